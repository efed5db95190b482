"""The plans a GPU re-timing measured more than 1.5x off the table, with what the collector recorded of them.

    python tools/agreement_outliers.py raw/h200-3d-pytorch/verify/xgboost-plans-safe \
        raw/h200-3d-pytorch/verify/networks/xgboost-plans-safe --raw raw/h200-3d [--json OUT.json]

A ``kbench verify-on-gpu --live-references`` record counts, per timing (CUDA-graph replays and eager
launches from Python), the plans whose run time is over 1.5x from their table time (``live.agreement``,
``over_1_5x``; table times of 0.05 ms and more): :func:`kbench.gpu_check.score.agreement_pairs` gives them.
This lists them: per run folder (its ``plan.json.gz`` and ``raw.jsonl.gz``) the problem, plan, timing,
table and measured times, and, from the collector's raw folder (``--raw``), the plan's own readings of
its first sitting (coarse and precise medians, the precise minimum, the warm eager execution), whether
the verification pass re-timed it, and the kernels one execution launches (``kernels_launched``; the
collector keeps the first 2,000 characters of the names, so a count from a cut list ends in ``+``),
so that each outlier can be given a cause.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbench.collect.measure.cudnn.pytorch_choice import KERNEL_NAMES_KEPT  # noqa: E402
from kbench.collect.packaging.package import load_raw  # noqa: E402
from kbench.core.errors import KbenchInputError  # noqa: E402
from kbench.gpu_check.command import read_live, read_raw  # noqa: E402
from kbench.gpu_check.score import AGREEMENT_MIN_MS, AGREEMENT_OFF, agreement_pairs, measured_times  # noqa: E402

COLLECTOR_FIELDS = ("timing_method", "coarse_ms", "precise_ms", "precise_min_ms", "warm_exec_ms", "verified_ms")


def run_outliers(run_dir: Path) -> pd.DataFrame:
    """(problem_id, plan, timing, table_ms, ms, ratio) of the run's plans over :data:`AGREEMENT_OFF` from the
    table: the pairs the record's ``over_1_5x`` counts, read and joined as the scoring does."""
    plan_path, raw_path = run_dir / "plan.json.gz", run_dir / "raw.jsonl.gz"
    for path in (plan_path, raw_path):
        if not path.is_file():
            raise KbenchInputError(f"{path}: not found; give a folder of raw/<dataset>/verify/ that holds "
                                   "plan.json.gz and raw.jsonl.gz")
    with gzip.open(plan_path, "rt") as fh:
        plan = json.load(fh)
    graph = read_raw(raw_path)[0]
    eager = read_live(raw_path)[1]
    pairs = pd.concat([agreement_pairs(plan, measured_times(graph)).assign(timing="graph"),
                       agreement_pairs(plan, eager).assign(timing="eager")], ignore_index=True)
    off = pairs[pairs["abs_log_ratio"] > np.log(AGREEMENT_OFF)].drop(columns="abs_log_ratio")
    off = off.assign(ratio=off["ms"] / off["table_ms"], run=str(run_dir))
    return off.sort_values(["problem_id", "plan", "timing"]).reset_index(drop=True)


def kernels_launched(names: pd.Series) -> pd.Series:
    """The number of kernels in each ``|``-joined list of names; ``"N+"`` where the list was cut at the
    collector's 2,000 characters (its last, partial name is not counted)."""
    names = names.fillna("").astype(str)
    count = names.str.count(r"\|") + names.ne("").astype(int)
    cut = names.str.len() >= KERNEL_NAMES_KEPT
    return (count - cut.astype(int)).astype(str) + np.where(cut, "+", "")


def with_collector_readings(off: pd.DataFrame, raw_folder: Path) -> pd.DataFrame:
    """``off`` with the collector's own readings of each plan and the number of kernels it launches."""
    _, plans, _ = load_raw([raw_folder])
    plans = plans.rename(columns={"key": "problem_id"})
    plans["kernels_launched"] = kernels_launched(plans["kernels"])
    keep = ["problem_id", "plan", *COLLECTOR_FIELDS, "kernels_launched"]
    return off.merge(plans[keep].astype({"problem_id": str}), on=["problem_id", "plan"], how="left")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="raw/<dataset>/verify/[<split>/]<method>/ folders")
    ap.add_argument("--raw", type=Path, required=True, help="the collector's raw folder of the dataset")
    ap.add_argument("--json", type=Path, help="write the rows here as JSON")
    args = ap.parse_args(argv)
    try:
        off = pd.concat([run_outliers(r) for r in args.runs], ignore_index=True)
        if not (args.raw / "env.jsonl").is_file():
            raise KbenchInputError(f"{args.raw}: not a raw folder of `kbench collect cudnn` (no env.jsonl)")
        rows = with_collector_readings(off, args.raw)
    except KbenchInputError as exc:
        print(f"agreement_outliers: {exc}", file=sys.stderr)
        return 2
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_colwidth", 90):
        print(rows.drop(columns=["run"]).to_string(index=False) if len(rows) else f"no plan over {AGREEMENT_OFF}x off")
    if args.json:
        payload = {"off_by_more_than": AGREEMENT_OFF, "min_table_ms": AGREEMENT_MIN_MS,
                   "command": "python tools/agreement_outliers.py " + " ".join(map(str, args.runs)) + f" --raw {args.raw}",
                   "rows": json.loads(rows.to_json(orient="records"))}
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

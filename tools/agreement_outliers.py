"""The plans a GPU re-timing measured more than 1.5x off the table, with what the collector recorded of them.

    python tools/agreement_outliers.py raw/h200-3d-pytorch/verify/xgboost-plans-safe \
        raw/h200-3d-pytorch/verify/networks/xgboost-plans-safe --raw raw/h200-3d [--json OUT.json]

A ``kbench verify-on-gpu --live-references`` record counts, per timing (CUDA-graph replays and eager
launches from Python), the plans whose run time is over 1.5x from their table time (``live.agreement``,
``over_1_5x``; table times of 0.05 ms and more, as :func:`kbench.gpu_check.score.agreement` takes them).
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

from kbench.collect.packaging.package import load_raw  # noqa: E402
from kbench.core.errors import KbenchInputError  # noqa: E402
from kbench.gpu_check.score import AGREEMENT_MIN_MS  # noqa: E402

OFF = 1.5
KERNEL_NAMES_KEPT = 2000  # kbench.collect.measure.cudnn.pytorch_choice keeps this many characters
COLLECTOR_FIELDS = ("timing_method", "coarse_ms", "precise_ms", "precise_min_ms", "warm_exec_ms", "verified_ms")


def run_outliers(run_dir: Path) -> pd.DataFrame:
    """(problem_id, plan, timing, table_ms, ms, ratio) of the run's plans over ``OFF`` from the table."""
    plan_path, raw_path = run_dir / "plan.json.gz", run_dir / "raw.jsonl.gz"
    for path in (plan_path, raw_path):
        if not path.is_file():
            raise KbenchInputError(f"{path}: not found; give a folder of raw/<dataset>/verify/ that holds "
                                   "plan.json.gz and raw.jsonl.gz")
    with gzip.open(plan_path, "rt") as fh:
        plan = json.load(fh)
    table = pd.DataFrame([(item["problem_id"], name, ms) for item in plan["problems"]
                          for name, ms in item["table_ms"].items()], columns=["problem_id", "plan", "table_ms"])
    raw = pd.read_json(raw_path, lines=True)
    # graph timings are the "time" rows, eager ones the "eager" rows (kbench.gpu_check.live)
    timed = raw[raw["kind"].isin(["time", "eager"])].assign(
        timing=lambda d: d["kind"].map({"time": "graph", "eager": "eager"}))
    measured = timed.groupby(["problem_id", "plan", "timing"], as_index=False)["ms"].median()
    pairs = table.merge(measured, on=["problem_id", "plan"], how="inner")
    pairs = pairs[pairs["table_ms"] >= AGREEMENT_MIN_MS].assign(ratio=lambda d: d["ms"] / d["table_ms"])
    off = pairs[np.abs(np.log(pairs["ratio"])) > np.log(OFF)]
    return off.assign(run=str(run_dir)).sort_values(["problem_id", "plan", "timing"]).reset_index(drop=True)


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
        print(rows.drop(columns=["run"]).to_string(index=False) if len(rows) else f"no plan over {OFF}x off")
    if args.json:
        payload = {"off_by_more_than": OFF, "min_table_ms": AGREEMENT_MIN_MS,
                   "command": "python tools/agreement_outliers.py " + " ".join(map(str, args.runs)) + f" --raw {args.raw}",
                   "rows": json.loads(rows.to_json(orient="records"))}
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

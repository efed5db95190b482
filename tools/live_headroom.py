"""Where the headroom over the live references is, from a GPU re-timing run with live references.

    python tools/live_headroom.py RUN_DIR [--timed] [--json OUT.json]
    # e.g. RUN_DIR raw/h200-3d-pytorch/verify/xgboost-plans-safe (plan.json[.gz], raw.jsonl[.gz],
    # raw_autotune.jsonl[.gz] as kbench verify-on-gpu --live-references left them)

The record (``verification.json``) gives the choice's speed-up over each live reference overall and by
direction. This splits the same per-problem times by direction, dtype, layout, depth, and problem kind and
network (the dataset's ``kind`` and ``sources``, where it is installed), as ``tools/three_d_headroom.py``
splits the table's, with kbench's own scoring functions (:mod:`kbench.gpu_check.score`), per group:

* ``oracle/<ref>`` and ``entry/<ref>``: the geomean speed-up of the oracle's plan and of the choice over
  ``ref``: ``pytorch_op`` (PyTorch's own convolution, default flags) and ``live_mode_b`` from the main pass,
  ``pytorch_autotune`` (its convolution with ``benchmark = True``) from the autotune pass, each with the
  choice and the oracle timed in the same pass;
* ``closed/<ref>``: the share of the oracle's headroom over ``ref`` that the choice closes on a log scale,
  sum log(t_ref / t_choice) / sum log(t_ref / t_oracle).

``--timed`` scores the timed selector of a plan made with ``--timed-top K`` instead of the first choice
(:func:`kbench.gpu_check.score.timed_choice`: chosen in each pass's first round, measured on the others).
A problem of several networks counts in each.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from three_d_headroom import groups, headroom_figures  # noqa: E402  (tools/, on the path above)

from kbench.core.errors import KbenchInputError  # noqa: E402
from kbench.gpu_check.command import _present, raw_bytes, read_live, read_raw  # noqa: E402
from kbench.gpu_check.plan import LIVE_AUTOTUNE, RAW_AUTOTUNE  # noqa: E402
from kbench.gpu_check.score import autotune_times, live_times, measured_times, timed_choice  # noqa: E402

REFERENCES = ("pytorch_op", "live_mode_b", LIVE_AUTOTUNE)


def read_run(run_dir: Path) -> tuple[dict, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(plan, main-pass time rows, live picks, autotune-pass time rows) of a run folder."""
    plan_path, raw_path, auto_path = (_present(run_dir / n) for n in ("plan.json", "raw.jsonl", RAW_AUTOTUNE))
    for path in (plan_path, raw_path, auto_path):
        if not path.exists():
            raise KbenchInputError(f"{path}: not there; give a run folder of 'kbench verify-on-gpu "
                                   "--live-references' whose autotune pass has run (plan.json, raw.jsonl, "
                                   f"{RAW_AUTOTUNE}, or their .gz copies)")
    try:
        plan = json.loads(raw_bytes(plan_path))
    except json.JSONDecodeError as exc:
        raise KbenchInputError(f"{plan_path}: not JSON ({exc}); copy the run plan again") from None
    picks, _ = read_live(raw_path)
    return plan, read_raw(raw_path)[0], picks, read_raw(auto_path)[0]


def per_problem(run_dir: Path, timed: bool = False) -> tuple[pd.DataFrame, dict]:
    """(one row per problem timed whole in both passes: its direction, dtype, layout, depths and
    ``<pass>_choice``, ``<pass>_oracle`` and each reference's time (``main_`` or ``auto_``); the plan)."""
    plan, raw, picks, auto_raw = read_run(run_dir)
    if timed and not plan.get("timed_top"):
        raise KbenchInputError(f"{run_dir}: the plan has no timed_top; plan the run with --timed-top K")
    main_plan, main_raw = timed_choice(plan, raw) if timed else (plan, raw)
    auto_plan, auto_rows = timed_choice(plan, auto_raw) if timed else (plan, auto_raw)
    main = live_times(main_plan, measured_times(main_raw), picks)
    auto = autotune_times(auto_plan, auto_rows)
    if not len(main) or not len(auto):
        raise KbenchInputError(f"{run_dir}: no problem timed whole in both passes yet")
    keep = ["problem_id", "m_choice", "m_oracle", "m_pytorch_op", "m_live_mode_b"]
    df = main[keep].rename(columns={c: f"main_{c[2:]}" for c in keep[1:]}).merge(
        auto[["problem_id", "m_choice", "m_oracle", f"m_{LIVE_AUTOTUNE}"]].rename(
            columns={"m_choice": "auto_choice", "m_oracle": "auto_oracle", f"m_{LIVE_AUTOTUNE}": f"auto_{LIVE_AUTOTUNE}"}),
        on="problem_id")
    geometry = pd.DataFrame([{"problem_id": i["problem_id"], **i["problem"]} for i in plan["problems"]])
    return df.merge(geometry, on="problem_id", how="left"), plan


def breakdown(df: pd.DataFrame, dataset_problems: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per group (:func:`three_d_headroom.groups`; ``kind`` and ``network`` from the dataset's problems,
    by problem id, where given): problems, and for each of :data:`REFERENCES` the oracle's and the choice's
    speed-up over it and the share of the headroom closed (:func:`three_d_headroom.headroom_figures`)."""
    problems = df
    if dataset_problems is not None:
        extra = dataset_problems.set_index("problem_id")[["kind", "sources"]].reindex(df["problem_id"])
        problems = df.assign(kind=extra["kind"].to_numpy(), sources=extra["sources"].to_numpy())
    rows = []
    for (by, group), sel in groups(problems).groupby(["by", "group"], sort=False):
        part = df.iloc[sel["row"].to_numpy()]
        rec = {"by": by, "group": group, "problems": int(len(part))}
        for ref in REFERENCES:
            side = "auto" if ref == LIVE_AUTOTUNE else "main"
            rec.update(headroom_figures(ref, *(np.log(part[f"{side}_{c}"].to_numpy(dtype=np.float64))
                                               for c in (ref, "oracle", "choice"))))
        rows.append(rec)
    return pd.DataFrame(rows)


def dataset_problems(plan: dict) -> pd.DataFrame | None:
    """The run's dataset's problems (for each problem's ``kind`` and the networks it comes from, ``sources``),
    where the dataset is installed at the plan's version."""
    from kbench import load

    try:
        ds = load(plan["dataset"]["name"])
    except Exception:  # noqa: BLE001 - the kind and network split are optional; the rest needs no dataset
        return None
    if ds.version != plan["dataset"].get("version") or not {"kind", "sources"} <= set(ds.problems.columns):
        return None
    return ds.problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", help="a verify-on-gpu --live-references run folder with its autotune pass")
    ap.add_argument("--timed", action="store_true", help="the timed selector of a --timed-top K plan")
    ap.add_argument("--json", help="write the table as JSON records here")
    a = ap.parse_args(argv)
    try:
        df, plan = per_problem(Path(a.run_dir), a.timed)
    except KbenchInputError as exc:
        print(f"live_headroom: {exc}", file=sys.stderr)
        return 2
    table = breakdown(df, dataset_problems(plan))
    what = f"timed top-{plan['timed_top']}" if a.timed else "first choice"
    with pd.option_context("display.width", 250, "display.max_rows", 200):
        print(f"{plan['dataset']['name']} {plan['split']}/{plan['part']}, {plan.get('method')} ({what}), GPU-timed:")
        print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if a.json:
        Path(a.json).write_text(json.dumps({"run": a.run_dir, "dataset": plan["dataset"], "split": plan["split"],
                                            "part": plan["part"], "method": plan.get("method"),
                                            "choice": what, "groups": table.to_dict("records")}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

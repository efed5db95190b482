"""CPU latency of a (problem, plan) selector at batch 1, and its break-even against cuDNN mode A (issue 19).

    python bench/bench_selector_latency.py [--baseline xgboost-plans] [--problems 300]
    # writes bench/results/selector_latency_<baseline>.json

The model is fitted once (default parameters, seed 0, h100 ``random`` train,
early stopping on valid). Then, one problem at a time, ``predict`` is timed on
a dataset view that holds only that problem and cuDNN's heuristic answer for
it (what a library has in hand when it asks: the problem and the heuristic's
plan list), so the figure covers feature building, the booster and the
ranking, not a search of the whole dataset. ``booster_only_latency_ms`` times
the booster alone on the problem's prebuilt feature rows (the floor a compiled
feature builder could reach). p50/p99 over ``--problems`` test
problems, after a few warm-up calls, the booster on one thread (as a library
call would be; fitting uses the default two).

Break-even: how many calls of the convolution pay for one prediction =
p50 latency / mean time saved per call over mode A, where the time saved is
t(mode A's first plan) - t(chosen plan) from the dataset's table on the test
problems, the choices read from the leaderboard entry's predictions file
(the committed test predictions: test is not predicted again here). A
prediction made once per layer shape (and cached, as frameworks cache their
algorithm choice) is paid back after that many calls.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


class OneProblem:
    """A dataset view with one problem and its heuristic lists (no runtimes: nothing to peek at)."""

    def __init__(self, ds, pid: str, heur_by_problem: dict):
        self.name, self.info = ds.name, ds.info
        self.problems = ds.problems[ds.problems["problem_id"] == pid]
        self.heuristics = heur_by_problem[pid]


def mean_saved_ms(ds, split: str, preds_path: Path) -> dict:
    """Table-derived time saved per call over mode A with the entry's committed test choices (its first
    seed's, which the GPU re-timing also times)."""
    from kbench.leaderboard.store import read_seed_predictions
    from kbench.scoring.evaluate import Evaluator, read_predictions
    ev = Evaluator(ds, split=split, part="test")
    if Path(preds_path).suffix == ".parquet":  # an entry's every-seed table
        by_seed = read_seed_predictions(preds_path)
        preds = by_seed[min(by_seed)]
    else:
        preds, _ = read_predictions(preds_path)
    ids = ev.ids
    from kbench.gpu_check.plan import role_plans
    roles = role_plans(preds, ds.runtimes, ds.heuristics, ids)
    saved = roles["t_mode_a"] - roles["t_choice"]
    return {"problems": int(len(roles)), "mean_t_mode_a_ms": float(roles["t_mode_a"].mean()),
            "mean_t_choice_ms": float(roles["t_choice"].mean()), "mean_saved_ms": float(saved.mean()),
            "median_saved_ms": float(saved.median()), "share_saved_positive": float((saved > 0).mean())}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="xgboost-plans")
    ap.add_argument("--split", default="random")
    ap.add_argument("--problems", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args(argv)
    import kbench
    from kbench_baselines import get_baseline
    ds = kbench.load("h100")
    parts = ds.split(args.split)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    model = get_baseline(args.baseline).fit(ds, parts["train"], parts["valid"], seed=0)
    fit_s = time.perf_counter() - t0
    model.booster.set_param({"nthread": 1})  # predict on one thread, as a library call would
    rng = np.random.default_rng(0)
    ids = [str(x) for x in rng.choice(np.asarray(parts["test"], dtype=object), args.problems, replace=False)]
    heur = ds.heuristics[ds.heuristics["problem_id"].isin(ids)]
    by_problem = {pid: g for pid, g in heur.groupby("problem_id", observed=True)}
    views = [OneProblem(ds, pid, by_problem) for pid in ids]
    for v in views[: args.warmup]:
        model.predict(v, v.problems["problem_id"])
    lat = []
    for v in views:
        ts = time.perf_counter()
        model.predict(v, v.problems["problem_id"])
        lat.append(1e3 * (time.perf_counter() - ts))
    lat = np.asarray(lat)
    # the booster alone on the problem's prebuilt feature rows: what is left without pandas feature building
    mats = []
    for v in views:
        problems = v.problems.reset_index(drop=True)
        rows = model._candidates(v, pd.Index(problems["problem_id"].astype(str)))
        mats.append(model._matrix(v, problems, rows))
    booster_lat = []
    for x in mats:
        ts = time.perf_counter()
        model.booster.inplace_predict(x)
        booster_lat.append(1e3 * (time.perf_counter() - ts))
    booster_lat = np.asarray(booster_lat)
    load_after = os.getloadavg()
    out = {"baseline": args.baseline, "dataset": "h100", "split": args.split, "batch": 1, "threads": 1,
           "problems_timed": int(len(lat)), "latency_ms": {"p50": float(np.percentile(lat, 50)),
                                                           "p99": float(np.percentile(lat, 99)),
                                                           "mean": float(lat.mean())},
           "booster_only_latency_ms": {"p50": float(np.percentile(booster_lat, 50)),
                                       "p99": float(np.percentile(booster_lat, 99))},
           "candidates_per_problem": {"mean": float(np.mean([len(x) for x in mats])),
                                      "max": int(max(len(x) for x in mats))},
           "fit_s": round(fit_s, 1), "fit_info": model.fit_info,
           "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in load_after],
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "processor": platform.processor() or platform.machine()}}
    entry = ROOT / "leaderboard" / "h100" / args.split / args.baseline
    record = entry / "result.json"  # names the entry's predictions file (preds.parquet or preds.csv.gz)
    preds = entry / (json.loads(record.read_text())["predictions"]["path"] if record.exists() else "preds.parquet")
    if preds.exists():
        saved = mean_saved_ms(ds, args.split, preds)
        out["table_saving"] = saved
        out["break_even_calls"] = (out["latency_ms"]["p50"] / saved["mean_saved_ms"]
                                   if saved["mean_saved_ms"] > 0 else None)
        out["break_even_note"] = ("calls of the convolution whose mean time saved over mode A (table) pays for "
                                  "one prediction at the p50 latency")
    else:
        out["table_saving"] = None
        out["break_even_note"] = f"{preds} not found: run kbench run --update-leaderboard first"
    path = ROOT / "bench" / "results" / f"selector_latency_{args.baseline}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

"""Batch latency of a forest of the full ``xgboost-plans-safe`` recipe's shape, on one core: kbench's
numpy evaluator (``kbench.selector.Forest``) against xgboost's own predictor.

    python bench/bench_forest_latency.py [--rounds 2500] [--depth 10]
    # writes bench/results/forest_latency.json

Why: the deployable selector must answer in <= 1 ms (issue 61, item 6), and the full recipe scored
on only the first 16 places of mode A and mode B keeps 95.3% of its gain
(``experiments/results/compact_plans_trial_h200-pytorch.json``, ``entry_restricted``). This asks what a
forest of that shape (2,500 rounds, depth 10, 169 features, as the h200-pytorch entry) costs per
problem, at 8, 16 and 32 candidate rows. The forest is fitted on synthetic data (169 normal features,
a target of 20 of them squared) so that its trees fill their depth as the entry's do; its latency
depends on the forest's shape, not on what it learned. Fitted with 2 threads, timed pinned to one core.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def p50_ms(fn, x, calls: int) -> float:
    for _ in range(10):  # warm-up
        fn(x)
    lat = []
    for _ in range(calls):
        t = time.perf_counter()
        fn(x)
        lat.append(time.perf_counter() - t)
    return float(np.percentile(lat, 50) * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2500)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--features", type=int, default=169)
    ap.add_argument("--rows", type=int, default=40000)
    a = ap.parse_args()
    import xgboost as xgb

    from kbench.selector import Forest

    rng = np.random.default_rng(0)
    x = rng.normal(size=(a.rows, a.features)).astype(np.float32)
    y = (x[:, :20] ** 2).sum(1) + rng.normal(size=a.rows)
    t0 = time.perf_counter()
    booster = xgb.train({"max_depth": a.depth, "eta": 0.05, "tree_method": "hist", "nthread": 2},
                        xgb.DMatrix(x, y), a.rounds)
    fit_s = time.perf_counter() - t0
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    booster.set_param({"nthread": 1})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "forest.json"
        booster.save_model(str(path))
        model = json.loads(path.read_text())
    forest = Forest.from_xgboost_json(model)
    rows = {}
    for n in (1, 8, 16, 32):
        batch = np.ascontiguousarray(x[:n])
        rows[str(n)] = {"numpy_ms_p50": p50_ms(forest.margins_rows, batch, 50),
                        "xgboost_ms_p50": p50_ms(booster.inplace_predict, batch, 200)}
    agree = float(np.abs(forest.margins_rows(x[:32])[:, 0] - booster.inplace_predict(x[:32])).max())
    out = {"rounds": a.rounds, "max_depth": a.depth, "features": a.features, "tree_nodes":
           int(sum(len(t["split_indices"]) for t in model["learner"]["gradient_booster"]["model"]["trees"])),
           "fit_s": round(fit_s, 1), "latency_by_rows": rows, "max_abs_margin_difference": agree,
           "aim_ms": 1.0, "xgboost_version": xgb.__version__, "numpy_version": np.__version__,
           "machine": {"processor": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
                       "cores_used": 1, "loadavg_1min": os.getloadavg()[0]},
           "note": "p50 over 50 (numpy) and 200 (xgboost) calls after 10 warm-up calls, one batch per call"}
    path = ROOT / "bench" / "results" / "forest_latency.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(rows))
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

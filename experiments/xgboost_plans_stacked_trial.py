"""Issue 19 trial: do per-problem relative features from a first-stage model lift ``xgboost-plans``?

    python experiments/xgboost_plans_stacked_trial.py --seed 0

Stage 1 is ``xgboost-plans`` at its defaults. Its scores on the training problems are out-of-fold (3
problem-level folds, 1,000 rounds each, no early stopping: the default run never stopped early); on
valid they are the cached scores of the model fitted on all of train by
``experiments/xgboost_plans_safe_trial.py --variants base`` (run that first). Stage 2 is the same
regression of log(t / t_best) on the same features plus, per row, the stage-1 score, its gap to the
problem's best stage-1 score, its rank within the problem, its gap to mode A's first plan's score, and
that plan's gap to the best (the predicted gain over mode A). Scored on h100 ``random`` valid only.
Result appended to ``experiments/results/xgboost_plans_safe_trial.json`` as variant ``stacked``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbench_baselines import get_baseline  # noqa: E402
from kbench_baselines.base import as_id_index, predictions_frame, problems_of  # noqa: E402
from kbench_baselines.xgb_plans import rank_rows  # noqa: E402

OUT = ROOT / "experiments" / "results" / "xgboost_plans_safe_trial.json"
CACHE = Path("/tmp/xgb_plans_safe_cache")
N_FOLDS = 3


def relative_features(rows: pd.DataFrame, score: np.ndarray) -> pd.DataFrame:
    """Per-problem relative features of stage-1 scores (higher = preferred)."""
    pos = rows["pos"].to_numpy()
    s = pd.Series(np.asarray(score, dtype=np.float64))
    best = s.groupby(pos).transform("max")
    is_a = (rows["rank_cudnn_mode_a"] == 0).to_numpy()
    a = pd.Series(np.where(is_a, s, np.nan)).groupby(pos).transform("max")
    return pd.DataFrame({"s1": s, "s1_gap_to_best": s - best,
                         "s1_rank": s.groupby(pos).rank(ascending=False, method="first") - 1,
                         "s1_minus_a0": s - a, "s1_best_gain_over_a0": best - a})


def main(seed: int = 0) -> None:
    import xgboost as xgb

    import kbench
    from kbench.scoring.evaluate import Evaluator
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    ds = kbench.load("h100")
    parts = ds.split("random")
    train = as_id_index(parts["train"])
    fold_of = np.random.default_rng(seed).integers(0, N_FOLDS, len(train))
    oof = []
    for f in range(N_FOLDS):
        m = get_baseline("xgboost-plans").fit(ds, train[fold_of != f], None, seed=seed)
        _, rows_f, s_f = m.row_scores(ds, train[fold_of == f])
        oof.append(pd.concat([rows_f[["problem_id", "kernel"]], relative_features(rows_f, s_f)], axis=1))
        print(f"fold {f} done {time.perf_counter() - t0:.0f}s", flush=True)
    oof = pd.concat(oof, ignore_index=True)
    helper = get_baseline("xgboost-plans")
    ptr, rtr, ratio_tr = helper._labelled(ds, train)
    xtr = helper._matrix(ds, ptr, rtr)
    rel_tr = rtr[["problem_id", "kernel"]].merge(oof, on=["problem_id", "kernel"], how="left").drop(
        columns=["problem_id", "kernel"])
    z = np.load(CACHE / f"base_{seed}.npz", allow_pickle=True)
    ids = pd.Index(z["ids"])
    rva = helper._candidates(ds, ids)
    xva = helper._matrix(ds, problems_of(ds, ids), rva)
    rel_va = relative_features(rva, z["score"])
    names = helper.columns + list(rel_tr.columns)
    dtr = xgb.DMatrix(np.hstack([xtr, rel_tr.to_numpy(np.float32)]), label=np.log(ratio_tr), feature_names=names)
    params = helper.xgb_params(seed)
    params.update(objective="reg:squarederror", eval_metric="rmse")
    booster = xgb.train(params, dtr, helper.params["max_rounds"])
    pred = booster.predict(xgb.DMatrix(np.hstack([xva, rel_va.to_numpy(np.float32)]), feature_names=names))
    ev = Evaluator(ds, split="random", part="valid")
    res = ev(predictions_frame(ids, rank_rows(rva, -pred, len(ids), 30)))
    row = {"variant": "stacked", "seed": seed, "margin": None,
           "speedup_geomean": res.overall["speedup_geomean"], "top1": res.overall["top1"],
           "geomean_slowdown": res.overall["geomean_slowdown"],
           "speedup_by_direction": {d: v.get("speedup_geomean") for d, v in res.metrics["by_direction"].items()},
           "share_mode_a_first_chosen": None, "rounds": booster.num_boosted_rounds(),
           "fit_seconds": round(time.perf_counter() - t0, 1), "loadavg_start": round(load0, 2)}
    print(json.dumps(row), flush=True)
    doc = json.loads(OUT.read_text())
    doc["runs"] = [r for r in doc["runs"] if not (r["variant"] == "stacked" and r["seed"] == seed)] + [row]
    OUT.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 0)

"""Issue 19 trial: do neighbour statistics of each plan lift ``xgboost-plans``?

    python experiments/xgboost_plans_neighbour_trial.py --seeds 0 1 2 [--k 8]

The tree model sees a plan's engine and knobs and the problem's shape, but it has to learn from scratch how
a plan fares on problems *like this one*. This trial gives it that directly, as a target encoding through
the nearest training problems (the ``nearest-neighbour`` baseline's distance: z-normalised
``DISTANCE_FEATURES``, categorical columns weighted 3, same direction only). Per candidate row (problem p,
plan k), over the ``k`` nearest training problems q of p:

* ``nn_lr_mean`` / ``nn_lr_min``: mean and min of log(t_qk / t_q,best) over the neighbours that timed k;
* ``nn_lr_first``: that log ratio on the nearest neighbour that timed k (NaN if none);
* ``nn_cover``: how many of the neighbours timed k; ``nn_best``: how many had k as their fastest plan.

Leakage guard: a training problem's neighbours never share its ``geometry_id`` (the split keeps a
geometry's problems, every dtype and layout, in one part, so a valid problem never has such a neighbour
either). Stage and labels are those of ``xgboost-plans`` at its defaults (depth 10, learning rate 0.05,
1,000 rounds, early stopping on valid); the baseline itself is fitted beside it with the same seed for a
paired comparison. Scored on h100 ``random`` valid only; the test part is not read.
Result: ``experiments/results/xgboost_plans_neighbour_trial.json``.
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
from kbench_baselines.base import as_id_index, predictions_frame  # noqa: E402
from kbench_baselines.features import DISTANCE_FEATURES, Standardizer, features_for  # noqa: E402
from kbench_baselines.nearest_neighbour import CATEGORICAL  # noqa: E402
from kbench_baselines.xgb_plans import rank_rows  # noqa: E402

OUT = ROOT / "experiments" / "results" / "xgboost_plans_neighbour_trial.json"
NN_COLUMNS = ["nn_lr_mean", "nn_lr_min", "nn_lr_first", "nn_cover", "nn_best"]


def neighbour_table(ds, train: pd.Index, query: pd.Index, k: int) -> pd.DataFrame:
    """(query problem_id, neighbour problem_id, order) for the k nearest training problems of the same
    direction whose geometry differs from the query's."""
    from sklearn.neighbors import NearestNeighbors
    probs = ds.problems.set_index("problem_id")
    ftr = features_for(ds, train)
    scaler = Standardizer().fit(ftr, DISTANCE_FEATURES)
    w = np.array([3.0 if c.startswith(CATEGORICAL) else 1.0 for c in DISTANCE_FEATURES])
    xtr = scaler.transform(ftr) * w
    xq = scaler.transform(features_for(ds, query)) * w
    dtr, dq = probs.loc[train, "direction"].to_numpy(), probs.loc[query, "direction"].to_numpy()
    gtr, gq = probs.loc[train, "geometry_id"].to_numpy(), probs.loc[query, "geometry_id"].to_numpy()
    out = []
    # a geometry has at most a few dozen problems per direction: ask for enough extra to drop them
    extra = int(pd.Series(gtr).value_counts().max())
    for d in np.unique(dq):
        pool, rows = np.flatnonzero(dtr == d), np.flatnonzero(dq == d)
        nn = NearestNeighbors(n_neighbors=min(k + extra, len(pool))).fit(xtr[pool])
        _, idx = nn.kneighbors(xq[rows])
        cand = pool[idx]                                   # (rows, k + extra) training positions
        ok = gtr[cand] != gq[rows][:, None]                # same geometry: never a neighbour
        order = np.cumsum(ok, axis=1) - 1
        keep = ok & (order < k)
        r, c = np.nonzero(keep)
        out.append(pd.DataFrame({"problem_id": query[rows[r]], "neighbour": train[cand[r, c]],
                                 "order": order[r, c]}))
    return pd.concat(out, ignore_index=True)


def neighbour_features(ds, train: pd.Index, rows: pd.DataFrame, nb: pd.DataFrame) -> pd.DataFrame:
    """NN_COLUMNS for each candidate row (problem_id, kernel), from the neighbours' measured times."""
    rt = ds.runtimes[["problem_id", "kernel", "time_ms"]]
    rt = rt[rt["problem_id"].isin(train) & np.isfinite(rt["time_ms"])].astype({"problem_id": str, "kernel": str})
    rt = rt.groupby(["problem_id", "kernel"], as_index=False)["time_ms"].min()
    best = rt.groupby("problem_id")["time_ms"].transform("min")
    rt = rt.assign(lr=np.log(rt["time_ms"] / best), is_best=(rt["time_ms"] == best).astype(np.int8))
    m = nb.merge(rt.rename(columns={"problem_id": "neighbour"}), on="neighbour")
    m = m.sort_values(["problem_id", "kernel", "order"], kind="stable")
    g = m.groupby(["problem_id", "kernel"], sort=False)
    stats = pd.DataFrame({"nn_lr_mean": g["lr"].mean(), "nn_lr_min": g["lr"].min(), "nn_lr_first": g["lr"].first(),
                          "nn_cover": g["lr"].size(), "nn_best": g["is_best"].sum()}).reset_index()
    f = rows[["problem_id", "kernel"]].astype(str).merge(stats, on=["problem_id", "kernel"], how="left")
    f[["nn_cover", "nn_best"]] = f[["nn_cover", "nn_best"]].fillna(0)
    return f[NN_COLUMNS]


def fit_score(ds, helper, xtr, ytr, xva, yva, rva, ids_va, seed, names):
    import xgboost as xgb

    from kbench.scoring.evaluate import Evaluator
    params = helper.xgb_params(seed)
    params.update(objective="reg:squarederror", eval_metric="rmse")
    dtr = xgb.DMatrix(xtr, label=ytr, feature_names=names)
    dva = xgb.DMatrix(xva, label=yva, feature_names=names)
    booster = xgb.train(params, dtr, helper.params["max_rounds"], evals=[(dva, "valid")],
                        early_stopping_rounds=helper.params["early_stopping"], verbose_eval=False)
    booster = booster[: booster.best_iteration + 1]
    pred = booster.predict(xgb.DMatrix(xva, feature_names=names))
    res = Evaluator(ds, split="random", part="valid")(
        predictions_frame(ids_va, rank_rows(rva, -pred, len(ids_va), 30)))
    o = res.overall
    return {"speedup_geomean": o["speedup_geomean"], "top1": o["top1"], "geomean_slowdown": o["geomean_slowdown"],
            "rounds": booster.num_boosted_rounds(),
            "speedup_by_direction": {d: v.get("speedup_geomean") for d, v in res.metrics["by_direction"].items()}}


def main(seeds: list[int], k: int) -> None:
    import kbench
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    ds = kbench.load("h100")
    parts = ds.split("random")
    train, valid = as_id_index(parts["train"]), as_id_index(parts["valid"])
    helper = get_baseline("xgboost-plans")
    ptr, rtr, ratio_tr = helper._labelled(ds, train)
    pva, rva, ratio_va = helper._labelled(ds, valid)
    xtr, xva = helper._matrix(ds, ptr, rtr), helper._matrix(ds, pva, rva)
    ftr = neighbour_features(ds, train, rtr, neighbour_table(ds, train, as_id_index(ptr["problem_id"]), k))
    fva = neighbour_features(ds, train, rva, neighbour_table(ds, train, as_id_index(pva["problem_id"]), k))
    print(f"features ready {time.perf_counter() - t0:.0f}s; rows {len(rtr)} train, {len(rva)} valid; "
          f"valid rows with a neighbour time {float((fva['nn_cover'] > 0).mean()):.3f}", flush=True)
    ids_va = as_id_index(pva["problem_id"])
    runs = []
    for seed in seeds:
        base = fit_score(ds, helper, xtr, np.log(ratio_tr), xva, np.log(ratio_va), rva, ids_va, seed,
                         helper.columns)
        nn = fit_score(ds, helper, np.hstack([xtr, ftr.to_numpy(np.float32)]), np.log(ratio_tr),
                       np.hstack([xva, fva.to_numpy(np.float32)]), np.log(ratio_va), rva, ids_va, seed,
                       helper.columns + NN_COLUMNS)
        for variant, r in (("base", base), (f"neighbours_k{k}", nn)):
            runs.append({"variant": variant, "seed": seed, "k": k, **r})
            print(json.dumps(runs[-1]), flush=True)
    doc = json.loads(OUT.read_text()) if OUT.exists() else {"runs": []}
    done = {(r["variant"], r["seed"]) for r in runs}
    doc["runs"] = [r for r in doc["runs"] if (r["variant"], r["seed"]) not in done] + runs
    command = "python experiments/xgboost_plans_neighbour_trial.py " + " ".join(sys.argv[1:])
    doc["commands"] = [c for c in doc.get("commands", []) if c != command] + [command]
    doc.update(dataset=f"h100 {ds.info.get('version', '')}".strip(), split="random", part="valid",
               seconds=round(time.perf_counter() - t0, 1), loadavg_start=round(load0, 2))
    OUT.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--k", type=int, default=8, help="neighbours per problem")
    a = ap.parse_args()
    main(a.seeds, a.k)

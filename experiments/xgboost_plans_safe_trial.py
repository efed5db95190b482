"""Issue 19 trial: can a decision rule or training weights lift ``xgboost-plans`` over cuDNN mode A on h100 valid?

    python experiments/xgboost_plans_safe_trial.py --variants base weighted pairwise

Every variant is fitted once on h100 ``random`` train (seed 0, early stopping on valid) and scored by
kbench's Evaluator on the **valid** part only. For each fitted model the "safe" decision rule is scored
for a grid of margins: a problem keeps cuDNN mode A's first plan unless the model's best plan is
predicted better than it by more than the margin (in the model's score units: log slowdown for the
regression, relevance score for the ranking objective).

Variants:

* ``base``: ``xgboost-plans`` at its defaults (regression of log(t / t_best), depth 10, lr 0.05).
* ``weighted``: the same, each training row weighted by 1 + ``alpha`` * log(t_A / t_best) of its problem
  (problems where mode A is far from the best count more).
* ``pairwise``: ``objective="rank:pairwise"`` at the same depth and learning rate.

Row scores are cached under ``/tmp`` so a margin grid can be re-scored without refitting.
Results: ``experiments/results/xgboost_plans_safe_trial.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from baselines import get_baseline  # noqa: E402
from baselines.base import predictions_frame  # noqa: E402
from baselines.features import problem_features  # noqa: E402
from baselines.xgb_plans import XGBoostPlans, heuristic_features, rank_rows, safe_scores  # noqa: E402

OUT = ROOT / "experiments" / "results" / "xgboost_plans_safe_trial.json"
CACHE = Path("/tmp/xgb_plans_safe_cache")
MARGINS_LOG = [0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2]
MARGINS_RANK = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0]


class WeightedPlans(XGBoostPlans):
    """xgboost-plans with per-problem training weights 1 + alpha * log(t_A / t_best) (trial only)."""

    alpha = 5.0

    def _labelled(self, dataset, ids):
        problems, rows, ratio = super()._labelled(dataset, ids)
        self._last_rows = rows
        return problems, rows, ratio

    def _dmatrix(self, x, ratio, pos):
        d = super()._dmatrix(x, ratio, pos)
        is_a = (self._last_rows["rank_cudnn_mode_a"] == 0).to_numpy()
        ratio_a = pd.Series(np.where(is_a, ratio, np.nan)).groupby(pos).transform("min").to_numpy()
        gap = np.log(np.nan_to_num(ratio_a, nan=1.0))
        d.set_weight(1.0 + self.alpha * gap)
        return d


class ClippedPlans(XGBoostPlans):
    """xgboost-plans regressing min(log(t / t_best), log(cap)): plans slower than cap x the best all count
    as equally bad, so the trees spend their splits near the top of each problem (trial only)."""

    cap = 1.5

    def _dmatrix(self, x, ratio, pos):
        return super()._dmatrix(x, np.minimum(ratio, self.cap), pos)


class ContextPlans(XGBoostPlans):
    """xgboost-plans whose rows also carry the engine/knob features of cuDNN mode A's first plan for the
    problem (``a0_`` columns) and whether the row's plan is it / shares its engine, so a tree can learn
    "when mode A picks X, Y is faster" (trial only)."""

    def _matrix(self, dataset, problems, rows):
        pf = problem_features(problems).reset_index(drop=True)
        h = dataset.heuristics
        a0 = h[(h["heuristic"] == "cudnn_mode_a") & (h["rank"] == 0)]
        a0_of = a0.astype({"problem_id": str, "kernel": str}).drop_duplicates("problem_id") \
            .set_index("problem_id")["kernel"]
        own = rows["kernel"].to_numpy().astype(str)
        a0k = rows["problem_id"].astype(str).map(a0_of).fillna(pd.Series(own)).to_numpy().astype(str)
        kt = self._kernel_table(own)
        at = self._kernel_table(a0k).add_prefix("a0_")
        rel = pd.DataFrame({"is_a0": (own == a0k).astype(np.float64),
                            "same_engine_as_a0": (pd.Series(own).str.extract(r"^(eng\d+)")[0].to_numpy()
                                                  == pd.Series(a0k).str.extract(r"^(eng\d+)")[0].to_numpy())
                            .astype(np.float64)})
        x = pd.concat([pf.iloc[rows["pos"].to_numpy()].reset_index(drop=True), kt, at, rel,
                       heuristic_features(rows)], axis=1)
        if not self.columns:
            self.columns = list(x.columns)
        return x[self.columns].to_numpy(dtype=np.float32)


VARIANTS = {
    "clipped": lambda: ClippedPlans(),
    "context": lambda: ContextPlans(),
    "base": lambda: get_baseline("xgboost-plans"),
    "weighted": lambda: WeightedPlans(),
    "pairwise": lambda: get_baseline("xgboost-plans", objective="rank:pairwise"),
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import kbench
    from kbench.evaluate import Evaluator
    ds = kbench.load("h100")
    parts = ds.split("random")
    ev = Evaluator(ds, split="random", part="valid")
    doc = json.loads(OUT.read_text()) if OUT.exists() else {"runs": []}
    doc.update({"dataset": "h100", "split": "random", "part": "valid",
                "command": "python experiments/xgboost_plans_safe_trial.py " + " ".join(argv or sys.argv[1:])})
    CACHE.mkdir(exist_ok=True)
    for name in args.variants:
        cache = CACHE / f"{name}_{args.seed}.npz"
        model = VARIANTS[name]()
        problems = None
        t0, load0 = time.perf_counter(), os.getloadavg()[0]
        if cache.exists():
            z = np.load(cache, allow_pickle=True)
            problems_ids, score = z["ids"], z["score"]
            rows = model._candidates(ds, pd.Index(problems_ids))
            fit_info = json.loads(str(z["fit_info"]))
        else:
            model.fit(ds, parts["train"], parts["valid"], seed=args.seed)
            problems, rows, score = model.row_scores(ds, parts["valid"])
            problems_ids = problems["problem_id"].astype(str).to_numpy()
            fit_info = model.fit_info
            np.savez(cache, ids=problems_ids, score=score, fit_info=json.dumps(fit_info))
        seconds = round(time.perf_counter() - t0, 1)
        margins = MARGINS_LOG if model.params["objective"] == "log_ratio" else MARGINS_RANK
        for margin in [None] + margins:
            s = score if margin is None else safe_scores(rows, score, margin)
            res = ev.score(predictions_frame(problems_ids, rank_rows(rows, s, len(problems_ids), 30)))
            kept_a = None
            if margin is not None:
                first = rank_rows(rows, s, len(problems_ids), 1)
                a_first = rows[rows["rank_cudnn_mode_a"] == 0].drop_duplicates("pos")
                kept_a = round(float(np.mean(first[a_first["pos"].to_numpy()] == a_first["kernel"].to_numpy())), 4)
            row = {"variant": name, "seed": args.seed, "margin": margin,
                   "speedup_geomean": res.overall["speedup_geomean"], "top1": res.overall["top1"],
                   "geomean_slowdown": res.overall["geomean_slowdown"],
                   "speedup_by_direction": {d: v.get("speedup_geomean") for d, v in res.metrics["by_direction"].items()},
                   "share_mode_a_first_chosen": kept_a, "rounds": fit_info.get("rounds"),
                   "fit_seconds": seconds, "loadavg_start": round(load0, 2)}
            doc["runs"] = [r for r in doc["runs"] if not (r["variant"] == name and r["seed"] == args.seed
                                                          and r["margin"] == margin)]
            doc["runs"].append(row)
            print(json.dumps(row), flush=True)
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()

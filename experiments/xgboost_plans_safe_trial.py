"""Issue 19 trial: can a decision rule, training weights, a label cap, context features, a ranking
objective, more rounds or a seed ensemble lift ``xgboost-plans`` over cuDNN mode A on h100 valid?

    python experiments/xgboost_plans_safe_trial.py --variants base weighted pairwise
    python experiments/xgboost_plans_safe_trial.py --variants context clipped
    python experiments/xgboost_plans_safe_trial.py --variants base --seed 1      # and --seed 2
    python experiments/xgboost_plans_safe_trial.py --variants base --ensemble 0 1 2
    python experiments/xgboost_plans_safe_trial.py --variants long
    python experiments/xgboost_plans_safe_trial.py --variants base --regret      # where the big misses are

Every variant is fitted on h100 ``random`` train (early stopping on valid) and scored by kbench's
Evaluator on the **valid** part only. For each fitted model the "safe" decision rule is scored for a
grid of margins: a problem keeps cuDNN mode A's first plan unless the model's best plan is predicted
better than it by more than the margin (in the model's score units: log slowdown for the regression,
relevance score for the ranking objective); ``margin: null`` is the model's own ranking.

Variants:

* ``base``: ``xgboost-plans`` at its defaults (regression of log(t / t_best), depth 10, lr 0.05,
  1,000 rounds).
* ``weighted``: the same, each training row weighted by 1 + 5 * log(t_A / t_best) of its problem
  (problems where mode A is far from the best count more).
* ``pairwise``: ``objective="rank:pairwise"`` at the same depth and learning rate.
* ``clipped``: the label capped at log(1.5) (plans slower than 1.5x the best are equally bad).
* ``context``: every row also carries mode A's first plan's engine/knob features and whether the row's
  plan is it or shares its engine.
* ``long``: ``max_rounds=2500`` (the default run used all 1,000 rounds).
* ``--ensemble``: the mean of the cached row scores of several seeds of a variant.

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

from kbench_baselines import get_baseline  # noqa: E402
from kbench_baselines.base import predictions_frame  # noqa: E402
from kbench_baselines.features import problem_features  # noqa: E402
from kbench_baselines.xgb_plans import XGBoostPlans, heuristic_features, rank_rows, safe_scores  # noqa: E402

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
    "long": lambda: get_baseline("xgboost-plans", max_rounds=2500),
}


def regret_breakdown(ds, variant: str, seed: int, threshold: float = 0.2) -> dict:
    """Where the chosen plan of a cached model lands: problems whose pick is more than exp(threshold) x
    slower than the fastest candidate, split by where the pick sits in mode A's list."""
    z = np.load(CACHE / f"{variant}_{seed}.npz", allow_pickle=True)
    rows = XGBoostPlans()._candidates(ds, pd.Index(z["ids"]))
    rows["ratio"], rows["score"] = XGBoostPlans._ratios(ds, rows), z["score"]
    pick = rows.sort_values(["pos", "score"], ascending=[True, False], kind="stable").groupby("pos").head(1)
    regret = np.log(pick["ratio"].to_numpy())
    where = np.where(pick["rank_cudnn_mode_a"] == 0, "mode A's first plan",
                     np.where(pick["rank_cudnn_mode_a"].notna(), "another mode-A plan", "not in mode A's list"))
    big = regret > threshold
    return {"variant": variant, "seed": seed, "threshold_log": threshold, "problems": int(len(regret)),
            "over_threshold": int(big.sum()),
            "over_threshold_by_pick": pd.Series(where[big]).value_counts().to_dict(),
            "regret_sum_by_pick": pd.Series(regret[big]).groupby(where[big]).sum().round(3).to_dict(),
            "share_of_all_regret_in_worst_tenth": round(float(np.sort(regret)[::-1][:len(regret) // 10].sum()
                                                              / regret.sum()), 3)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--regret", action="store_true",
                    help="instead of fitting: record regret_breakdown of the cached variants at --seed")
    ap.add_argument("--ensemble", type=int, nargs="*", default=None,
                    help="instead of fitting: score the mean of the cached row scores of these seeds per variant")
    args = ap.parse_args(argv)
    import kbench
    from kbench.scoring.evaluate import Evaluator
    ds = kbench.load("h100")
    parts = ds.split("random")
    ev = Evaluator(ds, split="random", part="valid")
    doc = json.loads(OUT.read_text()) if OUT.exists() else {"runs": []}
    doc.update({"dataset": "h100", "split": "random", "part": "valid"})
    command = "python experiments/xgboost_plans_safe_trial.py " + " ".join(argv or sys.argv[1:])
    doc["commands"] = [c for c in doc.get("commands", []) if c != command] + [command]
    CACHE.mkdir(exist_ok=True)
    if args.regret:
        doc["regret_breakdown"] = [regret_breakdown(ds, name, args.seed) for name in args.variants]
        print(json.dumps(doc["regret_breakdown"], indent=1))
        OUT.write_text(json.dumps(doc, indent=1) + "\n")
        return
    for name in args.variants:
        cache = CACHE / f"{name}_{args.seed}.npz"
        model = VARIANTS[name]()
        problems = None
        t0, load0 = time.perf_counter(), os.getloadavg()[0]
        if args.ensemble:
            zs = [np.load(CACHE / f"{name}_{s}.npz", allow_pickle=True) for s in args.ensemble]
            problems_ids = zs[0]["ids"]
            assert all((z["ids"] == problems_ids).all() for z in zs)
            score = np.mean([z["score"] for z in zs], axis=0)
            rows = model._candidates(ds, pd.Index(problems_ids))
            fit_info = {"ensemble_of_seeds": list(args.ensemble)}
            name = f"{name}-mean-of-seeds-{'-'.join(map(str, args.ensemble))}"
        elif cache.exists():
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
            res = ev(predictions_frame(problems_ids, rank_rows(rows, s, len(problems_ids), 30)))
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

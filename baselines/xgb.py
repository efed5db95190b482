"""XGBoost baselines: ``xgboost`` (multi-class classifier) and ``xgboost-ranker`` (XGBRanker).

Both use the features of :mod:`kbench_baselines.features`, the histogram tree method,
early stopping on the valid part (never the test part) and ``n_jobs=2`` (``KBENCH_THREADS``
overrides the thread count; the trees are the same for any count).

``xgboost`` — multi-class over the kernel vocabulary (the better of the two on
mi100, so it carries the plain name; docs/baselines.md compares them)
    One booster per direction (F, B, W); its classes are the kernels that are
    fastest for at least one training problem of that direction (no other
    kernel can be learned as a label). The label is the fastest measured
    kernel. Ranking: the class kernels by predicted probability, then the other
    kernels seen in training for the problem's (direction, dtype) in the prior
    order, then kernels never seen for that (direction, dtype) ("masked":
    ranked last, still listed so LoP@n can use them). Early stopping on the
    valid multi-class log-loss.

``xgboost-ranker`` — learning to rank over (problem, kernel) rows
    One ``XGBRanker`` (``rank:ndcg``) over rows of problem features + the
    kernel as a categorical feature + its family. Rows per training problem:
    every measured kernel, with relevance ``1 + max(0, round(8 - 4*log2(t /
    t_best)))`` (9 for the fastest, one step down per 2^(1/4) slowdown, at
    least 1); for censored problems also up to ``negatives`` kernels seen for
    the (direction, dtype) but not listed, relevance 0 (they are slower than
    the 4th listed one, or inapplicable). For complete lists the unlisted
    kernels are inapplicable, which the evaluator skips anyway, so they are
    not trained on. Early stopping on valid NDCG@3.

Practicality on a 2-core machine. Multi-class: depth 10, learning rate 0.2,
at most 600 rounds with early stopping after 20 rounds without gain on valid,
``subsample`` 0.8, ``colsample_bytree`` 0.6, ``max_bin`` 256. Ranker: depth 8,
learning rate 0.3, at most 400 rounds, early stopping after 15, ``subsample``
and ``colsample_bytree`` 0.8, ``max_bin`` 64 (its ~0.7 M training rows
dominate its cost). ``fit_info`` keeps the rounds kept per booster; the
subsampling makes the seed matter. The settings were picked on valid by
``experiments/tune_xgboost.py`` (results in ``experiments/results/xgboost_tuning*.json``;
the multi-class defaults in ``xgboost_tuning_multiclass.json``, three seeds per
setting, where a deeper, slower setting that scores higher on valid is
listed too: it stays opt-in because the default run must stay short). The OpenMP wait policy is set to
PASSIVE before xgboost is imported (unless the user set it): with the default
active spinning, 2 threads on a loaded 2-core machine ran several times
slower than 1 thread.

Optional, multi-class, default off:

* ``margin_weight``: weight each training problem by min(1, log2(t_second /
  t_best) / margin_weight), at least 0.1, so near-ties, whose label is
  arbitrary, count less.
* ``soft_labels`` = τ > 0: soft labels from the runtimes. Each training
  problem contributes one row per class kernel with t <= 20^τ · t_best,
  weighted ∝ (t_best / t)^(1/τ) and normalised to 1 per problem (τ = 0.02: a
  kernel 1 % slower than the fastest gets 0.61 of its weight, 2 % slower
  0.37, more than 6.2 % slower none), so a near-tie teaches both kernels.
* ``decision="expected_slowdown"``: rank the class kernels by the expected log
  slowdown sum_j p_j C[j, k] (``slowdown_costs``: the training problems' mean
  log(t_k / t_best) per fastest kernel j) instead of by probability, a Bayes
  decision meant to avoid rare, very slow picks. On mi100 valid it lost 1.4
  points of top-1 and did not help total time (``experiments/xgboost_decision_trial.py``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench.scoring.environment import tree_threads
from kbench_baselines.base import (
    Baseline,
    KernelSpace,
    as_id_index,
    predictions_frame,
    problems_of,
    rank_by_scores,
    train_runtimes,
)
from kbench_baselines.features import features_for

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

DIRECTIONS = ("F", "B", "W")


def _xgb():
    import xgboost
    return xgboost


def _progress(total: int, desc: str, enabled: bool | None):
    """A boosting-rounds bar; ``enabled=None`` shows it only on a terminal."""
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, disable=None if enabled is None else not enabled, leave=False,
                unit="round")


def _callback(bar):
    xgb = _xgb()

    class Tick(xgb.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            bar.update(1)
            return False
    return Tick()


class _XGBBase(Baseline):
    stochastic = True
    DEFAULTS: dict = {}

    def __init__(self, **params):
        unknown = sorted(set(params) - set(self.DEFAULTS))
        if unknown:
            raise TypeError(f"{self.name}: unknown parameters {unknown}; it takes {sorted(self.DEFAULTS)}")
        p = dict(self.DEFAULTS)
        p.update(params)
        super().__init__(**p)
        self.progress: bool | None = None  # None: progress bars on a terminal only

    def xgb_params(self, seed: int) -> dict:
        p = self.params
        return {"tree_method": "hist", "max_bin": p["max_bin"], "max_depth": p["max_depth"],
                "learning_rate": p["learning_rate"], "subsample": p["subsample"],
                "colsample_bytree": p["colsample_bytree"], "min_child_weight": p["min_child_weight"],
                "reg_lambda": p["reg_lambda"], "nthread": tree_threads(p["n_jobs"]), "seed": seed}


# ============================================================================ multi-class
class XGBoostMulticlass(_XGBBase):
    name = "xgboost"
    description = "XGBoost multi-class over kernels, one booster per direction (hist, early stopping on valid)"
    DEFAULTS = {"max_depth": 10, "learning_rate": 0.2, "max_bin": 256, "subsample": 0.8, "colsample_bytree": 0.6,
                "min_child_weight": 1.0, "reg_lambda": 1.0, "max_rounds": 600, "early_stopping": 20, "n_jobs": 2,
                "margin_weight": 0.0, "soft_labels": 0.0, "decision": "probability"}
    DECISIONS = ("probability", "expected_slowdown")

    def __init__(self, **params):
        super().__init__(**params)
        if self.params["decision"] not in self.DECISIONS:
            raise KbenchInputError(f"xgboost: decision must be one of {self.DECISIONS}, "
                                   f"got {self.params['decision']!r}")

    @staticmethod
    def margin(dataset, ids: pd.Index) -> np.ndarray:
        """log2(t_second / t_best) per problem (inf where only one kernel was measured)."""
        rt = train_runtimes(dataset, ids).sort_values(["problem_id", "ratio"], kind="stable")
        second = rt[rt.groupby("problem_id").cumcount() == 1].set_index("problem_id")["ratio"]
        return np.log2(second.reindex(ids).to_numpy(dtype=np.float64, na_value=np.inf))

    @staticmethod
    def slowdown_costs(dataset, ids: pd.Index, classes: list[str]) -> np.ndarray:
        """C[j, k]: mean log(t_k / t_best) over the training problems ``ids`` whose fastest kernel
        is ``classes[j]`` (so C[j, j] = 0), for each class kernel k.

        A kernel a censored list leaves out counts at the list's last time (as the evaluator
        times it); one a complete list leaves out is inapplicable there and not counted. A pair
        never seen together takes kernel k's mean over all problems."""
        everything = train_runtimes(dataset, ids)
        last = np.log(everything.groupby("problem_id")["ratio"].max())  # the list's last (slowest) time
        rt = everything[everything["kernel"].isin(classes)]
        log_ratio = np.log(rt.pivot_table(index="problem_id", columns="kernel", values="ratio", aggfunc="min",
                                          observed=True).reindex(columns=classes))
        censored = rt.groupby("problem_id")["censored"].first().reindex(log_ratio.index).fillna(False)
        fill = np.where(censored.to_numpy(bool)[:, None], last.reindex(log_ratio.index).to_numpy()[:, None], np.nan)
        values = np.where(np.isnan(log_ratio.to_numpy()), fill, log_ratio.to_numpy())
        best = dataset.best.drop_duplicates("problem_id").set_index("problem_id")["kernel"].reindex(log_ratio.index)
        by_best = pd.DataFrame(values, columns=classes).groupby(best.to_numpy()).mean().reindex(classes)
        cost = by_best.fillna(pd.DataFrame(values, columns=classes).mean()).fillna(0.0).to_numpy()
        np.fill_diagonal(cost, 0.0)
        return cost

    def soft_targets(self, dataset, ids: pd.Index) -> pd.DataFrame:
        """Soft-label candidates: per problem, each kernel with t <= 20^τ · t_best (τ = ``soft_labels``)
        and its weight (t_best / t)^(1/τ) (1 for the fastest, at least 1/20)."""
        tau = self.params["soft_labels"]
        rt = train_runtimes(dataset, ids)[["problem_id", "kernel", "ratio"]]
        rt = rt[rt["ratio"] <= 20.0 ** tau].copy()
        rt["share"] = rt["ratio"] ** (-1.0 / tau)
        return rt.sort_values(["problem_id", "ratio"], kind="stable").reset_index(drop=True)

    @staticmethod
    def training_rows(ids: pd.Index, label: np.ndarray, weight: np.ndarray, soft: pd.DataFrame | None,
                      cidx: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row of ``ids``, class label, weight) per training row: one row per problem with its
        fastest kernel, or with soft labels one row per (problem, near-fastest class kernel)
        whose weights are the problem's weight split by the kernels' shares (summing to it)."""
        if soft is None:
            return np.arange(len(ids)), label, weight
        s = soft[soft["problem_id"].isin(ids) & soft["kernel"].isin(cidx)]
        share = (s["share"] / s.groupby("problem_id")["share"].transform("sum")).to_numpy()
        rows = ids.get_indexer(s["problem_id"])
        return rows, s["kernel"].map(cidx).to_numpy(), weight[rows] * share

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        xgb = _xgb()
        self.seed = seed
        train_ids, valid_ids = as_id_index(train_ids), as_id_index([] if valid_ids is None else valid_ids)
        self.space = KernelSpace.fit(dataset, train_ids)
        best = dataset.best.drop_duplicates("problem_id").set_index("problem_id")["kernel"]
        direction = dataset.problems.set_index("problem_id")["direction"].astype(str)
        ftr, fva = features_for(dataset, train_ids), features_for(dataset, valid_ids)
        soft = self.soft_targets(dataset, train_ids) if self.params["soft_labels"] > 0 else None
        self.columns = list(ftr.columns)
        self.boosters, self.classes, self.fit_info = {}, {}, {"rounds": {}, "valid_mlogloss": {}, "fit_s": {}}
        self.costs = {}
        for d in DIRECTIONS:
            tr = (direction.reindex(train_ids) == d).to_numpy()
            if not tr.any():
                continue
            ytr_names = best.reindex(train_ids[tr])
            classes = sorted(ytr_names.dropna().unique())
            cidx = {k: i for i, k in enumerate(classes)}
            self.classes[d] = classes
            if self.params["decision"] == "expected_slowdown":
                self.costs[d] = self.slowdown_costs(dataset, train_ids[tr], classes)
            if len(classes) == 1:  # nothing to learn: one kernel is always fastest
                self.boosters[d] = None
                continue
            weight = np.ones(int(tr.sum()))
            if self.params["margin_weight"] > 0:  # near-ties (arbitrary labels) count less
                weight = np.clip(self.margin(dataset, train_ids[tr]) / self.params["margin_weight"], 0.1, 1.0)
            rows, label, weight = self.training_rows(train_ids[tr], ytr_names.map(cidx).to_numpy(), weight,
                                                     soft, cidx)
            dtr = xgb.DMatrix(ftr.to_numpy(np.float32)[tr][rows], label=label, weight=weight,
                              feature_names=self.columns)
            va = (direction.reindex(valid_ids) == d).to_numpy()
            yva = best.reindex(valid_ids[va]).map(cidx)
            ok = yva.notna().to_numpy()
            params = dict(self.xgb_params(seed), objective="multi:softprob", num_class=len(classes),
                          eval_metric="mlogloss")
            evals, es = [], None
            if ok.any():
                dva = xgb.DMatrix(fva.to_numpy(np.float32)[va][ok], label=yva[ok].to_numpy(),
                                  feature_names=self.columns)
                evals, es = [(dva, "valid")], self.params["early_stopping"]
            t0 = time.perf_counter()
            with _progress(self.params["max_rounds"], f"xgboost {d}", self.progress) as bar:
                booster = xgb.train(params, dtr, self.params["max_rounds"], evals=evals, early_stopping_rounds=es,
                                    verbose_eval=False, callbacks=[_callback(bar)])
            if es is not None:  # keep the rounds up to the best valid score
                self.fit_info["valid_mlogloss"][d] = round(float(booster.best_score), 5)
                booster = booster[: booster.best_iteration + 1]
            self.fit_info["rounds"][d] = booster.num_boosted_rounds()
            self.fit_info["fit_s"][d] = round(time.perf_counter() - t0, 2)
            self.boosters[d] = booster
        return self

    def scores(self, dataset, problems: pd.DataFrame) -> np.ndarray:
        """(problems x kernels): 2 + probability for class kernels, then the prior order below."""
        feats = features_for(dataset, problems["problem_id"])
        prior = self.space.prior_scores(problems)
        seen = prior > 0
        # seen kernels in prior order in (1, 2); never-seen ones in (0, 1): masked to the end
        score = np.where(seen, 1.0, 0.0) + prior / (prior.max(axis=1, keepdims=True) + 1.0)
        d_all = problems["direction"].astype(str).to_numpy()
        x = feats[self.columns].to_numpy(np.float32)
        for d, classes in self.classes.items():
            rows = np.flatnonzero(d_all == d)
            if len(rows) == 0:
                continue
            cols = np.array([self.space.index[k] for k in classes])
            booster = self.boosters.get(d)
            if booster is None:
                prob = np.ones((len(rows), 1))
            else:
                prob = booster.inplace_predict(x[rows])  # = predict(DMatrix), without building one
            if d in self.costs:  # Bayes decision: the least expected log slowdown first, in (2, 3]
                prob = 1.0 / (1.0 + prob.reshape(len(rows), -1) @ self.costs[d])
            sub = score[rows][:, cols]
            # a class kernel never seen for this (direction, dtype) keeps its masked score
            score[np.ix_(rows, cols)] = np.where(seen[np.ix_(rows, cols)], 2.0 + prob, sub)
        return score

    def predict(self, dataset, ids) -> pd.DataFrame:
        problems = problems_of(dataset, ids)
        score = self.scores(dataset, problems)
        return predictions_frame(problems["problem_id"],
                                 rank_by_scores(score, self.space.names, self.space.allowed(problems)))

    # -- persistence: xgboost's native JSON per direction -------------------------
    def get_state(self):
        return {"space": self.space.to_dict(), "classes": self.classes, "columns": self.columns,
                "fit_info": self.fit_info, "costs": {d: c.tolist() for d, c in self.costs.items()},
                "boosters": {d: (f"booster_{d}.json" if b is not None else None) for d, b in self.boosters.items()}}, {}

    def _save_files(self, path: Path) -> None:
        for d, b in self.boosters.items():
            if b is not None:
                b.save_model(str(path / f"booster_{d}.json"))

    def set_state(self, state, arrays, path):
        xgb = _xgb()
        self.space = KernelSpace.from_dict(state["space"])
        self.classes, self.columns = state["classes"], state["columns"]
        self.fit_info = state.get("fit_info", {})
        self.costs = {d: np.asarray(c, dtype=np.float64) for d, c in state.get("costs", {}).items()}
        self.boosters = {}
        for d, fname in state["boosters"].items():
            if fname is None:
                self.boosters[d] = None
            else:
                b = xgb.Booster()
                b.load_model(str(path / fname))
                self.boosters[d] = b


# ============================================================================ ranker
def relevance(ratio: np.ndarray) -> np.ndarray:
    """Relevance label of a measured kernel from its time ratio to the fastest (9 = fastest, >= 1)."""
    return (1 + np.maximum(0, np.round(8 - 4 * np.log2(np.maximum(ratio, 1.0))))).astype(np.int32)


class XGBoostRanker(_XGBBase):
    name = "xgboost-ranker"
    description = "XGBRanker (rank:ndcg) over (problem, kernel) rows, relevance from the runtime ratio"
    benchmark = False  # the multi-class model is kept as `xgboost`; this one is reported alongside
    DEFAULTS = {"max_depth": 8, "learning_rate": 0.3, "max_bin": 64, "subsample": 0.8, "colsample_bytree": 0.8,
                "min_child_weight": 1.0, "reg_lambda": 1.0, "max_rounds": 400, "early_stopping": 15, "n_jobs": 2,
                "negatives": 4}

    def _rows(self, dataset, ids: pd.Index, rng: np.random.Generator | None):
        """Training rows (problem index, kernel index, relevance) for ``ids``, grouped by problem."""
        rt = train_runtimes(dataset, ids)
        rt = rt[rt["kernel"].isin(self.space.index)]
        pid = ids.get_indexer(rt["problem_id"])
        kid = rt["kernel"].map(self.space.index).to_numpy(np.int64)
        rel = relevance(rt["ratio"].to_numpy())
        parts = [(pid, kid, rel)]
        if self.params["negatives"] > 0 and rng is not None:
            problems = problems_of(dataset, ids)
            seen = self.space.prior_scores(problems) > 0
            listed = np.zeros_like(seen)
            listed[pid, kid] = True
            cand = seen & ~listed & problems["censored"].to_numpy()[:, None]
            # a random subset of the unlisted kernels per censored problem: random keys, keep the smallest
            keys = np.where(cand, rng.random(cand.shape), np.inf)
            order = np.argsort(keys, axis=1)[:, : self.params["negatives"]]
            take = np.take_along_axis(keys, order, axis=1) < np.inf
            r = np.repeat(np.arange(len(ids)), order.shape[1]).reshape(order.shape)
            parts.append((r[take], order[take], np.zeros(int(take.sum()), dtype=np.int32)))
        pid = np.concatenate([p[0] for p in parts])
        kid = np.concatenate([p[1] for p in parts])
        rel = np.concatenate([p[2] for p in parts])
        o = np.lexsort((kid, pid))
        return pid[o], kid[o], rel[o]

    def _matrix(self, feats: pd.DataFrame, pid: np.ndarray, kid: np.ndarray) -> pd.DataFrame:
        x = feats[self.columns].iloc[pid].reset_index(drop=True)
        x["kernel"] = pd.Categorical.from_codes(kid, categories=self.space.names)
        x["kernel_family"] = pd.Categorical.from_codes(self.family_codes[kid], categories=self.families)
        return x

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        xgb = _xgb()
        self.seed = seed
        train_ids, valid_ids = as_id_index(train_ids), as_id_index([] if valid_ids is None else valid_ids)
        self.space = KernelSpace.fit(dataset, train_ids)
        kfam = dataset.kernels.set_index("kernel")["family"].astype(str) if dataset.kernels is not None \
            and "family" in dataset.kernels else pd.Series(dtype=str)
        fam = [kfam.get(k, "other") for k in self.space.names]
        self.families = sorted(set(fam))
        self.family_codes = pd.Index(self.families).get_indexer(fam).astype(np.int64)
        rng = np.random.default_rng(seed)
        ftr = features_for(dataset, train_ids)
        self.columns = list(ftr.columns)
        pid, kid, rel = self._rows(dataset, train_ids, rng)
        dtr = xgb.DMatrix(self._matrix(ftr, pid, kid), label=rel, qid=pid, enable_categorical=True)
        evals, es = [], None
        if len(valid_ids):
            fva = features_for(dataset, valid_ids)
            vp, vk, vr = self._rows(dataset, valid_ids, np.random.default_rng(seed + 1))
            dva = xgb.DMatrix(self._matrix(fva, vp, vk), label=vr, qid=vp, enable_categorical=True)
            evals, es = [(dva, "valid")], self.params["early_stopping"]
        params = dict(self.xgb_params(seed), objective="rank:ndcg", eval_metric="ndcg@3",
                      lambdarank_pair_method="topk", lambdarank_num_pair_per_sample=8, max_cat_to_onehot=1)
        t0 = time.perf_counter()
        with _progress(self.params["max_rounds"], "xgboost-ranker", self.progress) as bar:
            booster = xgb.train(params, dtr, self.params["max_rounds"], evals=evals, early_stopping_rounds=es,
                                verbose_eval=False, callbacks=[_callback(bar)])
        self.fit_info = {"rows": int(len(rel))}
        if es is not None:
            self.fit_info["valid_ndcg@3"] = round(float(booster.best_score), 5)
            booster = booster[: booster.best_iteration + 1]
        self.booster = booster
        self.fit_info.update(rounds=booster.num_boosted_rounds(), fit_s=round(time.perf_counter() - t0, 2))
        return self

    def predict(self, dataset, ids) -> pd.DataFrame:
        xgb = _xgb()
        problems = problems_of(dataset, ids)
        allowed = self.space.allowed(problems)
        prior = self.space.prior_scores(problems)
        seen = prior > 0
        pid, kid = np.nonzero(seen & allowed)
        feats = features_for(dataset, problems["problem_id"])
        s = self.booster.predict(xgb.DMatrix(self._matrix(feats, pid, kid), enable_categorical=True))
        # model scores for the kernels seen for (direction, dtype); never-seen ones after, in prior order
        score = prior / (prior.max(axis=1, keepdims=True) + 1.0) - 2.0
        score[pid, kid] = s - s.min() + 1.0 if len(s) else 0.0
        return predictions_frame(problems["problem_id"], rank_by_scores(score, self.space.names, allowed))

    def get_state(self):
        return {"space": self.space.to_dict(), "columns": self.columns, "families": self.families,
                "family_codes": self.family_codes.tolist(), "fit_info": self.fit_info,
                "booster": "booster.json"}, {}

    def _save_files(self, path: Path) -> None:
        self.booster.save_model(str(path / "booster.json"))

    def set_state(self, state, arrays, path):
        xgb = _xgb()
        self.space = KernelSpace.from_dict(state["space"])
        self.columns, self.families = state["columns"], state["families"]
        self.family_codes = np.asarray(state["family_codes"], dtype=np.int64)
        self.fit_info = state.get("fit_info", {})
        self.booster = xgb.Booster()
        self.booster.load_model(str(path / state["booster"]))



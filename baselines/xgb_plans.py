"""XGBoost over (problem, cuDNN plan) rows with cuDNN's own heuristic ranks as features.

Three registered entries, one model class:

``xgboost-plans``
    Scores every plan cuDNN proposes for the problem (the union of heuristic
    modes A, B and the fallback list, as recorded in the dataset's
    ``heuristics`` table) and ranks them by the score.
``xgboost-rerank-a``
    The same model restricted to **re-ranking cuDNN mode A's first ``top_k``
    plans** (default 16). This is the form a library could ship on top of its
    heuristic: it only ever runs a plan mode A already proposes near the top,
    so it can never pick a plan outside that short list (the restriction: it
    cannot reach a fastest plan that mode A ranks below ``top_k`` or does not
    propose at all; where mode A proposes no plan of the problem's set, it ranks
    all of them; ``experiments/results/xgboost_plans_tuning.json`` gives the share
    of valid problems whose fastest plan lies inside).
``xgboost-plans-safe``
    ``xgboost-plans`` with up to 2,500 rounds and a "safe" decision rule (:func:`safe_scores`): a problem
    keeps cuDNN mode A's first plan unless the model predicts another plan faster by more than
    ``safe_margin`` = 0.01 in log time (1%), chosen on h100 ``random`` valid by
    ``experiments/xgboost_plans_safe_trial.py`` (figures in ``docs/baselines.md``).

Inputs at inference are the problem and cuDNN's heuristic answer for it
(querying the heuristic is cheap; the collector records it); no runtime of a
predicted problem is read. The candidate set is exactly what the heuristic
proposes, which on ``h100`` is the measured set (every proposed plan was timed).

Features of a row (problem, plan):

* :func:`kbench_baselines.features.problem_features` of the problem;
* :func:`kbench_baselines.features.kernel_features` of the plan name with the
  ``engine_knobs`` encoding (engine one-hot + one column per knob), so plans
  never seen in training still get meaningful features; engines or knobs the
  training set never had are dropped (columns are fixed at fit time);
* the plan's position in each heuristic list (``rank_cudnn_mode_a``, ``_b``,
  ``_fallback``; NaN when the list does not hold it, which XGBoost routes
  by a learned default direction), the length of each list, the position
  relative to that length, and the number of candidates.

Objectives (``objective``):

* ``log_ratio`` (default after tuning, see below): squared-error regression
  of log(t / t_best) per row; plans ranked by the predicted value, lowest first.
* ``rank:pairwise`` / ``rank:ndcg``: XGBoost's ranking objectives with one
  query group per problem, relevance ``kbench_baselines.xgb.relevance`` (9 for the
  fastest, one step down per 2^(1/4) slowdown).

Ties in the score keep cuDNN mode A's order (then mode B's). Rankings hold the
first ``max_ranking`` (30) candidates. Early stopping on the valid part only.
Settings were chosen on h100 ``random`` valid by ``experiments/tune_xgboost_plans.py``
(``experiments/results/xgboost_plans_tuning.json``). How the settings were chosen, and what the
three entries score on the h100 and h200 boards and when re-timed on the GPU, is in
``docs/baselines.md`` ("cuDNN plans"). Batch-1 CPU latency and break-even:
``bench/bench_selector_latency.py``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench_baselines.base import as_id_index, dataset_task, predictions_frame, problems_of
from kbench_baselines.features import KNOB_ABSENT, kernel_features, problem_features
from kbench_baselines.xgb import _XGBBase, relevance

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

#: heuristic lists used as features, in tie-break order
HEURISTIC_LISTS = ("cudnn_mode_a", "cudnn_mode_b", "cudnn_fallback")
OBJECTIVES = ("log_ratio", "rank:pairwise", "rank:ndcg")
CANDIDATE_SETS = ("all", "mode_a_top_k", "modes_ab_top_k")


def _xgb():
    import xgboost
    return xgboost


def plan_candidates(heuristics: pd.DataFrame, ids: pd.Index, candidates: str = "all",
                    top_k: int = 0) -> pd.DataFrame:
    """One row per (problem, proposed plan) of ``ids`` with its position in each heuristic list.

    Columns: ``pos`` (index into ``ids``), ``problem_id``, ``kernel``, ``rank_<list>``
    (float, NaN when absent) for each of :data:`HEURISTIC_LISTS`. ``candidates="mode_a_top_k"``
    keeps only the plans of mode A's first ``top_k`` positions, except in a problem where mode A
    proposes none of its plans, which keeps them all; ``"modes_ab_top_k"`` keeps the plans of the
    first ``top_k`` positions of mode A or mode B, likewise. Rows are sorted by
    (pos, mode A rank, mode B rank, fallback rank, kernel): the heuristic's own order.
    """
    h = heuristics[heuristics["heuristic"].isin(HEURISTIC_LISTS) & heuristics["problem_id"].isin(ids)]
    wide = h.pivot_table(index=["problem_id", "kernel"], columns="heuristic", values="rank", aggfunc="min",
                         observed=True)
    wide = wide.reindex(columns=list(HEURISTIC_LISTS)).astype(np.float64)
    wide.columns = [f"rank_{c}" for c in HEURISTIC_LISTS]
    rows = wide.reset_index()
    rows["problem_id"] = rows["problem_id"].astype(str)
    rows["kernel"] = rows["kernel"].astype(str)
    if candidates in ("mode_a_top_k", "modes_ab_top_k"):
        # a problem for which mode A proposes no plan of the set (cuDNN's mode-A query failed, or its plans
        # did not run) keeps all its candidates: a library falls back to its other lists there too
        in_top = rows["rank_cudnn_mode_a"] < top_k
        if candidates == "modes_ab_top_k":
            in_top |= rows["rank_cudnn_mode_b"] < top_k
        rows = rows[in_top | ~in_top.groupby(rows["problem_id"]).transform("any")]
    elif candidates != "all":
        raise KbenchInputError(f"candidates must be one of {CANDIDATE_SETS}, got {candidates!r}")
    rows.insert(0, "pos", ids.get_indexer(rows["problem_id"]))
    keys = ["pos"] + [f"rank_{c}" for c in HEURISTIC_LISTS] + ["kernel"]
    return rows.sort_values(keys, kind="stable", na_position="last").reset_index(drop=True)


def heuristic_features(rows: pd.DataFrame) -> pd.DataFrame:
    """Per-row heuristic features from :func:`plan_candidates` rows (see the module docstring)."""
    out = {}
    pos = rows["pos"].to_numpy()
    for c in HEURISTIC_LISTS:
        r = rows[f"rank_{c}"].to_numpy(dtype=np.float64)
        length = pd.Series(~np.isnan(r)).groupby(pos).transform("sum").to_numpy(dtype=np.float64)
        out[f"rank_{c}"] = r
        out[f"len_{c}"] = length
        out[f"relrank_{c}"] = r / np.maximum(length, 1.0)
    out["n_candidates"] = pd.Series(pos).groupby(pos).transform("size").to_numpy(dtype=np.float64)
    return pd.DataFrame(out)


class XGBoostPlans(_XGBBase):
    name = "xgboost-plans"
    description = ("XGBoost over (problem, cuDNN plan) rows: problem + engine/knob features + cuDNN's heuristic "
                   "ranks, regression of log(t/t_best); ranks every plan cuDNN proposes")
    stochastic = True
    DEFAULTS = {"objective": "log_ratio", "candidates": "all", "top_k": 0, "max_depth": 10, "learning_rate": 0.05,
                "max_bin": 128, "subsample": 0.8, "colsample_bytree": 0.8, "min_child_weight": 1.0,
                "reg_lambda": 1.0, "max_rounds": 1000, "early_stopping": 30, "n_jobs": 2, "max_ranking": 30}

    def __init__(self, **params):
        super().__init__(**params)  # unknown names refused, defaults filled in (_XGBBase)
        p = self.params
        if p["objective"] not in OBJECTIVES:
            raise KbenchInputError(f"{self.name}: objective must be one of {OBJECTIVES}, got {p['objective']!r}")
        if p["candidates"] not in CANDIDATE_SETS:
            raise KbenchInputError(f"{self.name}: candidates must be one of {CANDIDATE_SETS}, "
                                   f"got {p['candidates']!r}")
        if p["candidates"] != "all" and int(p["top_k"]) < 1:
            raise KbenchInputError(f"{self.name}: candidates={p['candidates']!r} needs top_k >= 1, got {p['top_k']}")
        margin = p.get("safe_margin", 0.0)
        if not (isinstance(margin, (int, float)) and np.isfinite(margin) and margin >= 0):
            raise KbenchInputError(f"{self.name}: safe_margin must be a finite number >= 0 (score units: log "
                                   f"slowdown for objective='log_ratio'), got {margin!r}")
        self.booster = None
        self.columns: list[str] = []
        self.kernel_columns: list[str] = []

    def supports(self, dataset) -> bool:
        info = getattr(dataset, "info", None) or {}
        library = str(info.get("library") or "")
        files = info.get("files") or {}
        has_heuristics = "heuristics.parquet" in files or getattr(dataset, "heuristics", None) is not None
        return dataset_task(dataset) == "kernel-selection" and library.startswith("cuDNN") and has_heuristics

    # -- rows and features ---------------------------------------------------------------
    def _candidates(self, dataset, ids: pd.Index) -> pd.DataFrame:
        heur = dataset.heuristics
        if heur is None:
            raise KbenchInputError(f"{self.name}: dataset {dataset.name!r} has no heuristics table "
                                   "(cuDNN's recorded heuristic orders); this baseline needs it")
        return plan_candidates(heur, ids, self.params["candidates"], int(self.params["top_k"]))

    def _kernel_table(self, names: np.ndarray) -> pd.DataFrame:
        """Engine/knob features of ``names`` in the fitted columns (absent engine 0, absent knob KNOB_ABSENT)."""
        uniq, inv = np.unique(names.astype(str), return_inverse=True)
        kf = kernel_features(uniq, "engine_knobs")
        if not self.kernel_columns:  # fitting: the training set fixes the columns
            self.kernel_columns = list(kf.columns)
        fill = {c: (KNOB_ABSENT if c.startswith("knob_") else 0.0) for c in self.kernel_columns}
        kf = kf.reindex(columns=self.kernel_columns).fillna(fill)
        return kf.iloc[inv].reset_index(drop=True)

    def _matrix(self, dataset, problems: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
        pf = problem_features(problems).reset_index(drop=True)
        parts = [pf.iloc[rows["pos"].to_numpy()].reset_index(drop=True),
                 self._kernel_table(rows["kernel"].to_numpy()), heuristic_features(rows)]
        x = pd.concat(parts, axis=1)
        if not self.columns:
            self.columns = list(x.columns)
        return x[self.columns].to_numpy(dtype=np.float32)

    @staticmethod
    def _ratios(dataset, rows: pd.DataFrame) -> np.ndarray:
        """t / t_best over each problem's candidate rows (the measured times of those plans)."""
        rt = dataset.runtimes[["problem_id", "kernel", "time_ms"]]
        rt = rt[rt["problem_id"].isin(rows["problem_id"].unique())]
        t = rows[["problem_id", "kernel"]].merge(
            rt.astype({"problem_id": str, "kernel": str}).groupby(["problem_id", "kernel"], as_index=False)["time_ms"]
            .min(), on=["problem_id", "kernel"], how="left")["time_ms"].to_numpy(dtype=np.float64)
        best = pd.Series(t).groupby(rows["pos"].to_numpy()).transform("min").to_numpy()
        return t / best

    def _labelled(self, dataset, ids: pd.Index):
        problems = problems_of(dataset, ids)
        rows = self._candidates(dataset, ids)
        ratio = self._ratios(dataset, rows)
        keep = np.isfinite(ratio)  # a proposed plan without a valid time (wrong answer) is not learned from
        rows, ratio = rows[keep].reset_index(drop=True), ratio[keep]
        ratio = ratio / pd.Series(ratio).groupby(rows["pos"].to_numpy()).transform("min").to_numpy()
        return problems, rows, ratio

    def _dmatrix(self, x: np.ndarray, ratio: np.ndarray, pos: np.ndarray):
        xgb = _xgb()
        if self.params["objective"] == "log_ratio":
            return xgb.DMatrix(x, label=np.log(ratio), feature_names=self.columns)
        return xgb.DMatrix(x, label=relevance(ratio), qid=pos, feature_names=self.columns)

    # -- fit / predict ---------------------------------------------------------------------
    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        xgb = _xgb()
        t0 = time.perf_counter()
        self.seed = int(seed)
        self.columns, self.kernel_columns = [], []
        train_ids = as_id_index(train_ids)
        valid_ids = as_id_index([] if valid_ids is None else valid_ids)
        ptr, rtr, ratio_tr = self._labelled(dataset, train_ids)
        dtr = self._dmatrix(self._matrix(dataset, ptr, rtr), ratio_tr, rtr["pos"].to_numpy())
        p = self.params
        params = self.xgb_params(self.seed)
        if p["objective"] == "log_ratio":
            params.update(objective="reg:squarederror", eval_metric="rmse")
        else:
            params.update(objective=p["objective"], eval_metric="ndcg@1", lambdarank_pair_method="topk",
                          lambdarank_num_pair_per_sample=8)
        evals, es = [], None
        if len(valid_ids):
            pva, rva, ratio_va = self._labelled(dataset, valid_ids)
            dva = self._dmatrix(self._matrix(dataset, pva, rva), ratio_va, rva["pos"].to_numpy())
            evals, es = [(dva, "valid")], p["early_stopping"]
        booster = xgb.train(params, dtr, p["max_rounds"], evals=evals, early_stopping_rounds=es, verbose_eval=False)
        self.fit_info = {"rows": int(len(ratio_tr)), "n_features": len(self.columns)}
        if es is not None:
            self.fit_info["valid_best_score"] = round(float(booster.best_score), 5)
            booster = booster[: booster.best_iteration + 1]
        self.booster = booster
        self.fit_info.update(rounds=booster.num_boosted_rounds(), fit_time_s=round(time.perf_counter() - t0, 2))
        return self

    def row_scores(self, dataset, ids) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
        """(problems, candidate rows, preference score: higher = preferred) for ``ids``."""
        if self.booster is None:
            raise KbenchInputError(f"{self.name}: call fit (or load a saved model) before predict")
        xgb = _xgb()
        problems = problems_of(dataset, ids)
        rows = self._candidates(dataset, as_id_index(problems["problem_id"]))
        if not len(rows):
            return problems, rows, np.zeros(0)
        pred = self.booster.predict(xgb.DMatrix(self._matrix(dataset, problems, rows), feature_names=self.columns))
        # regression predicts a log slowdown (lower first); ranking objectives a relevance (higher first)
        return problems, rows, (-pred if self.params["objective"] == "log_ratio" else pred)

    def predict(self, dataset, ids) -> pd.DataFrame:
        problems, rows, score = self.row_scores(dataset, ids)
        margin = float(self.params.get("safe_margin", 0.0))
        if margin > 0 and len(rows):
            score = safe_scores(rows, score, margin)
        return predictions_frame(problems["problem_id"],
                                 rank_rows(rows, score, len(problems), int(self.params["max_ranking"])))

    def n_parameters(self) -> int | None:
        """Tree nodes of the booster (every split threshold and leaf value is one learned number)."""
        if self.booster is None:
            return None
        return int(sum(d.count("\n") for d in self.booster.get_dump()))

    # -- persistence: xgboost's native JSON ----------------------------------------------------
    def get_state(self):
        if self.booster is None:
            raise KbenchInputError(f"{self.name}: nothing to save, call fit first")
        return {"columns": self.columns, "kernel_columns": self.kernel_columns, "fit_info": self.fit_info,
                "booster": "booster.json"}, {}

    def _save_files(self, path: Path) -> None:
        self.booster.save_model(str(path / "booster.json"))

    def set_state(self, state, arrays, path):
        xgb = _xgb()
        self.columns, self.kernel_columns = list(state["columns"]), list(state["kernel_columns"])
        self.fit_info = state.get("fit_info", {})
        self.booster = xgb.Booster()
        self.booster.load_model(str(Path(path) / state["booster"]))


def rank_rows(rows: pd.DataFrame, score: np.ndarray, n_problems: int, max_ranking: int) -> np.ndarray:
    """Ranking strings per problem: its candidate rows by descending score, ties in the rows' order
    (the heuristic's), at most ``max_ranking`` plans; "" for a problem without candidates."""
    order = np.lexsort((np.arange(len(rows)), -np.asarray(score, dtype=np.float64), rows["pos"].to_numpy()))
    r = rows.iloc[order]
    r = r[r.groupby("pos").cumcount().to_numpy() < max_ranking]
    joined = r.groupby("pos")["kernel"].agg(";".join)
    out = np.full(n_problems, "", dtype=object)
    out[joined.index.to_numpy()] = joined.to_numpy()
    return out


def safe_scores(rows: pd.DataFrame, score: np.ndarray, margin: float) -> np.ndarray:
    """Scores with the "safe" rule applied: in every problem whose best-scored plan beats cuDNN mode A's
    first plan (``rank_cudnn_mode_a == 0``) by at most ``margin`` score units, mode A's first plan is moved
    to the top (the other plans keep the model's order). Problems without a mode-A row are left as they are.

    Why: the metric is the geomean of t(mode A's first) / t(chosen), so a predicted small gain that turns
    out to be a big loss costs more than the small gain brings; keeping mode A's answer scores exactly 1.
    """
    score = np.asarray(score, dtype=np.float64).copy()
    pos = rows["pos"].to_numpy()
    is_a = (rows["rank_cudnn_mode_a"] == 0).to_numpy()
    best = pd.Series(score).groupby(pos).transform("max").to_numpy()
    a_score = pd.Series(np.where(is_a, score, np.nan)).groupby(pos).transform("max").to_numpy()
    keep_a = is_a & (best - a_score <= margin)
    score[keep_a] = best[keep_a] + 1.0
    return score


class XGBoostRerankModeA(XGBoostPlans):
    name = "xgboost-rerank-a"
    description = ("xgboost-plans restricted to re-ranking cuDNN mode A's first top_k plans (deployable on top of "
                   "the heuristic; cannot pick a plan mode A ranks below top_k)")
    DEFAULTS = {**XGBoostPlans.DEFAULTS, "candidates": "mode_a_top_k", "top_k": 16}


class XGBoostPlansSafe(XGBoostPlans):
    name = "xgboost-plans-safe"
    description = ("xgboost-plans (2,500 rounds) with a safe decision rule: keeps cuDNN mode A's first plan unless "
                   "the model predicts another plan faster by more than safe_margin (log slowdown)")
    #: chosen on h100 random valid, seeds 0-2, by experiments/xgboost_plans_safe_trial.py (variants base, long)
    DEFAULTS = {**XGBoostPlans.DEFAULTS, "max_rounds": 2500, "safe_margin": 0.01}

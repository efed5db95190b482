"""Comparison baselines for tuning-parameter prediction: per-parameter XGBoost and nearest neighbour.

Both read the same descriptor fields as :mod:`kbench_baselines.seq2seq`
(:func:`kbench_baselines.seq2seq.descriptor`: direction, dtype, n, c, k, x/y sizes,
filter, stride, pad, plus the solver's direction-relative in/out channels and
image size).

``xgboost-per-param``
    One multi-class XGBoost classifier per parameter on the plain numeric
    descriptor (:func:`kbench_baselines.seq2seq.numeric_matrix`: raw values,
    ``log2(1 + v)``, trailing zero bits, one-hots). Classes are the values
    seen in training; early stopping on the valid part (multi-class log
    loss). ``constrained=False`` (default): each parameter is its own argmax
    (the tuple may be invalid). ``constrained=True``: the per-parameter
    log-probabilities feed the same constrained beam search as seq2seq
    (:func:`kbench_baselines.seq2seq.beam_search` with a table scorer), so the tuple
    is the most probable valid one under independence.
``nearest-neighbour``
    Descriptor as ``log2(1 + v)`` of every numeric field, z-normalised on the
    training part, plus one-hots of direction and dtype scaled by
    ``cat_weight`` (default 10, so a neighbour shares direction and dtype
    whenever the training part has one). The training problem at the
    smallest Euclidean distance gives its tuple (``k = 1``; ties: the lower
    training row). ``constrained=True``: the nearest of the ``k_max`` (50)
    nearest whose tuple is valid for the query problem; the nearest one if
    none is.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench_baselines.base import problems_of
from kbench_baselines.seq2seq import (
    CATEGORICAL_FIELDS,
    TableScorer,
    TuningModel,
    _tuning_problems,
    beam_search,
    descriptor,
    numeric_matrix,
    prediction_frame,
)

UNSEEN_LOGP = np.log(1e-9)  # log-probability given to values never seen in training


class TuningXGBoost(TuningModel):
    method = "xgboost-per-param"

    DEFAULTS = dict(n_estimators=400, max_depth=6, learning_rate=0.1, early_stopping_rounds=30,
                    threads=1, constrained=False, beam_width=10)

    def __init__(self, solver: str = "ConvAsm1x1U", **params):
        unknown = set(params) - set(self.DEFAULTS)
        if unknown:
            raise KbenchInputError(f"{self.method}: unknown parameter(s) {sorted(unknown)}")
        super().__init__(solver, **{**self.DEFAULTS, **params})
        self.classes: list[list[int]] = []
        self.models: list = []

    def _x(self, problems):
        return numeric_matrix(descriptor(problems, self.space))[0]

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        import xgboost as xgb

        t0 = time.perf_counter()
        self.seed = seed
        p = self.params
        tgt, prob = _tuning_problems(dataset, self.solver, train_ids)
        x = self._x(prob)
        vx = vt = None
        if valid_ids is not None:
            vt, vprob = _tuning_problems(dataset, self.solver, valid_ids)
            vx = self._x(vprob)
        self.classes, self.models, rounds = [], [], {}
        for name in self.space.params:
            y = tgt[name].to_numpy(np.int64)
            classes = np.unique(y)
            self.classes.append(classes.tolist())
            if len(classes) == 1:
                self.models.append(None)
                continue
            yi = np.searchsorted(classes, y)
            kw = dict(n_estimators=p["n_estimators"], max_depth=p["max_depth"], learning_rate=p["learning_rate"],
                      tree_method="hist", n_jobs=p["threads"], random_state=seed, objective="multi:softprob",
                      eval_metric="mlogloss")
            fit_kw = {}
            if vx is not None:
                vy = vt[name].to_numpy(np.int64)
                known = np.isin(vy, classes)
                kw["early_stopping_rounds"] = p["early_stopping_rounds"]
                fit_kw = dict(eval_set=[(vx[known], np.searchsorted(classes, vy[known]))], verbose=False)
            clf = xgb.XGBClassifier(**kw)
            clf.fit(x, yi, **fit_kw)
            rounds[name] = int(getattr(clf, "best_iteration", p["n_estimators"] - 1)) + 1
            self.models.append(clf)
        self.fit_info = {"fit_time_s": time.perf_counter() - t0, "rounds": rounds, "n_train": int(len(tgt)),
                         "threads": p["threads"]}
        return self

    def logp(self, problems) -> list[np.ndarray]:
        """Per position (N, V_t) log-probabilities over the space's legal values."""
        x = self._x(problems)
        out = []
        for t, (classes, clf) in enumerate(zip(self.classes, self.models)):
            vals = self.space.values[t]
            lp = np.full((len(x), len(vals)), UNSEEN_LOGP)
            col = pd.Index(vals).get_indexer(np.asarray(classes))
            if clf is None:
                lp[:, col[0]] = 0.0
            else:
                lp[:, col] = np.log(np.maximum(clf.predict_proba(x), 1e-12))
            out.append(lp)
        return out

    def predict(self, dataset, ids, constrained: bool | None = None) -> pd.DataFrame:
        problems = problems_of(dataset, ids)
        constrained = self.params["constrained"] if constrained is None else constrained
        lp = self.logp(problems)
        if constrained:
            res = beam_search(TableScorer(lp), self.space, self.space.context(problems), np.arange(len(problems)),
                              int(self.params["beam_width"]), True)
            self.last_search = res
            return prediction_frame(problems["problem_id"], self.space, self.space.decode(np.maximum(res.best, 0)),
                                    res.found)
        idx = np.column_stack([a.argmax(axis=1) for a in lp])
        return prediction_frame(problems["problem_id"], self.space, self.space.decode(idx))

    def get_state(self):
        return {"classes": self.classes, "models": [None if m is None else f"xgb_{i}.json"
                                                    for i, m in enumerate(self.models)]}, {}

    def _save_files(self, path: Path):
        for i, m in enumerate(self.models):
            if m is not None:
                m.save_model(path / f"xgb_{i}.json")

    def set_state(self, state, arrays, path):
        import xgboost as xgb

        self.classes = state["classes"]
        self.models = []
        for f in state["models"]:
            if f is None:
                self.models.append(None)
            else:
                m = xgb.XGBClassifier()
                m.load_model(path / f)
                self.models.append(m)


class TuningNearestNeighbour(TuningModel):
    method = "nearest-neighbour"

    DEFAULTS = dict(cat_weight=10.0, constrained=False, k_max=50)

    def __init__(self, solver: str = "ConvAsm1x1U", **params):
        unknown = set(params) - set(self.DEFAULTS)
        if unknown:
            raise KbenchInputError(f"{self.method}: unknown parameter(s) {sorted(unknown)}")
        super().__init__(solver, **{**self.DEFAULTS, **params})
        self.mean = self.std = None
        self.train_x = self.train_y = None

    def _raw(self, problems) -> np.ndarray:
        d = descriptor(problems, self.space)
        num = [c for c in d.columns if c not in CATEGORICAL_FIELDS]
        return np.log2(1.0 + np.maximum(d[num].to_numpy(np.float64), 0.0)), d

    def _x(self, problems) -> np.ndarray:
        num, d = self._raw(problems)
        z = (num - self.mean) / self.std
        w = float(self.params["cat_weight"])
        cats = [(d["direction"].to_numpy() == lv) * w for lv in ("F", "B", "W")]
        cats += [(d["dtype"].to_numpy() == lv) * w for lv in ("FP32", "FP16", "BF16")]
        return np.column_stack([z] + cats)

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        t0 = time.perf_counter()
        self.seed = seed
        tgt, prob = _tuning_problems(dataset, self.solver, train_ids)
        num, _ = self._raw(prob)
        self.mean = num.mean(axis=0)
        s = num.std(axis=0)
        self.std = np.where(s > 1e-12, s, 1.0)
        self.train_x = self._x(prob)
        self.train_y = tgt[list(self.space.params)].to_numpy(np.int64)
        self.fit_info = {"fit_time_s": time.perf_counter() - t0, "n_train": int(len(tgt))}
        return self

    def neighbours(self, x: np.ndarray, k: int) -> np.ndarray:
        from sklearn.neighbors import NearestNeighbors

        nn = NearestNeighbors(n_neighbors=min(k, len(self.train_x)), algorithm="brute")
        nn.fit(self.train_x)
        dist, idx = nn.kneighbors(x)
        # deterministic ties: by distance, then training row
        order = np.lexsort((idx, np.round(dist, 12)), axis=1)
        return np.take_along_axis(idx, order, axis=1)

    def predict(self, dataset, ids, constrained: bool | None = None) -> pd.DataFrame:
        problems = problems_of(dataset, ids)
        constrained = self.params["constrained"] if constrained is None else constrained
        x = self._x(problems)
        if not constrained:
            idx = self.neighbours(x, 1)[:, 0]
            return prediction_frame(problems["problem_id"], self.space, self.train_y[idx])
        nb = self.neighbours(x, int(self.params["k_max"]))
        n, k = nb.shape
        cand = self.train_y[nb.ravel()]
        ctx = self.space.context(problems)
        ok = self.space.is_valid(ctx, np.repeat(np.arange(n), k), cand).reshape(n, k)
        first = np.where(ok.any(axis=1), ok.argmax(axis=1), 0)
        return prediction_frame(problems["problem_id"], self.space, self.train_y[nb[np.arange(n), first]])

    def get_state(self):
        return {"mean": self.mean.tolist(), "std": self.std.tolist()}, {
            "train_x": self.train_x, "train_y": self.train_y}

    def set_state(self, state, arrays, path):
        self.mean, self.std = np.asarray(state["mean"]), np.asarray(state["std"])
        self.train_x, self.train_y = arrays["train_x"], arrays["train_y"].astype(np.int64)


__all__ = ["TuningXGBoost", "TuningNearestNeighbour"]

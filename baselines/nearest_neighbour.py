"""``nearest-neighbour``: copy the measured ranking of the closest training problem.

Distance: Euclidean over :data:`kbench_baselines.features.DISTANCE_FEATURES`
(log-scaled sizes, shape flags, one-hot data type and layout), z-normalised on
the training problems; the categorical columns (data type, layout, 3D) are
weighted by ``cat_weight`` so that a neighbour of the same data type and layout
wins over a closer shape of another type. Neighbours are searched among
training problems of the same direction only.

Ranking: the nearest neighbour's measured kernels (fastest first), then those
of the next ``k - 1`` neighbours not already listed, then every other kernel
of the direction in the training prior order. ``k`` only lengthens the
ranking; the first choice is always the nearest problem's best kernel.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kbench_baselines.base import (
    Baseline,
    KernelSpace,
    as_id_index,
    predictions_frame,
    problems_of,
    rank_by_scores,
    train_runtimes,
)
from kbench_baselines.features import DISTANCE_FEATURES, Standardizer, features_for

CATEGORICAL = ("dtype_", "layout_", "is_3d")


class NearestNeighbour(Baseline):
    name = "nearest-neighbour"
    description = "copies the measured ranking of the closest training problem (same direction)"

    def __init__(self, k: int = 5, cat_weight: float = 3.0):
        super().__init__(k=k, cat_weight=cat_weight)
        self.k, self.cat_weight = int(k), float(cat_weight)

    def _weights(self) -> np.ndarray:
        return np.array([self.cat_weight if c.startswith(CATEGORICAL) else 1.0 for c in DISTANCE_FEATURES])

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        self.seed = seed
        ids = as_id_index(train_ids)
        self.space = KernelSpace.fit(dataset, ids)
        feats = features_for(dataset, ids)
        self.scaler = Standardizer().fit(feats, DISTANCE_FEATURES)
        self.x = (self.scaler.transform(feats) * self._weights()).astype(np.float32)
        self.direction = dataset.problems.set_index("problem_id").loc[ids, "direction"].astype(str).to_numpy()
        # each training problem's measured kernels, fastest first (-1 pads)
        rt = train_runtimes(dataset, ids).sort_values(["problem_id", "time_ms"], kind="stable")
        row = ids.get_indexer(rt["problem_id"])
        pos = rt.groupby("problem_id", sort=False).cumcount().to_numpy()
        width = int(pos.max()) + 1 if len(pos) else 1
        self.lists = np.full((len(ids), width), -1, dtype=np.int32)
        col = rt["kernel"].map(self.space.index)
        ok = col.notna().to_numpy()
        self.lists[row[ok], pos[ok]] = col[ok].to_numpy(dtype=np.int32)
        return self

    def neighbours(self, q: np.ndarray, qdir: np.ndarray) -> np.ndarray:
        """Indices (into the training problems) of the k nearest of the same direction, nearest first."""
        from sklearn.neighbors import NearestNeighbors
        out = np.full((len(q), self.k), -1, dtype=np.int64)
        for d in np.unique(qdir):
            pool = np.flatnonzero(self.direction == d)
            rows = np.flatnonzero(qdir == d)
            if len(pool) == 0:
                continue
            k = min(self.k, len(pool))
            nn = NearestNeighbors(n_neighbors=k).fit(self.x[pool])
            _, idx = nn.kneighbors(q[rows])
            out[rows, :k] = pool[idx]
        return out

    def predict(self, dataset, ids) -> pd.DataFrame:
        problems = problems_of(dataset, ids)
        feats = features_for(dataset, problems["problem_id"])
        q = (self.scaler.transform(feats) * self._weights()).astype(np.float32)
        nb = self.neighbours(q, problems["direction"].astype(str).to_numpy())
        # candidates in order: neighbour 1's list, neighbour 2's list, ...
        cand = np.where(nb[:, :, None] >= 0, self.lists[np.maximum(nb, 0)], -1).reshape(len(q), -1)
        n_k = len(self.space.names)
        first = np.full((len(q), n_k + 1), cand.shape[1], dtype=np.int64)  # last column: padding
        rows = np.repeat(np.arange(len(q)), cand.shape[1])
        cols = np.where(cand >= 0, cand, n_k).ravel()
        np.minimum.at(first, (rows, cols), np.tile(np.arange(cand.shape[1]), len(q)))
        first = first[:, :n_k]
        listed = first < cand.shape[1]
        prior = self.space.prior_scores(problems)
        score = np.where(listed, 1e15 - first, prior)
        allowed = self.space.allowed(problems) | listed
        return predictions_frame(problems["problem_id"], rank_by_scores(score, self.space.names, allowed))

    def get_state(self):
        state = {"space": self.space.to_dict(), "scaler": self.scaler.to_dict(),
                 "directions": sorted(set(self.direction))}
        codes = pd.Index(state["directions"]).get_indexer(self.direction).astype(np.int8)
        return state, {"x": self.x, "lists": self.lists, "direction": codes}

    def set_state(self, state, arrays, path):
        self.space = KernelSpace.from_dict(state["space"])
        self.scaler = Standardizer.from_dict(state["scaler"])
        self.x = arrays["x"]
        self.lists = arrays["lists"]
        self.direction = np.asarray(state["directions"], dtype=object)[arrays["direction"]]

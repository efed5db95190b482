"""Small datasets for the baseline tests (a few thousand mi100 problems, or hand-written keys)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kbench.data.dataset import Dataset
from kbench.sources.problem import parse_miopen_keys


def small_subset(ds, split: str = "random", n_train: int = 2500, n_valid: int = 400, n_test: int = 800,
                 seed: int = 0) -> Dataset:
    """A deterministic subset of ``ds`` keeping the split's parts (sizes as given)."""
    rng = np.random.default_rng(seed)
    parts = ds.split(split)
    keep = np.concatenate([rng.choice(parts[p], size=min(n, len(parts[p])), replace=False)
                           for p, n in (("train", n_train), ("valid", n_valid), ("test", n_test))])
    sub = ds.subset(keep)
    sub.name = f"{ds.name}-small"
    return sub


class KeyDataset:
    """A minimal dataset of hand-written MIOpen keys, with a real kernel vocabulary (no runtimes)."""

    def __init__(self, keys, kernels: pd.DataFrame, name="hand"):
        p = parse_miopen_keys(pd.Series(keys))
        p["censored"] = False
        self.problems = p
        self.kernels = kernels
        self.runtimes = pd.DataFrame({"problem_id": pd.Series([], dtype=str), "kernel": pd.Series([], dtype=str),
                                      "time_ms": pd.Series([], dtype=float)})
        self.name = name
        self.info = {"task": "kernel-selection", "library": "MIOpen"}

"""The cross-device transfer track: train on one GPU's data, adapt with k measured problems of another.

>>> import kbench
>>> tr = kbench.transfer("mi100", "mi300x", k=100, seed=0)   # doctest: +SKIP
>>> src = tr.source_train()          # source Dataset: its random train part, minus leaking geometries
>>> shots = tr.target_shots()        # target Dataset whose runtimes hold the k drawn problems only
>>> parts = tr.target_split()        # the target's standard random split (ids; no labels)
>>> # predict parts["test"] on tr.target_inputs(), score with Evaluator(target, split="random")

Protocol (``docs/transfer.md``)
-------------------------------
* **Source**: the source dataset's ``random`` train and valid parts, minus every
  problem whose geometry (``geometry_id``, shared across devices) falls in the
  target's ``valid`` or ``test`` part. Problem ids are the same on every device,
  so without this a target test problem, or its twin in another direction or data
  type, could be trained on through the source.
* **Target**: its standard ``random`` split. Its ``train`` part is reachable only
  through the k-shot budget: ``k`` problems (k in :data:`K_BUDGETS`) drawn by a
  seeded permutation of the train ids (the first ``n`` of one seed's order, so
  the 100 shots are a subset of the 1000). Asking for more than ``k`` raises
  :class:`KbenchInputError`. The target ``valid`` part carries labels too, so a
  transfer method gets none of it (selection uses the source valid part).
* **Score**: the target's ``test`` part with the standard Evaluator, exactly as
  ``kbench evaluate preds.csv --dataset TARGET --split random``.

This module is in the data-model layer: it reads datasets and splits only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench.data.dataset import Dataset, load

#: the k-shot budgets of the track (measured target problems)
K_BUDGETS = (0, 100, 1000)
#: the split every transfer pair uses, on both sides
TRANSFER_SPLIT = "random"
#: target parts whose geometries the source training data must not contain
HELD_OUT_PARTS = ("valid", "test")
#: the pairs of the track; ``kbench transfer run`` without --source/--target runs these
PAIRS = (("mi100", "mi210"), ("mi210", "mi250x"), ("mi100", "mi300x"), ("mi210", "gfx1030"), ("h100", "h200"))


def _held_out(target: Dataset, split: str) -> tuple[pd.Index, pd.Index]:
    """(ids, geometry ids) of the target's held-out (valid + test) problems."""
    parts = target.split(split)
    ids = pd.Index(np.concatenate([parts[p] for p in HELD_OUT_PARTS]).astype(object))
    problem_ids = target.problems["problem_id"].to_numpy(dtype=object)
    geometry = target.problems["geometry_id"].to_numpy(dtype=object)
    return ids, pd.Index(np.unique(geometry[ids.get_indexer(problem_ids) >= 0]))


def leaking_geometries(target: Dataset, split: str = TRANSFER_SPLIT) -> np.ndarray:
    """The geometry ids of the target's held-out (valid + test) problems."""
    return _held_out(target, split)[1].to_numpy()


def drop_leaking(source: Dataset, ids, target: Dataset, split: str = TRANSFER_SPLIT,
                 held_out: tuple[pd.Index, pd.Index] | None = None) -> np.ndarray:
    """``ids`` (source problem ids) without any problem whose id or geometry is held out on the target.

    ``held_out``: the target's (ids, geometries) from :func:`_held_out`, when already computed."""
    ids = np.asarray(ids, dtype=object)
    bad_ids, bad_geometry = held_out if held_out is not None else _held_out(target, split)
    # object arrays and Index look-ups: Arrow-string isin and astype(str) are slow on ~10^5 ids
    source_ids = pd.Index(source.problems["problem_id"].to_numpy(dtype=object))
    geometry = source.problems["geometry_id"].to_numpy(dtype=object)[source_ids.get_indexer(ids)]
    keep = (bad_geometry.get_indexer(geometry) < 0) & (bad_ids.get_indexer(ids) < 0)
    return ids[keep]


def draw_shot_order(train_ids, seed: int) -> np.ndarray:
    """The target train ids in the seed's draw order (sorted first, so the draw never depends on file order)."""
    ids = np.sort(np.asarray(train_ids, dtype=object).astype(str))
    return ids[np.random.default_rng(seed).permutation(len(ids))]


def _with_runtimes_of(ds: Dataset, ids) -> Dataset:
    """``ds`` with every problem kept but measured times (and other per-problem labels) for ``ids`` only."""
    keep = pd.Index(np.asarray(ids, dtype=object).astype(str))
    tables = {}
    for key, table in ds.tables.items():
        labelled = "problem_id" in table and key not in ("problems", "splits")
        tables[key] = table[table["problem_id"].astype(str).isin(keep)].reset_index(drop=True) if labelled else table
    return Dataset(ds.name, tables, ds.manifest, ds.path)


@dataclass
class Transfer:
    """One transfer task: source data, target split, k-shot budget and the seed of the draw."""

    source: Dataset
    target: Dataset
    k: int
    seed: int = 0
    split: str = TRANSFER_SPLIT
    _order: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        if self.k not in K_BUDGETS:
            raise KbenchInputError(f"transfer: k must be one of {K_BUDGETS} (measured target problems), "
                                   f"got {self.k!r}.")
        if self.source.name == self.target.name:
            raise KbenchInputError(f"transfer: source and target are both {self.source.name!r}; name two devices.")
        for ds in (self.source, self.target):
            if ds.runtimes is None:
                raise KbenchInputError(f"transfer: {ds.name!r} has no measured runtimes (task {ds.task!r}); "
                                       "the transfer track needs two kernel-selection datasets.")
        if self.source.kernels is not None and self.target.kernels is not None and not (
                set(self.source.kernels["kernel"]) & set(self.target.kernels["kernel"])):
            lib = {ds.name: (ds.info or {}).get("library") or "?" for ds in (self.source, self.target)}
            raise KbenchInputError(
                f"transfer: {self.source.name!r} ({lib[self.source.name]}) and {self.target.name!r} "
                f"({lib[self.target.name]}) share no kernel, so no choice on one can be run on the other; "
                "name two devices of one library (e.g. mi100 -> mi210, h100 -> h200).")
        self._order = draw_shot_order(self.target.split(self.split)["train"], self.seed)
        if self.k > len(self._order):
            raise KbenchInputError(f"transfer: k={self.k} but {self.target.name!r} has only "
                                   f"{len(self._order)} problems in its {self.split} train part.")

    @property
    def pair(self) -> str:
        return f"{self.source.name}-to-{self.target.name}"

    # -- source -----------------------------------------------------------------
    def source_ids(self) -> dict[str, np.ndarray]:
        """The source's train and valid ids with every target-held-out geometry removed."""
        parts, held = self.source.split(self.split), _held_out(self.target, self.split)
        return {p: drop_leaking(self.source, parts[p], self.target, self.split, held) for p in ("train", "valid")}

    def source_train(self) -> Dataset:
        """The source dataset restricted to its (leak-free) train and valid problems."""
        ids = self.source_ids()
        return self.source.subset(np.concatenate([ids["train"], ids["valid"]]))

    def source_measurements(self) -> Dataset:
        """The source device's own measurements of every problem (a different GPU: no target label).

        For the zero-shot reference that reuses the source's measured ranking of the same problem
        id; a learned method trains on :meth:`source_train` only.
        """
        return self.source

    # -- target -----------------------------------------------------------------
    def target_split(self) -> dict[str, np.ndarray]:
        """The target's standard split as ids (no labels): train, valid, test."""
        return self.target.split(self.split)

    def shot_ids(self, n: int | None = None) -> np.ndarray:
        """The first ``n`` (default k) drawn target train ids; more than k is refused."""
        n = self.k if n is None else int(n)
        if n < 0 or n > self.k:
            raise KbenchInputError(
                f"transfer {self.pair}: asked for {n} measured target problems but the budget is k={self.k}; "
                f"use a larger budget (one of {K_BUDGETS}) or ask for at most {self.k}.")
        return self._order[:n]

    def target_shots(self, n: int | None = None) -> Dataset:
        """The target dataset whose measured times are those of the drawn shots only (n <= k)."""
        return _with_runtimes_of(self.target, self.shot_ids(n))

    def target_inputs(self) -> Dataset:
        """What a transfer model may see of the target: every problem's description, the k shots' times."""
        return self.target_shots()


def transfer(source: str | Dataset, target: str | Dataset, k: int = 0, seed: int = 0) -> Transfer:
    """A transfer task from ``source`` to ``target`` with a budget of ``k`` measured target problems."""
    src = load(source) if isinstance(source, str) else source
    tgt = load(target) if isinstance(target, str) else target
    return Transfer(src, tgt, int(k), int(seed))

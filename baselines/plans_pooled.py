"""One cuDNN-plans model over every NVIDIA GPU of a candidate set: ``xgboost-plans-pooled`` and ``-lodo``.

The ``xgboost-plans-safe`` recipe (one row per (problem, plan cuDNN proposes), regression of
log(t / t_best), the safe decision rule) trained on the train parts of every collected dataset
of the target's candidate-set variant: h100 with h200, h100-pytorch with h200-pytorch. The GPU
enters through the ``device_spec`` of each dataset's manifest, what the collector recorded of it
(``kbench.collect.packaging.package.DEVICE_SPEC``: SM count, L2 bytes, memory bytes, maximum SM and memory
clocks), never a device id, so a GPU the model never saw can be scored.

Which problems are trained on is :func:`kbench_baselines.pooled.training_parts`, as for the AMD
pooled model: every sibling's train part of the same split, less the problems whose geometry lies
in the target's valid or test part; the splits are a hash of the geometry, the same on every GPU,
so no device's test problems are seen. Early stopping reads every device's valid part.
``xgboost-plans-pooled-lodo`` (``leave_out=True``) trains without the target GPU at all: the
zero-shot row of the transfer track.

A fitted pooled model does not depend on the GPU it is scored on (the rows are the same for
either target), so it is cached as :mod:`kbench_baselines.pooled` caches the AMD one
(``$KBENCH_CACHE/pooled/plans-<key>``, a saved model): one training scores both GPUs' boards.

Problem ids of the devices are kept apart by a ``<dataset>|`` prefix inside the model; predictions
carry the target's own ids. ``docs/pooled.md`` has the results.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench_baselines.base import as_id_index
from kbench_baselines.pooled import _cache_root, _load, cache_key, sibling_names, training_parts
from kbench_baselines.xgb_plans import XGBoostPlansSafe

#: the manifest's ``device_spec`` fields, in the model's column order
DEVICE_SPEC_FIELDS = ("sm_count", "l2_bytes", "memory_bytes", "clock_max_sm_mhz", "clock_max_mem_mhz")
DEVICE_COLUMNS = tuple(f"device_{f}" for f in DEVICE_SPEC_FIELDS)
SEP = "|"


def device_spec_columns(info: dict) -> dict[str, float]:
    """The device columns of a dataset from its manifest's ``device_spec``."""
    spec = (info or {}).get("device_spec") or {}
    missing = [f for f in DEVICE_SPEC_FIELDS if f not in spec]
    if missing:
        raise KbenchInputError(f"dataset {info.get('name')!r}: its manifest's device_spec lacks {', '.join(missing)}; "
                               "package it with this kbench (kbench.collect.packaging.package writes it from the collector's "
                               "environment records)")
    return {col: float(spec[f]) for col, f in zip(DEVICE_COLUMNS, DEVICE_SPEC_FIELDS)}


def tagged(name: str, ids) -> pd.Index:
    return pd.Index([f"{name}{SEP}{i}" for i in as_id_index(ids)], dtype=object)


def pooled_view(datasets: dict) -> SimpleNamespace:
    """One dataset-like object over ``{name: dataset}``: ids ``<name>|<id>``, device columns on the problems."""
    def tag(frame: pd.DataFrame, name: str) -> pd.DataFrame:
        return frame.assign(problem_id=name + SEP + frame["problem_id"].astype(str))
    problems = pd.concat([tag(ds.problems, n).assign(**device_spec_columns(ds.info)) for n, ds in datasets.items()],
                         ignore_index=True)
    heuristics = pd.concat([tag(ds.heuristics, n) for n, ds in datasets.items()], ignore_index=True)
    runtimes = pd.concat([tag(ds.runtimes[["problem_id", "kernel", "time_ms"]].astype({"kernel": str}), n)
                          for n, ds in datasets.items()], ignore_index=True)
    first = next(iter(datasets.values()))
    return SimpleNamespace(name="+".join(datasets), info=first.info, problems=problems, heuristics=heuristics,
                           runtimes=runtimes)


class XGBoostPlansPooled(XGBoostPlansSafe):
    name = "xgboost-plans-pooled"
    description = ("xgboost-plans-safe trained on every GPU of the candidate set (train parts only), the "
                   "collector's device_spec as features")
    external_data = True  # trained on the sibling GPU's train part as well
    benchmark = False  # two GPUs' rows: run it by name
    code = "baselines/plans_pooled.py"
    DEFAULTS = {**XGBoostPlansSafe.DEFAULTS, "leave_out": False, "split": "auto", "cache": True}

    def __init__(self, **params):
        super().__init__(**params)
        self._views: dict[int, tuple[object, SimpleNamespace]] = {}

    def supports(self, dataset) -> bool:
        info = getattr(dataset, "info", None) or {}
        return (super().supports(dataset) and bool(info.get("device_spec"))
                and len(sibling_names(dataset)) >= 2)

    def _matrix(self, dataset, problems: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
        # the recipe's own columns (fixed by the first call, as in xgboost-plans), then the device columns
        if not set(DEVICE_COLUMNS) <= set(problems.columns):
            raise KbenchInputError(f"{self.name}: problems without device columns; pass a pooled view "
                                   "(fit and predict build one)")
        self.columns = [c for c in self.columns if c not in DEVICE_COLUMNS]
        x = super()._matrix(dataset, problems, rows)
        self.columns = self.columns + list(DEVICE_COLUMNS)
        device = problems[list(DEVICE_COLUMNS)].to_numpy(np.float32)[rows["pos"].to_numpy()]
        return np.hstack([x, device])

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        train_ids = as_id_index(train_ids)
        valid_ids = as_id_index([] if valid_ids is None else valid_ids)
        parts = training_parts(dataset, train_ids, valid_ids, seed, sibling_names(dataset),
                               self.params["split"], self.params["leave_out"])
        key = "plans-" + cache_key(self.params, seed, parts)
        folder = _cache_root() / key
        if self.params["cache"] and (folder / "baseline.json").is_file():
            self.seed = int(seed)
            self.set_state(json.loads((folder / "baseline.json").read_text())["state"], {}, folder)
            # what the training took when it ran: kbench run records it as the seed's fit time
            self.fit_info.update(cache=key, cached_training_time_s=self.fit_info["training_time_s"])
            return self
        t0 = time.perf_counter()
        view = pooled_view({name: _load(name, dataset) for name in parts})
        tr = pd.Index(np.concatenate([tagged(n, ids[0]) for n, ids in parts.items()]), dtype=object)
        va = pd.Index(np.concatenate([tagged(n, ids[1]) for n, ids in parts.items()]), dtype=object)
        super().fit(view, tr, va, seed)
        self.fit_info["devices"] = {name: [len(ids[0]), len(ids[1])] for name, ids in parts.items()}
        self.fit_info["training_time_s"] = round(time.perf_counter() - t0, 2)
        if self.params["cache"]:
            # saved beside, then renamed: a folder under its key is always complete
            tmp = folder.with_name(f"{key}.tmp-{os.getpid()}")
            self.save(tmp)
            try:
                tmp.rename(folder)
            except OSError:  # another job saved the same fit meanwhile
                shutil.rmtree(tmp, ignore_errors=True)
        self.fit_info["cache"] = key
        return self

    def _view(self, dataset) -> SimpleNamespace:
        """The target alone as a pooled view, built once per dataset object (latency is timed per call)."""
        held = self._views.get(id(dataset))
        if held is None or held[0] is not dataset:
            held = (dataset, pooled_view({dataset.name: dataset}))
            self._views[id(dataset)] = held
        return held[1]

    def row_scores(self, dataset, ids) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
        """The recipe's rows and scores for the target ``dataset``, under its own problem ids (predict ranks them)."""
        problems, rows, score = super().row_scores(self._view(dataset), tagged(dataset.name, as_id_index(ids)))

        def untagged(frame: pd.DataFrame) -> pd.DataFrame:
            return frame.assign(problem_id=frame["problem_id"].astype(str).str.split(SEP, n=1).str[1])
        return untagged(problems), untagged(rows), score


class XGBoostPlansPooledLeaveOut(XGBoostPlansPooled):
    name = "xgboost-plans-pooled-lodo"
    description = ("xgboost-plans-safe trained on every other GPU of the candidate set (leave-one-device-out: "
                   "none of the target's data), the collector's device_spec as features")
    DEFAULTS = {**XGBoostPlansPooled.DEFAULTS, "leave_out": True}

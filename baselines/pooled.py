"""Pooled XGBoost over every GPU of a vendor: ``xgboost-pooled`` and ``xgboost-pooled-lodo``.

One multi-class model (the ``xgboost`` recipe: one booster per direction,
classes = kernels fastest for some training problem, early stopping on valid)
trained on the train parts of *all* kernel-selection datasets of the target's
vendor and library (for AMD: mi100, mi50, mi210, mi250x, mi300x, gfx1030).
The GPU enters as device descriptors, never as a per-device id, so a GPU the
model never saw can be scored:

``device_units``
    compute units (AMD) or SMs (NVIDIA), read from the registry's device
    string (``"... 120 CUs)"``).
``arch_major``, ``arch_minor``, ``arch_stepping``
    the architecture name split into its parts: an LLVM AMDGPU target
    ``gfx<major><minor><stepping>`` (the last two one hex digit each, so
    gfx908 = 9/0/8, gfx90a = 9/0/10, gfx1030 = 10/3/0) or ``sm_<major><minor>``.

Use it like any baseline (``kbench run --dataset mi100 --baselines
xgboost-pooled``); ``fit(dataset, train_ids, valid_ids)`` loads the sibling
datasets itself.

Which problems are trained on. The splits are a hash of the problem's
geometry, the same on every GPU, so one split's train part is the same
geometries everywhere. The model takes, for every sibling, the train part of
the split whose train part the given ``train_ids`` are (``split="auto"``; a
subset of it, as in a learning curve, takes the same fraction of every
sibling's train part) and drops any sibling problem whose geometry lies in
the target's valid or test part. Early stopping reads the valid parts the
same way. No device's test problems are seen.

``xgboost-pooled-lodo`` (``leave_out=True``) trains without the target GPU
at all: no problems, no labels, no valid part of it; its kernel prior (the
order of kernels the boosters do not rank) comes from the siblings too. Only
the target's kernel vocabulary (which solvers exist and their directions) is
read from it. This is the zero-shot row of the transfer track.

A fitted pooled model depends only on its training rows, not on which GPU it
is scored on, so it is cached (``$KBENCH_CACHE``, default
``~/.cache/kbench``, under ``pooled/``, keyed by a hash of the settings, the
seed and the training and valid rows): scoring the six AMD boards with one
seed trains it once. A fit loaded from the cache gives the training's own time
(``fit_info["cached_training_time_s"]``), which ``kbench run`` records as the
seed's fit time, with ``extra.fit_from_cache``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench.data.dataset import load
from kbench.data.registry import DATASETS
from kbench_baselines.base import KernelSpace, as_id_index
from kbench_baselines.features import features_for
from kbench_baselines.xgb import DIRECTIONS, XGBoostMulticlass, _callback, _progress, _xgb

DEVICE_COLUMNS = ("device_units", "arch_major", "arch_minor", "arch_stepping")
_UNITS = re.compile(r"(\d+)\s*(?:CUs|SMs)\b")
_GFX = re.compile(r"^gfx(\d{1,2})([0-9a-f])([0-9a-f])$")
_SM = re.compile(r"^sm_(\d+)(\d)$")


def device_descriptors(info: dict) -> dict[str, float]:
    """The device columns of a dataset from its ``info`` (registry) fields; NaN where not stated."""
    out = dict.fromkeys(DEVICE_COLUMNS, np.nan)
    units = _UNITS.search(str(info.get("device", "")))
    if units:
        out["device_units"] = float(units.group(1))
    arch = str(info.get("arch", "")).strip().lower()
    gfx, sm = _GFX.match(arch), _SM.match(arch)
    if gfx:
        out.update(arch_major=float(gfx.group(1)), arch_minor=float(int(gfx.group(2), 16)),
                   arch_stepping=float(int(gfx.group(3), 16)))
    elif sm:
        out.update(arch_major=float(sm.group(1)), arch_minor=float(sm.group(2)), arch_stepping=0.0)
    return out


def device_features(dataset, ids) -> pd.DataFrame:
    """``features_for`` plus the dataset's device columns (the same value in every row)."""
    feats = features_for(dataset, ids)
    for col, value in device_descriptors(dataset.info).items():
        feats[col] = value
    return feats


def sibling_names(dataset) -> list[str]:
    """Registered kernel-selection datasets of the same vendor, library and candidate-set variant as
    ``dataset`` (itself included): h100 pools with h200, not with h100-pytorch. A 2D set pools with 2D
    sets; a 3D set with the 3D sets and the 2D set of its own GPU (h200-3d with h200), whose plans and
    engines it shares."""
    info = dataset.info
    variant = info.get("variant", "default")
    registered = DATASETS.get(dataset.name)  # the registry names the library alike for every collected set
    library = registered.library if registered is not None else info.get("library")
    rank = registered.spatial_dims if registered is not None else 2
    device = registered.device if registered is not None else info.get("device")

    def same_family(s) -> bool:
        return s.spatial_dims == rank or (rank == 3 and s.device == device)
    names = [s.name for s in DATASETS.values() if s.task == "kernel-selection" and s.vendor == info.get("vendor")
             and s.library == library and s.variant == variant and same_family(s)]
    return names if dataset.name in names else names + [dataset.name]


_LOADED: dict[str, object] = {}


def _load(name: str, dataset):
    """A sibling dataset, loaded once per process (the target itself is the object passed in)."""
    if name == dataset.name:
        return dataset
    if name not in _LOADED:
        _LOADED[name] = load(name)
    return _LOADED[name]


def infer_split(dataset, train_ids: pd.Index) -> tuple[str, float]:
    """(split name, fraction): the standard split whose train part holds ``train_ids``."""
    given = set(train_ids)
    for split in dataset.info.get("splits", {}) or ("random", "networks"):
        train = dataset.split(split)["train"]
        if given <= set(train):
            return split, len(given) / max(len(train), 1)
    raise KbenchInputError(f"{dataset.name}: the train ids are not (part of) the train part of a standard "
                           "split; pass split=NAME to the pooled baseline or train on a standard split.")


def training_parts(dataset, train_ids: pd.Index, valid_ids: pd.Index, seed: int, siblings: list[str],
                   split: str = "auto", leave_out: bool = False) -> dict:
    """{device name: (train ids, valid ids)} of every dataset of ``siblings`` a pooled model trains on.

    The target's own parts are the ids given (none with ``leave_out``). A sibling gives the train part
    of the same split (the same fraction of it, drawn by the seed, when ``train_ids`` are a share of the
    target's), less every problem whose geometry lies in the target's valid or test part, and its valid part.
    """
    split, fraction = (split, None) if split != "auto" else infer_split(dataset, train_ids)
    if fraction is None:
        fraction = len(train_ids) / max(len(dataset.split(split)["train"]), 1)
    geometry = dataset.problems.set_index("problem_id")["geometry_id"]
    target_parts = dataset.split(split)
    held_out = set(geometry.reindex(as_id_index(target_parts["valid"]).append(
        as_id_index(target_parts["test"]))).dropna())
    parts = {}
    for name in siblings:
        if name == dataset.name:
            if not leave_out:
                parts[name] = (train_ids, valid_ids)
            continue
        sib = _load(name, dataset)
        sp = sib.split(split)
        sgeo = sib.problems.set_index("problem_id")["geometry_id"]
        tr, va = as_id_index(sp["train"]), as_id_index(sp["valid"])
        tr = tr[~sgeo.reindex(tr).isin(held_out).to_numpy()]
        if fraction < 1.0:  # the same share of every sibling, drawn by the seed
            rng = np.random.default_rng([seed, len(name)] + [ord(c) for c in name])
            tr = tr[np.sort(rng.choice(len(tr), int(round(fraction * len(tr))), replace=False))]
        parts[name] = (tr, va)
    return parts


def _cache_root() -> Path:
    return Path(os.environ.get("KBENCH_CACHE", Path.home() / ".cache" / "kbench")) / "pooled"


def cache_key(params: dict, seed: int, parts: dict, **extra) -> str:
    """A pooled fit's cache key: its settings (not ``cache``, ``split``, ``n_jobs``, which change
    neither the rows nor the trees), seed, ``extra`` and the ids of every part it trains on. A pooled
    model does not depend on the GPU it is scored on, so every sibling's board finds the same key."""
    h = hashlib.sha256()
    settings = {k: v for k, v in params.items() if k not in ("cache", "split", "n_jobs")}
    h.update(json.dumps({"settings": settings, "seed": seed, **extra}, sort_keys=True).encode())
    for name in sorted(parts):
        h.update(name.encode())
        for ids in parts[name]:
            h.update("\n".join(sorted(map(str, ids))).encode())
            h.update(b"|")
    return h.hexdigest()[:24]


class XGBoostPooled(XGBoostMulticlass):
    name = "xgboost-pooled"
    description = ("XGBoost multi-class trained on every GPU of the vendor (train parts only), "
                   "device descriptors as features")
    external_data = True  # trained on the sibling GPUs' train parts as well
    benchmark = False  # trains on every sibling (558,085 AMD problems): run it by name, not by default
    code = "baselines/pooled.py"
    DEFAULTS = {**{k: v for k, v in XGBoostMulticlass.DEFAULTS.items() if k not in ("margin_weight", "soft_labels")},
                "leave_out": False, "split": "auto", "cache": True}

    def __init__(self, **params):
        super().__init__(**params)
        if self.params["decision"] != "probability":
            raise KbenchInputError(f"{self.name}: only decision='probability' is supported")

    def supports(self, dataset) -> bool:
        info = getattr(dataset, "info", {}) or {}
        if info.get("task") != "kernel-selection" or len(sibling_names(dataset)) < 2:
            return False
        # the descriptors must tell the GPUs apart: H100 and H200 are both sm_90 with 132 SMs
        # (xgboost-plans-pooled describes them by the manifests' device_spec instead)
        described = [tuple(device_descriptors({"device": DATASETS[n].device, "arch": DATASETS[n].arch}).values())
                     if n in DATASETS else tuple(device_descriptors(info).values()) for n in sibling_names(dataset)]
        return len(set(described)) == len(described)

    # -- which rows -----------------------------------------------------------------------
    infer_split = staticmethod(infer_split)

    def training_parts(self, dataset, train_ids: pd.Index, valid_ids: pd.Index, seed: int):
        """{device name: (train ids, valid ids)} of every dataset the model is trained on."""
        return training_parts(dataset, train_ids, valid_ids, seed, sibling_names(dataset),
                              self.params["split"], self.params["leave_out"])

    def _stack(self, dataset, parts: dict, which: int):
        """(features, best kernel, direction) of the rows of every part, stacked."""
        feats, best, direction = [], [], []
        for name, ids in parts.items():
            ids = ids[which]
            if len(ids) == 0:
                continue
            ds = _load(name, dataset)
            feats.append(device_features(ds, ids).reset_index(drop=True))
            b = ds.best.drop_duplicates("problem_id").set_index("problem_id")["kernel"].astype(str)
            best.append(b.reindex(ids).to_numpy(dtype=object))
            direction.append(ds.problems.set_index("problem_id")["direction"].astype(str).reindex(ids).to_numpy())
        if not feats:
            return pd.DataFrame(), np.array([], dtype=object), np.array([], dtype=object)
        return pd.concat(feats, ignore_index=True), np.concatenate(best), np.concatenate(direction)

    def _pooled_space(self, dataset, parts: dict) -> KernelSpace:
        """The target's kernel vocabulary with a prior counted on the siblings' train parts."""
        problems, runtimes = [], []
        for name, (tr, _) in parts.items():
            ds = _load(name, dataset)
            p = ds.problems[ds.problems["problem_id"].isin(tr)].copy()
            r = ds.runtimes[ds.runtimes["problem_id"].isin(tr)][["problem_id", "kernel", "time_ms"]].copy()
            r["kernel"] = r["kernel"].astype(str)  # the devices' categorical vocabularies differ
            p["problem_id"] = name + ":" + p["problem_id"].astype(str)
            r["problem_id"] = name + ":" + r["problem_id"].astype(str)
            problems.append(p)
            runtimes.append(r)
        view = SimpleNamespace(kernels=dataset.kernels, problems=pd.concat(problems, ignore_index=True),
                               runtimes=pd.concat(runtimes, ignore_index=True), name=f"pooled-{dataset.name}")
        return KernelSpace.fit(view, view.problems["problem_id"])

    def _cache_key(self, seed: int, parts: dict) -> str:
        return cache_key(self.params, seed, parts, columns=self.columns)

    # -- fit / predict --------------------------------------------------------------------
    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        self.seed = seed
        train_ids, valid_ids = as_id_index(train_ids), as_id_index([] if valid_ids is None else valid_ids)
        parts = self.training_parts(dataset, train_ids, valid_ids, seed)
        if self.params["leave_out"]:
            self.space = self._pooled_space(dataset, parts)
        else:
            self.space = KernelSpace.fit(dataset, train_ids)
        self.columns = list(device_features(dataset, train_ids[:1]).columns)
        self.costs = {}
        key = self._cache_key(seed, parts)
        folder = _cache_root() / key
        if self.params["cache"] and (folder / "pooled.json").is_file():
            self._load_boosters(folder)
            self.fit_info["cache"] = key
            # what the training took when it ran (kbench run records it as the fit time); a cache
            # written before the field: the boosters' own seconds, without building the rows
            self.fit_info["cached_training_time_s"] = self.fit_info.get(
                "training_time_s", sum(self.fit_info.get("fit_s", {}).values()))
            return self
        t0 = time.perf_counter()
        self._train(dataset, parts, seed)
        self.fit_info["training_time_s"] = round(time.perf_counter() - t0, 2)
        self.fit_info["devices"] = {name: [len(tr), len(va)] for name, (tr, va) in parts.items()}
        if self.params["cache"]:
            self._save_boosters(folder)
        self.fit_info["cache"] = key
        return self

    def _train(self, dataset, parts: dict, seed: int) -> None:
        xgb = _xgb()
        ftr, ytr, dtr_all = self._stack(dataset, parts, 0)
        fva, yva_all, dva_all = self._stack(dataset, parts, 1)
        xtr = ftr[self.columns].to_numpy(np.float32)
        xva = fva[self.columns].to_numpy(np.float32) if len(fva) else np.zeros((0, len(self.columns)), np.float32)
        self.boosters, self.classes = {}, {}
        self.fit_info = {"rounds": {}, "valid_mlogloss": {}, "fit_s": {}, "train_rows": int(len(ytr))}
        for d in DIRECTIONS:
            tr = dtr_all == d
            if not tr.any():
                continue
            classes = sorted(set(ytr[tr]))
            cidx = {k: i for i, k in enumerate(classes)}
            self.classes[d] = classes
            if len(classes) == 1:
                self.boosters[d] = None
                continue
            dtrain = xgb.DMatrix(xtr[tr], label=pd.Series(ytr[tr]).map(cidx).to_numpy(),
                                 feature_names=self.columns)
            va = dva_all == d
            yva = pd.Series(yva_all[va]).map(cidx)
            ok = yva.notna().to_numpy()
            params = dict(self.xgb_params(seed), objective="multi:softprob", num_class=len(classes),
                          eval_metric="mlogloss")
            evals, es = [], None
            if ok.any():
                dvalid = xgb.DMatrix(xva[va][ok], label=yva[ok].to_numpy(), feature_names=self.columns)
                evals, es = [(dvalid, "valid")], self.params["early_stopping"]
            t0 = time.perf_counter()
            with _progress(self.params["max_rounds"], f"{self.name} {d}", self.progress) as bar:
                booster = xgb.train(params, dtrain, self.params["max_rounds"], evals=evals, early_stopping_rounds=es,
                                    verbose_eval=False, callbacks=[_callback(bar)])
            if es is not None:
                self.fit_info["valid_mlogloss"][d] = round(float(booster.best_score), 5)
                booster = booster[: booster.best_iteration + 1]
            self.fit_info["rounds"][d] = booster.num_boosted_rounds()
            self.fit_info["fit_s"][d] = round(time.perf_counter() - t0, 2)
            self.boosters[d] = booster

    def _save_boosters(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._save_files(folder)
        tmp = folder / "pooled.json.tmp"  # written last: a complete folder has pooled.json
        tmp.write_text(json.dumps({"classes": self.classes, "fit_info": self.fit_info,
                                   "boosters": {d: b is not None for d, b in self.boosters.items()}}))
        tmp.replace(folder / "pooled.json")

    def _load_boosters(self, folder: Path) -> None:
        xgb = _xgb()
        state = json.loads((folder / "pooled.json").read_text())
        self.classes, self.fit_info = state["classes"], dict(state["fit_info"])
        self.boosters = {}
        for d, present in state["boosters"].items():
            if present:
                b = xgb.Booster()
                b.load_model(str(folder / f"booster_{d}.json"))
                self.boosters[d] = b
            else:
                self.boosters[d] = None

    def scores(self, dataset, problems: pd.DataFrame) -> np.ndarray:
        """(problems x kernels of the target): 2 + probability for the class kernels the target has,
        then the prior order; pooled classes the target does not have are dropped."""
        x = device_features(dataset, problems["problem_id"])[self.columns].to_numpy(np.float32)
        prior = self.space.prior_scores(problems)
        seen = prior > 0
        score = np.where(seen, 1.0, 0.0) + prior / (prior.max(axis=1, keepdims=True) + 1.0)
        d_all = problems["direction"].astype(str).to_numpy()
        for d, classes in self.classes.items():
            rows = np.flatnonzero(d_all == d)
            if len(rows) == 0:
                continue
            booster = self.boosters.get(d)
            prob = np.ones((len(rows), 1)) if booster is None else \
                booster.inplace_predict(x[rows]).reshape(len(rows), -1)
            keep = [j for j, k in enumerate(classes) if k in self.space.index]
            if not keep:
                continue
            cols = np.array([self.space.index[classes[j]] for j in keep])
            sub = score[np.ix_(rows, cols)]
            score[np.ix_(rows, cols)] = np.where(seen[np.ix_(rows, cols)], 2.0 + prob[:, keep], sub)
        return score


class XGBoostPooledLeaveOut(XGBoostPooled):
    name = "xgboost-pooled-lodo"
    description = ("XGBoost multi-class trained on every other GPU of the vendor (leave-one-device-out: "
                   "none of the target's data), device descriptors as features")
    DEFAULTS = {**XGBoostPooled.DEFAULTS, "leave_out": True}

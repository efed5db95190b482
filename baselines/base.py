"""The common baseline interface, the registry, and shared ranking helpers.

Every baseline is a class with the same small interface, in the scikit-learn
spirit::

    model = get_baseline("xgboost")                 # an unfitted instance
    model.supports(dataset)                          # bool
    model.fit(dataset, train_ids, valid_ids, seed=0) # select with valid only
    preds = model.predict(dataset, test_ids)         # DataFrame[problem_id, ranking]
    model.save("model_dir"); Baseline.load("model_dir")

``ranking`` holds kernel names in preference order joined by ``;``
(``docs/data_model.md``, "Predictions").

Registry
--------
A baseline joins the registry by being a module of the ``baselines`` package
that defines a :class:`Baseline` subclass with a ``name``: subclasses register
themselves when their module is imported, and :func:`discover` imports every
module of the package. Nothing else has to change for ``kbench baseline
list/run`` or ``kbench run`` to pick a new one up. A module whose import
fails is listed in :data:`UNAVAILABLE` with the error, not hidden. A class
that follows the interface without subclassing (``name``, ``fit``,
``predict``, ``save``, ``load``) is registered through :class:`DuckBaseline`.

Saving
------
``save(path)`` writes a folder: ``baseline.json`` (name, configuration and
any JSON state) plus, when the model has arrays, ``arrays.safetensors``
(written and read with the ``safetensors`` package; never pickle). Models with a
library-native format (XGBoost's JSON) add their own files to the folder.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import stat
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError, read_json_object, suggest
from kbench.core.version import __version__
from kbench.data.dataset import _dataset_dir
from kbench.data.registry import DATASETS

SAVE_FORMAT = 1
#: Dataset tasks whose data is (problem, kernel, time): every selection baseline applies.
SELECTION_TASKS = ("kernel-selection", "tile-selection")


# ----------------------------------------------------------------------------- safetensors
def save_safetensors(path: str | Path, arrays: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    """Write numeric arrays with the ``safetensors`` package (no pickle: loading runs no code)."""
    from safetensors.numpy import save_file
    out = {}
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name]) if np.ndim(arrays[name]) else np.asarray(arrays[name])
        if a.dtype.kind not in "biuf":
            raise TypeError(f"safetensors: array {name!r} has unsupported dtype {a.dtype}")
        out[name] = a
    save_file(out, str(path), metadata={str(k): str(v) for k, v in (metadata or {}).items()})


def load_safetensors(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read a safetensors file: (arrays, metadata)."""
    from safetensors import safe_open
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise KbenchInputError(f"{path}: cannot be read ({exc.strerror}).") from None
    if not stat.S_ISREG(mode):  # a FIFO would block the open for ever, a device would be read without end
        raise KbenchInputError(f"{path}: not a regular file (a pipe, device or folder); remove it or give a "
                               "safetensors file.")
    try:
        with safe_open(str(path), framework="numpy") as fh:
            meta = fh.metadata() or {}
            return {name: fh.get_tensor(name) for name in fh.keys()}, dict(meta)
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
        raise KbenchInputError(f"{path}: not a readable safetensors file ({exc}); re-save the model "
                               "with kbench or check that the file is complete.") from exc


# ----------------------------------------------------------------------------- ranking helpers
def as_id_index(ids: Iterable[str]) -> pd.Index:
    """Problem ids as a pandas Index of str, order kept."""
    return pd.Index(np.asarray(list(ids) if not isinstance(ids, (np.ndarray, pd.Index, pd.Series)) else ids,
                               dtype=object).astype(str))


def problems_of(dataset, ids: Iterable[str]) -> pd.DataFrame:
    """The problems rows for ``ids`` in the given order; unknown ids are an input error."""
    ids = as_id_index(ids)
    problems = dataset.problems
    pos = pd.Index(problems["problem_id"].astype(str)).get_indexer(ids)
    if (pos < 0).any():
        bad = ids[pos < 0]
        raise KbenchInputError(
            f"{len(bad)} problem id(s) are not in dataset {dataset.name!r}, e.g. {', '.join(bad[:3])}")
    return problems.iloc[pos].reset_index(drop=True)


def join_rankings(order: np.ndarray, names: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """Ranking strings from a (problems x kernels) matrix of kernel indices in preference order.

    ``keep`` (same shape as ``order``, aligned with it) drops entries. The
    join is one vectorised Arrow call over all problems.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    n, m = order.shape
    if m == 0 or n == 0:
        return np.full(n, "", dtype=object)
    names = np.asarray(names, dtype=object)
    dictionary = pa.array(names.astype(str), type=pa.string())
    cols = []
    for j in range(m):
        idx = pa.array(order[:, j].astype(np.int32), mask=None if keep is None else ~keep[:, j])
        cols.append(pc.take(dictionary, idx))
    # pyarrow 26 drops the rows whose values are all null under null_handling="skip": a last
    # column of empty strings keeps every row, and the separator it adds is trimmed again.
    cols.append(pa.array(np.full(n, "", dtype=object), type=pa.string()))
    joined = pc.utf8_rtrim(pc.binary_join_element_wise(*cols, ";", null_handling="skip"), characters=";")
    out = np.asarray(joined.to_numpy(zero_copy_only=False), dtype=object)
    if len(out) != n:  # never silently misalign problems and rankings
        raise RuntimeError(f"join_rankings: {len(out)} rankings for {n} problems")
    return out


def rank_by_scores(scores: np.ndarray, names: list[str] | np.ndarray,
                   allowed: np.ndarray | None = None) -> np.ndarray:
    """Ranking strings: kernels by descending score (ties: lower column first), ``allowed`` only."""
    order = np.argsort(-scores, axis=1, kind="stable")
    keep = None if allowed is None else np.take_along_axis(allowed, order, axis=1)
    return join_rankings(order, np.asarray(names, dtype=object), keep)


def predictions_frame(ids, rankings) -> pd.DataFrame:
    return pd.DataFrame({"problem_id": np.asarray(ids, dtype=object).astype(str),
                         "ranking": np.asarray(rankings, dtype=object).astype(str)})


def kernel_directions(dataset) -> dict[str, set[str]]:
    """kernel -> the directions it runs in (kernels table; else the directions it was measured in)."""
    k = dataset.kernels
    if k is not None and "directions" in k.columns:
        dirs = k["directions"].fillna("").astype(str).str.split(",")
        return {name: {d.strip() for d in ds if d.strip()} for name, ds in zip(k["kernel"], dirs)}
    pairs = dataset.runtimes[["problem_id", "kernel"]].merge(
        dataset.problems[["problem_id", "direction"]], on="problem_id")[["kernel", "direction"]]
    return pairs.drop_duplicates().groupby("kernel")["direction"].agg(set).to_dict()


def train_runtimes(dataset, ids) -> pd.DataFrame:
    """Runtimes of ``ids`` joined with direction, dtype and layout; adds ``ratio`` = time / best time."""
    ids = as_id_index(ids)
    rt = dataset.runtimes
    rt = rt[rt["problem_id"].isin(ids)][["problem_id", "kernel", "time_ms"]]
    rt = rt.merge(dataset.problems[["problem_id", "direction", "dtype", "layout", "censored"]],
                  on="problem_id", how="left")
    rt["ratio"] = rt["time_ms"] / rt.groupby("problem_id")["time_ms"].transform("min")
    return rt.reset_index(drop=True)


def seen_kernels(rt: pd.DataFrame, keys=("direction", "dtype")) -> dict[tuple, list[str]]:
    """(direction, dtype) -> kernels measured for it in ``rt`` (sorted by name)."""
    g = rt[list(keys) + ["kernel"]].drop_duplicates()
    return {k if isinstance(k, tuple) else (k,): sorted(v) for k, v in g.groupby(list(keys))["kernel"]}


# ----------------------------------------------------------------------------- base class
BASELINES: dict[str, type] = {}
#: module name -> import error, for modules of the package that could not be imported
UNAVAILABLE: dict[str, str] = {}


class Baseline:
    """Base class of every baseline. Subclasses set ``name`` and implement ``fit``/``predict``.

    Class attributes
    ----------------
    name : registry name (``kbench baseline run NAME``)
    description : one line for ``kbench baseline list``
    stochastic : the predictions depend on the seed (else one fit serves every seed)
    benchmark : part of the default set that ``kbench run`` trains
    uses_test_labels : reads the measured runtimes of the problems it predicts (the oracle only)
    machine_dependent : why a fit with the same seed gives other predictions on another machine or
        software build (None, the default: the same everywhere); ``kbench run`` stores it in the record
        and the board's note and ``kbench run``'s comparison with the board state it

    Instance attribute
    ------------------
    fit_checkpoint : where a fit that trains epoch by epoch writes its training state after each
        epoch and resumes from when the file exists (``kbench run`` sets it per seed and removes the
        file once the seed is written); ``None``, the default: no checkpoint. Baselines that honour it
        say so in their docstring; the others ignore it.
    """

    name: str = ""
    description: str = ""
    stochastic: bool = False
    benchmark: bool = True
    uses_test_labels: bool = False
    machine_dependent: str | None = None
    fit_checkpoint: Path | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            BASELINES[cls.name] = cls

    def __init__(self, **params):
        if params and type(self).__init__ is Baseline.__init__:
            raise TypeError(f"{self.name or type(self).__name__} takes no parameters, got {sorted(params)}")
        self.params = dict(params)
        self.seed = 0
        self.fit_info: dict = {}

    # -- interface --------------------------------------------------------------
    def supports(self, dataset) -> bool:
        """Whether this baseline applies to a dataset (a ``Dataset`` or anything with ``info``)."""
        return dataset_task(dataset) in SELECTION_TASKS

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0) -> Baseline:
        raise NotImplementedError

    def _fit_kernel_space(self, dataset, train_ids, seed: int) -> Baseline:
        """The whole fit of baselines that only need the training kernel statistics."""
        self.seed = seed
        self.space = KernelSpace.fit(dataset, train_ids)
        return self

    def predict(self, dataset, ids) -> pd.DataFrame:
        raise NotImplementedError

    # -- persistence ------------------------------------------------------------
    def get_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """(JSON-able state, numeric arrays) of a fitted model."""
        return {}, {}

    def set_state(self, state: dict, arrays: dict[str, np.ndarray], path: Path) -> None:
        pass

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state, arrays = self.get_state()
        doc = {"baseline": self.name, "format": SAVE_FORMAT, "kbench_version": __version__,
               "params": self.params, "seed": self.seed, "state": state}
        (path / "baseline.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        if arrays:
            save_safetensors(path / "arrays.safetensors", arrays, {"baseline": self.name})
        self._save_files(path)
        return path

    def _save_files(self, path: Path) -> None:
        """Hook: write library-native model files into the folder."""

    @classmethod
    def load(cls, path: str | Path) -> Baseline:
        path = Path(path)
        meta_path = path / "baseline.json"
        if not meta_path.exists():
            raise KbenchInputError(f"{path}: no saved baseline here (baseline.json missing)")
        doc = read_json_object(meta_path)
        name = doc.get("baseline")
        target = cls if cls.name else BASELINES.get(name) or discover().get(name)
        if target is None or (cls.name and name != cls.name):
            raise KbenchInputError(f"{path}: holds baseline {name!r}, not {cls.name or 'a known one'!r}")
        obj = target(**doc.get("params", {}))
        obj.seed = doc.get("seed", 0)
        arrays = {}
        if (path / "arrays.safetensors").exists():
            arrays, _ = load_safetensors(path / "arrays.safetensors")
        obj.set_state(doc.get("state", {}), arrays, path)
        return obj

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"


def dataset_task(dataset) -> str | None:
    info = getattr(dataset, "info", None) or {}
    return info.get("task") if isinstance(info, dict) else getattr(dataset, "task", None)


def dataset_library(dataset) -> str | None:
    info = getattr(dataset, "info", None) or {}
    return info.get("library") if isinstance(info, dict) else getattr(dataset, "library", None)


class DatasetMeta:
    """What ``supports`` may look at without loading a dataset's tables: name and manifest."""

    def __init__(self, name: str, info: dict):
        self.name = name
        self.info = info

    def __repr__(self) -> str:
        return f"DatasetMeta({self.name!r})"


def registered_datasets() -> list[DatasetMeta]:
    """Every registered dataset as a :class:`DatasetMeta` (manifest when built, else the spec)."""
    out = []
    for name, spec in DATASETS.items():
        info = asdict(spec)
        manifest = _dataset_dir(name) / "manifest.json"
        if manifest.exists():
            try:
                info.update(json.loads(manifest.read_text()))
            except json.JSONDecodeError:
                pass
        out.append(DatasetMeta(name, info))
    return out


class DuckBaseline(Baseline):
    """Adapter for a class that follows the interface without subclassing :class:`Baseline`.

    ``supports(dataset)``: the wrapped class's ``supports_dataset`` if it has
    one; else, if its module can map a dataset to a model (``_dataset_arch``,
    as ``tunanet`` does), whether that succeeds; else True for selection tasks.
    """

    wrapped: type = None  # set per adapter subclass

    def __init__(self, **params):
        super().__init__(**params)
        self.inner = self.wrapped(**params)

    def supports(self, dataset) -> bool:
        if not super().supports(dataset):
            return False
        fn = getattr(self.wrapped, "supports_dataset", None)
        if callable(fn):
            return bool(fn(dataset))
        module = inspect.getmodule(self.wrapped)
        arch_of = getattr(module, "_dataset_arch", None)
        if callable(arch_of):
            try:
                arch_of(dataset)
                return True
            except Exception:
                return False
        return True

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        self.seed = seed
        sig = inspect.signature(self.inner.fit)
        kwargs = {"seed": seed} if "seed" in sig.parameters else {}
        self.inner.fit(dataset, train_ids, valid_ids, **kwargs)
        return self

    def predict(self, dataset, ids) -> pd.DataFrame:
        return self.inner.predict(dataset, ids)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.inner.save(path / "model.json")
        (path / "baseline.json").write_text(json.dumps(
            {"baseline": self.name, "format": SAVE_FORMAT, "wrapped": True, "params": self.params,
             "seed": self.seed, "state": {}}, indent=1) + "\n")
        return path

    def set_state(self, state, arrays, path: Path) -> None:
        self.inner = self.wrapped.load(path / "model.json")


#: class attributes a wrapped class may set to describe itself (else the Baseline defaults hold)
_PASSED_THROUGH = ("benchmark", "external_data", "leaderboard_role", "paper", "code", "contact", "display_name")


def _wrap(cls: type) -> type:
    attrs = {"name": cls.name, "wrapped": cls, "__module__": cls.__module__,
             "description": getattr(cls, "description", "") or (cls.__doc__ or "").strip().split("\n")[0]}
    attrs.update({a: getattr(cls, a) for a in _PASSED_THROUGH if hasattr(cls, a)})
    return type(f"{cls.__name__}Baseline", (DuckBaseline,), attrs)


def _is_duck(obj) -> bool:
    return (inspect.isclass(obj) and not issubclass(obj, Baseline) and isinstance(getattr(obj, "name", None), str)
            and all(callable(getattr(obj, m, None)) for m in ("fit", "predict", "save", "load")))


#: modules of the package that are helpers, not baselines
HELPER_MODULES = {"base", "features"}


def discover() -> dict[str, type]:
    """Import every module of the ``baselines`` package so that its baselines register."""
    # the package's folder and name from this module's own (importing the package would be a cycle)
    package = __name__.rpartition(".")[0]
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        mod_name = info.name
        if mod_name.startswith("_") or mod_name in HELPER_MODULES or mod_name in UNAVAILABLE:
            continue
        full = f"{package}.{mod_name}"
        try:
            module = importlib.import_module(full)
        except Exception as exc:  # a broken or in-progress module must not hide the others
            UNAVAILABLE[mod_name] = f"{type(exc).__name__}: {exc}"
            continue
        has_subclass = any(inspect.isclass(o) and issubclass(o, Baseline) and o.__module__ == full
                           and o.__dict__.get("name") for o in vars(module).values())
        if not has_subclass:
            for obj in vars(module).values():
                if _is_duck(obj) and obj.__module__ == full and obj.name not in BASELINES:
                    BASELINES[obj.name] = _wrap(obj)
    return BASELINES


def get_baseline(name: str, **params) -> Baseline:
    """A new, unfitted instance of the baseline called ``name``."""
    discover()
    if name not in BASELINES:
        known = sorted(BASELINES)
        raise KbenchInputError(f"unknown baseline {name!r}. Available: {', '.join(known)}."
                               f"{suggest(name, known)}")
    return BASELINES[name](**params)


# ----------------------------------------------------------------------------- kernel prior
class KernelSpace:
    """The kernel vocabulary of a dataset, which directions each kernel runs in, and a prior order.

    The prior order, per (direction, dtype) seen in training, ranks kernels by
    how often they were fastest there, then by how often they were listed;
    (direction) alone is the fallback for an unseen data type. Every kernel
    that can run in a problem's direction is ``allowed`` for it, so rankings
    cover every kernel that could apply (longer rankings score better on LoP@n).
    """

    DEFAULT_LEVELS = (("direction",), ("direction", "dtype"))

    def __init__(self, names: list[str], directions: dict[str, list[str]], prior: dict[str, list[float]],
                 levels=DEFAULT_LEVELS):
        self.levels = [list(lv) for lv in levels]
        self.names = list(names)
        self.index = {k: i for i, k in enumerate(self.names)}
        self.directions = {k: sorted(v) for k, v in directions.items()}
        self.prior = {k: np.asarray(v, dtype=np.float64) for k, v in prior.items()}

    @classmethod
    def fit(cls, dataset, train_ids, levels=DEFAULT_LEVELS) -> KernelSpace:
        """Count, per group of each level (coarse to fine), how often each kernel was fastest."""
        names = sorted(dataset.kernels["kernel"].astype(str)) if dataset.kernels is not None \
            else sorted(dataset.runtimes["kernel"].astype(str).unique())
        kdirs = kernel_directions(dataset)
        rt = train_runtimes(dataset, train_ids)
        index = {k: i for i, k in enumerate(names)}
        rt = rt[rt["kernel"].isin(index)]
        is_best = rt["ratio"] <= 1.0
        prior = {}
        for keys in map(list, levels):
            listed = rt.groupby(keys + ["kernel"]).size()
            best = rt[is_best].groupby(keys + ["kernel"]).size()
            tab = pd.DataFrame({"listed": listed, "best": best}).fillna(0).reset_index()
            for key, g in tab.groupby(keys):
                key = key if isinstance(key, tuple) else (key,)
                score = np.zeros(len(names))
                idx = g["kernel"].map(index).to_numpy()
                # fastest-most-often first; listed count breaks ties (always < 1)
                score[idx] = g["best"].to_numpy() + g["listed"].to_numpy() / (1.0 + g["listed"].max())
                prior["|".join(map(str, key))] = score.tolist()
        directions = {d: sorted(k for k in names if d in kdirs.get(k, set())) for d in ("F", "B", "W")}
        return cls(names, directions, prior, levels)

    def allowed(self, problems: pd.DataFrame) -> np.ndarray:
        """(problems x kernels) bool: the kernel runs in the problem's direction."""
        direction = problems["direction"].astype(str).to_numpy()
        out = np.zeros((len(problems), len(self.names)), dtype=bool)
        for d, ks in self.directions.items():
            row = np.zeros(len(self.names), dtype=bool)
            row[[self.index[k] for k in ks if k in self.index]] = True
            out[direction == d] = row
        return out

    def prior_scores(self, problems: pd.DataFrame) -> np.ndarray:
        """(problems x kernels) prior score, higher = preferred (0 for kernels never listed)."""
        out = np.zeros((len(problems), len(self.names)))
        for keys in self.levels:  # coarse to fine: a finer group seen in training overrides
            key = problems[keys[0]].astype(str).to_numpy().astype(object)
            for col in keys[1:]:
                key = key + "|" + problems[col].astype(str).to_numpy().astype(object)
            for k in pd.unique(key):
                if k in self.prior:
                    out[key == k] = self.prior[k]
        return out

    def to_dict(self) -> dict:
        return {"names": self.names, "directions": self.directions, "levels": self.levels,
                "prior": {k: v.tolist() for k, v in self.prior.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> KernelSpace:
        return cls(d["names"], d["directions"], d["prior"], d.get("levels", cls.DEFAULT_LEVELS))


def runtime_matrix(dataset, problems: pd.DataFrame, space: KernelSpace) -> np.ndarray:
    """(problems x kernels) measured time in ms, NaN where not measured."""
    out = np.full((len(problems), len(space.names)), np.nan)
    rt = dataset.runtimes
    ids = problems["problem_id"].astype(str)
    rt = rt[rt["problem_id"].isin(ids)]
    row = pd.Index(ids).get_indexer(rt["problem_id"].astype(str))
    col = rt["kernel"].astype(str).map(space.index)
    ok = (row >= 0) & col.notna().to_numpy()
    out[row[ok], col[ok].to_numpy(dtype=np.int64)] = rt["time_ms"].to_numpy()[ok]
    return out

"""kbench: an open dataset and benchmark suite for learned GPU kernel selection.

>>> import kbench
>>> ds = kbench.load("mi100")           # offline, from data shipped in the package
>>> parts = ds.split("random")           # {"train": ids, "valid": ids, "test": ids}
>>> tr = kbench.transfer("mi100", "mi300x", k=100)   # cross-device transfer task (docs/transfer.md)

The package's folders are its layers (``kbench/layers.py``). The import paths of the flat layout
before them (``kbench.dataset``, ``kbench.evaluate``, ``kbench.collect.cudnn``, ...) still import,
with a DeprecationWarning, through :data:`DEPRECATED_PATHS`; the code of kbench never uses them.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

from kbench.core.version import __version__
from kbench.data.dataset import Dataset, list_datasets, load
from kbench.data.transfer_task import Transfer, transfer

#: old import path -> the module that holds it now (a path below an old one moves with it)
DEPRECATED_PATHS = {
    **{f"kbench.{m}": f"kbench.core.{m}" for m in ("errors", "version", "output_files")},
    **{f"kbench.{m}": f"kbench.sources.{m}" for m in ("problem", "splits", "dataset_files", "repeatability")},
    **{f"kbench.{m}": f"kbench.data.{m}"
       for m in ("registry", "build", "hub_download", "dataset", "cards", "transfer_task")},
    **{f"kbench.{m}": f"kbench.scoring.{m}" for m in ("metrics", "environment", "records", "prediction_files",
                                                      "evaluate", "selection_metrics", "network_time")},
    "kbench.tuning.grammar": "kbench.sources.tuning_grammar",
    "kbench.tuning.perfdb": "kbench.sources.perfdb",
    "kbench.tuning.dataset": "kbench.sources.tuning_dataset",
    "kbench.tuning.metrics": "kbench.scoring.tuning_metrics",
    **{f"kbench.collect.{m}": f"kbench.collect.measure.{m}"
       for m in ("corpus", "strides", "gpu_turn", "notes_cache", "environment", "cudnn")},
    **{f"kbench.collect.{m}": f"kbench.collect.raw_store.{m}" for m in ("writer", "lock", "shard", "merge")},
    "kbench.collect.travel": "kbench.collect.raw_store.travel_copy",
    **{f"kbench.collect.{m}": f"kbench.collect.packaging.{m}" for m in ("package", "card")},
    "kbench.collect.label_retiming.shipped": "kbench.gpu_check.shipped_labels",
    "kbench.leaderboard.selection": "kbench.leaderboard.practitioner_table",
    "kbench.leaderboard.rescore": "kbench.leaderboard.rescorer",
    "kbench.leaderboard.rescore_entries": "kbench.leaderboard.rescore_command",
    "kbench.leaderboard.board_extras": "kbench.leaderboard.table_extras",
    "kbench.leaderboard.transfer": "kbench.leaderboard.transfer_track",
}

#: the old package ``kbench.tuning``: the names its ``__init__`` gave, module by module
_TUNING_NAMES = {
    "kbench.sources.tuning_dataset": ("build_tuning_dataset", "convert_perfdb"),
    "kbench.sources.tuning_grammar": ("CONV_ASM_1X1U", "GRAMMARS", "SOLVER_PARAMS", "get_grammar"),
    "kbench.scoring.tuning_metrics": ("average_accuracy", "perfect_prediction", "score_tuning", "tuning_metrics",
                                      "valid_share"),
}


def _new_path(old: str) -> str | None:
    """Where the deprecated import path ``old`` (or a module below it) is now, or None when it is not one."""
    head, rest = old, ""
    while head:
        if head in DEPRECATED_PATHS:
            return DEPRECATED_PATHS[head] + rest
        head, dot, tail = head.rpartition(".")
        rest = f".{tail}{rest}" if dot else rest
    return None


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated and will be removed in the next release: import {new}",
                  DeprecationWarning, stacklevel=3)


class _DeprecatedPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path as the module that holds it now (the same module object, so state is shared)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "kbench.tuning" or _new_path(fullname) is not None:
            return importlib.util.spec_from_loader(fullname, self, is_package=fullname == "kbench.tuning")
        return None

    def create_module(self, spec):
        if spec.name == "kbench.tuning":
            return None  # a fresh module, filled by exec_module
        new = _new_path(spec.name)
        _warn(spec.name, new)
        return importlib.import_module(new)

    def exec_module(self, module):
        if module.__name__ != "kbench.tuning" or hasattr(module, "score_tuning"):
            return
        _warn("kbench.tuning", ", ".join(_TUNING_NAMES))
        for source, names in _TUNING_NAMES.items():
            loaded = importlib.import_module(source)
            for name in names:
                setattr(module, name, getattr(loaded, name))
        module.__all__ = [name for names in _TUNING_NAMES.values() for name in names]


if not any(isinstance(finder, _DeprecatedPaths) for finder in sys.meta_path):
    sys.meta_path.insert(0, _DeprecatedPaths())  # first: a module below an old package path is claimed too


def __getattr__(name):
    # Evaluator is imported lazily so `import kbench; kbench.load(...)` stays light, and free of pydantic
    # (kbench.scoring.evaluate's records need it): every `import kbench.x` runs this file, the GPU machines' too.
    if name == "Evaluator":
        from kbench.scoring.evaluate import Evaluator
        return Evaluator
    if f"kbench.{name}" in DEPRECATED_PATHS or name == "tuning":
        return importlib.import_module(f"kbench.{name}")
    raise AttributeError(f"module 'kbench' has no attribute {name!r}")


__all__ = ["Dataset", "Evaluator", "Transfer", "load", "list_datasets", "transfer", "__version__"]

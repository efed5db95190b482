"""The datasets the leaderboard scores on: ``kbench.load`` plus datasets registered in-process.

Its own module so that both the validator (:mod:`.schema`) and the entry store (:mod:`.store`)
can use it without importing each other.
"""

from __future__ import annotations

from kbench.data.dataset import load
from kbench.data.registry import DATASETS

#: datasets registered in-process (tests, custom data) by name; checked before kbench.load
_EXTRA_DATASETS: dict = {}
_CACHE: dict = {}


def register_dataset(dataset) -> None:
    """Make a :class:`kbench.Dataset` resolvable by name for the leaderboard (tests, custom data)."""
    _EXTRA_DATASETS[dataset.name] = dataset


def dataset_device(name: str) -> str | None:
    """The GPU a dataset was measured on, resolved as :func:`load_dataset` resolves the name (a dataset
    registered in-process first, then the registry) without loading any table; None if unknown."""
    if name in _EXTRA_DATASETS:
        return (_EXTRA_DATASETS[name].info or {}).get("device")
    spec = DATASETS.get(name)
    return spec.device if spec is not None else None


def unregister_dataset(name: str) -> None:
    _EXTRA_DATASETS.pop(name, None)
    _CACHE.pop(name, None)


def load_dataset(name: str):
    """A dataset by name (registered ones first, then ``kbench.load``), cached per process."""
    if name in _EXTRA_DATASETS:
        return _EXTRA_DATASETS[name]
    if name not in _CACHE:
        _CACHE[name] = load(name)
    return _CACHE[name]

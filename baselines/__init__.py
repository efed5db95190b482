"""kbench baselines: one module per baseline, all with the interface of :class:`baselines.base.Baseline`.

>>> from baselines import get_baseline
>>> model = get_baseline("single-best")           # doctest: +SKIP
>>> model.fit(ds, parts["train"], parts["valid"]).predict(ds, parts["test"])   # doctest: +SKIP

Importing the package imports every module in it (:func:`baselines.base.discover`),
so each baseline is in :data:`BASELINES` as soon as its module exists.
"""

from baselines.base import BASELINES, UNAVAILABLE, Baseline, discover, get_baseline  # noqa: F401

discover()

__all__ = ["BASELINES", "UNAVAILABLE", "Baseline", "discover", "get_baseline"]

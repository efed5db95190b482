"""kbench baselines: one module per baseline, all with the interface of :class:`kbench_baselines.base.Baseline`.

Installed under the import name ``kbench_baselines`` (the folder is ``baselines/``); the old name
``import baselines`` still works for one release, with a ``DeprecationWarning``.

>>> from kbench_baselines import get_baseline
>>> model = get_baseline("single-best")           # doctest: +SKIP
>>> model.fit(ds, parts["train"], parts["valid"]).predict(ds, parts["test"])   # doctest: +SKIP

Importing the package imports every module in it (:func:`baselines.base.discover`),
so each baseline is in :data:`BASELINES` as soon as its module exists.
"""

if __name__ == "baselines":  # the old name, imported from a checkout's root (the folder is on sys.path)
    from kbench_baselines._old_name import redirect

    redirect()
else:
    from kbench_baselines.base import BASELINES, UNAVAILABLE, Baseline, discover, get_baseline  # noqa: F401

    discover()

    __all__ = ["BASELINES", "UNAVAILABLE", "Baseline", "discover", "get_baseline"]

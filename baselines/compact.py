"""``xgboost-compact``: the ``xgboost`` recipe made small enough to ship, and its export.

The same multi-class model as ``xgboost`` (one booster per direction, classes =
kernels fastest for some training problem, early stopping on valid), with
shallow trees and few rounds so that it fits in a few megabytes and scores one
problem in well under a millisecond with :mod:`kbench.selector` (numpy only).

    python -m kbench.selector export mi100            # train on mi100 random's train part, export
    python -m kbench.selector export mi100 --out DIR  # export elsewhere

``kbench.selector.export(model, folder)`` writes the portable selector folder
that ``kbench.selector.load`` reads: the trees as flat node arrays, the kernel
vocabulary, classes, directions and prior order. ``bench/bench_compact_selector.py``
measures its size, its latency at batch 1 on one core and the speed-up it keeps.
"""

from __future__ import annotations

from kbench_baselines.xgb import XGBoostMulticlass


class XGBoostCompact(XGBoostMulticlass):
    name = "xgboost-compact"
    description = "XGBoost multi-class, shallow and short (max depth 6, at most 40 rounds) for deployment"
    benchmark = False  # a deployment variant: measured by bench/bench_compact_selector.py
    code = "baselines/compact.py"
    DEFAULTS = {**XGBoostMulticlass.DEFAULTS, "max_depth": 6, "learning_rate": 0.3, "max_rounds": 40,
                "early_stopping": 10}

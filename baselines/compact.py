"""``xgboost-compact`` and ``xgboost-plans-compact``: models made small enough to ship, and their export.

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

``xgboost-plans-compact`` is the same for a collected NVIDIA set: ``xgboost-plans-safe`` with
shallower trees and fewer rounds, scoring only the plans of the first places of cuDNN mode A and
mode B, exported as a :class:`kbench.selector.PlanSelector` that re-ranks cuDNN's own lists:

    python -m kbench.selector export h200-pytorch --model xgboost-plans-compact
"""

from __future__ import annotations

from kbench_baselines.xgb import XGBoostMulticlass
from kbench_baselines.xgb_plans import XGBoostPlansSafe


class XGBoostCompact(XGBoostMulticlass):
    name = "xgboost-compact"
    description = "XGBoost multi-class, shallow and short (max depth 6, at most 40 rounds) for deployment"
    benchmark = False  # a deployment variant: measured by bench/bench_compact_selector.py
    code = "baselines/compact.py"
    DEFAULTS = {**XGBoostMulticlass.DEFAULTS, "max_depth": 6, "learning_rate": 0.3, "max_rounds": 40,
                "early_stopping": 10}


class XGBoostPlansCompact(XGBoostPlansSafe):
    name = "xgboost-plans-compact"
    description = ("xgboost-plans-safe made small enough to ship on top of cuDNN's heuristic: shallower trees, "
                   "fewer rounds, and only the plans of the first places of mode A and mode B are scored")
    benchmark = False  # a deployment variant: measured by bench/bench_compact_selector.py
    code = "baselines/compact.py"
    #: chosen on h200-pytorch random valid by experiments/compact_plans_trial.py: the largest gain among the
    #: settings tried that stay under 10 MB (experiments/results/compact_plans_trial_h200-pytorch.json);
    #: bench/bench_compact_selector.py measures its latency
    DEFAULTS = {**XGBoostPlansSafe.DEFAULTS, "max_depth": 8, "learning_rate": 0.1, "max_rounds": 1000,
                "candidates": "modes_ab_top_k", "top_k": 8}

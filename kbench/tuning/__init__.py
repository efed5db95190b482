"""Tuning-parameter prediction: perf-db datasets, solver grammars, metrics."""

from kbench.tuning.dataset import build_tuning_dataset, convert_perfdb
from kbench.tuning.grammar import CONV_ASM_1X1U, GRAMMARS, SOLVER_PARAMS, get_grammar
from kbench.tuning.metrics import (
    average_accuracy,
    perfect_prediction,
    score_tuning,
    tuning_metrics,
    valid_share,
)

__all__ = [
    "build_tuning_dataset", "convert_perfdb", "CONV_ASM_1X1U", "GRAMMARS", "SOLVER_PARAMS",
    "get_grammar", "average_accuracy", "perfect_prediction", "score_tuning", "tuning_metrics",
    "valid_share",
]

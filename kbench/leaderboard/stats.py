"""Per-problem scores of a predictions file, and the paired bootstrap that marks statistical ties.

The tie test: for two entries A and B on the same test part, take their seed-0
predictions and the per-problem log slowdown ``d_i = log(t_choice / t_best)``
(the quantity the primary metric, the geometric-mean slowdown, averages).
Resample the test problems with replacement ``B`` times (the same resample for
both entries: paired), and compute the mean of ``d_A - d_B`` each time. A and B
are *tied* when the two-sided 95% percentile interval of that mean contains 0.
The RNG is seeded, so the same records always give the same marks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kbench.scoring.metrics import score_rankings

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95
TIE_TEST_TEXT = (f"paired bootstrap over test problems ({BOOTSTRAP_RESAMPLES} resamples, seed-0 predictions): "
                 f"two entries are tied when the {CONFIDENCE:.0%} interval of the mean difference in "
                 "per-problem log slowdown, log(t_choice / t_best), contains 0")


@dataclass
class ProblemScores:
    """Per-problem outcome of one predictions file on an Evaluator's part (NaN where not predicted)."""

    lop: np.ndarray
    log_slowdown: np.ndarray
    direction: np.ndarray


def problem_scores(evaluator, preds) -> ProblemScores:
    """Score a predictions frame problem by problem (the same rules as the Evaluator)."""
    prob, kern, predicted = evaluator.ranked_rows(preds, allow_partial=True)
    choices = score_rankings(evaluator.table, prob, kern)
    t_best = evaluator.table.t_best
    tc = np.where(predicted, choices.t_choice, np.nan)
    return ProblemScores(lop=(tc - t_best) / t_best, log_slowdown=np.log(tc / t_best),
                         direction=evaluator.table.direction)


def paired_bootstrap_ci(a: np.ndarray, b: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES,
                        seed: int = BOOTSTRAP_SEED, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(mean difference, low, high) of mean(a - b) over problems, paired bootstrap percentile interval."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    d = d[~np.isnan(d)]
    n = len(d)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.Generator(np.random.PCG64(seed))
    means = np.empty(resamples)
    chunk = max(1, min(resamples, 4_000_000 // max(n, 1)))  # bound the index matrix to ~32 MB
    for start in range(0, resamples, chunk):
        m = min(chunk, resamples - start)
        idx = rng.integers(0, n, size=(m, n))
        means[start:start + m] = d[idx].mean(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return float(d.mean()), float(low), float(high)


def tied(a: np.ndarray, b: np.ndarray, **kw) -> bool:
    _, low, high = paired_bootstrap_ci(a, b, **kw)
    return bool(low <= 0.0 <= high)

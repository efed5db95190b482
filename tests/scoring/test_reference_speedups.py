"""Speed-up over every reference with its tie test, PyTorch's autotune as a reference, and the
break-even between a selector and the autotuner. Values worked by hand."""

import math

import numpy as np
import pandas as pd
import pytest

import kbench
from kbench.leaderboard.practitioner_table import break_even
from kbench.scoring import selection_metrics

NAN = np.nan


def test_autotune_is_the_fastest_of_mode_a_first_k_and_its_first_call_their_sum(monkeypatch):
    times = np.array([[1.0, 2.0, 4.0, NAN],
                      [8.0, NAN, 3.0, 5.0],
                      [NAN, NAN, NAN, 7.0]])
    # mode A's order: problem 0: k2, k1, k0; problem 1: k3, k1 (not listed), k2, k0; problem 2: none
    prob = np.array([0, 0, 0, 1, 1, 1, 1])
    kern = np.array([2, 1, 0, 3, 1, 2, 0])
    run = selection_metrics.autotune_run(times, prob, kern)
    assert run.name == "autotune_top10"
    np.testing.assert_allclose(run.t, [1.0, 3.0, NAN])
    np.testing.assert_allclose(run.first_call, [7.0, 16.0, NAN])  # 4+2+1 and 5+3+8
    monkeypatch.setattr(selection_metrics, "AUTOTUNE_K", 2)  # the first two listed plans only: k2, k1 and k3, k2
    run = selection_metrics.autotune_run(times, prob, kern)
    np.testing.assert_allclose(run.t, [2.0, 3.0, NAN])
    np.testing.assert_allclose(run.first_call, [6.0, 8.0, NAN])


def test_speedup_and_its_tie_test():
    out = selection_metrics.speedup_with_tie_test(np.log([2.0, 2.0, 2.0]))
    assert out["speedup_geomean"] == pytest.approx(2.0) and out["tied"] == 0.0
    assert out["speedup_ci_low"] == pytest.approx(2.0) and out["speedup_ci_high"] == pytest.approx(2.0)
    out = selection_metrics.speedup_with_tie_test(np.log([2.0, 0.5]))
    assert out["speedup_geomean"] == pytest.approx(1.0) and out["tied"] == 1.0
    # mean 0.1, sd 0.1 over 4 problems: half-width 1.96 * 0.1 / 2 = 0.098 -> interval 0.002 .. 0.198
    out = selection_metrics.speedup_with_tie_test(np.array([0.0, 0.2, 0.0, 0.2]) + 0.0)
    sd = np.std([0.0, 0.2, 0.0, 0.2], ddof=1)
    assert out["speedup_ci_low"] == pytest.approx(math.exp(0.1 - selection_metrics.Z95 * sd / 2))
    assert out["tied"] == (0.1 - selection_metrics.Z95 * sd / 2 <= 0.0)


def test_break_even_counts_latency_and_the_first_call():
    figures = {"n": 10, "first_call_ms": 100.0, "sum_choice_ms": 12.0, "sum_ref_ms": 10.0}
    # the selector spends 10 x 1 ms once and 2 ms more per call round: (100 - 10) / (12 - 10) = 45
    assert break_even(figures, 1.0) == "the selector is ahead for the first 45 calls per shape, autotune after"
    assert break_even(figures, 20.0) == "autotune is ahead from the first call on"
    faster = {**figures, "sum_choice_ms": 9.0}
    assert break_even(faster, 1.0) == "the selector is ahead at every number of calls"
    assert break_even(faster, 20.0) == "the selector is ahead after 100 calls per shape"  # (200 - 100) / 1
    assert break_even(figures, None) is None


def test_the_oracle_over_autotune_is_mode_a_best_of_ten():
    """By definition: the oracle's speed-up over autotune top-10 is the geomean slowdown of the best of
    mode A's first 10, and its speed-up over mode A is mode A's best-of-1."""
    ds = kbench.load("h100")
    best = ds.runtimes.sort_values(["problem_id", "time_ms"]).drop_duplicates("problem_id")
    best = best[best["problem_id"].isin(set(ds.split("random")["test"]))]
    ev = kbench.Evaluator(ds, split="random")
    refs = ev(pd.DataFrame({"problem_id": best["problem_id"], "kernel": best["kernel"]}),
              method="oracle").metrics["overall"]["references"]
    assert refs["autotune_top10"]["speedup_geomean"] == pytest.approx(refs["cudnn_mode_a"]["best_of_10"], rel=1e-12)
    assert refs["cudnn_mode_a"]["speedup_geomean"] == pytest.approx(refs["cudnn_mode_a"]["best_of_1"], rel=1e-12)
    assert refs["autotune_top10"]["first_call_ms"] > refs["autotune_top10"]["sum_ref_ms"]

"""Test-retest statistics (kbench.sources.repeatability) on a hand-worked 3-problem example."""
import math

import numpy as np
import pandas as pd
import pytest

from kbench.core.errors import KbenchInputError
from kbench.sources import repeatability

# (problem, kernel): (run 0, run 1); p3/b was not timed in run 1
TIMES = {("p1", "a"): (1.0, 1.1), ("p1", "b"): (1.2, 1.0), ("p1", "c"): (2.0, 2.2),
         ("p2", "a"): (1.0, 1.0), ("p2", "b"): (1.5, 1.5),
         ("p3", "a"): (2.0, 2.0), ("p3", "b"): (1.0, None)}
REPEATS = pd.DataFrame([(p, k, run, t[run]) for (p, k), t in TIMES.items() for run in (0, 1) if t[run] is not None],
                       columns=["problem_id", "kernel", "run_id", "time_ms"])
HEURISTICS = pd.DataFrame({"problem_id": ["p1", "p2", "p3"], "heuristic": "cudnn_mode_a", "rank": 0,
                           "kernel": ["c", "a", "b"]})


def test_pairs_keep_kernels_timed_in_both_runs():
    pairs = repeatability.run_pairs(REPEATS)
    assert len(pairs) == 6 and ("p3", "b") not in set(zip(pairs["problem_id"], pairs["kernel"]))


def test_plan_repeatability():
    # |log ratio|: p1 a log 1.1, b log 1.2, c log 1.1; four zeros -> [0, 0, 0, .0953, .0953, .1823]
    r = repeatability.plan_repeatability(repeatability.run_pairs(REPEATS))
    assert r["n"] == 6
    assert r["median"] == pytest.approx(math.log(1.1) / 2)  # (0 + 0.0953) / 2 = 0.04766
    assert r["p90"] == pytest.approx(0.1388159, abs=1e-6)  # position 4.5: .0953 + .5 (.1823 - .0953)
    assert r["p99"] == pytest.approx(0.1779710, abs=1e-6)  # position 4.95


def test_same_winner_and_noise_ceiling():
    pairs = repeatability.run_pairs(REPEATS)
    # winners run 0: p1 a, p2 a, p3 a (b is not in both runs); run 1: p1 b, p2 a, p3 a
    assert repeatability.same_winner_share(pairs) == {"n": 3, "same": 2, "share": pytest.approx(2 / 3)}
    s = repeatability.noise_slowdowns(pairs)
    assert s.to_dict() == {"p1": pytest.approx(1.1), "p2": 1.0, "p3": 1.0}  # p1: a at 1.1 against b at 1.0
    c = repeatability.noise_ceiling(pairs)
    assert c == {"n": 3, "geomean": pytest.approx(1.1 ** (1 / 3)), "p90": pytest.approx(1.08), "max": pytest.approx(1.1)}


def test_heuristic_gap_in_both_runs():
    # p1 picks c: 2.0 / 1.0 in run 0, 2.2 / 1.0 in run 1; p2 picks a (the fastest): 1; p3's pick b is not in both
    g = repeatability.heuristic_gaps(repeatability.run_pairs(REPEATS), HEURISTICS)
    assert g == {"heuristic": "cudnn_mode_a", "n": 2, "run_a": pytest.approx(math.sqrt(2.0)),
                 "run_b": pytest.approx(math.sqrt(2.2))}


def test_summary_and_bad_tables():
    s = repeatability.summary(REPEATS, HEURISTICS)
    assert s["problems"] == 3 and s["same_winner"]["same"] == 2
    with pytest.raises(KbenchInputError, match="missing column"):
        repeatability.run_pairs(REPEATS.drop(columns="run_id"))
    with pytest.raises(KbenchInputError, match="run 2 has no rows"):
        repeatability.run_pairs(REPEATS, 0, 2)


def test_plan_repeatability_by_first_run_timing_hand_worked():
    from kbench.sources.repeatability import plan_repeatability_by
    pairs = pd.DataFrame({"problem_id": ["P", "P", "Q"], "kernel": ["a", "b", "a"],
                          "t_a": [1.0, 1.0, 2.0], "t_b": [1.0, np.e, 2.0 * np.e ** 2]})
    labels = pd.DataFrame({"problem_id": ["P", "P", "Q", "R"], "kernel": ["a", "b", "a", "a"],
                           "timing": ["verified", "coarse", "coarse", "verified"]})
    per = plan_repeatability_by(pairs, labels).set_index("timing")
    # coarse: |log| = 1 (P b) and 2 (Q a): median 1.5; verified: P a only, 0 (R is not in the pairs)
    assert per.loc["coarse", "n"] == 2 and per.loc["coarse", "median"] == pytest.approx(1.5)
    assert per.loc["verified", "n"] == 1 and per.loc["verified", "p99"] == pytest.approx(0.0)

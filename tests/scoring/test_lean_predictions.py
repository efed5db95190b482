"""Lean predictions: each ranking cut to its first 30 applicable candidates scores as the full one."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbench.leaderboard.store import lean_predictions
from kbench.scoring.metrics import ScoringTable, lean_rows


@pytest.fixture(scope="module")
def mi300x_valid():
    from kbench.scoring.evaluate import Evaluator
    return Evaluator("mi300x", split="random", part="valid")

NAN = np.nan


def _table():
    # kernels a b c d; problem 0 complete (b, d listed), problem 1 censored (a listed; c measured
    # elsewhere in its class, d never), problem 2 complete with only a listed
    times = np.array([[NAN, 1.0, NAN, 2.0], [1.0, NAN, NAN, NAN], [1.0, NAN, NAN, NAN]])
    runs = np.array([[True, True, True, True], [True, False, True, False], [True, False, False, False]])
    return ScoringTable(problem_ids=np.array(["p0", "p1", "p2"]), kernels=np.array(list("abcd")), times=times,
                        censored=np.array([False, True, False]), runs_in_class=runs,
                        direction=np.array(["F"] * 3), dtype=np.array(["FP32"] * 3))


def test_hand_worked_cut():
    t = _table()
    #          p0: a  b  a  c  d      p1: d  c  b  a      p2: d  c
    prob = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
    kern = np.array([0, 1, 0, 2, 3, 3, 2, 1, 0, 3, 2])
    # p0: applicable b, d (a and c are unlisted on a complete list); p1 (censored): c (measured in
    # its class) and a (listed); p2: nothing applicable -> its first row stays, scored a failure
    assert lean_rows(t, prob, kern, keep=1).tolist() == [1, 6, 9]
    assert lean_rows(t, prob, kern, keep=2).tolist() == [1, 4, 6, 8, 9]


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), keep_all=st.booleans())
def test_lean_file_scores_identically(mi300x_valid, seed, keep_all):
    ev = mi300x_valid
    rng = np.random.default_rng(seed)
    kernels = np.asarray(ev.table.kernels)
    rankings = [";".join(rng.permutation(kernels)[: len(kernels) if keep_all else rng.integers(1, len(kernels))])
                for _ in ev.table.problem_ids]
    preds = pd.DataFrame({"problem_id": ev.table.problem_ids, "ranking": rankings})
    lean = lean_predictions(ev, preds, keep=30)
    assert (lean["ranking"].str.count(";") < 30).all()
    full_rec, lean_rec = ev(preds).model_dump(), ev(lean).model_dump()
    for rec in (full_rec, lean_rec):
        rec.pop("predictions"), rec.pop("date")
    assert full_rec == lean_rec
    # cut at 5: every figure that reads at most 5 candidates is unchanged too
    five = ev(lean_predictions(ev, preds, keep=5)).metrics["overall"]
    for key in ("top1", "top3", "top5", "lop_at_1", "lop_at_5", "geomean_slowdown", "share_failed"):
        assert five[key] == full_rec["metrics"]["overall"][key]


def test_lean_predictions_hand_worked_frame():
    """The cut frame of the hand-worked table: problems keep their order; a problem of another part
    (px) or with an unknown kernel name (p2 here lists zz) keeps its ranking whole; names are stripped."""
    class OnTable:
        table = _table()

    preds = pd.DataFrame({"problem_id": ["p1", "px", "p0", "p2"],
                          "ranking": ["d;c;b;a", "a;b", " a;b ;a;c;d", "d;zz"]})
    for keep, expected in ((1, ["c", "a;b", "b", "d;zz"]), (2, ["c;a", "a;b", "b;d", "d;zz"])):
        lean = lean_predictions(OnTable(), preds, keep=keep)
        assert lean["problem_id"].tolist() == ["p1", "px", "p0", "p2"]
        assert lean["ranking"].tolist() == expected
    no_rows = lean_predictions(OnTable(), preds.iloc[:0])
    assert no_rows.empty and list(no_rows.columns) == ["problem_id", "ranking"]
    only_p2 = lean_predictions(OnTable(), pd.DataFrame({"problem_id": ["p2"], "ranking": ["d;c"]}), keep=1)
    assert only_p2["ranking"].tolist() == ["d"]  # nothing applicable: its first name stays, scored a failure

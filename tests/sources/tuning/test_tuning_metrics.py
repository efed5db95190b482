"""Tuning metrics on hand-worked examples."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tuning_toy import problem

from kbench.core.errors import KbenchInputError
from kbench.scoring.tuning_metrics import (
    align_predictions,
    average_accuracy,
    parameter_accuracy,
    perfect_prediction,
    row_accuracy,
    score_tuning,
    tuning_metrics,
    valid_share,
)
from kbench.sources.tuning_grammar import ASM1X1U_PARAMS

TRUE = np.array([[1, 2, 3],
                 [4, 5, 6],
                 [7, 8, 9],
                 [1, 1, 1]])
PRED = np.array([[1, 2, 3],     # 3/3 right, perfect
                 [4, 0, 6],     # 2/3
                 [0, 0, 9],     # 1/3
                 [2, 2, 2]])    # 0/3


def test_hand_worked_example():
    assert row_accuracy(PRED, TRUE).tolist() == pytest.approx([1, 2 / 3, 1 / 3, 0])
    # (1 + 2/3 + 1/3 + 0) / 4 = 0.5
    assert average_accuracy(PRED, TRUE) == pytest.approx(0.5)
    # one tuple of four is entirely right
    assert perfect_prediction(PRED, TRUE) == pytest.approx(0.25)
    # per parameter: column 0 right in rows 0, 1 -> 2/4; column 1: row 0 -> 1/4; column 2: rows 0, 1, 2 -> 3/4
    assert parameter_accuracy(PRED, TRUE).tolist() == pytest.approx([0.5, 0.25, 0.75])
    assert valid_share([True, False, True, True]) == pytest.approx(0.75)
    m = tuning_metrics(PRED, TRUE, valid=np.array([True, False, True, True]))
    assert m == {"n": 4, "average_accuracy": pytest.approx(0.5),
                 "perfect_prediction": pytest.approx(0.25), "valid_share": pytest.approx(0.75)}


def test_missing_and_non_numeric_predictions_are_wrong():
    pred = pd.DataFrame({"a": [1, None], "b": ["2", "x"]})
    true = pd.DataFrame({"a": [1, 3], "b": [2, 4]})
    assert row_accuracy(pred, true).tolist() == [1.0, 0.0]
    nan_true = pd.DataFrame({"a": [np.nan], "b": [1]})
    assert row_accuracy(pd.DataFrame({"a": [np.nan], "b": [1]}), nan_true).tolist() == [0.5]


def test_bad_shapes():
    with pytest.raises(KbenchInputError, match="shape"):
        average_accuracy(PRED[:, :2], TRUE)
    with pytest.raises(KbenchInputError, match="nothing to score"):
        average_accuracy(np.zeros((0, 3)), np.zeros((0, 3)))
    with pytest.raises(KbenchInputError, match="lack"):
        average_accuracy(pd.DataFrame({"a": [1]}), pd.DataFrame({"a": [1], "b": [2]}), params=["a", "b"])
    with pytest.raises(KbenchInputError):
        valid_share([])


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 30), st.integers(1, 8), st.integers(0, 2**31 - 1))
def test_metric_identities(n, p, seed):
    """Average accuracy = mean of the per-parameter accuracies; perfect <= average;
    a prediction equal to the truth scores 1."""
    rng = np.random.default_rng(seed)
    true = rng.integers(0, 3, (n, p))
    pred = rng.integers(0, 3, (n, p))
    avg = average_accuracy(pred, true)
    assert avg == pytest.approx(parameter_accuracy(pred, true).mean())
    assert avg == pytest.approx((pred == true).mean())
    assert perfect_prediction(pred, true) <= avg + 1e-12
    assert average_accuracy(true, true) == 1.0 and perfect_prediction(true, true) == 1.0


def test_align_predictions():
    targets = pd.DataFrame({"problem_id": ["p1", "p2", "p3"], "a": [1, 2, 3], "b": [4, 5, 6]})
    preds = pd.DataFrame({"problem_id": ["p3", "p1", "zz"], "params": ["3,6", "1,0", "9,9"]})
    aligned, counts = align_predictions(preds, targets, ["a", "b"])
    assert aligned["problem_id"].tolist() == ["p1", "p2", "p3"]
    assert counts == {"n_missing": 1, "n_unknown": 1}
    # p1 half right, p2 missing (wrong), p3 right: (0.5 + 0 + 1) / 3
    assert average_accuracy(aligned[["a", "b"]], targets[["a", "b"]]) == pytest.approx(0.5)
    with pytest.raises(KbenchInputError, match="twice"):
        align_predictions(pd.concat([preds, preds]), targets, ["a", "b"])
    with pytest.raises(KbenchInputError, match="problem_id"):
        align_predictions(preds.drop(columns="problem_id"), targets, ["a", "b"])
    wrong_count = pd.DataFrame({"problem_id": ["p1"], "params": ["1"]})
    aligned, _ = align_predictions(wrong_count, targets, ["a", "b"])
    assert aligned[["a", "b"]].iloc[0].isna().all()


def test_score_tuning_with_validity():
    p1 = problem().assign(problem_id="p1")
    p2 = problem(n=1).assign(problem_id="p2")
    problems = pd.concat([p1, p2], ignore_index=True)
    cols = list(ASM1X1U_PARAMS)
    targets = pd.DataFrame([[*("p1", "ConvAsm1x1U"), 4, 16, 4, 16, 2, 1, 1, 1],
                            [*("p2", "ConvAsm1x1U"), 4, 16, 4, 16, 1, 1, 1, 1],
                            [*("p2", "Other"), 0, 0, 0, 0, 0, 0, 0, 0]],
                           columns=["problem_id", "solver", *cols])
    # p1: exact; p2: n_mult 2 (wrong, and invalid: batch 1 allows n_mult 1 only)
    preds = pd.DataFrame({"problem_id": ["p1", "p2"],
                          "params": ["4,16,4,16,2,1,1,1", "4,16,4,16,2,1,1,1"]})
    s = score_tuning(preds, targets, "ConvAsm1x1U", problems)
    assert s["n"] == 2 and s["n_missing"] == 0 and s["n_unknown"] == 0
    assert s["average_accuracy"] == pytest.approx((1 + 7 / 8) / 2)
    assert s["perfect_prediction"] == pytest.approx(0.5)
    assert s["valid_share"] == pytest.approx(0.5)
    assert s["parameter_accuracy"]["n_mult"] == pytest.approx(0.5)
    # restricted to a subset of problems (e.g. a split)
    s1 = score_tuning(preds, targets, "ConvAsm1x1U", problems.iloc[[0]])
    assert s1["n"] == 1 and s1["perfect_prediction"] == 1.0 and s1["n_unknown"] == 1
    with pytest.raises(KbenchInputError, match="no parameter list"):
        score_tuning(preds, targets, "NoSuchSolver")

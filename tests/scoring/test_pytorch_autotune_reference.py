"""PyTorch's real autotune (`pytorch_autotune`, recorded for part of the problems) beside the idealised
`autotune_top10` as references of the Evaluator: a four-problem dataset worked by hand."""

import math

import numpy as np
import pandas as pd
import pytest

from kbench.data.dataset import Dataset
from kbench.scoring.evaluate import EXPECTED_FORMAT, Evaluator
from kbench.scoring.selection_metrics import AUTOTUNE, PYTORCH_AUTOTUNE, REFERENCE_TEXT


def four_problems(autotune: bool = True) -> Dataset:
    """p1..p4 (complete lists). Mode A: p1 C, B, A; p2 C, A, B; p3 A, C; p4 B, A. PyTorch's autotune was
    recorded for p1 (settled on B, tuning cost 30 ms), p2 (B, 50 ms) and p3 (a plan outside the set: no
    choice, its 7 ms never counted); p4 has no record."""
    ids = ["p1", "p2", "p3", "p4"]
    problems = pd.DataFrame({"problem_id": ids, "direction": "F", "dtype": "FP16", "layout": "NHWC", "censored": False})
    runtimes = pd.DataFrame(
        [
            ("p1", "A", 1.0),
            ("p1", "B", 2.0),
            ("p1", "C", 4.0),
            ("p2", "A", 2.0),
            ("p2", "B", 1.0),
            ("p2", "C", 8.0),
            ("p3", "A", 4.0),
            ("p3", "B", 2.0),
            ("p3", "C", 1.0),
            ("p4", "A", 1.0),
            ("p4", "B", 3.0),
        ],
        columns=["problem_id", "kernel", "time_ms"],
    )
    heur = [
        ("p1", "cudnn_mode_a", 0, "C"),
        ("p1", "cudnn_mode_a", 1, "B"),
        ("p1", "cudnn_mode_a", 2, "A"),
        ("p2", "cudnn_mode_a", 0, "C"),
        ("p2", "cudnn_mode_a", 1, "A"),
        ("p2", "cudnn_mode_a", 2, "B"),
        ("p3", "cudnn_mode_a", 0, "A"),
        ("p3", "cudnn_mode_a", 1, "C"),
        ("p4", "cudnn_mode_a", 0, "B"),
        ("p4", "cudnn_mode_a", 1, "A"),
    ]
    tables = {
        "problems": problems,
        "runtimes": runtimes,
        "kernels": pd.DataFrame({"kernel": list("ABC"), "directions": "F"}),
        "splits": pd.DataFrame({"problem_id": ids, "random": "test"}),
    }
    if autotune:
        heur += [("p1", PYTORCH_AUTOTUNE, 0, "B"), ("p2", PYTORCH_AUTOTUNE, 0, "B")]
        tables["autotune"] = pd.DataFrame(
            {
                "problem_id": ["p1", "p2", "p3"],
                "status": ["in_set", "in_set", "not_in_set"],
                "kernel": ["B", "B", ""],
                "n_matched": np.array([1, 1, 1], dtype=np.int16),
                "first_call_ms": [31.0, 51.0, 8.0],
                "second_call_ms": [1.0, 1.0, 1.0],
                "first_call_cost_ms": [30.0, 50.0, 7.0],
            }
        )
    tables["heuristics"] = pd.DataFrame(heur, columns=["problem_id", "heuristic", "rank", "kernel"])
    return Dataset("four", tables, {"name": "four", "version": "0", "checksum": "0" * 64})


ORACLE = pd.DataFrame({"problem_id": ["p1", "p2", "p3", "p4"], "kernel": ["A", "B", "C", "A"]})


def test_both_autotune_references_by_hand():
    refs = Evaluator(four_problems())(ORACLE).overall["references"]
    assert list(refs) == ["cudnn_mode_a", PYTORCH_AUTOTUNE, AUTOTUNE]
    real = refs[PYTORCH_AUTOTUNE]
    # over p1, p2 only: t_ref 2 and 1 against the oracle's 1 and 1
    assert real["n"] == 2 and real["speedup_geomean"] == pytest.approx(math.sqrt(2))
    assert (real["sum_ref_ms"], real["sum_choice_ms"]) == (3.0, 2.0)
    assert real["first_call_ms"] == 80.0  # 30 + 50: p3's 7 ms has no choice behind it
    assert real["best_of_1"] == real["best_of_10"] == pytest.approx(math.sqrt(2))  # one plan: a flat curve
    assert real["headroom_closed"] == pytest.approx(1.0) and real["improved"] == 0.5
    ideal = refs[AUTOTUNE]
    # the fastest of mode A's first 10: 1, 1, 1, 1 (the oracle everywhere); first call 7 + 11 + 5 + 4
    assert ideal["n"] == 4 and ideal["speedup_geomean"] == pytest.approx(1.0) and ideal["first_call_ms"] == 27.0
    # the board's reference stays cuDNN mode A: C 4, C 8, A 4, B 3 over the oracle
    assert refs["cudnn_mode_a"]["speedup_geomean"] == pytest.approx((4 * 8 * 4 * 3) ** 0.25)


def test_without_an_autotune_record_the_references_are_as_before():
    refs = Evaluator(four_problems(autotune=False))(ORACLE).overall["references"]
    assert list(refs) == ["cudnn_mode_a", AUTOTUNE]


def test_the_scoring_rules_name_both_autotune_references():
    text = " ".join(EXPECTED_FORMAT.split())
    assert "autotune_top10, the best of mode A's first 10 plans, each timed exactly (idealised autotune)" in text
    assert "pytorch_autotune, the plan PyTorch's benchmark = True settled on (real autotune)" in text
    assert REFERENCE_TEXT[AUTOTUNE] == "idealised autotune: the best of mode A's first 10 plans, each timed exactly"

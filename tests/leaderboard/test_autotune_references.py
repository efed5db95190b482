"""The boards' autotune references: `autotune_top10` named for what it is (idealised), `pytorch_autotune`
(real, recorded for part of the test problems) beside it with its coverage, every headline naming which
autotune it quotes. A four-problem dataset worked by hand (the Evaluator's figures in
tests/scoring/test_pytorch_autotune_reference.py)."""

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from kbench.data.dataset import Dataset
from kbench.leaderboard import practitioner_table
from kbench.leaderboard.board import Board, Row
from kbench.leaderboard.store import Entry
from kbench.scoring.evaluate import Evaluator


def four_problems() -> Dataset:
    """p1..p4; mode A p1 C, B, A; p2 C, A, B; p3 A, C; p4 B, A. pytorch_autotune: p1 B, p2 B (tuning 30 and
    50 ms); p3 recorded outside the set, p4 not recorded."""
    ids = ["p1", "p2", "p3", "p4"]
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
    heur = pd.DataFrame(
        [
            (p, "cudnn_mode_a", r, k)
            for p, order in (("p1", "CBA"), ("p2", "CAB"), ("p3", "AC"), ("p4", "BA"))
            for r, k in enumerate(order)
        ]
        + [("p1", "pytorch_autotune", 0, "B"), ("p2", "pytorch_autotune", 0, "B")],
        columns=["problem_id", "heuristic", "rank", "kernel"],
    )
    autotune = pd.DataFrame(
        {
            "problem_id": ["p1", "p2", "p3"],
            "status": ["in_set", "in_set", "not_in_set"],
            "kernel": ["B", "B", ""],
            "n_matched": np.ones(3, dtype=np.int16),
            "first_call_ms": [31.0, 51.0, 8.0],
            "second_call_ms": [1.0, 1.0, 1.0],
            "first_call_cost_ms": [30.0, 50.0, 7.0],
        }
    )
    tables = {
        "problems": pd.DataFrame(
            {"problem_id": ids, "direction": "F", "dtype": "FP16", "layout": "NHWC", "censored": False}
        ),
        "runtimes": runtimes,
        "kernels": pd.DataFrame({"kernel": list("ABC"), "directions": "F"}),
        "splits": pd.DataFrame({"problem_id": ids, "random": "test"}),
        "heuristics": heur,
        "autotune": autotune,
    }
    return Dataset("four", tables, {"name": "four", "version": "0", "checksum": "0" * 64})


def board(latency_ms: float = 1.0) -> Board:
    oracle = pd.DataFrame({"problem_id": ["p1", "p2", "p3", "p4"], "kernel": ["A", "B", "C", "A"]})
    record = Evaluator(four_problems())(oracle, method="oracle")
    meta = SimpleNamespace(display_name="oracle", role="entry", description="", inference_latency_ms=latency_ms)
    return Board("four", "random", [Row(Entry(Path("x"), record, meta, None), 1)], [], 4, "cudnn_mode_a")


def test_the_readme_view_names_each_autotune_and_the_real_ones_coverage():
    text = practitioner_table.markdown(board())
    ideal = r"autotune\_top10 \(idealised autotune: the best of mode A's first 10 plans, each timed exactly\)"
    real = (
        r"pytorch\_autotune \(real autotune: the plan PyTorch's benchmark = True settled on, recorded on the "
        r"dataset's machine; on 2 of 4 test problems\)"
    )
    row = lambda label: label.replace(r"\(", "(").replace(r"\)", ")")  # noqa: E731 (a cell's own parentheses)
    assert f"| {row(ideal)} | 1.000× |" in text  # its best-of-K row: the oracle everywhere
    assert f"| {row(real)} | {math.sqrt(2):.3f}× |" in text  # one plan: the same at every K, over p1 and p2
    # the headline: every reference's speed-up, each autotune named, the real one's coverage stated (p1 2x,
    # p2 1x: a wide interval, tied)
    assert (
        rf"speed-up over each reference \(≈: tied, its 95% interval holds 1\): cudnn\_mode\_a "
        f"{384**0.25:.3f}×; {real} {math.sqrt(2):.3f}× ≈; {ideal} 1.000× ≈."
    ) in text
    # break-even, named: the selector pays 2 x 1 ms once and runs 1 ms less per call round over p1, p2
    assert (
        r"Against pytorch\_autotune \(first call 80 ms of PyTorch's own tuning, measured over 2 shapes; the "
        r"selector's latency 1 ms per shape\): the selector is ahead at every number of calls."
    ) in text
    assert (
        r"Against autotune\_top10 \(first call 27 ms of timings, the 10 plans' table times over 4 shapes; "
        r"the selector's latency 1 ms per shape\): the selector is ahead at every number of calls."
    ) in text


def test_the_sortable_table_says_the_same():
    html = practitioner_table.table_html(board())
    assert "autotune_top10 (idealised autotune: the best of mode A&#x27;s first 10 plans, each timed exactly)" in html
    assert "on 2 of 4 test problems" in html
    assert "on 2 of 4 test problems, the speed-up over them only" in html  # the speed-up cell's tooltip
    assert "speed-up over pytorch_autotune (real autotune: the plan PyTorch&#x27;s benchmark = True settled on" in html
    assert "autotune_top10 (idealised autotune: the best of mode A's first 10 plans, each timed exactly)" in practitioner_table.TEXT


def test_break_even_names_the_autotuner():
    figures = {"n": 10, "first_call_ms": 100.0, "sum_choice_ms": 12.0, "sum_ref_ms": 10.0}
    assert practitioner_table.break_even(figures, 20.0, "pytorch_autotune") == "pytorch_autotune is ahead from the first call on"
    assert practitioner_table.break_even(figures, 1.0, "autotune_top10") == (
        "the selector is ahead for the first 45 calls per shape, autotune_top10 after"
    )
    assert practitioner_table.coverage({"n": 4}, 4) == "" and practitioner_table.coverage({"n": 3}, 1200) == "on 3 of 1,200 test problems"

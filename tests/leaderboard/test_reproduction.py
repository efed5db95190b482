"""Machine-dependent entries: the record says why, the board's note and `kbench run` state the tolerance."""

import json

from lbtoy import fake_classes, run_fakes

from kbench.leaderboard.reproduction import board_comparison, machine_dependent, tolerance_text
from kbench.leaderboard.schema import parse_record

WHY = "its float32 sums follow the toy build"
COMPARISON = {"before": {"torch": "2.11.0", "cpu": "CPU: Xeon, 32 cores"},
              "after": {"torch": "2.13.0", "cpu": "CPU: EPYC, 2 cores"}, "seeds": 5,
              "difference": {"top1": -0.0008, "lop_mean": 0.0087, "geomean_slowdown": 0.0031}}


def test_tolerance_text_names_both_runs_and_each_difference():
    assert tolerance_text(COMPARISON) == (
        "observed between torch 2.11.0 on CPU: Xeon, 32 cores and torch 2.13.0 on CPU: EPYC, 2 cores, 5 seeds each: "
        "top-1 by 0.0008, mean LoP by 0.0087, geomean slowdown by 0.0031")
    assert tolerance_text(None) is None
    with_spread = {**COMPARISON, "before": {**COMPARISON["before"], "std_over_seeds": {"top1": 0.0025, "lop_mean": 0.0074}},
                   "after": {**COMPARISON["after"], "std_over_seeds": {"top1": 0.0019, "lop_mean": 0.0052}}}
    assert tolerance_text(with_spread) == tolerance_text(COMPARISON) + (
        " (std over seeds, each run: top-1 0.0025 and 0.0019, mean LoP 0.0074 and 0.0052)")


def _machine_dependent_fakes():
    classes = fake_classes()
    classes["toy-model"].machine_dependent = WHY
    return classes


def test_a_machine_dependent_method_is_marked_in_its_record_and_the_boards_note(toy, tmp_path):
    (tmp_path / "experiments" / "results").mkdir(parents=True)
    (tmp_path / "experiments/results/reproduction_toy_random.json").write_text(json.dumps(
        {"dataset": "toy", "split": "random", "entries": {"toy-model": COMPARISON}}))
    report = run_fakes(tmp_path / "results", tmp_path / "leaderboard", classes=_machine_dependent_fakes())
    assert not report.failed
    records = {o.method: o.record for o in report.outcomes}
    assert machine_dependent(records["toy-model"]) == WHY and machine_dependent(records["toy-rules"]) is None
    note = (f"toy-model is machine-dependent: {WHY}; {tolerance_text(COMPARISON)} "
            "(experiments/results/reproduction_toy_random.json).")
    assert f"_{note}_" in (tmp_path / "leaderboard" / "README.md").read_text()
    assert note in (tmp_path / "leaderboard" / "site" / "toy.html").read_text()


def test_kbench_run_compares_its_rows_with_the_board(toy, tmp_path):
    (tmp_path / "experiments" / "results").mkdir(parents=True)
    (tmp_path / "experiments/results/reproduction_toy_random.json").write_text(json.dumps(
        {"dataset": "toy", "split": "random", "entries": {"toy-model": COMPARISON}}))
    run_fakes(tmp_path / "results", tmp_path / "leaderboard", classes=_machine_dependent_fakes())
    board = tmp_path / "leaderboard"
    same = parse_record(board / "toy/random/toy-rules/result.json")
    moved = parse_record(board / "toy/random/toy-model/result.json")
    b = dict(moved.metrics["overall"])
    moved.metrics["overall"] = {**b, "top1": b["top1"] - 0.25}
    lines = board_comparison([("toy-rules", same), ("toy-model", moved), ("not-on-board", same)], board,
                             "toy", "random")
    assert lines[0] == "  toy-rules: equal to the board at 4 decimals"
    assert lines[1] == (f"  toy-model: top-1 {b['top1'] - 0.25:.4f} (board {b['top1']:.4f}), "
                        f"mean LoP {b['lop_mean']:.4f} (board {b['lop_mean']:.4f}), "
                        f"geomean slowdown {b['geomean_slowdown']:.4f} (board {b['geomean_slowdown']:.4f}); "
                        f"machine-dependent: {WHY}; {tolerance_text(COMPARISON)}")
    assert len(lines) == 2
    fewer = moved.model_copy(deep=True)
    fewer.seeds.seeds = [0]
    line = board_comparison([("toy-model", fewer)], board, "toy", "random")[0]
    assert "; the board's figures are over seeds [0, 1, 2, 3, 4], these over [0]; machine-dependent:" in line

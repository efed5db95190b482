"""The timed selector of ``verify-on-gpu --timed-top K``: the entry's first K listed plans timed on the
GPU, the fastest in a pass's first round kept, every unit measured on the other rounds; hand-worked."""

import json
import math

import pandas as pd
import pytest
from collect_fakes import SimulatedCollector
from test_live_autotune import ITEM, MS

from kbench.core.errors import KbenchInputError
from kbench.gpu_check import autotune_pass
from kbench.gpu_check.command import make_record
from kbench.gpu_check.plan import (
    PYTORCH_AUTOTUNE_UNIT,
    PYTORCH_OP_UNIT,
    RAW_AUTOTUNE,
    build_plan,
    live_block,
    role_plans,
)
from kbench.scoring.records import VerificationRecord


def test_role_plans_lists_the_first_k_listed_plans_of_the_ranking():
    runtimes = pd.DataFrame({"problem_id": ["p"] * 4, "kernel": ["a", "b", "c", "m"], "time_ms": [2.0, 1.0, 3.0, 4.0]})
    heuristics = pd.DataFrame({"problem_id": ["p"], "heuristic": ["cudnn_mode_a"], "kernel": ["m"], "rank": [0]})
    preds = pd.DataFrame({"problem_id": ["p"], "ranking": ["x;c;a;b"]})  # x is not measured: skipped
    two = role_plans(preds, runtimes, heuristics, ["p"], timed_top=2).iloc[0]
    assert (two["choice"], two["candidates"], two["t_candidates"]) == ("c", ["c", "a"], [3.0, 2.0])
    assert role_plans(preds, runtimes, heuristics, ["p"], timed_top=5).iloc[0]["candidates"] == ["c", "a", "b"]
    assert "candidates" not in role_plans(preds, runtimes, heuristics, ["p"]).columns
    # a ranking with no measured plan fails to the slowest plan, which is then the only candidate
    none = role_plans(preds.assign(ranking="x;y"), runtimes, heuristics, ["p"], timed_top=3).iloc[0]
    assert (none["choice"], none["candidates"]) == ("m", ["m"])


def test_the_plan_times_the_candidates_and_needs_a_round_to_choose_in():
    roles = pd.DataFrame({"problem_id": ["p"], "choice": ["c"], "mode_a": ["m"], "oracle": ["b"], "t_choice": [3.0],
                          "t_mode_a": [4.0], "t_oracle": [1.0], "candidates": [["c", "a", "b"]],
                          "t_candidates": [[3.0, 2.0, 1.0]]})
    problems = pd.DataFrame([{"problem_id": "p", "direction": "F", "dtype": "FP16", "n": 1, "c": 8, "k": 8, "groups": 1,
                              "x_h": 8, "x_w": 8, "y_h": 8, "y_w": 8, "fil_h": 3, "fil_w": 3, "pad_h": 1, "pad_w": 1,
                              "stride_h": 1, "stride_w": 1, "dil_h": 1, "dil_w": 1, "layout_x": "NHWC"}])
    item = build_plan(roles, problems, rounds=3)["problems"][0]
    assert item["plans"] == ["c", "m", "b", "a"] and item["candidates"] == ["c", "a", "b"]
    assert item["table_ms"] == {"c": 3.0, "m": 4.0, "b": 1.0, "a": 2.0}
    assert all(sorted(r) == sorted(item["plans"]) for r in item["order"])
    with pytest.raises(KbenchInputError, match="rounds >= 2"):
        build_plan(roles, problems, rounds=1)


def test_the_autotune_pass_times_the_candidates_too():
    col = SimulatedCollector(MS, ["c", "b", "a"])
    rows, line = autotune_pass.time_problem(col, {**ITEM, "candidates": ["a", "c"]}, replays=1, seed=7,
                                            live=live_block("default", ["FP32"], True))
    assert {r["plan"] for r in rows} == {"a", "b", "c", PYTORCH_AUTOTUNE_UNIT}
    # the selector's first call: each candidate run to warm up, then once between events (a: 1 ms, c: 30 ms);
    # the simulated GPU's clock moves only by runs, so the call takes 2 x (1 + 30) ms on it
    assert line["timed_top_call"] == {"ms": 62.0, "times": {"a": 1.0, "c": 30.0}}
    _, plain = autotune_pass.time_problem(SimulatedCollector(MS, ["c", "b", "a"]), ITEM, replays=1, seed=7,
                                          live=live_block("default", ["FP32"], True))
    assert "timed_top_call" not in plain


# main pass, ms per round (0, 1): the candidates c1, c2; mode A a1, oracle o1, live mode B's pick b, PyTorch's op
MAIN = {"p1": {"c1": (2.0, 1.0), "c2": (1.0, 0.8), "a1": (4.0, 4.0), "o1": (0.5, 0.5), "b": (2.0, 2.0),
               PYTORCH_OP_UNIT: (4.0, 4.0)},
        "p2": {"c1": (1.0, 1.0), "c2": (3.0, 0.9), "a1": (2.0, 2.0), "o1": (0.5, 0.5), "b": (1.0, 1.0),
               PYTORCH_OP_UNIT: (2.0, 2.0)}}
# the autotune pass chooses in its own first round: c1 on p1, c2 on p2 (not the main pass's picks)
AUTO = {"p1": {"c1": (1.0, 1.2), "c2": (2.0, 0.6), "o1": (0.5, 0.5), PYTORCH_AUTOTUNE_UNIT: (1.8, 1.8)},
        "p2": {"c1": (1.0, 1.0), "c2": (0.5, 1.5), "o1": (0.5, 0.5), PYTORCH_AUTOTUNE_UNIT: (3.0, 3.0)}}


def _rows(ms: dict, problem_line: dict) -> list[dict]:
    lines = [{"kind": "run", "env": {"gpu": "SIMULATED"}}]
    for pid, units in ms.items():
        lines += [{"kind": "time", "problem_id": pid, "plan": u, "round": r, "slot": 0, "ms": t[r], "k": 1,
                   "method": "graph"} for r in (0, 1) for u, t in units.items()]
        lines.append({"kind": "problem", "problem_id": pid, "status": "ok", **problem_line})
    return lines + [{"kind": "run_end", "seconds": 2.0, "ok": len(ms), "failed": 0}]


def _timed_run(tmp_path) -> dict:
    problems = [{"problem_id": pid, "problem": {"direction": "F", "dtype": "FP16", "layout": "NDHWC", "x_d": 4,
                                                "fil_d": 3 if pid == "p1" else 1},
                 "roles": {"choice": "c1", "mode_a": "a1", "oracle": "o1"}, "candidates": ["c1", "c2"],
                 "table_ms": {"c1": 1.0, "c2": 1.0, "a1": 2.0, "o1": 0.5}, "plans": ["c1", "a1", "o1", "c2"],
                 "order": []} for pid in MAIN]
    live = {"live": {"live_mode_a": "a1", "live_mode_b": "b", "pytorch_op": PYTORCH_OP_UNIT}}
    (tmp_path / "raw.jsonl").write_text("\n".join(json.dumps(x) for x in _rows(MAIN, live)) + "\n")
    auto = {"autotune": {"first_call_ms": 10.5, "second_call_ms": 0.5}}
    (tmp_path / RAW_AUTOTUNE).write_text("\n".join(json.dumps(x) for x in _rows(AUTO, auto)) + "\n")
    return {"format": 1, "seed": 0, "rounds": 2, "replays": 1, "problems": problems, "timed_top": 2,
            "dataset": {"name": "h200-3d-pytorch", "version": "0.4.0", "checksum": "x"}, "split": "random",
            "part": "test", "method": "m", "predictions": {"path": None, "sha256": None, "rows": 2},
            "live": live_block("pytorch", ["FP16"], autotune=True)}


def test_timed_top_figures_hand_worked(tmp_path):
    rec = make_record(_timed_run(tmp_path), tmp_path)
    # the first choice c1, every round: p1 median(2, 1) = 1.5 against mode A's 4, p2 1 against 2
    assert rec.measured.overall.speedup_geomean == pytest.approx(math.sqrt(4 / 1.5 * 2))
    timed = rec.timed_top
    assert (timed.k, timed.candidates_mean, timed.changed_share) == (2, 2.0, 0.5)  # p1 goes to c2
    # round 1 only: p1's c2 0.8 against 4 (5x), p2's c1 1.0 against 2 (2x)
    assert timed.measured.overall.speedup_geomean == pytest.approx(math.sqrt(10))
    assert timed.measured.overall.choice_is_mode_a == 0.0
    assert timed.table.overall.speedup_geomean == pytest.approx(2.0)  # the table has 1 ms for c1 and c2
    refs = timed.live.references
    assert refs["live_mode_b"].speedup_geomean == pytest.approx(math.sqrt(2 / 0.8 * 1))
    # the autotune pass's own picks (c1 on p1, c2 on p2), its round 1: 1.8 / 1.2 and 3 / 1.5
    auto = refs["pytorch_autotune"]
    assert auto.speedup_geomean == pytest.approx(math.sqrt(1.5 * 2))
    assert auto.oracle_speedup_geomean == pytest.approx(math.sqrt(3.6 * 6))
    assert auto.headroom_closed == pytest.approx(math.log(math.sqrt(3)) / math.log(math.sqrt(21.6)))
    assert auto.first_call_cost_ms == 20.0
    # the first choice over real autotune, every round of that pass: c1 median(1, 1.2) = 1.1 and 1.0
    assert rec.live.references["pytorch_autotune"].speedup_geomean == pytest.approx(math.sqrt(1.8 / 1.1 * 3))
    doc = json.loads(rec.model_dump_json())
    assert VerificationRecord.model_validate(doc) == rec and doc["timed_top"]["k"] == 2


def test_a_plan_without_timed_top_has_no_such_figures(tmp_path):
    plan = _timed_run(tmp_path)
    del plan["timed_top"]
    assert "timed_top" not in json.loads(make_record(plan, tmp_path).model_dump_json())


def test_the_cli_refuses_no_candidates(tmp_path, capsys):
    from kbench.cli import main
    assert main(["verify-on-gpu", "preds.csv", "--dataset", "h200-3d-pytorch", "--out", str(tmp_path / "o"),
                 "--plan-only", "--timed-top", "0"]) == 2
    assert "--timed-top 0" in capsys.readouterr().err


def _stored_timed_top_retiming(tmp_path):
    """A copy of the h200-3d-pytorch random entry's GPU re-timing (a timed top-5 plan) laid out as in the
    repository, with the entry's first-seed predictions."""
    import shutil
    from pathlib import Path

    from kbench.leaderboard.store import first_seed, read_seed_predictions
    repo = Path(__file__).resolve().parents[2]
    dataset, split, method = "h200-3d-pytorch", "random", "xgboost-plans-safe"
    entry = tmp_path / "leaderboard" / dataset / split / method
    entry.mkdir(parents=True)
    shutil.copy(repo / "leaderboard" / dataset / split / method / "verification.json", entry)
    raw = tmp_path / "raw" / dataset / "verify" / method
    shutil.copytree(repo / "raw" / dataset / "verify" / method, raw)
    preds = first_seed(read_seed_predictions(repo / "leaderboard" / dataset / split / method / "preds.parquet"))
    return entry, raw, preds


def test_validate_plans_a_timed_top_retiming_again_with_its_k(tmp_path):
    """validate re-plans a stored re-timing from the entry's predictions: with the plan's own timed_top, or a
    top-5 plan never matches (it did not, and the board's timed re-timing was refused)."""
    import gzip

    from kbench.gpu_check.command import input_sha256
    from kbench.leaderboard.integrity import verification_rescore_problems
    entry, raw, preds = _stored_timed_top_retiming(tmp_path)
    plan = json.loads(gzip.decompress((raw / "plan.json.gz").read_bytes()))
    assert plan["timed_top"] == 5
    assert verification_rescore_problems(entry, "h200-3d-pytorch", "random", "xgboost-plans-safe", tmp_path,
                                         preds) == []
    # a plan claiming K = 3 whose record names its digest: not the plan the predictions give for K = 3
    plan["timed_top"] = 3
    (raw / "plan.json.gz").write_bytes(gzip.compress(json.dumps(plan).encode()))
    record = json.loads((entry / "verification.json").read_text())
    record["inputs"]["plan.json"] = input_sha256(raw / "plan.json.gz")
    (entry / "verification.json").write_text(json.dumps(record))
    problems = verification_rescore_problems(entry, "h200-3d-pytorch", "random", "xgboost-plans-safe", tmp_path,
                                             preds)
    assert any("is not the one the entry's first-seed predictions" in p and "problems" in p for p in problems), problems


def _with_calls(tmp_path, calls: dict) -> dict:
    """The hand-worked run, its autotune pass's problem lines carrying the selector's first call ``calls[pid]``."""
    plan = _timed_run(tmp_path)
    lines = [json.loads(x) for x in (tmp_path / RAW_AUTOTUNE).read_text().splitlines()]
    for line in lines:
        if line["kind"] == "problem" and line["problem_id"] in calls:
            line["timed_top_call"] = calls[line["problem_id"]]
    (tmp_path / RAW_AUTOTUNE).write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return plan


def test_the_selectors_first_call_chooses_in_the_autotune_pass(tmp_path):
    # its single timings pick c2 on p1 and c1 on p2; every round of the pass then measures:
    # p1 c2 median(2.0, 0.6) = 1.3 against autotune's 1.8, p2 c1 1.0 against 3.0
    plan = _with_calls(tmp_path, {"p1": {"ms": 7.0, "times": {"c1": 0.9, "c2": 0.7}},
                                  "p2": {"ms": 5.0, "times": {"c1": 0.4, "c2": 0.4}}})  # a tie: the ranking's first
    timed = make_record(plan, tmp_path).timed_top
    assert timed.autotune_pass_choice == "first_call"
    assert timed.live.references["pytorch_autotune"].speedup_geomean == pytest.approx(math.sqrt(1.8 / 1.3 * 3.0))
    assert (timed.call_cost_ms, timed.call_cost_median_ms) == (12.0, 6.0)
    assert timed.live.references["pytorch_autotune"].first_call_cost_ms == 20.0  # PyTorch's own, as before
    doc = json.loads(timed.model_dump_json())
    assert doc["autotune_pass_choice"] == "first_call" and doc["call_cost_ms"] == 12.0


def test_a_pass_with_calls_on_some_problems_chooses_in_its_first_round(tmp_path):
    plan = _with_calls(tmp_path, {"p1": {"ms": 7.0, "times": {"c1": 0.9, "c2": 0.7}}})
    timed = make_record(plan, tmp_path).timed_top
    assert (timed.autotune_pass_choice, timed.call_cost_ms) == ("first_round", None)
    assert timed.live.references["pytorch_autotune"].speedup_geomean == pytest.approx(math.sqrt(1.5 * 2))
    assert "call_cost_ms" not in json.loads(timed.model_dump_json())


@pytest.mark.parametrize("call", [{"ms": 7.0, "times": {"c1": "fast"}}, {"ms": -1.0, "times": {"c1": 1.0}},
                                  {"ms": 7.0, "times": {}}, {"ms": 7.0, "times": {"c1": 0.0}}, "7 ms"])
def test_a_damaged_call_is_refused(tmp_path, call):
    plan = _with_calls(tmp_path, {"p1": call})
    with pytest.raises(KbenchInputError, match="timed selector's call of 'p1'"):
        make_record(plan, tmp_path)

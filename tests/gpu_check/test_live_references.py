"""``kbench verify-on-gpu --live-references`` on the CPU: the variant's filter, the GPU protocol on a
simulated GPU whose clock moves only by the runs it is given, and the scoring with hand-worked figures."""

import gzip
import json
import math

import numpy as np
import pandas as pd
import pytest
from collect_fakes import SimulatedCollector
from hypothesis import given
from hypothesis import strategies as st

from kbench.collect.measure.cudnn.candidates import NOTE_NAMES, default_set, pytorch_default_mask
from kbench.core.errors import KbenchInputError
from kbench.gpu_check.command import make_record, read_live
from kbench.gpu_check.plan import LIVE_REFERENCES, PYTORCH_OP_UNIT, interleave, live_block, live_filter, problem_rng
from kbench.gpu_check.score import live_figures
from kbench.gpu_check.timing import _time_problem
from kbench.scoring.records import VerificationRecord


# -- the variant's filter --------------------------------------------------------------
@given(notes=st.sets(st.sampled_from(NOTE_NAMES)), dtype=st.sampled_from(["FP16", "BF16", "FP32"]))
def test_live_filter_keeps_what_the_variants_candidate_set_keeps(notes, dtype):
    """A plan survives the live filter exactly when the variant's table rule keeps it (a correct,
    full-FP32-precise plan of known notes): the live references choose among the table's set."""
    kept = lambda variant: not (notes & set(live_filter(variant, dtype)["deselect"]))  # noqa: E731
    table = pd.DataFrame({"numeric_notes": [";".join(sorted(notes))]})
    assert kept("pytorch") == bool(pytorch_default_mask(table).iloc[0])
    plan = {"numeric_notes": ";".join(sorted(notes)), "precision": "fp32"}
    assert kept("default") == default_set(plan, dtype, notes_reliable=True)


def test_live_filter_flags_and_errors():
    assert live_filter("pytorch", "FP32") == {"deselect": ["DOWN_CONVERT_INPUTS"], "allow_tf32": True}
    assert live_filter("default", "FP32")["allow_tf32"] is False  # PyTorch's strict-FP32 switch
    assert live_filter("default", "BF16") == {"deselect": ["REDUCED_PRECISION_REDUCTION"], "allow_tf32": True}
    with pytest.raises(KbenchInputError, match="tf32.*known: default, pytorch"):
        live_filter("tf32", "FP32")
    block = live_block("pytorch", ["FP32", "FP16", "FP32"])
    assert block["references"] == list(LIVE_REFERENCES) and sorted(block["filters"]) == ["FP16", "FP32"]


# -- one problem on the simulated GPU -----------------------------------------------------
MS = {"a": 1.0, "b": 0.5, "c": 30.0, "q": 0.25, "torch": 0.75, "dc": 0.1}


def _collector():
    # mode A's filtered list: "dc" (down-converts: deselected), "x" (does not build), then "q", a plan
    # no unfiltered list holds; mode B's: "b", a table plan
    return SimulatedCollector(MS, ["c", "b", "a"], live_lists={
        "a": [("dc", ("DOWN_CONVERT_INPUTS",), True), ("x", (), False), ("q", ("TENSOR_CORE",), True)],
        "b": [("b", (), True), ("a", (), True)]})


GEOMETRY = {k: 1 for k in ("stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w", "groups")}
ITEM = {"problem_id": "p", "problem": {"dtype": "FP32", "direction": "F", **GEOMETRY}, "plans": ["a", "b", "c"],
        "order": [["b", "a", "c"], ["c", "b", "a"]]}


def test_live_references_join_the_rounds_and_run_from_their_own_graph():
    col = _collector()
    rows, fields = _time_problem(col, ITEM, replays=3, seed=7, live=live_block("pytorch", ["FP32"]))
    # mode A: dc deselected, x fails to build, q is the first that builds; mode B: b, a table plan's unit
    assert fields == {"live": {"live_mode_a": "q", "live_mode_b": "b", "pytorch_op": PYTORCH_OP_UNIT}}
    timed = [r for r in rows if r["kind"] == "time"]
    units = ["a", "b", "c", "q", PYTORCH_OP_UNIT]  # b is timed once, for its role and for mode B
    expected_order = interleave(units, 2, problem_rng(7, "p"))
    assert [[r["plan"] for r in timed if r["round"] == k] for k in (0, 1)] == expected_order
    # the simulated clock moves by exactly each run's time (binary-exact values): each unit's time is its own
    assert {r["plan"]: r["ms"] for r in timed} == {"a": 1.0, "b": 0.5, "c": 30.0, "q": 0.25, PYTORCH_OP_UNIT: 0.75}
    # k from the warm run, as the collector picks it (ceil(0.5 ms / t), at most 100); c is slow: single runs
    assert {r["plan"]: (r["k"], r["method"]) for r in timed} == {
        "a": (1, "graph"), "b": (1, "graph"), "c": (1, "single"), "q": (2, "graph"), PYTORCH_OP_UNIT: (1, "graph")}
    eager = {r["plan"]: r["ms"] for r in rows if r["kind"] == "eager"}
    assert eager == {"a": 1.0, "b": 0.5, "c": 30.0, "q": 0.25, PYTORCH_OP_UNIT: 0.75}


def test_pytorchs_op_runs_with_the_variants_tf32_flag_and_the_flag_is_put_back():
    for variant, flag in (("default", False), ("pytorch", True)):
        col = _collector()
        col.live_lists["a"] = [("a", (), True)]
        _time_problem(col, ITEM, replays=1, live=live_block(variant, ["FP32"]))
        assert set(col.tf32_at_torch_runs) == {flag}  # the warm-up, the captures and the eager runs
        assert col.torch.backends.cudnn.allow_tf32 is True and col.torch.backends.cudnn.benchmark is False
        assert col.gpu.empty_cache_calls >= 1  # the captures' memory pools go back after the problem


def test_a_mode_with_no_plan_that_builds_fails_the_problem_with_the_reason():
    col = _collector()
    col.live_lists["a"] = [("dc", ("DOWN_CONVERT_INPUTS",), True)]
    with pytest.raises(RuntimeError, match="live mode A: none of 1 plans built with DOWN_CONVERT_INPUTS deselected"):
        _time_problem(col, ITEM, replays=1, live=live_block("pytorch", ["FP32"]))


# -- scoring ------------------------------------------------------------------------------
def _live_run(tmp_path, picks_b="b"):
    """Three problems; per problem the choice c1, oracle o1, the table's mode-A plan a1, live picks."""
    problems = []
    for pid, d in (("p1", "F"), ("p2", "F"), ("p3", "W")):
        problems.append({"problem_id": pid, "problem": {"direction": d, "dtype": "FP16"},
                         "roles": {"choice": "c1", "mode_a": "a1", "oracle": "o1"},
                         "table_ms": {"c1": 1.0, "a1": 2.0, "o1": 0.5}, "plans": ["c1", "a1", "o1"], "order": []})
    plan = {"format": 1, "seed": 0, "rounds": 1, "replays": 1, "problems": problems,
            "dataset": {"name": "h200-pytorch", "version": "1.5.0", "checksum": "x"}, "split": "random",
            "part": "test", "method": "m", "predictions": {"path": None, "sha256": None, "rows": 3},
            "live": live_block("pytorch", ["FP16"])}
    # measured ms: choice 1 everywhere; table mode A 2, 8, 4 (speed-ups 2, 8, 4: geomean 4);
    # live A = table A's plan; live B "b" 1, 4, 2 (geomean 2); PyTorch's op 2.2 x choice; oracle 0.5
    ms = {"p1": {"c1": 1.0, "a1": 2.0, "o1": 0.5, "b": 1.0, PYTORCH_OP_UNIT: 2.2},
          "p2": {"c1": 1.0, "a1": 8.0, "o1": 0.5, "b": 4.0, PYTORCH_OP_UNIT: 2.2},
          "p3": {"c1": 1.0, "a1": 4.0, "o1": 0.5, "b": 2.0, PYTORCH_OP_UNIT: 2.2}}
    lines = [{"kind": "run", "env": {"gpu": "SIMULATED"}}]
    for pid, units in ms.items():
        lines += [{"kind": "time", "problem_id": pid, "plan": u, "round": 0, "slot": 0, "ms": v, "k": 1,
                   "method": "graph"} for u, v in units.items()]
        # eager: the table's plans 10% slower than the table, except p3's choice (2x: over 1.5x)
        lines += [{"kind": "eager", "problem_id": pid, "plan": u, "k": 1,
                   "ms": t * (2.0 if (pid, u) == ("p3", "c1") else 1.1)} for u, t in problems[0]["table_ms"].items()]
        lines.append({"kind": "problem", "problem_id": pid, "status": "ok",
                      "live": {"live_mode_a": "a1", "live_mode_b": picks_b, "pytorch_op": PYTORCH_OP_UNIT}})
    lines.append({"kind": "problem", "problem_id": "p4", "status": "failed", "error": "boom"})
    (tmp_path / "raw.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n{\"kind\": \"ti")
    return plan


def test_live_figures_hand_worked(tmp_path):
    plan = _live_run(tmp_path)
    rec = make_record(plan, tmp_path)
    live = rec.live
    assert rec.schema_version == 2 and live.variant == "pytorch" and live.problems == 3
    refs = live.references
    assert refs["table_mode_a"].speedup_geomean == pytest.approx(4.0)      # (2 * 8 * 4) ** (1/3)
    assert refs["live_mode_a"].speedup_geomean == pytest.approx(4.0)       # the same plan
    assert refs["live_mode_b"].speedup_geomean == pytest.approx(2.0)       # (1 * 4 * 2) ** (1/3)
    assert refs["pytorch_op"].speedup_geomean == pytest.approx(2.2)
    assert live.strongest_reference == "live_mode_b"
    # headroom over mode B: oracle 0.5 against 1, 4, 2 -> geomean 4; closed log 2 / log 4 = 0.5
    assert refs["live_mode_b"].oracle_speedup_geomean == pytest.approx(4.0)
    assert refs["live_mode_b"].headroom_closed == pytest.approx(0.5)
    # p1's choice ties mode B (1.0 vs 1.0): neither faster nor slower; p2, p3 faster
    assert refs["live_mode_b"].choice_faster_share == pytest.approx(2 / 3)
    assert refs["live_mode_b"].choice_slower_share == 0.0
    assert refs["live_mode_a"].same_plan_as_table_mode_a == 1.0
    assert refs["live_mode_b"].same_plan_as_table_mode_a == 0.0
    assert refs["pytorch_op"].same_plan_as_table_mode_a is None
    # a constant ratio has a zero-width bootstrap interval; the others contain their geomean
    assert refs["pytorch_op"].speedup_ci95 == pytest.approx((2.2, 2.2))
    low, high = refs["live_mode_b"].speedup_ci95
    assert 1.0 <= low <= 2.0 <= high <= 4.0
    assert live.by_direction["W"]["live_mode_b"] == pytest.approx(2.0)
    assert live.by_direction["F"]["table_mode_a"] == pytest.approx(4.0)     # sqrt(2 * 8)
    graph, eager = live.agreement
    # graph: p1 and p3 match the table (0), p2's mode-A plan is 4x the table's 2 ms: ln 4
    assert (graph.timing, graph.plans, graph.over_1_5x) == ("graph", 9, 2)  # p2's a1 (4x), p3's a1 (2x)
    assert graph.median_abs_log_ratio == pytest.approx(0.0)
    assert (eager.plans, eager.over_1_5x) == (9, 1)
    assert eager.median_abs_log_ratio == pytest.approx(math.log(1.1))
    assert rec.problems_failed == {"p4": "boom"}


def test_live_record_round_trip_and_old_records_stay_schema_1(tmp_path):
    plan = _live_run(tmp_path)
    rec = make_record(plan, tmp_path)
    doc = json.loads(rec.model_dump_json())
    assert doc["schema_version"] == 2 and VerificationRecord.model_validate(doc) == rec
    old = make_record({k: v for k, v in plan.items() if k != "live"}, tmp_path)
    doc = json.loads(old.model_dump_json())
    assert doc["schema_version"] == 1 and "live" not in doc


def test_read_live_takes_finished_problems_and_gzip(tmp_path):
    _live_run(tmp_path)
    picks, eager = read_live(tmp_path / "raw.jsonl")
    assert picks["problem_id"].tolist() == ["p1", "p2", "p3"] and len(eager) == 9
    gz = tmp_path / "raw.jsonl.gz"
    gz.write_bytes(gzip.compress((tmp_path / "raw.jsonl").read_bytes()))
    picks_gz, eager_gz = read_live(gz)
    pd.testing.assert_frame_equal(picks, picks_gz)
    pd.testing.assert_frame_equal(eager, eager_gz)


def test_live_figures_need_timed_problems(tmp_path):
    plan = _live_run(tmp_path)
    empty = pd.DataFrame(columns=["problem_id", *LIVE_REFERENCES])
    with pytest.raises(KbenchInputError, match="every live reference"):
        live_figures(plan, pd.DataFrame({"problem_id": [], "plan": [], "ms": []}), empty,
                     pd.DataFrame(columns=["problem_id", "plan", "ms"]))
    assert np.isfinite(make_record(plan, tmp_path).live.references["live_mode_b"].speedup_ci95[0])


def test_a_run_brought_back_gzipped_scores_the_same(tmp_path):
    plan = _live_run(tmp_path)
    plain = make_record(plan, tmp_path)
    raw = tmp_path / "raw.jsonl"
    (tmp_path / "raw.jsonl.gz").write_bytes(gzip.compress(raw.read_bytes()))
    raw.unlink()  # as run_on_device.sh's verify mode brings it back
    assert make_record(plan, tmp_path).model_dump(exclude={"date"}) == plain.model_dump(exclude={"date"})


def test_no_autotune_pass_plans_the_live_references_without_it(tmp_path, capsys):
    from pathlib import Path

    from kbench.cli import main
    preds = Path(__file__).resolve().parents[2] / "leaderboard" / "h200-3d" / "networks" / "xgboost-plans-safe" / \
        "preds.parquet"
    out = tmp_path / "o"
    assert main(["verify-on-gpu", str(preds), "--dataset", "h200-3d", "--split", "networks", "--out", str(out),
                 "--plan-only", "--live-references", "--no-autotune-pass"]) == 0
    live = json.loads((out / "plan.json").read_text())["live"]
    assert live["variant"] == "default" and "autotune" not in live
    capsys.readouterr()
    # without --live-references there is no pass to leave out: one message, exit 2, nothing written
    assert main(["verify-on-gpu", str(preds), "--dataset", "h200-3d", "--split", "networks",
                 "--out", str(tmp_path / "p"), "--plan-only", "--no-autotune-pass"]) == 2
    assert "--no-autotune-pass" in capsys.readouterr().err and not (tmp_path / "p").exists()

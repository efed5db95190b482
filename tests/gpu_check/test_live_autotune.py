"""PyTorch's real autotune as a live reference (``verify-on-gpu --live-references``) on the CPU: the pass in
a process of its own on a simulated GPU whose clock moves only by the runs it is given, its launch after
the main pass, and the scoring with hand-worked figures."""

import json
import math
import sys

import pytest
from collect_fakes import SimulatedCollector
from test_live_references import GEOMETRY, _live_run

from kbench.collect.measure.cudnn.protocol import FatalCudaError
from kbench.gpu_check import autotune_pass, timing
from kbench.gpu_check.command import make_record
from kbench.gpu_check.plan import PYTORCH_AUTOTUNE_UNIT, RAW_AUTOTUNE, interleave, live_block, problem_rng
from kbench.gpu_check.timing import run_timing
from kbench.scoring.records import VerificationRecord

# the choice a (1 ms), the oracle b (0.5 ms); PyTorch's op 0.75 ms without autotune, 0.25 ms with it, after
# 12 ms of tuning on its first call
MS = {"a": 1.0, "b": 0.5, "c": 30.0, "torch": 0.75, "torch_autotune": 0.25, "tuning": 12.0}
ITEM = {
    "problem_id": "p",
    "problem": {"key": "p", "dtype": "FP32", "direction": "F", **GEOMETRY},
    "roles": {"choice": "a", "mode_a": "c", "oracle": "b"},
    "plans": ["a", "c", "b"],
    "order": [["a", "c", "b"], ["b", "a", "c"]],
}


def test_the_pass_tunes_on_the_first_call_then_times_the_op_beside_the_choice_and_the_oracle():
    col = SimulatedCollector(MS, ["c", "b", "a"])
    rows, fields = autotune_pass.time_problem(col, ITEM, replays=3, seed=7, live=live_block("default", ["FP32"], True))
    # the host clock: the first call is the tuning (12) and one run (0.25), the second the cached plan
    assert fields == {"autotune": {"first_call_ms": 12.25, "second_call_ms": 0.25}}
    # the choice, the oracle and the op, each once per round in the problem's seeded order (mode A is not timed)
    units = ["a", "b", PYTORCH_AUTOTUNE_UNIT]
    assert [[r["plan"] for r in rows if r["round"] == k] for k in (0, 1)] == interleave(units, 2, problem_rng(7, "p"))
    assert {r["plan"]: r["ms"] for r in rows} == {"a": 1.0, "b": 0.5, PYTORCH_AUTOTUNE_UNIT: 0.25}
    # every call of the op with benchmark on; the default variant's FP32 without TF32, the flag put back after
    assert set(col.benchmark_at_torch_runs) == {True} and set(col.tf32_at_torch_runs) == {False}
    assert col.torch.backends.cudnn.allow_tf32 is True and col.gpu.empty_cache_calls >= 1


def test_the_pass_resumes_and_writes_its_own_raw_file(tmp_path):
    plan = {
        "seed": 7,
        "replays": 1,
        "live": live_block("pytorch", ["FP32"], True),
        "problems": [ITEM, {**ITEM, "problem_id": "q", "problem": {**ITEM["problem"], "key": "q"}}],
    }
    first = autotune_pass.run_pass(
        plan, tmp_path, time_budget_s=-1.0, make_collector=lambda: SimulatedCollector(MS, ["c", "b", "a"])
    )
    assert first["ok"] == 0 and first["left"] == 2
    summary = autotune_pass.run_pass(plan, tmp_path, make_collector=lambda: SimulatedCollector(MS, ["c", "b", "a"]))
    assert summary["ok"] == 2 and summary["left"] == 0 and not (tmp_path / "raw.jsonl").exists()
    lines = [json.loads(x) for x in (tmp_path / RAW_AUTOTUNE).read_text().splitlines()]
    done = [x for x in lines if x["kind"] == "problem"]
    assert [x["problem_id"] for x in done] == ["p", "q"] and done[0]["autotune"]["first_call_ms"] == 12.25
    assert (
        autotune_pass.run_pass(plan, tmp_path, make_collector=lambda: SimulatedCollector(MS, ["c", "b", "a"]))["ok"]
        == 0
    )  # all done


def test_the_timing_step_launches_the_pass_after_the_main_pass_with_the_budget_left(tmp_path):
    plan = {"seed": 7, "replays": 1, "live": live_block("pytorch", ["FP32"], True), "problems": [ITEM]}
    seen = []

    def launch(out_dir, left):
        # the main pass is over: its problem line is written before the pass starts
        seen.append((out_dir, left, "problem" in (tmp_path / "raw.jsonl").read_text()))
        return {"ok": 1}

    def collector():  # live mode A picks c, mode B b: table plans
        return SimulatedCollector(MS, ["c", "b", "a"], live_lists={"a": [("c", (), True)], "b": [("b", (), True)]})

    summary = run_timing(plan, tmp_path, time_budget_s=600.0, make_collector=collector, launch=launch)
    assert summary["autotune"] == {"ok": 1} and seen[0][0] == tmp_path and 0 < seen[0][1] <= 600.0 and seen[0][2]
    # with problems left in the main pass the pass waits for a later run
    plan2 = {**plan, "problems": [{**ITEM, "problem_id": "q"}]}
    summary = run_timing(plan2, tmp_path / "b", time_budget_s=-1.0, make_collector=collector, launch=launch)
    assert "skipped" in summary["autotune"] and len(seen) == 1
    # a plan made before the pass existed has none
    old = {**plan, "live": live_block("pytorch", ["FP32"])}
    assert "autotune" not in run_timing(old, tmp_path / "c", make_collector=collector, launch=launch) and len(seen) == 1


def test_launch_runs_a_new_python_process_and_passes_on_a_fatal_cuda_error(tmp_path, monkeypatch):
    calls = []

    def fake_run(cmd, capture_output, text, rc=0):
        calls.append(cmd)
        return type("Done", (), {"returncode": fake_run.rc, "stdout": 'x\n{"ok": 3, "failed": 0}\n', "stderr": ""})()

    fake_run.rc = 0
    monkeypatch.setattr(timing.subprocess, "run", fake_run)
    assert timing.launch_autotune_pass(tmp_path, 99.6) == {"ok": 3, "failed": 0}
    assert calls[0] == [
        sys.executable,
        "-m",
        "kbench.gpu_check.autotune_pass",
        "--out",
        str(tmp_path),
        "--time-budget",
        "100",
    ]
    fake_run.rc = 3
    with pytest.raises(FatalCudaError, match="autotune pass lost its CUDA context"):
        timing.launch_autotune_pass(tmp_path)


def test_the_pass_refuses_a_plan_without_it(tmp_path, capsys):
    assert autotune_pass.main(["--out", str(tmp_path)]) == 2 and "no run plan" in capsys.readouterr().err
    (tmp_path / "plan.json").write_text(json.dumps({"problems": [], "live": live_block("pytorch", ["FP16"])}))
    assert autotune_pass.main(["--out", str(tmp_path)]) == 2
    assert "has no autotune pass" in capsys.readouterr().err


# -- scoring ------------------------------------------------------------------------------
def _autotune_rows(tmp_path, ms: dict):
    """The autotune pass's raw file: per problem the choice c1 (1 ms), the oracle o1 (0.5 ms) and the op."""
    lines = [{"kind": "run", "env": {"gpu": "SIMULATED"}}]
    for pid, (op_ms, first, second) in ms.items():
        lines += [
            {"kind": "time", "problem_id": pid, "plan": u, "round": 0, "slot": 0, "ms": v, "k": 1, "method": "graph"}
            for u, v in (("c1", 1.0), ("o1", 0.5), (PYTORCH_AUTOTUNE_UNIT, op_ms))
        ]
        lines.append(
            {
                "kind": "problem",
                "problem_id": pid,
                "status": "ok",
                "autotune": {"first_call_ms": first, "second_call_ms": second},
            }
        )
    lines.append({"kind": "run_end", "seconds": 4.0, "ok": len(ms), "failed": 0})
    (tmp_path / RAW_AUTOTUNE).write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def _plan_with_autotune(tmp_path):
    plan = _live_run(tmp_path)  # p1, p2 F and p3 W: live mode B 1, 4, 2 ms against the choice's 1 ms
    plan["live"] = live_block("pytorch", ["FP16"], autotune=True)
    return plan


def test_pytorch_autotune_figures_hand_worked(tmp_path):
    plan = _plan_with_autotune(tmp_path)
    # the op under autotune 1.5, 3, 6 ms against the choice's 1 ms: speed-ups 1.5, 3, 6 (geomean 3); its
    # tuning: first call less second, 10, 20, 30 ms
    _autotune_rows(tmp_path, {"p1": (1.5, 10.5, 0.5), "p2": (3.0, 20.5, 0.5), "p3": (6.0, 30.5, 0.5)})
    rec = make_record(plan, tmp_path)
    auto = rec.live.references["pytorch_autotune"]
    assert auto.problems == 3 and auto.speedup_geomean == pytest.approx(3.0)
    assert auto.oracle_speedup_geomean == pytest.approx(6.0)  # 3, 6, 12 over the oracle's 0.5
    assert auto.headroom_closed == pytest.approx(math.log(3) / math.log(6))
    assert (auto.first_call_cost_ms, auto.first_call_cost_median_ms) == (60.0, 20.0)
    assert auto.choice_faster_share == 1.0 and auto.same_plan_as_table_mode_a is None
    assert rec.live.by_direction["F"]["pytorch_autotune"] == pytest.approx(4.5**0.5)
    assert rec.live.by_direction["W"]["pytorch_autotune"] == pytest.approx(6.0)
    assert rec.live.strongest_reference == "live_mode_b"  # 2.0 < 3.0
    assert set(rec.inputs) == {"raw.jsonl", RAW_AUTOTUNE}  # (the plan came as a dict, no file)
    assert rec.device_time_s == 4.0  # the pass's run; the main pass's raw file records none
    doc = json.loads(rec.model_dump_json())
    assert VerificationRecord.model_validate(doc) == rec


def test_the_real_autotune_is_the_strongest_only_over_every_problem(tmp_path):
    plan = _plan_with_autotune(tmp_path)
    # 1.1x over the choice, below live mode B's 2.0: but timed on p1 and p2 only
    _autotune_rows(tmp_path, {"p1": (1.1, 2.0, 1.0), "p2": (1.1, 2.0, 1.0)})
    live = make_record(plan, tmp_path).live
    assert live.references["pytorch_autotune"].problems == 2 and live.strongest_reference == "live_mode_b"
    _autotune_rows(tmp_path, {"p1": (1.1, 2.0, 1.0), "p2": (1.1, 2.0, 1.0), "p3": (1.1, 2.0, 1.0)})
    assert make_record(plan, tmp_path).live.strongest_reference == "pytorch_autotune"


def test_a_plan_without_the_pass_scores_as_before(tmp_path):
    plan = _live_run(tmp_path)
    before = make_record(plan, tmp_path)
    _autotune_rows(tmp_path, {"p1": (1.5, 10.5, 0.5)})  # a stray file: the plan never asked for it
    after = make_record(plan, tmp_path)
    assert "pytorch_autotune" not in after.live.references
    assert after.model_dump(exclude={"date"}) == before.model_dump(exclude={"date"})
    assert set(after.inputs) == {"raw.jsonl"}

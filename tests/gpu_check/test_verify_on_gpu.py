"""``kbench verify-on-gpu`` on the CPU: the run plan, the interleaving, the scoring and the record.

The scoring fixture ``fixtures/verify_h100_shipped.json`` could not be recorded
from a real GPU run (no GPU in this session). It is built from real shipped
h100 runtimes instead: three test problems of the ``random`` split, the plans
cuDNN mode B's first choice (``choice``), mode A's first plan and the oracle,
and as the three "rounds" of each plan the collector's own recorded spread of
that plan (``time_min_ms``, ``time_q1_ms``, ``time_q3_ms``), so the measured
time of a plan (median over rounds) is its q1 and the table time its
``time_ms``. Swap in a real ``raw.jsonl`` once one exists.
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbench.core.errors import KbenchInputError
from kbench.gpu_check.command import make_record, read_raw
from kbench.gpu_check.plan import build_plan, interleave, problem_rng, role_plans
from kbench.gpu_check.score import score
from kbench.scoring.records import VerificationRecord

FIXTURE = Path(__file__).parent / "fixtures" / "verify_h100_shipped.json"
P_F = "1024-28-28-1x1-2048-28-28-64-0x0-1x1-1x1-0-NCHW-FP16-F"
P_W = "121-9-9-5x5-48-22-22-16-0x0-2x2-1x1-0-NHWC-NHWC-NHWC-FP32-W"
P_B = "1024-14-14-1x1-256-14-14-128-0x0-1x1-1x1-0-NCHW-BF16-B"
# measured (q1) and table (time_ms) times of the fixture, copied from h100's runtimes table
Q1 = {P_F: {"a": 0.5885199904441833, "c": 0.31032799929380417, "o": 0.30896399915218353},
      P_W: {"a": 0.033134400844573975, "c": 0.028575999041398365, "o": 0.028575999041398365},
      P_B: {"a": 0.07375733181834221, "c": 0.07375733181834221, "o": 0.07327200046607427}}
TABLE = {P_F: {"a": 0.593280017375946, "c": 0.31196799874305725, "o": 0.3095040023326874},
         P_W: {"a": 0.03317119926214218, "c": 0.02859733377893766, "o": 0.02859733377893766},
         P_B: {"a": 0.07383999973535538, "c": 0.07383999973535538, "o": 0.07336685912949698}}


@pytest.fixture(scope="module")
def fixture():
    doc = json.loads(FIXTURE.read_text())
    return doc["plan"], doc["raw"]


# -- interleaving -----------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(plans=st.lists(st.text("abcdef", min_size=1, max_size=4), min_size=1, max_size=3, unique=True),
       rounds=st.integers(1, 7), seed=st.integers(0, 2**31), pid=st.text(min_size=1, max_size=20))
def test_interleave_every_plan_once_per_round_and_deterministic(plans, rounds, seed, pid):
    order = interleave(plans, rounds, problem_rng(seed, pid))
    assert len(order) == rounds
    for r in order:
        assert sorted(r) == sorted(plans)  # every plan exactly once per round
    assert order == interleave(plans, rounds, problem_rng(seed, pid))  # same seed and problem: same order


def test_interleave_rounds_are_shuffled():
    # with 3 plans and 20 rounds, a fixed order in every round would have probability 6^-19
    order = interleave(["x", "y", "z"], 20, problem_rng(0, "p"))
    assert len({tuple(r) for r in order}) > 1


def test_interleave_rejects_no_rounds():
    with pytest.raises(KbenchInputError, match="rounds"):
        interleave(["a"], 0, problem_rng(0, "p"))


def _toy():
    """2 problems, plans named a/b/c with known times; mode A order c, a, b (p1) and b (p2)."""
    runtimes = pd.DataFrame({"problem_id": ["p1", "p1", "p1", "p2", "p2"],
                             "kernel": ["a", "b", "c", "a", "b"],
                             "time_ms": [2.0, 1.0, 4.0, 3.0, 6.0]})
    heur = pd.DataFrame({"problem_id": ["p1", "p1", "p1", "p2", "p2"],
                         "heuristic": ["cudnn_mode_a"] * 5, "rank": [0, 1, 2, 1, 0],
                         "kernel": ["c", "a", "b", "a", "b"]})
    problems = pd.DataFrame({"problem_id": ["p1", "p2"], "direction": ["F", "W"], "dtype": ["FP16", "FP32"],
                             "layout": ["NHWC-NHWC-NHWC", "NCHW"],
                             "layout_x": ["NHWC", "NCHW"], **{c: [1, 1] for c in (
                                 "n", "c", "k", "groups", "x_h", "x_w", "y_h", "y_w", "fil_h", "fil_w", "pad_h",
                                 "pad_w", "stride_h", "stride_w", "dil_h", "dil_w")}})
    return runtimes, heur, problems


def test_role_plans_hand_worked():
    runtimes, heur, _ = _toy()
    # p1: "z" is not a measured plan, so the choice is "a"; p2 picks "b" (mode A's first too)
    preds = pd.DataFrame({"problem_id": ["p2", "p1"], "ranking": ["b;a", "z;a;b"]})
    r = role_plans(preds, runtimes, heur, ["p1", "p2"]).set_index("problem_id")
    assert r.loc["p1", ["choice", "mode_a", "oracle"]].tolist() == ["a", "c", "b"]
    assert r.loc["p2", ["choice", "mode_a", "oracle"]].tolist() == ["b", "b", "a"]
    assert r.loc["p1", ["t_choice", "t_mode_a", "t_oracle"]].tolist() == [2.0, 4.0, 1.0]
    assert r.loc["p2", ["t_choice", "t_mode_a", "t_oracle"]].tolist() == [6.0, 6.0, 3.0]


def test_role_plans_errors():
    runtimes, heur, _ = _toy()
    with pytest.raises(KbenchInputError, match="no prediction"):
        role_plans(pd.DataFrame({"problem_id": ["p1"], "ranking": ["a"]}), runtimes, heur, ["p1", "p2"])



def test_role_plans_follow_the_scoring_rules_for_failures_and_missing_references():
    runtimes, heur, _ = _toy()
    # p1's ranking holds no measured plan: a failure, timed (as scoring times it) at p1's slowest plan
    r = role_plans(pd.DataFrame({"problem_id": ["p1", "p2"], "ranking": ["z", "a"]}), runtimes, heur, ["p1", "p2"])
    slowest = "c"  # p1's plans: a 2.0, b 1.0, c 4.0 ms
    assert r.set_index("problem_id").loc["p1", "choice"] == slowest
    # mode A proposing only unmeasured plans is a failure too; proposing nothing leaves the problem out
    unmeasured = heur.assign(kernel=np.where(heur["problem_id"] == "p1", "z", heur["kernel"]))
    r = role_plans(pd.DataFrame({"problem_id": ["p1", "p2"], "ranking": ["a", "a"]}), runtimes, unmeasured,
                   ["p1", "p2"])
    assert r.set_index("problem_id").loc["p1", "mode_a"] == slowest and r.attrs["no_reference"] == []
    r = role_plans(pd.DataFrame({"problem_id": ["p1", "p2"], "ranking": ["a", "a"]}), runtimes,
                   heur[heur["problem_id"] != "p1"], ["p1", "p2"])
    assert r["problem_id"].tolist() == ["p2"] and r.attrs["no_reference"] == ["p1"]


def test_build_plan_dedupes_and_is_deterministic():
    runtimes, heur, problems = _toy()
    preds = pd.DataFrame({"problem_id": ["p1", "p2"], "ranking": ["a", "b"]})
    roles = role_plans(preds, runtimes, heur, ["p1", "p2"])
    plan = build_plan(roles, problems, rounds=4, replays=3, seed=5)
    assert plan == build_plan(roles, problems, rounds=4, replays=3, seed=5)
    by_id = {p["problem_id"]: p for p in plan["problems"]}
    assert by_id["p1"]["plans"] == ["a", "c", "b"]        # three distinct roles
    assert by_id["p2"]["plans"] == ["b", "a"]             # choice == mode A: timed once
    assert all(sorted(r) == ["a", "b"] for r in by_id["p2"]["order"]) and len(by_id["p2"]["order"]) == 4
    assert by_id["p1"]["table_ms"] == {"a": 2.0, "c": 4.0, "b": 1.0}
    assert by_id["p1"]["problem"]["direction"] == "F" and by_id["p1"]["problem"]["key"] == "p1"
    assert by_id["p1"]["problem"]["layout"] == "NHWC"  # the collector's one-name layout
    # a problem's order depends on the seed and its id only, not on the other problems
    alone = build_plan(roles[roles["problem_id"] == "p1"], problems, rounds=4, replays=3, seed=5)
    assert alone["problems"][0]["order"] == by_id["p1"]["order"]


# -- scoring ------------------------------------------------------------------------
def test_score_fixture_hand_checked(fixture):
    plan, raw = fixture
    measured, table, n = score(plan, pd.DataFrame([r for r in raw if r["kind"] == "time"]))
    assert n == 3
    q, t = Q1, TABLE
    # speed-up over mode A: geomean of t_a / t_choice (P_B picks mode A's plan: exactly 1)
    exp_m = (q[P_F]["a"] / q[P_F]["c"] * q[P_W]["a"] / q[P_W]["c"] * 1.0) ** (1 / 3)
    exp_t = (t[P_F]["a"] / t[P_F]["c"] * t[P_W]["a"] / t[P_W]["c"] * 1.0) ** (1 / 3)
    assert measured.overall.speedup_geomean == pytest.approx(exp_m, rel=1e-12)
    assert table.overall.speedup_geomean == pytest.approx(exp_t, rel=1e-12)
    # by hand: 0.58852/0.31033 = 1.8964, 0.033134/0.028576 = 1.1595; 1.8964 * 1.1595 = 2.1989,
    # and 1.3004^3 = 2.1990: the cube root is 1.3004
    assert measured.overall.speedup_geomean == pytest.approx(1.3004, abs=1e-4)
    oracle_m = (q[P_F]["a"] / q[P_F]["o"] * q[P_W]["a"] / q[P_W]["o"] * q[P_B]["a"] / q[P_B]["o"]) ** (1 / 3)
    assert measured.overall.oracle_speedup_geomean == pytest.approx(oracle_m, rel=1e-12)
    total = sum(q[p]["a"] for p in q) / sum(q[p]["c"] for p in q)
    assert measured.overall.speedup_total == pytest.approx(total, rel=1e-12)
    assert measured.overall.choice_is_mode_a == pytest.approx(1 / 3)
    # per direction: one problem each
    assert measured.by_direction["F"].speedup_geomean == pytest.approx(q[P_F]["a"] / q[P_F]["c"], rel=1e-12)
    assert measured.by_direction["W"].slowdown_vs_oracle_geomean == pytest.approx(1.0)
    assert measured.by_direction["B"].speedup_geomean == 1.0
    assert table.by_dtype["BF16"].oracle_speedup_geomean == pytest.approx(t[P_B]["a"] / t[P_B]["o"], rel=1e-12)
    assert set(measured.by_dtype) == {"FP16", "FP32", "BF16"}


def test_score_skips_problems_not_fully_measured(fixture):
    plan, raw = fixture
    rows = pd.DataFrame([r for r in raw if r["kind"] == "time" and not (r["problem_id"] == P_F
                                                                          and r["plan"] == plan["problems"][0]
                                                                          ["roles"]["oracle"])])
    _, _, n = score(plan, rows)
    by_id = {p["problem_id"]: p for p in plan["problems"]}
    assert n == (2 if by_id[P_F]["roles"]["oracle"] == plan["problems"][0]["roles"]["oracle"] else 3)
    with pytest.raises(KbenchInputError, match="run the timing first"):
        score(plan, pd.DataFrame(columns=["problem_id", "plan", "round", "ms"]))


# -- record ---------------------------------------------------------------------------
def _record(fixture, tmp_path) -> VerificationRecord:
    plan, raw = fixture
    plan = dict(plan, dataset={"name": "h100", "version": "1.0.0", "checksum": "x" * 64}, split="random",
                part="test", method="m", predictions={"path": "p.csv", "sha256": None, "rows": 3})
    lines = [json.dumps({"kind": "run", "env": {"gpu": "H100"}})] + [json.dumps(r) for r in raw]
    lines += [json.dumps({"kind": "problem", "problem_id": "gone", "status": "failed", "error": "boom"}),
              '{"kind": "time", "cut', json.dumps({"kind": "run_end", "seconds": 12.5})]
    (tmp_path / "raw.jsonl").write_text("\n".join(lines) + "\n")
    return make_record(plan, tmp_path)


def test_record_round_trip_and_schema(fixture, tmp_path):
    rec = _record(fixture, tmp_path)
    assert rec.problems_planned == 3 and rec.problems_measured == 3
    assert rec.problems_failed == {"gone": "boom"}     # a cut last line is ignored, failures are kept
    assert rec.device == {"gpu": "H100"} and rec.device_time_s == 12.5
    again = VerificationRecord.model_validate_json(rec.model_dump_json())
    assert again == rec
    schema = VerificationRecord.model_json_schema()
    assert {"measured", "table", "protocol", "problems_measured"} <= set(schema["required"])
    with pytest.raises(pydantic.ValidationError):
        VerificationRecord.model_validate({**json.loads(rec.model_dump_json()), "surprise": 1})
    # problems left out for want of a reference plan: listed when there are any, no key when none
    assert "problems_without_reference" not in json.loads(rec.model_dump_json())
    left_out = rec.model_copy(update={"problems_without_reference": ["q"]})
    assert json.loads(left_out.model_dump_json())["problems_without_reference"] == ["q"]
    assert VerificationRecord.model_validate_json(left_out.model_dump_json()) == left_out


def test_read_raw_ignores_cut_lines(tmp_path):
    (tmp_path / "raw.jsonl").write_text('{"kind": "time", "problem_id": "p", "plan": "a", "round": 0, '
                                        '"slot": 0, "ms": 1.5}\n{"kind": "ti')
    rows, failed, env, seconds = read_raw(tmp_path / "raw.jsonl")
    assert rows["ms"].tolist() == [1.5] and failed == {} and seconds == 0.0
    # the committed re-timings are gzipped: the same rows come back from the .gz file
    import gzip
    (tmp_path / "raw.jsonl.gz").write_bytes(gzip.compress((tmp_path / "raw.jsonl").read_bytes()))
    assert read_raw(tmp_path / "raw.jsonl.gz")[0].equals(rows)


def test_cli_plan_only_and_score_only(tmp_path):
    """The command end to end on the CPU: a plan from a predictions file, then a score from raw rows."""
    import kbench
    from kbench.cli import main
    ds = kbench.load("h100")
    test = ds.split("random")["test"]
    h = ds.heuristics
    h = h[(h["heuristic"] == "cudnn_mode_a") & h["problem_id"].isin(test)].sort_values(["problem_id", "rank"])
    preds = h.groupby("problem_id")["kernel"].agg(";".join).rename("ranking").reset_index()
    preds.to_csv(tmp_path / "p.csv", index=False)
    out = tmp_path / "run"
    assert main(["verify-on-gpu", str(tmp_path / "p.csv"), "--dataset", "h100", "--out", str(out),
                 "--plan-only", "--rounds", "2"]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert len(plan["problems"]) == len(test)
    # mode A's own ranking: the choice is mode A's plan on every problem
    assert all(p["roles"]["choice"] == p["roles"]["mode_a"] for p in plan["problems"])
    rows = [{"kind": "time", "problem_id": p["problem_id"], "plan": k, "round": 0, "slot": 0,
             "ms": p["table_ms"][k]} for p in plan["problems"] for k in p["plans"]]
    (out / "raw.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    assert main(["verify-on-gpu", "--out", str(out), "--score-only"]) == 0
    rec = VerificationRecord.model_validate_json((out / "verification.json").read_text())
    assert rec.measured.overall.speedup_geomean == 1.0 and rec.table.overall.speedup_geomean == 1.0
    # the table figures equal the evaluator's oracle speed-up over mode A on the same part
    ev = kbench.Evaluator(ds, split="random")
    best = ds.best[ds.best["problem_id"].isin(test)].drop_duplicates("problem_id")
    oracle = ev(best.rename(columns={"kernel": "ranking"})[["problem_id", "ranking"]].astype(str))
    assert rec.table.overall.oracle_speedup_geomean == pytest.approx(oracle.overall["speedup_geomean"], rel=1e-9)
    assert main(["verify-on-gpu", "--out", str(tmp_path / "nothing"), "--score-only"]) == 2
    assert np.isfinite(rec.measured.by_direction["W"].oracle_speedup_geomean)


# -- the timing loop, with a stand-in for the GPU collector ------------------------------
def test_time_problem_follows_the_interleaved_order():
    from collect_fakes import SimulatedCollector

    from kbench.gpu_check.timing import _time_problem
    col = SimulatedCollector({"a": 1.0, "b": 2.0, "c": 30.0, "z": 5.0}, ["c", "b", "a", "z"])
    item = {"problem_id": "p", "problem": {}, "plans": ["a", "b", "c"],
            "order": [["b", "a", "c"], ["c", "b", "a"]]}
    rows, fields = _time_problem(col, item, replays=3)
    assert fields == {}  # no live references asked
    assert [(r["round"], r["slot"], r["plan"]) for r in rows] == [
        (0, 0, "b"), (0, 1, "a"), (0, 2, "c"), (1, 0, "c"), (1, 1, "b"), (1, 2, "a")]
    assert {r["plan"]: r["ms"] for r in rows} == {"a": 1.0, "b": 2.0, "c": 30.0}
    # c (30 ms >= the collector's 20 ms slow-plan limit) is timed by single executions, not a graph
    assert {r["plan"]: r["method"] for r in rows} == {"a": "graph", "b": "graph", "c": "single"}
    assert col.workspace.numel() == 192  # the largest need of a, b, c (the simulated graph's 64 bytes x index)
    with pytest.raises(RuntimeError, match="did not propose q"):
        _time_problem(col, dict(item, plans=["a", "q"]), replays=1)


def test_run_timing_resumes_from_finished_problems(tmp_path):
    from kbench.gpu_check.timing import done_problems
    (tmp_path / "raw.jsonl").write_text('{"kind": "problem", "problem_id": "p1", "status": "ok"}\n'
                                        '{"kind": "time", "problem_id": "p2", "plan": "a", "ms": 1}\n'
                                        '{"kind": "problem", "problem_id": "p3", "status": "failed"}\n{"kin')
    assert done_problems(tmp_path / "raw.jsonl") == {"p1", "p3"}  # p2 was cut short: timed again


@pytest.mark.parametrize("command", ["verify-on-gpu", "verify-labels"])
def test_gpu_re_timing_refuses_a_dataset_the_cudnn_collector_did_not_measure(command, tmp_path, capsys):
    """mi100 is a MIOpen find-db (it has a heuristics table: the rules' choices): there is no cuDNN plan
    to re-time, so both commands stop with exit 2, one message naming the dataset, and write nothing."""
    from kbench.cli import main
    out = tmp_path / "run"
    if command == "verify-on-gpu":
        preds = tmp_path / "p.csv"
        preds.write_text("problem_id,ranking\n")
        argv = ["verify-on-gpu", str(preds), "--dataset", "mi100", "--out", str(out), "--plan-only"]
    else:
        argv = ["collect", "verify-labels", "--dataset", "mi100", "--out", str(out), "--plan-only"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "dataset 'mi100' was not measured by 'kbench collect cudnn' (MIOpen)" in err
    assert "h100" in err and "Traceback" not in err
    assert not out.exists()


def test_each_timing_command_refuses_the_other_ones_plan(tmp_path, capsys):
    """A verify-labels plan given to verify-on-gpu (or the reverse) is one message naming the right command,
    not a KeyError half-way through."""
    import kbench
    from kbench.cli import main
    from kbench.gpu_check import shipped_labels
    labels = tmp_path / "labels"
    shipped_labels.write_plan(shipped_labels.make_plan(kbench.load("h200"), limit=2), labels)
    assert main(["verify-on-gpu", "--out", str(labels), "--score-only"]) == 2
    assert "It is a label-verification plan: time it with 'kbench collect verify-labels" in capsys.readouterr().err
    ds = kbench.load("h100")
    test = ds.split("random")["test"]
    h = ds.heuristics
    h = h[(h["heuristic"] == "cudnn_mode_a") & h["problem_id"].isin(test)].sort_values(["problem_id", "rank"])
    h.groupby("problem_id")["kernel"].agg(";".join).rename("ranking").reset_index().to_csv(
        tmp_path / "p.csv", index=False)
    gpu = tmp_path / "gpu"
    assert main(["verify-on-gpu", str(tmp_path / "p.csv"), "--dataset", "h100", "--out", str(gpu),
                 "--plan-only"]) == 0
    with pytest.raises(KbenchInputError, match=r"not a label-verification plan.*It is a verify-on-gpu plan"):
        shipped_labels.read_plan(gpu)


def test_the_collector_without_cudnn_frontend_says_where_to_run(monkeypatch):
    """Without nvidia-cudnn-frontend (CI, a laptop) the GPU timing step is an input error that says how to
    split the work, not an internal error."""
    import builtins

    from kbench.collect.measure.cudnn import CudnnCollector
    real_import = builtins.__import__

    def no_cudnn(name, *args, **kwargs):
        if name == "cudnn":
            raise ModuleNotFoundError("No module named 'cudnn'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cudnn)
    with pytest.raises(KbenchInputError, match=r"needs nvidia-cudnn-frontend .*run_on_device.sh"):
        CudnnCollector()

import pandas as pd
import pytest

from kbench.collect.measure import cudnn


def test_timing_stats_hand_worked():
    st = cudnn.timing_stats([4.0, 1.0, 3.0, 2.0, float("nan")])
    # numpy's linear percentiles of 1,2,3,4: q1 = 1.75, median = 2.5, q3 = 3.25
    assert st == {"median": 2.5, "min": 1.0, "q1": 1.75, "q3": 3.25, "n": 4}
    assert cudnn.timing_stats([])["n"] == 0


def test_inner_count():
    assert cudnn.inner_count(0.01, target_ms=0.5) == 50
    assert cudnn.inner_count(0.001, target_ms=0.5, cap=100) == 100
    assert cudnn.inner_count(2.0, target_ms=0.5) == 1
    assert cudnn.inner_count(0.0) == 1 and cudnn.inner_count(float("nan")) == 1


def test_replays_and_priority():
    assert cudnn.replays_per_round(0.5) == cudnn.PRECISE_REPLAYS
    assert cudnn.replays_per_round(cudnn.PRECISE_ROUND_MS * 10) == 1
    assert cudnn.plan_priority({"rank_a": 2, "rank_b": 0}) == (0, 2)
    assert cudnn.plan_priority({"rank_a": -1, "rank_b": 3}) == (1, 3)
    assert cudnn.plan_priority({"rank_a": -1, "rank_b": -1, "rank_fallback": 1}) == (2, 1)


@pytest.mark.parametrize("msg, has", [
    ("Deselecting execution plan", False),  # texts as the frontend 1.32 wrote them (probe run)
    ("[cudnn_frontend] Error: Skipping plan since workspace violation. Requires 14599299", True),
    ("something else", None),
])
def test_classify_note_probe(msg, has):
    assert cudnn.classify_note_probe(msg) is has


def test_default_set():
    assert cudnn.default_set({"precision": "fp32", "numeric_notes": ""}, "FP32", True)
    assert not cudnn.default_set({"precision": "reduced", "numeric_notes": "TENSOR_CORE"}, "FP32", True)
    assert not cudnn.default_set({"precision": "fp32", "numeric_notes": "DOWN_CONVERT_INPUTS"}, "FP32", True)
    assert cudnn.default_set({"precision": "fp32", "numeric_notes": "TENSOR_CORE"}, "FP32", False)
    assert cudnn.default_set({"numeric_notes": "TENSOR_CORE"}, "FP16", True)
    assert not cudnn.default_set({"numeric_notes": "REDUCED_PRECISION_REDUCTION"}, "BF16", True)


def test_pytorch_default_mask():
    # PyTorch's filterEngineConfigs with allow_tf32=True, deterministic=False drops DOWN_CONVERT_INPUTS only;
    # unknown notes (None) are not shown to be kept
    cases = [("TENSOR_CORE", True), ("REDUCED_PRECISION_REDUCTION;TENSOR_CORE", True), ("NONDETERMINISTIC", True),
             ("", True), ("DOWN_CONVERT_INPUTS", False), ("DOWN_CONVERT_INPUTS;TENSOR_CORE", False),
             ("TENSOR_CORE;DOWN_CONVERT_INPUTS", False), ("NOT_DOWN_CONVERT_INPUTS_X", True), (None, False)]
    table = pd.DataFrame({"numeric_notes": [n for n, _ in cases]})
    assert cudnn.pytorch_default_mask(table).tolist() == [k for _, k in cases]


def test_kernel_segments_and_torch_match():
    names = ["nchwToNhwc", "convKernelA", "spin_kernel", "convKernelA", "spin_kernel", "convKernelB",
             "spin_kernel"]
    segs = cudnn.split_segments(names)
    assert segs == [["nchwToNhwc", "convKernelA"], ["convKernelA"], ["convKernelB"], []]
    plan_k = {"eng1": segs[1], "eng2": segs[2]}
    assert cudnn.match_torch(segs[0], plan_k) == ["eng1"]  # torch's own layout copy is ignored
    assert cudnn.match_torch(["other"], plan_k) == []


def test_parse_list():
    assert cudnn.parse_list("f, b", cudnn.DIRECTIONS, "directions") == ("F", "B")
    with pytest.raises(Exception, match="not understood"):
        cudnn.parse_list("X", cudnn.DIRECTIONS, "directions")


def test_host_cpu_reads_the_model_name(tmp_path):
    from kbench.collect.measure.cudnn import host_cpu

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9454 48-Core Processor\n"
                    "processor\t: 1\nmodel name\t: AMD EPYC 9454 48-Core Processor\n")
    got = host_cpu(str(info))
    assert got["cpu_model"] == "AMD EPYC 9454 48-Core Processor"
    assert got["cpu_count"] >= 1
    missing = host_cpu(str(tmp_path / "no-such-file"))
    assert "cpu_model" not in missing and missing["cpu_error"]


class _FakeClockTiming(cudnn.timing.PlanTiming):
    """PlanTiming's plan loop with the GPU parts replaced: each plan's first run takes 10 s of a fake clock,
    and every plan is slow (one warm execution is its time), so no replays are timed."""

    def __init__(self, cap_s, clock):
        self.opt = cudnn.Options(problem_time_cap_s=cap_s)
        self.clock = clock

    def _first_run(self, p, g, pack, ps, out, ref, ref_norm, e_tf32):
        self.clock[0] += 10.0
        ps.rec["correct"] = True
        return True

    def _single_ms(self, g, pack, index):
        return cudnn.SLOW_PLAN_MS * 2


@pytest.mark.parametrize("cap_s, run", [(25.0, 3), (100.0, 5), (5.0, 1)])
def test_problem_time_cap_stops_the_plan_loop(cap_s, run, monkeypatch):
    """Plans start at 0, 10, 20, 30, 40 s: a plan starts while the elapsed time is within the cap (25 s: the
    first three), the rest are recorded as not run and the problem as truncated."""
    from kbench.collect.measure.cudnn import timing
    clock = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    plans = [cudnn.PlanState(index=i, rec={"rank_a": i, "workspace_bytes": 0}) for i in range(5)]
    rec = {}
    valid = _FakeClockTiming(cap_s, clock)._coarse_timing({}, rec, None, None, plans, None, None, None, None)
    assert len(valid) == run and rec["truncated"] == (run < 5)
    assert [p.rec.get("exec_error") for p in plans[run:]] == [f"not run: the problem's {cap_s:g} s time cap was reached"] * (5 - run)
    assert cudnn.Options().problem_time_cap_s == cudnn.PROBLEM_TIME_CAP_S == 25.0

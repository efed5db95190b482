"""The verification pass on shipped labels (kbench.gpu_check.shipped_labels, kbench.collect.label_retiming.apply).

GPU-free: the plan order, the on-demand plan timer against a fake collector
(workspace growth must re-capture the graphs taken before it), and the label
files read back and applied to raw plan records, with hand-checked values.
"""
import gzip
import json

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kbench.collect.label_retiming import front_runners
from kbench.collect.label_retiming.apply import apply_labels, read_labels
from kbench.collect.measure import cudnn
from kbench.collect.packaging.package import candidate_runtimes
from kbench.core.errors import KbenchInputError
from kbench.gpu_check.shipped_labels import _PlanTimer, problem_order


# ---------------------------------------------------------------- order
def test_problem_order_parts_first_then_the_rest():
    order = problem_order(["a", "b", "c", "d", "e", "f"], [["c", "a"], ["a", "e"]], seed=0)
    assert set(order[:2]) == {"a", "c"}  # the first part
    assert order[2] == "e"                # the second part, less what the first took
    assert set(order[3:]) == {"b", "d", "f"}
    # independent of the order the ids come in
    assert order == problem_order(["f", "e", "d", "c", "b", "a"], [["a", "c"], ["e", "a"]], seed=0)


@given(st.sets(st.integers(0, 60), min_size=1), st.lists(st.sets(st.integers(0, 80)), max_size=3),
       st.integers(0, 2**16))
def test_problem_order_is_a_permutation_of_all_ids(ids, parts, seed):
    ids = [str(i) for i in ids]
    parts = [[str(i) for i in p if str(i) in ids] for p in parts]
    order = problem_order(ids, parts, seed)
    assert sorted(order) == sorted(ids)


# ---------------------------------------------------------------- on-demand timer
class FakeTorch:
    """Just enough of torch for the timer: a workspace tensor with numel()."""

    class _T:
        def __init__(self, n):
            self.n = n

        def numel(self):
            return self.n

    uint8 = "uint8"

    class cuda:  # noqa: N801 - mirrors torch.cuda
        @staticmethod
        def empty_cache():
            pass

    def empty(self, n, dtype=None, device=None):
        return self._T(n)


class FakeGraph:
    """cuDNN graph stand-in: per plan index a workspace size."""

    def __init__(self, workspace):
        self.workspace, self.built = workspace, []

    def build_plan_at_index(self, i):
        self.built.append(i)

    def get_workspace_size_plan_at_index(self, i):
        return self.workspace[i]


class FakeCollector:
    """Per plan index a first execution, a warm execution and a steady per-execution time (ms)."""

    def __init__(self, first, warm, steady):
        self.torch = FakeTorch()
        self.workspace = self.torch.empty(1)
        self.first, self.warm, self.steady = first, warm, steady
        self.singles = {}
        self.captures = []  # (plan index, k, workspace size at capture)

    def _single_ms(self, g, pack, i):
        n = self.singles[i] = self.singles.get(i, 0) + 1
        return self.first[i] if n == 1 else self.warm[i]

    def _capture(self, g, pack, i, k):
        self.captures.append((i, k, self.workspace.numel()))
        return ("graph", i, k, self.workspace.numel())

    def _replays(self, ps, n):
        return [self.steady[ps.index]] * n

    def _interleaved_rounds(self, g, pack, states):
        return {ps.index: [self.steady[ps.index]] * 3 for ps in states}


def test_timer_takes_k_from_the_warm_execution_and_recaptures_after_workspace_growth():
    # plan 0: first execution 4.5 ms (cuDNN's first-use set-up), warm 0.009 ms; plan 1 needs a larger workspace
    col = FakeCollector(first={0: 4.5, 1: 0.05}, warm={0: 0.009, 1: 0.05}, steady={0: 0.009, 1: 0.05})
    g = FakeGraph(workspace={0: 100, 1: 5000})
    timer = _PlanTimer(col, cudnn, g, pack=None, names=["p0", "p1"])
    got = timer.time(["p0", "not-proposed", "p1"])
    assert got == {"p0": 0.009, "p1": 0.05}  # a plan cuDNN does not propose here is left out
    assert timer.states["p0"].k == cudnn.inner_count(0.009)  # not inner_count(4.5), which is 1
    assert timer.states["p0"].k > 1
    # p0 was captured with the 100-byte workspace, then again after p1 grew it to 5000 bytes
    assert [c for c in col.captures if c[0] == 0] == [(0, timer.states["p0"].k, 100),
                                                      (0, timer.states["p0"].k, 5000)]
    assert timer.states["p0"].graph[3] == 5000
    assert timer.time(["p1"]) == {"p1": 0.05} and g.built == [0, 1]  # prepared once


def test_timer_times_slow_plans_by_single_executions():
    slow = cudnn.SLOW_PLAN_MS * 2
    col = FakeCollector(first={0: slow}, warm={0: slow}, steady={0: slow})
    timer = _PlanTimer(col, cudnn, FakeGraph({0: 1}), pack=None, names=["p0"])
    timer.time(["p0"])
    assert timer.states["p0"].graph is None and timer.states["p0"].rec["timing_method"] == "single"
    assert col.captures == []


def test_verify_problem_through_the_timer_replaces_a_bogus_fast_label():
    # shipped: p0 0.0310 ms (the re-run's flipped BF16 winner read 0.2343 when timed again), p1 0.0318 ms
    first = {"p0": 0.0310, "p1": 0.0318, "p2": 0.0500}
    col = FakeCollector(first={0: 1.0, 1: 1.0, 2: 1.0}, warm={0: 0.2343, 1: 0.0318, 2: 0.05},
                        steady={0: 0.2343, 1: 0.0318, 2: 0.05})
    timer = _PlanTimer(col, cudnn, FakeGraph({0: 1, 1: 1, 2: 1}), pack=None, names=["p0", "p1", "p2"])
    result = front_runners.verify_problem(first, timer.time, seed=0)
    # p0 disagrees (|log(0.2343/0.0310)| = 2.02 > 0.05): third timing 0.2343, median of three = 0.2343
    assert result.checks["p0"].verified == front_runners.DISAGREE_RESOLVED
    assert result.label_ms["p0"] == pytest.approx(0.2343)
    assert result.checks["p1"].verified == front_runners.AGREE and result.label_ms["p1"] == pytest.approx(0.0318)
    assert result.winners == ["p1"] and result.converged


# ---------------------------------------------------------------- label files
def _write(path, rows):
    with gzip.open(path, "wt") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    return path


def _check(first, verify, verify2, flag, label):
    return {"first_ms": first, "verify_ms": verify, "verify2_ms": verify2, "verified": flag, "verified_ms": label}


def test_read_labels_keeps_the_last_finished_verification(tmp_path):
    a = _write(tmp_path / "a.jsonl.gz", [
        {"kind": "run"},
        {"kind": "problem", "problem_id": "K1", "status": "ok", "passes": 1, "converged": True, "seconds": 0.2,
         "checks": {"p": _check(1.0, 1.01, None, "agree", 1.005)}},
        {"kind": "problem", "problem_id": "K2", "status": "failed", "error": "graph: x", "seconds": 0.1}])
    b = _write(tmp_path / "b.jsonl.gz", [
        {"kind": "problem", "problem_id": "K1", "status": "ok", "passes": 2, "converged": True, "seconds": 0.3,
         "checks": {"p": _check(1.0, 1.2, 1.1, "disagree-resolved", 1.1), "q": _check(1.05, 1.04, None, "agree",
                                                                                     1.045)}}])
    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress(b'{"kind": "problem", "problem_id": "K3", "sta'))  # cut
    checks, problems = read_labels([a, b, tmp_path / "c.jsonl.gz"])
    assert sorted(problems["key"]) == ["K1", "K2"]  # K3's line was cut: not finished
    assert problems.set_index("key")["status"].to_dict() == {"K1": "ok", "K2": "failed"}
    assert problems.set_index("key").loc["K1", "passes"] == 2  # file b's, the last
    assert checks.set_index("plan")["verified_ms"].to_dict() == {"p": 1.1, "q": 1.045}


def test_read_labels_drops_the_checks_of_a_superseded_verification(tmp_path):
    a = _write(tmp_path / "a.jsonl.gz", [
        {"kind": "problem", "problem_id": "K1", "status": "ok", "checks": {"r": _check(1.0, 1.0, None, "agree", 1.0)}},
        {"kind": "problem", "problem_id": "K1", "status": "failed", "error": "CUDA error"}])
    checks, problems = read_labels(a)
    assert len(checks) == 0 and problems["status"].tolist() == ["failed"]


def _plans():
    return pd.DataFrame({
        "key": ["K1", "K1", "K1"], "plan": ["p", "q", "r"], "exec_ok": True, "correct": True,
        "coarse_ms": [0.031, 0.033, 0.05], "precise_ms": [0.0310, 0.0318, None], "coarse_n": 10, "inner_k": 4,
        "timing_method": "graph", "precision": "", "numeric_notes": "TENSOR_CORE", "workspace_bytes": 0,
        "engine_id": 1, "rel_err": 0.0})


def test_apply_labels_makes_verified_times_the_packaged_times():
    checks = pd.DataFrame([{"key": "K1", "plan": "p", **_check(0.0310, 0.2343, 0.2341, "disagree-resolved", 0.2341)},
                           {"key": "K1", "plan": "q", **_check(0.0318, 0.0320, None, "agree", 0.0319)}])
    plans = apply_labels(_plans(), checks)
    problems = pd.DataFrame({"key": ["K1"], "status": ["ok"], "dtype": ["BF16"]})
    rt = candidate_runtimes(problems, plans).set_index("plan")
    assert rt["time_ms"].to_dict() == pytest.approx({"p": 0.2341, "q": 0.0319, "r": 0.05})
    assert rt["timing"].to_dict() == {"p": "verified", "q": "verified", "r": "coarse"}
    assert plans.set_index("plan").loc["p", "first_ms"] == 0.0310


def test_apply_labels_refuses_plans_the_collector_verified_already():
    plans = _plans().assign(verified_ms=[0.031, None, None], verified=["agree", None, None])
    checks = pd.DataFrame([{"key": "K1", "plan": "p", **_check(0.031, 0.031, None, "agree", 0.031)}])
    with pytest.raises(KbenchInputError, match="already verified"):
        apply_labels(plans, checks)
    other = pd.DataFrame([{"key": "K1", "plan": "q", **_check(0.0318, 0.0320, None, "agree", 0.0319)}])
    out = apply_labels(plans, other).set_index("plan")
    assert out.loc["p", "verified_ms"] == 0.031 and out.loc["q", "verified_ms"] == 0.0319


# ---------------------------------------------------------------- alignment of two GPUs' datasets
def test_alignment_section_hand_worked():
    from kbench.collect.packaging.card import alignment_section
    here = pd.DataFrame({"problem_id": ["P1", "P1", "P2", "P9"], "kernel": ["k1", "k2", "k1", "k1"],
                         "time_ms": [1.0, 2.0, 1.5, 1.0]})
    other = pd.DataFrame({"problem_id": ["P1", "P1", "P2", "P3"], "kernel": ["k1", "k2", "k1", "k1"],
                          "time_ms": [2.0, 1.0, 3.0, 1.0]})
    text = alignment_section("h200", here, "h100", other)
    # shared P1, P2; plans here 3 (P1 k1, k2; P2 k1), there 3, all in both
    assert "pairs 2 problem-directions (of 3 here)" in text
    assert "3 here, 3 on h100, 3 in both" in text
    # fastest: P1 k1 here, k2 there (differ); P2 k1 both -> 1 of 2
    assert "same in 1 of 2 (50.0%)" in text
    # here / there: P1 1.0 / 1.0 = 1, P2 1.5 / 3.0 = 0.5 -> geomean sqrt(0.5) = 0.707
    assert "geomean 0.707" in text


@pytest.mark.slow
def test_shipped_h200_aligns_with_h100():
    import kbench
    h100, h200 = kbench.load("h100"), kbench.load("h200")
    a, b = h100.align(h200)
    here = set(h200.problems["problem_id"].astype(str))
    paired = set(b.problems["problem_id"].astype(str))
    assert set(a.problems["problem_id"].astype(str)) == paired <= here
    # both collections are prefixes of one corpus order: whatever the longer one holds beyond the
    # shorter comes later in that order than everything the shorter measured, except the shorter
    # one's unfinished tail (below), and the longer one holds all that the shorter measured (either
    # GPU may be ahead: each grows run by run)
    from kbench.collect.packaging.package import load_raw
    from kbench.data.registry import DATASETS
    # each dataset's own runs (a raw folder may hold runs collected for its next version)
    shipped = {n: load_raw(f"raw/{n}", DATASETS[n].collected_through)[0] for n in ("h100", "h200")}
    short_name, long_name = sorted(shipped, key=lambda n: shipped[n]["order"].max())
    short, long_ = shipped[short_name], shipped[long_name]
    beyond = long_[~long_["key"].isin(short["key"])]
    # what the longer one holds earlier in the order than the shorter one's last problem is the shorter
    # one's unfinished tail (shards a budget stopped, merged with --allow-gaps): its own GPU measured
    # every one of them in runs after the version's last (raw/<name> keeps them for the next version)
    early = beyond[beyond["order"] <= short["order"].max()]
    later_runs = load_raw(f"raw/{short_name}", None)[0]
    assert early["key"].isin(later_runs["key"]).all()
    assert set(short["key"]) <= set(long_["key"])
    # one measured on both but left unpaired is one that h100's packager dropped: no plan of its
    # candidate set on the H100 (e.g. an FP32 problem with no full-FP32 plan there, while the H200 had some)
    cleaning = h100.info["cleaning"]
    unpaired = (here & set(shipped["h100"]["key"])) - paired
    assert len(unpaired) <= cleaning["problem_directions_collected"] - cleaning["problems_with_valid_plans"]
    # the h200 collection follows h100's corpus order: a prefix of it (by corpus order)
    assert h200.info["source"]["gpu"] == "NVIDIA H200" and h100.info["source"]["gpu"].startswith("NVIDIA H100")


# ---------------------------------------------------------------- the resumable GPU loop (shared with verify-on-gpu)
class LoopCollector:
    """The collector surface the loop touches: warm-up, environment, the CUDA check."""

    def __init__(self):
        self.checks = 0

    def warm_up(self):
        pass

    def env(self):
        return {"gpu": "fake"}

    def _check_cuda(self):
        self.checks += 1


def test_run_resumable_records_failures_and_resumes(tmp_path):
    from kbench.gpu_check.timing import done_problems, run_resumable
    items = [{"problem_id": p} for p in ("p1", "p2", "p3")]
    calls = []

    def work(col, item):
        calls.append(item["problem_id"])
        if item["problem_id"] == "p2":
            raise RuntimeError("graph: no plan")
        return [{"kind": "time", "problem_id": item["problem_id"], "ms": 1.0}], {"passes": 1}

    col = LoopCollector()
    assert run_resumable(items, tmp_path, lambda: col, work, progress_every=0) == {
        "ok": 2, "failed": 1, "left": 0, "seconds": pytest.approx(0, abs=5)}
    assert col.checks == 1  # the CUDA context is checked after a failed problem
    lines = [json.loads(x) for x in (tmp_path / "raw.jsonl").read_text().splitlines()]
    probs = {x["problem_id"]: x for x in lines if x["kind"] == "problem"}
    assert probs["p1"]["passes"] == 1 and probs["p2"]["status"] == "failed" and "no plan" in probs["p2"]["error"]
    assert [x["kind"] for x in lines][:3] == ["run", "time", "problem"]  # rows before their problem's line
    # a second run finds every problem done: nothing is timed again
    calls.clear()
    assert run_resumable(items, tmp_path, lambda: col, work, progress_every=0)["ok"] == 0 and calls == []
    assert done_problems(tmp_path / "raw.jsonl") == {"p1", "p2", "p3"}


def test_run_resumable_stops_on_a_lost_cuda_context(tmp_path):
    from kbench.gpu_check.timing import run_resumable

    def work(col, item):
        raise cudnn.FatalCudaError("CUDA context unusable")

    with pytest.raises(cudnn.FatalCudaError):
        run_resumable([{"problem_id": "p1"}], tmp_path, LoopCollector, work, progress_every=0)
    assert '"kind": "problem"' not in (tmp_path / "raw.jsonl").read_text()  # p1 is not marked done

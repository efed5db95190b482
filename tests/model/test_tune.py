"""``kbench model tune`` on the CPU: a hand-made cuDNN dataset whose fastest plans are worked out by hand, the
problems it lacks reported, a selector's first choice, and the refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from kbench.cli import main  # noqa: E402
from kbench.core.errors import KbenchInputError  # noqa: E402
from kbench.data.build import write_dataset  # noqa: E402
from kbench.data.dataset import Dataset  # noqa: E402
from kbench.model.plan_cache import load_plan_cache  # noqa: E402
from kbench.model.trace import trace_model, trace_problem_ids, write_trace  # noqa: E402
from kbench.model.tune import dataset_environment, tune_from_dataset  # noqa: E402
from kbench.sources.problem import parse_miopen_keys  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_trace import KEYS, TwoConvs  # noqa: E402

# (layer, direction) -> plan -> time (ms); conv1 W is left out of the dataset (a decoy at n=4 is its nearest)
TIMES = {("conv1", "F"): {"eng0": 0.30, "eng28_k2=4_k3=0": 0.10, "eng67_k2=5_k13=0": 0.20},
         ("conv2", "F"): {"eng1": 0.05, "eng0": 0.05},  # a tie: the first by name, as the packager sorts
         ("conv2", "B"): {"eng1": 0.40, "eng67_k2=5_k13=0": 0.35},
         ("conv2", "W"): {"eng0": 0.90}}
PYTORCH = {("conv1", "F"): "eng0", ("conv2", "F"): "eng1", ("conv2", "B"): "eng1", ("conv2", "W"): "eng0"}
# by hand: the fastest plan of each
ORACLE = {KEYS[("conv1", "F")]: ("eng28_k2=4_k3=0", 0.10), KEYS[("conv2", "F")]: ("eng0", 0.05),
          KEYS[("conv2", "B")]: ("eng67_k2=5_k13=0", 0.35), KEYS[("conv2", "W")]: ("eng0", 0.90)}
MANIFEST = {"name": "tinycudnn", "version": "1.0.0", "task": "kernel-selection", "vendor": "NVIDIA",
            "device": "NVIDIA H200 (a toy)", "arch": "sm_90", "library": "cuDNN 9.19.0 (frontend 1.32.0)",
            "source": {"collector": "kbench collect cudnn", "gpu": "NVIDIA H200", "torch": "2.11.0+cu130"},
            "license": "MIT"}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    tr = trace_model(TwoConvs(), (1, 3, 8, 8))
    return tr, write_trace(tr, tmp_path_factory.mktemp("trace") / "two_convs")


def tiny_cudnn_dataset(tr) -> Dataset:
    ids = {key: KEYS[key] for key in TIMES}
    decoy = tr.problems[(tr.problems["layers"] == "conv1") & (tr.problems["direction"] == "W")].assign(n=4)
    decoy_id = trace_problem_ids(decoy).iloc[0]
    all_ids = [*ids.values(), decoy_id]
    problems = parse_miopen_keys(pd.Series(all_ids)).assign(censored=False)
    runtimes = pd.DataFrame([(ids[key], k, t, 0) for key, kt in TIMES.items() for k, t in kt.items()]
                            + [(decoy_id, "eng0", 2.0, 0)], columns=["problem_id", "kernel", "time_ms", "rank"])
    heuristics = pd.DataFrame([(ids[key], "pytorch", 0, k) for key, k in PYTORCH.items()],
                              columns=["problem_id", "heuristic", "rank", "kernel"])
    kernels = sorted({k for kt in TIMES.values() for k in kt})
    tables = {"problems": problems, "runtimes": runtimes, "heuristics": heuristics,
              "kernels": pd.DataFrame({"kernel": kernels, "directions": "B,F,W", "family": "toy"}),
              "splits": pd.DataFrame({"problem_id": all_ids, "random": "test"})}
    return Dataset("tinycudnn", tables, {**MANIFEST, "checksum": "ab" * 32})


@pytest.fixture(scope="module")
def dataset_folder(traced, tmp_path_factory):
    ds = tiny_cudnn_dataset(traced[0])
    path = tmp_path_factory.mktemp("data") / "tinycudnn"
    write_dataset(path, ds.tables, {k: v for k, v in ds.manifest.items() if k != "checksum"})
    return path


def test_the_oracle_is_the_hand_worked_fastest_plan(traced):
    tr, folder = traced
    cache = tune_from_dataset(folder, tiny_cudnn_dataset(tr), oracle=True)
    assert {k: (e.plan, e.time_ms) for k, e in cache.plans.items()} == ORACLE
    entry = cache.plans[KEYS[("conv1", "F")]]
    assert (entry.engine_id, entry.knobs, entry.direction, entry.layers) == (28, {"k2": 4, "k3": 0}, "F", "conv1")
    assert (entry.pytorch_plan, entry.pytorch_ms) == ("eng0", 0.30)
    h = cache.header
    assert (h.gpu, h.compute_capability, h.cudnn_backend, h.cudnn_frontend, h.torch) == (
        "NVIDIA H200", "9.0", "9.19.0", "1.32.0", "2.11.0+cu130")
    assert (h.filled_by, h.source) == ("oracle", "dataset:tinycudnn@1.0.0")
    assert (h.trace.model, h.trace.input_shape, h.trace.mode) == ("TwoConvs", [1, 3, 8, 8], "train")


def test_the_problems_the_dataset_lacks_are_listed(traced):
    tr, folder = traced
    cache = tune_from_dataset(folder, tiny_cudnn_dataset(tr), oracle=True)
    assert [(m.problem_id, m.direction, m.layers, m.multiplicity) for m in cache.missing] == [
        (KEYS[("conv1", "W")], "W", "conv1", 1)]
    reason = cache.missing[0].reason
    assert reason.startswith("not in tinycudnn (nearest shape ") and "at distance 2.00" in reason  # n 1 -> 4: log2 4
    assert "kbench model tune --time" in reason


def test_a_selectors_first_choice_zero_shot(traced, monkeypatch):
    import kbench.selector

    class Eng67First:
        def choose(self, problem):
            return ["eng67_k2=5_k13=0", "eng0", "not_a_plan_of_the_set"]

    monkeypatch.setattr(kbench.selector, "load", lambda name, export_if_missing=True: Eng67First())
    tr, folder = traced
    cache = tune_from_dataset(folder, tiny_cudnn_dataset(tr), selector="mine")
    assert cache.header.filled_by == "selector:mine" and cache.header.kind == "selector"
    assert {e.plan for e in cache.plans.values()} == {"eng67_k2=5_k13=0"}
    # the dataset's time of the chosen plan where it was measured, else none
    assert cache.plans[KEYS[("conv2", "B")]].time_ms == 0.35 and cache.plans[KEYS[("conv2", "W")]].time_ms is None
    assert len(cache.missing) == 1


def test_the_dataset_environment_comes_from_its_manifest(traced):
    ds = tiny_cudnn_dataset(traced[0])
    assert dataset_environment(ds)["compute_capability"] == "9.0"
    bad = Dataset("amdish", ds.tables, {**ds.manifest, "library": "MIOpen 2.19"})
    with pytest.raises(KbenchInputError, match="does not record cudnn_backend, cudnn_frontend"):
        dataset_environment(bad)


def test_an_amd_dataset_is_refused(traced):
    with pytest.raises(KbenchInputError, match="not a collected cuDNN dataset"):
        tune_from_dataset(traced[1], "mi100", oracle=True)


def test_cli_writes_the_cache_and_reports_the_missing(traced, dataset_folder, tmp_path, capsys):
    _, folder = traced
    out = tmp_path / "two_convs.oracle.json"
    assert main(["model", "tune", str(folder), "--dataset", str(dataset_folder), "--oracle", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "4 problem-directions with a plan (oracle, from dataset:tinycudnn@1.0.0), 1 left to PyTorch" in printed
    assert f"missing W {KEYS[('conv1', 'W')]} (conv1)" in printed
    assert {k: e.plan for k, e in load_plan_cache(out).plans.items()} == {k: p for k, (p, _) in ORACLE.items()}
    assert main(["model", "tune", str(folder), "-d", str(dataset_folder), "--oracle", "--out", str(out),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "kbench-plan-cache-1"


def test_cli_refusals(traced, dataset_folder, tmp_path, capsys):
    _, folder = traced
    out = str(tmp_path / "c.json")
    assert main(["model", "tune", str(folder), "-d", str(dataset_folder), "--oracle", "--selector", "x",
                 "--out", out]) == 2
    assert "choose one way to fill the cache" in capsys.readouterr().err
    assert main(["model", "tune", str(folder), "--oracle", "--out", out]) == 2
    assert "give --dataset D" in capsys.readouterr().err
    assert main(["model", "tune", str(folder), "--out", str(folder / "cache.json"), "-d", str(dataset_folder),
                 "--oracle"]) == 2
    assert "inside the input folder" in capsys.readouterr().err
    assert not (folder / "cache.json").exists() and not Path(out).exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_time_without_cuda_says_so(traced, tmp_path, capsys):
    _, folder = traced
    assert main(["model", "tune", str(folder), "--time", "--out", str(tmp_path / "c.json")]) == 2
    assert "PyTorch sees none here" in capsys.readouterr().err


# ----------------------------------------------------------------------------- --time, with stand-ins for the GPU
PLAN_RECORDS = [  # one problem's plan records as the collector writes them
    {"plan": "eng0", "engine_id": 0, "knobs": "{}", "coarse_ms": 0.50, "precise_ms": 0.40},
    {"plan": "eng1_k2=3", "engine_id": 1, "knobs": '{"k2": 3}', "coarse_ms": 0.30, "precise_ms": 0.35},
    {"plan": "eng2", "engine_id": 2, "knobs": "{}", "coarse_ms": 0.10, "correct": False},  # a wrong answer
    {"plan": "eng3", "engine_id": 3, "knobs": "{}", "coarse_ms": 0.05,  # PyTorch's filter drops it
     "numeric_notes": "DOWN_CONVERT_INPUTS"},
]


class FakeCollector:
    """Stands in for the collector: every problem-direction, 2D or 3D, gets PLAN_RECORDS; ``measured`` (all
    instances) lists the keys in order, and ``stop_after`` ends the run with a KeyboardInterrupt."""
    measured: list[str] = []
    stop_after: int | None = None

    def __init__(self, options=None):
        pass

    def warm_up(self):
        return None

    def lists(self, p):  # the host part only: cuDNN's lists and the plans' notes and builds
        FakeCollector.measured.append(p["key"])
        rec = {"key": p["key"], "status": "ok", "dtype": p["dtype"], "heur_a": "eng3;eng1_k2=3;eng0;eng5",
               "heur_b": "eng0;eng1_k2=3", "heur_fallback": "eng0;eng3"}
        return rec, [{"plan": "eng0", "build_ok": True, "numeric_notes": ""},
                     {"plan": "eng1_k2=3", "build_ok": True, "numeric_notes": "TENSOR_CORE"},
                     {"plan": "eng3", "build_ok": True, "numeric_notes": "DOWN_CONVERT_INPUTS"},  # PyTorch drops it
                     {"plan": "eng5", "build_ok": False, "numeric_notes": ""}]                   # does not build

    def measure(self, p):
        if FakeCollector.stop_after is not None and len(FakeCollector.measured) >= FakeCollector.stop_after:
            raise KeyboardInterrupt
        FakeCollector.measured.append(p["key"])
        rec = {"key": p["key"], "status": "ok", "dtype": p["dtype"], "torch_plans": "eng0"}
        base = {"exec_ok": True, "correct": True, "numeric_notes": "", "timing_method": "graph", "coarse_n": 10,
                "precise_n": 100, "precise_ms": None, "precision": ""}
        return rec, [{**base, **r} for r in PLAN_RECORDS]


@pytest.fixture
def gpu_stand_ins(monkeypatch):
    from test_plan_cache import ENV

    import kbench.collect.measure.cudnn.collector as collector
    import kbench.model.tune as tune
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tune, "current_environment", lambda: dict(ENV))
    monkeypatch.setattr(collector, "CudnnCollector", FakeCollector)
    monkeypatch.setattr(FakeCollector, "measured", [])
    monkeypatch.setattr(FakeCollector, "stop_after", None)
    return FakeCollector


def test_time_keeps_the_fastest_correct_plan_pytorch_may_run(gpu_stand_ins, tmp_path):
    from test_use_plans import Mixed

    from kbench.model.tune import tune_by_timing
    tr = trace_model(Mixed(), (2, 4, 5))
    folder = write_trace(tr, tmp_path / "mixed")
    out = tmp_path / "mixed.oracle.json"
    cache = tune_by_timing(folder, out=out, progress=False)
    deep = set(tr.problems.loc[tr.problems["spatial_dims"] == 3, "problem_id"])
    # the collector measures the 2D and the 3D problem-directions alike (each rank from its own problems file)
    assert set(gpu_stand_ins.measured) == set(tr.problems["problem_id"]) and len(deep) == 6
    assert set(cache.plans) == set(tr.problems["problem_id"]) and cache.missing == []
    for entry in cache.plans.values():  # eng2 is wrong and eng3 outside PyTorch's set: eng1's precise time wins
        assert (entry.plan, entry.time_ms, entry.engine_id, entry.knobs) == ("eng1_k2=3", 0.35, 1, {"k2": 3})
        assert (entry.pytorch_plan, entry.pytorch_ms) == ("eng0", 0.40)
    assert (cache.header.filled_by, cache.header.source) == ("oracle", "timing")
    assert load_plan_cache(out).plans == cache.plans


def test_time_writes_as_it_goes(gpu_stand_ins, tmp_path):
    from test_use_plans import Mixed

    from kbench.model.tune import tune_by_timing
    gpu_stand_ins.stop_after = 8  # the run ends during the ninth problem-direction
    tr = trace_model(Mixed(), (2, 4, 5))
    folder = write_trace(tr, tmp_path / "mixed")
    out = tmp_path / "mixed.oracle.json"
    with pytest.raises(KeyboardInterrupt):
        tune_by_timing(folder, out=out, progress=False)
    partial = load_plan_cache(out)
    assert len(partial.plans) == 8  # the problem-directions timed before the stop
    assert {m.reason for m in partial.missing} == {"not timed yet: the run stopped before it"}
    assert len(partial.missing) == 6


def test_a_dataset_without_any_traced_problem_is_refused(traced):
    tr, folder = traced
    ds = tiny_cudnn_dataset(tr)
    decoy = ds.problems.loc[ds.problems["n"] == 4, "problem_id"]
    with pytest.raises(KbenchInputError, match="none of the 5 traced problem-directions is in tinycudnn; a cache "
                                               "would hold no plan") as err:
        tune_from_dataset(folder, ds.subset(decoy), oracle=True)
    assert "--time" in str(err.value)


@pytest.mark.gpu
def test_gpu_time_fills_a_cache_that_use_plans_runs_without_fallback(tmp_path):
    """2D and 3D problems through the collector; then the model runs on the cache."""
    import kbench.torch as ktorch
    from kbench.model.tune import tune_by_timing
    nn = torch.nn
    model = nn.Sequential(nn.Conv3d(8, 16, 3, padding=1), nn.ReLU(), nn.Conv3d(16, 8, 1))
    shape = (2, 8, 4, 12, 12)
    folder = write_trace(trace_model(model, shape, dtype="bf16", memory_format="channels_last_3d"), tmp_path / "t3")
    cache = tune_by_timing(folder, out=tmp_path / "c.json", progress=False)
    assert cache.missing == [] and len(cache.plans) == 5 and all(e.time_ms > 0 for e in cache.plans.values())
    flat = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 8, 1))
    folder2 = write_trace(trace_model(flat, (2, 8, 12, 12), dtype="bf16", memory_format="channels_last"),
                          tmp_path / "t2")
    cache2 = tune_by_timing(folder2, progress=False)
    assert cache2.missing == [] and len(cache2.plans) == 5
    for m, c, s, fmt in ((model, cache, shape, torch.channels_last_3d),
                         (flat, cache2, (2, 8, 12, 12), torch.channels_last)):
        m = m.cuda().to(torch.bfloat16).to(memory_format=fmt)
        handle = ktorch.use_plans(m, c)
        m(torch.randn(s, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=fmt)).float().sum().backward()
        stats = handle.stats()
        assert sum(stats["fallback"].values()) == 0, stats
        assert stats["through_cache"] == {"F": 2, "B": 1, "W": 2}


def test_time_resumes_a_partial_cache(gpu_stand_ins, tmp_path):
    from test_use_plans import Mixed

    from kbench.model.tune import tune_by_timing
    tr = trace_model(Mixed(), (2, 4, 5))
    folder = write_trace(tr, tmp_path / "mixed")
    out = tmp_path / "mixed.oracle.json"
    first = tune_by_timing(folder, out=out, progress=False, time_budget_s=-1.0)  # out of time at once
    assert first.plans == {} and len(first.missing) == 14
    gpu_stand_ins.stop_after = 10
    with pytest.raises(KeyboardInterrupt):
        tune_by_timing(folder, out=out, progress=False, resume=True)
    assert len(load_plan_cache(out).plans) == 10
    gpu_stand_ins.stop_after = None
    cache = tune_by_timing(folder, out=out, progress=False, resume=True)
    assert len(cache.plans) == 14 and cache.missing == []
    assert len(gpu_stand_ins.measured) == 14  # the resumed run measured only the 4 not timed yet
    other = tmp_path / "other"
    write_trace(trace_model(TwoConvs(), (1, 3, 8, 8)), other)
    with pytest.raises(KbenchInputError, match="--resume: .* is not a timing of this trace on this machine"):
        tune_by_timing(other, out=out, progress=False, resume=True)


# ----------------------------------------------------------------------------- --selector NAME --live
def test_live_without_cuda_says_so_and_writes_nothing(traced, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _, folder = traced
    out = tmp_path / "c.json"
    assert main(["model", "tune", str(folder), "--selector", "h200-3d-pytorch", "--live", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--live asks cuDNN on a CUDA GPU" in err and "PyTorch sees none here" in err and not out.exists()


def test_live_refusals(traced, dataset_folder, tmp_path, capsys):
    _, folder = traced
    out = str(tmp_path / "c.json")
    for extra in (["--live"], ["--live", "--selector", "h200-pytorch", "-d", str(dataset_folder)],
                  ["--live", "--selector", "h200-pytorch", "--time"]):
        assert main(["model", "tune", str(folder), "--out", out, *extra]) == 2
        assert "give it with --selector NAME alone" in capsys.readouterr().err
    assert main(["model", "tune", str(folder), "--selector", "mi100", "--live", "--out", out]) == 2
    assert "not cuDNN plans; --live needs a cuDNN plans selector" in capsys.readouterr().err
    assert main(["model", "tune", str(folder), "--selector", "no-such-selector", "--live", "--out", out]) == 2
    assert "--split networks" in capsys.readouterr().err
    assert not Path(out).exists()


@pytest.fixture
def fake_3d_selector(monkeypatch):
    """A plans selector of h200-3d-pytorch (the pytorch candidate set) that ranks 3D problems only, the union
    of the lists in reverse name order, and records what it was given."""
    import kbench.selector

    class Fake3d(kbench.selector.PlanSelector):
        seen: list = []

        def __init__(self):
            self.meta = {"model": "fake", "training": {"dataset": "h200-3d-pytorch", "version": "0.2.0",
                                                       "split": "networks", "model": "fake",
                                                       "problems": {"train": 5}, "held_out_networks": ["r3d_18"]}}
            self.dataset = "h200-3d-pytorch"

        def choose(self, problem, candidates=None):
            if int(problem["spatial_dims"]) != 3:
                raise KbenchInputError("selector: spatial_dims 2 is not one of 3")
            Fake3d.seen.append((problem, candidates))
            return sorted({p for v in candidates.values() for p in v}, reverse=True)

    monkeypatch.setattr(kbench.selector, "load", lambda name, export_if_missing=True: Fake3d())
    return Fake3d


def test_live_ranks_the_lists_cuda_gives_with_the_selector(gpu_stand_ins, fake_3d_selector, tmp_path, capsys):
    from test_use_plans import Mixed
    tr = trace_model(Mixed(), (2, 4, 5))
    folder = write_trace(tr, tmp_path / "mixed")
    out = tmp_path / "mixed.selector.json"
    assert main(["model", "tune", str(folder), "--selector", "fake3d", "--live", "--out", str(out), "-q"]) == 0
    cache = load_plan_cache(out)
    deep = set(tr.problems.loc[tr.problems["spatial_dims"] == 3, "problem_id"])
    assert set(gpu_stand_ins.measured) == set(tr.problems["problem_id"])  # cuDNN asked for every problem
    # eng5 does not build, eng3 has the note PyTorch's filter drops: the lists keep the others in their order
    want = {"cudnn_mode_a": ["eng1_k2=3", "eng0"], "cudnn_mode_b": ["eng0", "eng1_k2=3"], "cudnn_fallback": ["eng0"]}
    assert all(lists == want for _, lists in fake_3d_selector.seen) and len(fake_3d_selector.seen) == len(deep)
    assert {p["problem_id"] for p, _ in fake_3d_selector.seen} == deep  # the canonical columns of each key
    assert set(cache.plans) == deep and {e.plan for e in cache.plans.values()} == {"eng1_k2=3"}
    assert {e.engine_id for e in cache.plans.values()} == {1} and all(e.time_ms is None for e in cache.plans.values())
    assert {m.problem_id for m in cache.missing} == set(tr.problems["problem_id"]) - deep
    assert all(m.reason.startswith("the selector cannot rank it: selector: spatial_dims 2") for m in cache.missing)
    h = cache.header
    assert (h.filled_by, h.source, h.gpu, h.cudnn_frontend) == ("selector:fake3d", "live", "NVIDIA H200", "1.32.0")
    assert "no plan was run or timed" in h.notes[0] and "held out (r3d_18)" in h.notes[1]


def test_the_live_lists_keep_the_candidate_sets_plans():
    from kbench.model.tune import admitted_lists
    rec = {"dtype": "FP32", "heur_a": "eng1;eng2;eng3;eng4", "heur_b": "", "heur_fallback": "eng4;eng1"}
    plans = [{"plan": "eng1", "build_ok": True, "numeric_notes": ""},
             {"plan": "eng2", "build_ok": True, "numeric_notes": "TENSOR_CORE"},
             {"plan": "eng3", "build_ok": True, "numeric_notes": None},  # notes unknown: PyTorch's set leaves it out
             {"plan": "eng4", "build_ok": True, "numeric_notes": "DOWN_CONVERT_INPUTS"}]
    assert admitted_lists(rec, plans, "pytorch") == {"cudnn_mode_a": ["eng1", "eng2"], "cudnn_mode_b": [],
                                                     "cudnn_fallback": ["eng1"]}
    # the default set's FP32 rule: no tensor-core or down-converting plan; unknown notes count as none
    assert admitted_lists(rec, plans, "default") == {"cudnn_mode_a": ["eng1", "eng3"], "cudnn_mode_b": [],
                                                     "cudnn_fallback": ["eng1"]}


def test_the_live_choice_reads_the_problem_from_its_key_as_the_dataset_has_it():
    """For a problem of the 3D set, the shipped selector's first choice from the key alone equals its first
    choice from the dataset's own row, given the dataset's lists."""
    import kbench
    import kbench.selector
    from kbench.model.tune import live_choice
    ds = kbench.load("h200-3d-pytorch")
    sel = kbench.selector.load("h200-3d-pytorch", export_if_missing=False)
    heur = ds.heuristics[ds.heuristics["heuristic"].isin(kbench.selector.HEURISTIC_LISTS)]
    for pid in ds.split("networks")["test"][:5]:
        h = heur[heur["problem_id"] == pid]
        lists = {str(k): g.sort_values("rank")["kernel"].astype(str).tolist() for k, g in h.groupby("heuristic",
                                                                                                     observed=True)}
        row = ds.problems.set_index("problem_id").loc[pid].to_dict()
        assert live_choice(sel, pid, lists) == sel.choose(row, lists)[0]


@pytest.mark.gpu
def test_gpu_live_fills_a_cache_that_use_plans_runs_without_fallback(tmp_path):
    """The shipped 3D selector's first choices among the lists cuDNN gives here build and run in use_plans."""
    import kbench.torch as ktorch
    from kbench.model.tune import tune_live
    nn = torch.nn
    model = nn.Sequential(nn.Conv3d(8, 16, 3, padding=1), nn.ReLU(), nn.Conv3d(16, 8, 1))
    shape = (2, 8, 4, 12, 12)
    folder = write_trace(trace_model(model, shape, dtype="bf16", memory_format="channels_last_3d"), tmp_path / "t3")
    cache = tune_live(folder, "h200-3d-pytorch", progress=False)
    assert cache.missing == [] and len(cache.plans) == 5
    assert (cache.header.source, cache.header.filled_by) == ("live", "selector:h200-3d-pytorch")
    model = model.cuda().to(torch.bfloat16).to(memory_format=torch.channels_last_3d)
    handle = ktorch.use_plans(model, cache)
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last_3d)
    model(x).float().sum().backward()
    stats = handle.stats()
    assert sum(stats["fallback"].values()) == 0, stats
    assert stats["through_cache"] == {"F": 2, "B": 1, "W": 2}

"""``kbench.torch.use_plans``. On the CPU (no CUDA, no cuDNN frontend): every call falls back to PyTorch's own
op with reason ``no_cudnn``, bit for bit the plain model's result, counted per direction as the trace counts
the calls, under the trace's problem keys; ``remove()`` gives the modules back. On a GPU (``-m gpu``): outputs
and gradients against PyTorch's float64 result within the collector's tolerance, CUDA-graph capture and
torch.compile's eager fallback."""

from __future__ import annotations

import copy
import sys
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import kbench.torch as ktorch  # noqa: E402
from kbench.collect.measure.cudnn.candidates import TOLERANCE  # noqa: E402
from kbench.core.errors import KbenchInputError  # noqa: E402
from kbench.model.plan_cache import PlanCache, PlanCacheHeader, PlanEntry, TraceRef  # noqa: E402
from kbench.model.trace import trace_model  # noqa: E402
from kbench.model.use_plans import FALLBACK_REASONS, dense_strides  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_trace import KEYS, TwoConvs  # noqa: E402

ENV = {"gpu": "NVIDIA H200", "compute_capability": "9.0", "cudnn_backend": "9.19.0", "cudnn_frontend": "1.32.0",
       "torch": "2.11.0+cu130"}


def cache_of(entries: dict[str, str], env=None) -> PlanCache:
    header = PlanCacheHeader(**(env or ENV), filled_by="oracle", source="timing",
                             trace=TraceRef(model="test", input_shape=[1], dtype="fp32", memory_format="contiguous",
                                            mode="train"))
    # a key ends in its direction, grouped ones with _g<groups> after it: ...-NCHW-FP32-F_g2
    plans = {k: PlanEntry(plan=p, direction=k.rsplit("-", 1)[1][0]) for k, p in entries.items()}
    return PlanCache(header=header, plans=plans)


def run_step(model, x):
    out = model(x)
    out.float().sum().backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters()}


class Mixed(nn.Module):
    """1d, 2d, 3d and transposed convs (grouped, strided, output_padding, no bias) in one model."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(4, 8, 3, padding=1)
        self.t2 = nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.c2 = nn.Conv2d(6, 6, 3, padding=2, dilation=2, groups=3, bias=False)
        self.c3 = nn.Conv3d(6, 4, (1, 3, 3), padding=(0, 1, 1))
        self.t3 = nn.ConvTranspose3d(4, 2, 2, stride=2)

    def forward(self, x):
        y = self.c1(x)                                  # (N, 8, L)
        y = self.t2(y.unsqueeze(2).expand(-1, -1, 4, -1))  # (N, 6, 8, 2L)
        y = torch.relu(self.c2(y))
        y = self.c3(y.unsqueeze(2))                    # (N, 4, 1, 8, 2L)
        return self.t3(y)


def test_cpu_every_call_falls_back_bit_for_bit_and_counts_like_the_trace():
    torch.manual_seed(0)
    plain = TwoConvs()
    planned = copy.deepcopy(plain)
    handle = ktorch.use_plans(planned, cache_of({KEYS[("conv1", "F")]: "eng0"}))
    x = torch.randn(1, 3, 8, 8)
    out_plain, grads_plain = run_step(plain, x)
    out_planned, grads_planned = run_step(planned, x)
    assert torch.equal(out_plain, out_planned)
    assert grads_plain.keys() == grads_planned.keys()
    assert all(torch.equal(grads_plain[n], grads_planned[n]) for n in grads_plain)
    stats = handle.stats()
    assert stats["calls"] == {"F": 2, "B": 1, "W": 2}  # conv1's input needs no grad: no B
    assert stats["through_cache"] == {"F": 0, "B": 0, "W": 0}
    assert stats["fallback"] == {r: (5 if r == "no_cudnn" else 0) for r in FALLBACK_REASONS}
    assert stats["fallback_by_direction"] == {"F": 2, "B": 1, "W": 2}
    assert set(stats["problems"]) == set(KEYS.values())  # the trace's problem ids: the cache's keys
    assert stats["modules"] == 2 and stats["not_wrapped"] == [] and stats["warnings"] == []


def test_remove_gives_the_modules_back():
    model = TwoConvs()
    before = {name: m.forward for name, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    handle = ktorch.use_plans(model, cache_of({}))
    assert all("forward" in m.__dict__ for m in (model.conv1, model.conv2))
    # torch.compile breaks the graph at the injected forward and runs it eagerly
    assert getattr(model.conv1.forward.__func__, "_torchdynamo_disable", False)
    handle.remove()
    assert all("forward" not in m.__dict__ for m in (model.conv1, model.conv2))
    assert {name: m.forward for name, m in model.named_modules() if isinstance(m, nn.Conv2d)} == before
    model(torch.randn(1, 3, 8, 8))
    assert handle.stats()["calls"] == {"F": 0, "B": 0, "W": 0}
    with ktorch.use_plans(model, cache_of({})) as h:
        model(torch.randn(1, 3, 8, 8))
        assert h.stats()["calls"]["F"] == 2
    assert "forward" not in model.conv1.__dict__


class Planar(nn.Module):
    """2D convs around a grouped transposed one, for channels-last."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.t = nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1, groups=2)
        self.b = nn.Conv2d(4, 2, 1, bias=False)

    def forward(self, x):
        return self.b(torch.relu(self.t(self.a(x))))


@pytest.mark.parametrize("make, shape, memory_format, autocast", [
    (Mixed, (2, 4, 5), "contiguous", None), (Mixed, (2, 4, 5), "contiguous", "bf16"),
    (Planar, (2, 3, 8, 8), "channels_last", None), (Planar, (2, 3, 8, 8), "contiguous", "bf16")])
def test_cpu_1d_2d_3d_and_transposed_match_pytorch_and_the_trace_keys(make, shape, memory_format, autocast):
    torch.manual_seed(1)
    plain = make()
    x = torch.randn(shape)
    if memory_format == "channels_last":
        plain = plain.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    planned = copy.deepcopy(plain)
    handle = ktorch.use_plans(planned, cache_of({}))
    cast = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.autocast("cpu", enabled=False)
    with cast:
        out_plain, grads_plain = run_step(plain, x)
    with cast:
        out_planned, grads_planned = run_step(planned, x)
    assert out_plain.dtype == out_planned.dtype and torch.equal(out_plain, out_planned)
    assert all(torch.equal(grads_plain[n], grads_planned[n]) for n in grads_plain)
    trace = trace_model(make(), shape, memory_format=memory_format, autocast=autocast)
    stats = handle.stats()
    assert stats["calls"] == trace.info["counts"]["calls_by_direction"]
    assert stats["fallback"]["no_cudnn"] == sum(stats["calls"].values())
    # the keys use_plans looks up are the trace's problem ids (transposed convs as the equivalent conv,
    # a conv1d as H = 1, the layout and the autocast dtype as PyTorch's cuDNN path sees them)
    assert set(stats["problems"]) == set(trace.problems["problem_id"])
    if memory_format == "channels_last":
        assert all("-NHWC-" in k for k in stats["problems"])


def test_modules_padding_otherwise_are_left_to_pytorch():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"), nn.Conv2d(4, 4, 3, padding="same"),
                          nn.Conv2d(4, 4, 1))
    handle = ktorch.use_plans(model, cache_of({}))
    assert handle.stats()["modules"] == 1
    assert [s.split(":")[0] for s in handle.stats()["not_wrapped"]] == ["0", "1"]
    assert "reflect" in handle.stats()["not_wrapped"][0] and "'same'" in handle.stats()["not_wrapped"][1]


def test_bad_caches_and_models_are_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "kbench-plan-cache-1", "header": ')
    with pytest.raises(KbenchInputError, match="bad.json: not valid JSON"):
        ktorch.use_plans(TwoConvs(), bad)
    with pytest.raises(KbenchInputError, match="expected an nn.Module"):
        ktorch.use_plans("resnet", cache_of({}))


def test_dense_strides_of_5d_tensors_follow_atens_rule():
    assert dense_strides((2, 3, 4, 5, 6), False) == (360, 120, 30, 6, 1)
    assert dense_strides((2, 3, 4, 5, 6), True) == (360, 1, 90, 18, 3)
    # a size-1 dimension gets the product of the sizes inside it (fixSizeOneDimStride)
    assert dense_strides((2, 1, 1, 1, 6), True) == (6, 1, 6, 6, 1)
    assert dense_strides((8, 4, 1, 1), True) == (4, 1, 4, 4)


# ----------------------------------------------------------------------------- on a GPU
def first_plan_cache(module, x) -> PlanCache:
    """A cache with, for each direction of ``module``'s call on ``x``, the first plan cuDNN offers that builds."""
    from kbench.model.plan_cache import current_environment
    from kbench.model.use_plans import first_buildable_plans
    return cache_of(first_buildable_plans(module, x), env={k: str(v) for k, v in current_environment().items()})


def rel_err(a, ref) -> float:
    return float((a.double() - ref).norm() / ref.norm().clamp_min(1e-30))


MODULES = {"Conv2d": (lambda: nn.Conv2d(16, 32, 3, padding=1), (4, 16, 14, 14)),
           "Conv3d": (lambda: nn.Conv3d(16, 32, 3, padding=1), (2, 16, 6, 10, 10)),
           "ConvTranspose3d": (lambda: nn.ConvTranspose3d(16, 8, 3, stride=2, padding=1, output_padding=1),
                               (2, 16, 4, 6, 6))}
DTYPES = {"FP32": torch.float32, "BF16": torch.bfloat16, "FP16": torch.float16}


@pytest.mark.gpu
@pytest.mark.parametrize("kind", list(MODULES))
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("channels_last", [False, True])
def test_gpu_outputs_and_gradients_within_tolerance(kind, dtype, channels_last):
    torch.manual_seed(0)
    make, shape = MODULES[kind]
    fmt = (torch.channels_last if len(shape) == 4 else torch.channels_last_3d) if channels_last else \
        torch.contiguous_format
    ref_module = make().double().cuda()
    module = copy.deepcopy(ref_module).to(DTYPES[dtype]).to(memory_format=fmt)
    x = torch.randn(shape, device="cuda", dtype=torch.float64)
    xr = x.clone().requires_grad_(True)
    xp = x.to(DTYPES[dtype]).contiguous(memory_format=fmt).requires_grad_(True)
    cache = first_plan_cache(module, xp.detach())
    assert len(cache.plans) == 3
    handle = ktorch.use_plans(module, cache)
    out = module(xp)
    out.float().sum().backward()
    ref = ref_module(xr)
    ref.sum().backward()
    tol = TOLERANCE[dtype]
    assert rel_err(out, ref) <= tol
    assert rel_err(xp.grad, xr.grad) <= tol
    assert rel_err(module.weight.grad, ref_module.weight.grad) <= tol
    assert rel_err(module.bias.grad, ref_module.bias.grad) <= tol
    stats = handle.stats()
    assert stats["through_cache"] == {"F": 1, "B": 1, "W": 1}, stats
    assert sum(stats["fallback"].values()) == 0


@pytest.mark.gpu
def test_gpu_a_captured_training_step_replays_the_plans():
    torch.manual_seed(0)
    module = nn.Conv2d(16, 32, 3, padding=1).cuda().to(torch.bfloat16).to(memory_format=torch.channels_last)
    eager = copy.deepcopy(module)
    x = torch.randn(8, 16, 14, 14, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    handle = ktorch.use_plans(module, first_plan_cache(module, x))
    ktorch.use_plans(eager, handle.cache)
    static_x = x.clone().requires_grad_(True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the warm-up step builds every plan, outside the capture
        for _ in range(2):
            module.weight.grad = module.bias.grad = static_x.grad = None
            module(static_x).float().sum().backward()
    torch.cuda.current_stream().wait_stream(side)
    module.weight.grad = module.bias.grad = static_x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = module(static_x)
        static_out.float().sum().backward()
    new_x = torch.randn_like(x)
    static_x.data.copy_(new_x)
    graph.replay()
    torch.cuda.synchronize()
    ex = new_x.clone().requires_grad_(True)
    eager_out = eager(ex)
    eager_out.float().sum().backward()
    # the same plans on the same input (a wgrad plan may sum in another order from run to run); a replay that
    # did not run the plans would give the warm-up input's result, an error of order 1
    assert rel_err(static_out, eager_out.double()) <= TOLERANCE["BF16"]
    assert rel_err(module.weight.grad, eager.weight.grad.double()) <= TOLERANCE["BF16"]
    assert handle.stats()["fallback"]["unbuilt_during_capture"] == 0
    assert sum(handle.stats()["fallback"].values()) == 0


@pytest.mark.gpu
def test_gpu_torch_compile_runs_the_plans_eagerly():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU()).cuda().to(torch.bfloat16)
    x = torch.randn(4, 16, 14, 14, device="cuda", dtype=torch.bfloat16)
    handle = ktorch.use_plans(model, first_plan_cache(model[0], x))
    eager = model(x)
    compiled = torch.compile(model)(x)
    assert rel_err(compiled, eager.double()) <= TOLERANCE["BF16"]
    assert handle.stats()["through_cache"]["F"] == 2


# ----------------------------------------------------------------------------- the cached path, on a stand-in
@pytest.mark.parametrize("make, shape, memory_format", [(Mixed, (2, 4, 5), "contiguous"),
                                                        (Planar, (2, 3, 8, 8), "channels_last")])
def test_cached_path_computes_every_direction_as_pytorch(fake_frontend, make, shape, memory_format):
    torch.manual_seed(2)
    plain = make()
    x = torch.randn(shape)
    if memory_format == "channels_last":
        plain, x = plain.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    trace = trace_model(make(), shape, memory_format=memory_format)
    planned = copy.deepcopy(plain)
    handle = ktorch.use_plans(planned, cache_of({pid: "eng2" for pid in trace.problems["problem_id"]}), check=False)
    out_plain, grads_plain = run_step(plain, x)
    out_planned, grads_planned = run_step(planned, x)
    assert out_planned.shape == out_plain.shape
    assert torch.allclose(out_planned, out_plain, atol=1e-5, rtol=1e-4)
    for name in grads_plain:
        assert torch.allclose(grads_planned[name], grads_plain[name], atol=1e-4, rtol=1e-4), name
    stats = handle.stats()
    assert stats["through_cache"] == trace.info["counts"]["calls_by_direction"]
    assert sum(stats["fallback"].values()) == 0
    assert len(fake_frontend.executed) == sum(stats["calls"].values())
    assert {plan for _, plan in fake_frontend.executed} == {"eng2"}


def test_cached_path_falls_back_per_direction_and_reason(fake_frontend):
    torch.manual_seed(3)
    plain = TwoConvs()
    planned = copy.deepcopy(plain)
    x = torch.randn(1, 3, 8, 8)
    # conv1 F: a plan that builds; conv1 W: one that does not; conv2 F: one cuDNN does not offer;
    # conv2 B and W: none in the cache
    cache = cache_of({KEYS[("conv1", "F")]: "eng0", KEYS[("conv1", "W")]: "eng1", KEYS[("conv2", "F")]: "eng7"})
    handle = ktorch.use_plans(planned, cache, check=False)
    for _ in range(2):  # a fallback found once is remembered, and counted each call
        planned.zero_grad(set_to_none=True)
        plain.zero_grad(set_to_none=True)
        out_plain, grads_plain = run_step(plain, x)
        out_planned, grads_planned = run_step(planned, x)
        assert torch.allclose(out_planned, out_plain, atol=1e-5, rtol=1e-4)
        assert all(torch.allclose(grads_planned[n], grads_plain[n], atol=1e-4, rtol=1e-4) for n in grads_plain)
    stats = handle.stats()
    assert stats["through_cache"] == {"F": 2, "B": 0, "W": 0}
    assert stats["fallback"] == {"no_cudnn": 0, "dtype_or_layout": 0, "not_in_cache": 4, "plan_not_offered": 2,
                                 "build_failed": 2, "unbuilt_during_capture": 0}
    assert stats["problems"][KEYS[("conv1", "W")]]["fallback"] == {"build_failed": 2}
    assert fake_frontend.executed == [("F", "eng0"), ("F", "eng0")]


def test_float64_is_left_to_pytorch(fake_frontend):
    model = TwoConvs().double()
    handle = ktorch.use_plans(model, cache_of({k: "eng0" for k in KEYS.values()}), check=False)
    model(torch.randn(1, 3, 8, 8, dtype=torch.float64))
    assert handle.stats()["fallback"]["dtype_or_layout"] == 2 and fake_frontend.executed == []


# ----------------------------------------------------------------------------- the work of one call
#: the aten ops that make a tensor's memory or write all of it: an allocation, a copy, a fill or a cast
ALLOCATING = {"empty.memory_format", "empty_strided.default", "empty_like.default", "new_empty.default",
              "zeros.default", "zeros_like.default", "new_zeros.default", "zero_.default", "fill_.Scalar",
              "ones_like.default", "clone.default", "copy_.default", "_to_copy.default", "contiguous.default"}


class OpLog(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the aten ops run below autograd (the stand-in frontend computes outside the mode)."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func).removeprefix("aten.")] += 1
        return func(*args, **(kwargs or {}))

    def allocating(self) -> Counter:
        return Counter({op: n for op, n in self.ops.items() if op in ALLOCATING})


@pytest.mark.parametrize("plan, workspaces", [("eng0", 0), ("eng2", 1)])
@pytest.mark.parametrize("memory_format", ["contiguous", "channels_last"])
def test_a_second_call_of_a_geometry_builds_nothing_and_allocates_only_its_outputs(fake_frontend, plan, workspaces,
                                                                                  memory_format):
    torch.manual_seed(4)
    model, x = TwoConvs(), torch.randn(1, 3, 8, 8)
    g = torch.randn(1, 4, 8, 8)
    if memory_format == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        x, g = x.contiguous(memory_format=torch.channels_last), g.contiguous(memory_format=torch.channels_last)
    keys = trace_model(TwoConvs(), (1, 3, 8, 8), memory_format=memory_format).problems["problem_id"]
    handle = ktorch.use_plans(model, cache_of({key: plan for key in keys}), check=False)

    def train_step():
        model.zero_grad(set_to_none=True)
        model(x).backward(g)

    def inference_step():
        with torch.no_grad():
            model(x)

    train_step()  # the first call of each direction builds its plan
    inference_step()
    built = Counter(fake_frontend.counts)
    # conv1 F, W; conv2 F, B, W; 5 executions in training and 2 in inference, each in the ordered form
    assert built == {"graphs": 5, "plan_lists": 5, "builds": 5, "ordered": 7}
    with OpLog() as train:
        train_step()
    with OpLog() as inference:
        inference_step()
    # no graph, plan list, build, handle or stream set again; 7 more ordered executions
    assert fake_frontend.counts == built + Counter({"ordered": 7})
    assert len(handle.runner.all_geometries) == 2  # one per module: the same geometry each call
    # one output per execution (5 in training: conv1's input needs no grad, so no B; 2 forwards in
    # inference), and a workspace only for a plan that needs one; no copy, fill or cast
    assert train.allocating() == {"empty.memory_format": 5 * (1 + workspaces)}
    assert inference.allocating() == {"empty.memory_format": 2 * (1 + workspaces)}
    assert handle.stats()["through_cache"] == {"F": 8, "B": 2, "W": 4}  # two steps of each kind
    assert sum(handle.stats()["fallback"].values()) == 0


def test_a_frontend_without_the_ordered_execute_gets_the_dictionary_form(fake_frontend, monkeypatch):
    # an older frontend refuses tensor_uids with a TypeError before running anything: each direction
    # tries the ordered form once, then runs the dictionary form, with PyTorch's results
    monkeypatch.setattr(fake_frontend, "ORDERED", False)
    torch.manual_seed(5)
    plain, x = TwoConvs(), torch.randn(1, 3, 8, 8)
    planned = copy.deepcopy(plain)
    handle = ktorch.use_plans(planned, cache_of({key: "eng0" for key in KEYS.values()}), check=False)
    for _ in range(2):
        out_plain, grads_plain = run_step(plain, x)
        out_planned, grads_planned = run_step(planned, x)
        assert torch.allclose(out_planned, out_plain, atol=1e-5, rtol=1e-4)
        assert all(torch.allclose(grads_planned[n], grads_plain[n], atol=1e-4, rtol=1e-4) for n in grads_plain)
        plain.zero_grad(set_to_none=True)
        planned.zero_grad(set_to_none=True)
    assert fake_frontend.counts["ordered"] == 0
    assert fake_frontend.counts["dict_form"] == len(fake_frontend.executed) == 10  # 5 executions a step
    directions = [d for geo in handle.runner.all_geometries for d in geo.directions.values() if d.graph is not None]
    assert len(directions) == 5 and all(d.uids is None for d in directions)


def test_the_profiler_sees_one_range_per_execution(fake_frontend):
    model, x = TwoConvs(), torch.randn(1, 3, 8, 8)
    ktorch.use_plans(model, cache_of({key: "eng0" for key in KEYS.values()}), check=False)
    run_step(model, x)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run_step(model, x)
    ranges = Counter(e.name for e in prof.events() if e.name.startswith("kbench::conv_"))
    assert ranges == {"kbench::conv_F": 2, "kbench::conv_B": 1, "kbench::conv_W": 2}


def test_the_handle_is_made_once_and_its_stream_set_only_when_it_changes(monkeypatch):
    import fake_cudnn

    from kbench.model import use_plans as up
    monkeypatch.setattr(up._Frontend, "cudnn", property(lambda self: fake_cudnn))
    streams = iter([7, 7, 9, 9, 7])
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: next(streams), raising=False)
    fake_cudnn.counts.clear()
    frontend = up._Frontend()
    handles = {id(frontend.handle(torch.device("cuda", 0))) for _ in range(5)}
    assert len(handles) == 1
    assert fake_cudnn.counts == {"handles": 1, "set_stream": 3}  # stream 7, then 9, then 7 again


def test_a_weight_not_among_the_parameters_is_read_from_the_module(fake_frontend):
    # the cached path reads weight and bias from the module's parameter dictionary; pruning moves the
    # weight out of it (a plain attribute that the pre-hook recomputes), which the path reads instead
    from torch.nn.utils import prune
    torch.manual_seed(5)
    plain, x = TwoConvs(), torch.randn(1, 3, 8, 8)
    planned = copy.deepcopy(plain)
    handle = ktorch.use_plans(planned, cache_of({key: "eng0" for key in KEYS.values()}), check=False)
    for model in (plain, planned):
        prune.l1_unstructured(model.conv1, "weight", amount=0.5)
    assert "weight" not in planned.conv1._parameters
    out_plain, grads_plain = run_step(plain, x)
    out_planned, grads_planned = run_step(planned, x)
    assert torch.allclose(out_planned, out_plain, atol=1e-5, rtol=1e-4)
    assert all(torch.allclose(grads_planned[n], grads_plain[n], atol=1e-4, rtol=1e-4) for n in grads_plain)
    assert handle.stats()["through_cache"] == {"F": 2, "B": 1, "W": 2}


def test_the_benchs_conv_ranges_in_a_cache_mode_wrap_only_the_fallbacks(fake_frontend):
    # kbench model bench profiles a cache mode's step under conv_ranges too: the cached path's executions
    # keep their own kbench::conv_<direction> ranges, only PyTorch's ops of the fallbacks get one
    from kbench.model.bench import conv_ranges
    model, x = TwoConvs(), torch.randn(1, 3, 8, 8)
    ktorch.use_plans(model, cache_of({KEYS[("conv1", "F")]: "eng0", KEYS[("conv1", "W")]: "eng0"}), check=False)
    run_step(model, x)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with conv_ranges() as ranges:
            run_step(model, x)
    # conv2 is not in the cache: its forward is one aten.convolution, its B and W one aten.convolution_backward
    assert ranges.calls == {"kbench::conv_aten": 1, "kbench::conv_aten_backward": 1}
    names = Counter(e.name for e in prof.events() if e.name.startswith("kbench::conv_"))
    assert names == {"kbench::conv_F": 1, "kbench::conv_W": 1, "kbench::conv_aten": 1,
                     "kbench::conv_aten_backward": 1}


def test_first_buildable_plans_gives_each_direction_the_first_plan_that_builds(fake_frontend, monkeypatch):
    # what bench/bench_use_plans_overhead.py fills its cache with; the stand-in offers eng0, eng1, eng2
    from kbench.model.use_plans import first_buildable_plans
    conv, x = nn.Conv2d(3, 8, 3, padding=1), torch.randn(1, 3, 8, 8)  # TwoConvs' conv1
    plans = first_buildable_plans(conv, x)
    (key_b,) = set(plans) - {KEYS[("conv1", "F")], KEYS[("conv1", "W")]}  # the trace has no B for conv1
    assert key_b.endswith("-NCHW-FP32-B")
    assert set(plans.values()) == {"eng0"}
    monkeypatch.setattr(fake_frontend, "UNBUILDABLE", {"eng0", "eng1"})
    assert set(first_buildable_plans(conv, x).values()) == {"eng2"}

"""``kbench model bench``: a model's step time on this GPU under PyTorch's default, autotune and plan caches.

**Modes.** ``default`` (``torch.backends.cudnn.benchmark = False``), ``autotune`` (``benchmark = True``)
and one ``cache:<oracle|selector>`` per plan cache given (:func:`kbench.model.use_plans.use_plans`,
the mode named by the cache's ``filled_by``). **Steps.** ``train``: the model in train mode, forward,
then backward of the sum of its outputs (as ``kbench model trace`` runs it), no optimizer, gradients
set to None before each step; ``inference``: eval mode under ``torch.no_grad``, forward only.

**Protocol.** Each (mode, step) runs in its own Python process (:func:`run_worker`), so that no
cuDNN or autotune state carries over: the model is built on the GPU (random weights, seed 0) in the
dtype and memory format given; the *first step* is timed on the host clock with a synchronize after
it (it holds autotune's search or the plans' builds); then ``warmup`` steps, then ``steps`` steps each
between CUDA events: the step time's median and interquartile range, and the host's time to issue
each step (a step whose issue time is its step time is bound by the host, not by the GPU); then one
step under the torch profiler (:func:`kernel_times`): every GPU activity (kernels, copies, fills)
counted once, as PyTorch's own profiler table sums them, the convolutions' among them (the
activities running on the GPU inside a ``kbench::conv_*`` range, or launched under
``aten::convolution`` or ``aten::convolution_backward``), their share, and the heaviest kernels by
name. Every mode's convolutions are measured by the same range rule: the cached path's executions
sit in its own ``kbench::conv_<direction>`` ranges, and during the profiled step
:func:`conv_ranges` wraps each of PyTorch's ``aten.convolution`` and ``aten.convolution_backward``
calls (those of PyTorch's modes, and a cache mode's fallbacks) in a ``kbench::conv_aten`` /
``kbench::conv_aten_backward`` range. Without them PyTorch's cuDNN kernels count for nothing: cuDNN
launches through the driver API, and such a launch links to no op in the profile.

The record (:class:`ModelBench`) is rewritten after each process ends, so a run cut short keeps
what finished.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kbench.core.errors import KbenchInputError
from kbench.core.output_files import atomic_write_text, check_output
from kbench.core.version import __version__

#: 3: PyTorch's own convolutions are measured like the cached path's, by the kernels inside the ranges
#: :func:`conv_ranges` puts around them (schema 2 found none of cuDNN's there: a conv share of 0 for the
#: ``default`` and ``autotune`` modes); 2: the profile counts each GPU activity once (schema 1 summed every
#: op's and every kernel's self time, each kernel twice and the cached path's ranges once more) and
#: records the host's issue time per step
BENCH_SCHEMA_VERSION = 3
STEPS = ("train", "inference")
#: the ranges :func:`conv_ranges` puts around PyTorch's convolution ops, by op
ATEN_CONV_RANGES = {"convolution.default": "kbench::conv_aten",
                    "convolution_backward.default": "kbench::conv_aten_backward"}
CONV_OPS = ("aten::convolution", "aten::convolution_backward", "kbench::conv_F", "kbench::conv_B", "kbench::conv_W",
            *ATEN_CONV_RANGES.values())
#: the kernels by name a record keeps from its profiled step (the heaviest first)
TOP_KERNELS = 15
STEP_TEXT = {"train": "train mode; forward, backward of the sum of the outputs; no optimizer (gradients set to None "
                      "before each step)",
             "inference": "eval mode under torch.no_grad; forward only"}


class ModeResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: str = Field(description="default, autotune, cache:oracle or cache:selector")
    step: Literal["train", "inference"]
    status: Literal["ok", "failed"]
    error: str = ""
    cache: str | None = Field(None, description="the plan cache file of a cache mode")
    cache_filled_by: str | None = None
    cache_source: str | None = None
    first_step_ms: float | None = Field(None, description="host time of the first step (autotune's search or "
                                                          "the plans' builds included)")
    step_ms_median: float | None = None
    step_ms_q1: float | None = None
    step_ms_q3: float | None = None
    step_ms_iqr: float | None = None
    step_ms: list[float] = Field(default_factory=list, description="each timed step (CUDA events)")
    step_host_ms_median: float | None = Field(None, description="the host's time to issue a timed step (median); "
                                                                "near step_ms_median: the step waits for the host")
    conv_share: float | None = Field(None, description="conv CUDA time over the step's CUDA time (one profiled step)")
    conv_cuda_ms: float | None = Field(None, description="the GPU time of the convolutions' kernels in the profiled step")
    profiled_aten_convs: dict[str, int] | None = Field(None, description="PyTorch's convolution ops in the profiled "
                                                       "step, each in its kbench::conv_aten* range: calls per "
                                                       "range (schema 3)")
    step_cuda_ms: float | None = Field(None, description="the GPU time of every kernel, copy and fill of the profiled "
                                                         "step, each once (schema 1: each kernel counted twice)")
    kernels: list[dict] = Field(default_factory=list, description="the profiled step's heaviest kernels by name: "
                                                                  "name, calls, cuda_ms, conv")
    use_plans_stats: dict | None = Field(None, description="use_plans' stats after the run (cache modes)")
    wall_s: float | None = None
    notes: list[str] = Field(default_factory=list)


class ModelRun(BaseModel):
    """What every model record of ``raw/models/`` starts with: its type and version, and the model as run."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int
    record: str
    kbench_version: str = __version__
    created: str = Field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    model: str
    input_shape: list[int]
    dtype: str
    autocast: str | None = None
    memory_format: str


class ModelBench(ModelRun):
    """``raw/models/NAME.json``: one model's step times per mode on one GPU."""

    schema_version: int = BENCH_SCHEMA_VERSION
    record: Literal["kbench-model-bench"] = "kbench-model-bench"
    warmup: int
    steps: int
    step_definitions: dict[str, str] = Field(default_factory=lambda: dict(STEP_TEXT))
    protocol: str = Field(default="each (mode, step) in its own process; first step on the host clock; warmup "
                                  "steps; timed steps between CUDA events, each step's issue on the host clock; one "
                                  "profiled step, each GPU activity counted once, for the conv share")
    environment: dict = Field(description="kbench.scoring.environment.environment(): Python, packages, git commit, OS, CPU")
    gpu: dict = Field(description="the collector's record (kbench.collect.measure.environment): GPU, driver, clocks, "
                                  "torch, CUDA and cuDNN versions")
    results: list[ModeResult] = Field(default_factory=list)


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        v = values[0]
        return v, v, v
    q1, med, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return med, q1, q3


# ----------------------------------------------------------------------------- one process
def _build(spec: dict):
    import torch

    from kbench.model.spec import build_model
    from kbench.model.trace import DTYPES
    torch.manual_seed(0)
    model = build_model(spec["model"])
    fmt = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last,
           "channels_last_3d": torch.channels_last_3d}[spec["memory_format"]]
    dtype = getattr(torch, DTYPES[spec["dtype"]])
    device = spec.get("device", "cuda")  # another device only for `kbench model check`'s tests
    model = model.to(device=device, dtype=dtype)
    # as `kbench model trace` does: restride the tensors of the format's rank only (model.to would refuse a
    # model that also holds tensors of the other rank)
    rank = {"channels_last": 4, "channels_last_3d": 5}.get(spec["memory_format"])
    for tensor in [*model.parameters(), *model.buffers()]:
        if rank is not None and tensor.ndim == rank:
            tensor.data = tensor.data.contiguous(memory_format=fmt)
    x = torch.randn(spec["input_shape"], device=device, dtype=dtype).contiguous(memory_format=fmt)
    return model, x


def autocast_dtype(torch, autocast: str | None):
    """The torch dtype of an ``--autocast`` name (fp16, bf16), None without autocast."""
    from kbench.model.trace import DTYPES
    return getattr(torch, DTYPES[autocast]) if autocast else None


def _step_fn(model, x, step: str, autocast: str | None):
    import torch
    from torch.utils._pytree import tree_flatten
    cast = autocast_dtype(torch, autocast)

    def forward():
        if cast is not None:
            with torch.autocast("cuda", dtype=cast):
                return model(x)
        return model(x)

    if step == "inference":
        model.eval()

        def run():
            with torch.no_grad():
                forward()
        return run
    model.train()

    def run():
        for p in model.parameters():
            p.grad = None
        out = forward()
        leaves = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
        sum(t.float().sum() for t in leaves).backward()
    return run


def kernel_times(events) -> tuple[float, float, list[dict]]:
    """(conv ms, all ms, the heaviest kernels by name) of a profiled step's events (``prof.events()``).

    Every GPU activity (a device event that is not a user annotation: kernels, copies, fills) is counted
    once, by its duration: the sum PyTorch's profiler table gives as its self CUDA time total. One is a
    convolution's where the op that launched it (its linked correlation id) is, or lies inside,
    ``aten::convolution`` or ``aten::convolution_backward`` (the op's kernels that link to it), or where it
    runs on the GPU inside a ``kbench::conv_*`` range's span: the cached path's ranges, and those
    :func:`conv_ranges` puts around PyTorch's ops (cuDNN launches through the driver API, and such a
    launch links to no op, but it runs inside the range of the call that made it)."""
    from torch.autograd import DeviceType
    cpu_ops, kernels, ranges = {}, [], []
    for e in events:
        if e.device_type == DeviceType.CPU:
            if not getattr(e, "linked_correlation_id", 0):
                cpu_ops[e.id] = e
        elif e.is_user_annotation:
            if str(e.name).startswith("kbench::conv_"):
                ranges.append((e.device_index, e.time_range.start, e.time_range.end))
        elif not getattr(e, "is_async", False):
            kernels.append(e)

    def under_conv_op(e) -> bool:
        op = cpu_ops.get(getattr(e, "linked_correlation_id", 0))
        while op is not None:
            if op.name in CONV_OPS:
                return True
            op = op.cpu_parent
        return False

    def in_range(e) -> bool:
        return any(dev == e.device_index and start <= e.time_range.start and e.time_range.end <= end
                   for dev, start, end in ranges)

    by_name: dict[tuple[str, bool], list[float]] = {}
    conv = whole = 0.0
    for e in kernels:
        us = float(e.time_range.end - e.time_range.start)
        is_conv = under_conv_op(e) or in_range(e)
        whole += us
        conv += us if is_conv else 0.0
        calls_us = by_name.setdefault((str(e.name), is_conv), [0, 0.0])
        calls_us[0] += 1
        calls_us[1] += us
    top = sorted(by_name.items(), key=lambda kv: (-kv[1][1], kv[0]))[:TOP_KERNELS]
    heaviest = [{"name": name[:200], "calls": int(n), "cuda_ms": us / 1e3, "conv": is_conv}
                for (name, is_conv), (n, us) in top]
    return conv / 1e3, whole / 1e3, heaviest


def conv_ranges():
    """A dispatch mode that runs each of PyTorch's convolution ops inside a ``kbench::conv_aten*`` profiler
    range (:data:`ATEN_CONV_RANGES`); its class is made on call, as it needs torch."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    labels = {aten.convolution.default: ATEN_CONV_RANGES["convolution.default"],
              aten.convolution_backward.default: ATEN_CONV_RANGES["convolution_backward.default"]}
    record_function = torch.profiler.record_function

    class ConvRanges(TorchDispatchMode):
        """Runs every op as it is, each ``aten.convolution`` and ``aten.convolution_backward`` inside a
        ``kbench::conv_aten`` / ``kbench::conv_aten_backward`` profiler range; ``calls`` counts them per range.
        A dispatch mode sees the ops below autograd, so both the forward's op and the one the backward
        pass calls (the autograd engine carries the mode to its threads)."""

        def __init__(self):
            super().__init__()
            self.calls: dict[str, int] = dict.fromkeys(labels.values(), 0)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            label = labels.get(func)
            if label is None:
                return func(*args, **(kwargs or {}))
            self.calls[label] += 1
            with record_function(label):
                return func(*args, **(kwargs or {}))

    return ConvRanges()


def _profile_share(torch, run) -> tuple[float, float, list[dict], dict[str, int]]:
    """(conv CUDA ms, all activities' CUDA ms, heaviest kernels, PyTorch's conv ops per range) of one step
    under the profiler, PyTorch's convolution ops in :func:`conv_ranges`' ranges."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with conv_ranges() as ranges:
            run()
        torch.cuda.synchronize()
    return (*kernel_times(prof.events()), dict(ranges.calls))


def run_worker(spec: dict) -> dict:
    """One (mode, step) in this process: the :class:`ModeResult` fields as a dict."""
    import torch
    t0 = time.perf_counter()
    mode, step = spec["mode"], spec["step"]
    out: dict = {"mode": mode, "step": step, "status": "ok", "cache": spec.get("cache")}
    try:
        torch.backends.cudnn.benchmark = mode == "autotune"
        model, x = _build(spec)
        handle = None
        if spec.get("cache"):
            from kbench.model.use_plans import use_plans
            handle = use_plans(model, spec["cache"], allow_mismatch=bool(spec.get("allow_mismatch")))
            out.update(cache_filled_by=handle.cache.header.filled_by, cache_source=handle.cache.header.source)
        run = _step_fn(model, x, step, spec.get("autocast"))
        torch.cuda.synchronize()
        t_first = time.perf_counter()
        run()
        torch.cuda.synchronize()
        out["first_step_ms"] = 1e3 * (time.perf_counter() - t_first)
        for _ in range(int(spec["warmup"])):
            run()
        times, host = [], []
        for _ in range(int(spec["steps"])):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            t_issue = time.perf_counter()
            run()
            host.append(1e3 * (time.perf_counter() - t_issue))
            e.record()
            e.synchronize()
            times.append(float(s.elapsed_time(e)))
        med, q1, q3 = _quartiles(times)
        out.update(step_ms=times, step_ms_median=med, step_ms_q1=q1, step_ms_q3=q3, step_ms_iqr=q3 - q1,
                   step_host_ms_median=statistics.median(host))
        conv, whole, heaviest, aten_convs = _profile_share(torch, run)
        out.update(conv_cuda_ms=conv, step_cuda_ms=whole, conv_share=conv / whole if whole > 0 else None,
                   kernels=heaviest, profiled_aten_convs=aten_convs)
        if handle is not None:
            stats = handle.stats()
            stats.pop("problems", None)
            out["use_plans_stats"] = stats
    except Exception as exc:  # noqa: BLE001 - one mode's failure is recorded, the others still run
        out.update(status="failed", error=f"{type(exc).__name__}: {str(exc)[:500]}")
    out["wall_s"] = time.perf_counter() - t0
    return out


# ----------------------------------------------------------------------------- the parent
def _cuda_or_refuse() -> None:
    try:
        import torch
    except ImportError:
        raise KbenchInputError("kbench model bench needs PyTorch with CUDA.") from None
    if not torch.cuda.is_available():
        raise KbenchInputError("kbench model bench times a model on a CUDA GPU, and PyTorch sees none here. Run "
                               "it on the GPU machine; on this one, `kbench model report` gives the dataset's "
                               "per-layer times.")


def mode_name(cache_path) -> str:
    from kbench.model.plan_cache import load_plan_cache
    return f"cache:{load_plan_cache(cache_path).header.kind}"


def bench(model: str, input_shape, *, out, dtype: str = "fp32", autocast: str | None = None,
          memory_format: str = "contiguous", caches=(), modes=("default", "autotune"), steps=STEPS,
          warmup: int = 10, timed: int = 30, allow_mismatch: bool = False, timeout_s: float = 900.0,
          progress: bool = True) -> ModelBench:
    """Run every (mode, step) in its own process and write the record to ``out`` after each (see the module doc)."""
    _cuda_or_refuse()
    import torch

    from kbench.collect.measure.environment import environment as gpu_environment
    from kbench.model.plan_cache import check_environment, current_environment, load_plan_cache
    from kbench.scoring.environment import environment
    out = check_output(out, [*caches], option="--out")
    try:
        import cudnn
    except ImportError:
        cudnn = None
    for path in caches:  # refused before any process starts: a wrong cache is the user's input
        cache = load_plan_cache(path)
        if not allow_mismatch and cudnn is not None:
            check_environment(cache, current_environment(), where=f"plan cache {path}")
    record = ModelBench(model=model, input_shape=list(input_shape), dtype=dtype, autocast=autocast,
                        memory_format=memory_format, warmup=warmup, steps=timed,
                        environment=environment(["kbench.model.bench", "torch"]).model_dump(mode="json"),
                        gpu={k: v for k, v in gpu_environment(torch, cudnn).items()})
    jobs = [(m, None) for m in modes] + [(mode_name(c), str(c)) for c in caches]
    for step in steps:
        for mode, cache in jobs:
            spec = {"model": model, "input_shape": list(input_shape), "dtype": dtype, "autocast": autocast,
                    "memory_format": memory_format, "mode": mode, "step": step, "cache": cache,
                    "warmup": warmup, "steps": timed, "allow_mismatch": allow_mismatch}
            result = _run_in_process(spec, timeout_s)
            if cache is not None:
                result["notes"] = trace_differences(load_plan_cache(cache), spec)
            record.results.append(ModeResult(**result))
            atomic_write_text(out, record.model_dump_json(indent=2) + "\n")
            if progress:
                med = result.get("step_ms_median")
                print(f"kbench model bench: {step} {mode}: "
                      + (f"{med:.3f} ms median, first step {result['first_step_ms']:.0f} ms"
                         if result["status"] == "ok" else f"failed: {result['error']}"), file=sys.stderr)
    return record


def trace_differences(cache, spec: dict) -> list[str]:
    """Where the bench's model, input, dtype or format differ from the trace the cache was made for: its
    problems then differ, and their calls fall back (``not_in_cache``)."""
    trace = cache.header.trace
    ours = {"model": spec["model"], "input_shape": list(spec["input_shape"]), "dtype": spec["dtype"],
            "autocast": spec.get("autocast"), "memory_format": spec["memory_format"]}
    return [f"the cache was made for {key} {getattr(trace, key)!r}, the bench runs {value!r}"
            for key, value in ours.items() if getattr(trace, key) != value]


def _run_in_process(spec: dict, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        spec_file, result_file = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_file.write_text(json.dumps(spec))
        try:
            proc = subprocess.run([sys.executable, "-m", "kbench.model.bench", str(spec_file), str(result_file)],
                                  capture_output=True, text=True, timeout=timeout_s,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except subprocess.TimeoutExpired:
            return {"mode": spec["mode"], "step": spec["step"], "status": "failed", "cache": spec.get("cache"),
                    "error": f"the process ran past {timeout_s:.0f} s"}
        if not result_file.is_file():
            return {"mode": spec["mode"], "step": spec["step"], "status": "failed", "cache": spec.get("cache"),
                    "error": f"the process ended with code {proc.returncode}: {proc.stderr.strip()[-500:]}"}
        return json.loads(result_file.read_text())


def _worker_main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    Path(argv[1]).write_text(json.dumps(run_worker(spec)))
    return 0


if __name__ == "__main__":
    raise SystemExit(_worker_main(sys.argv[1:]))


__all__ = ["ATEN_CONV_RANGES", "CONV_OPS", "ModeResult", "ModelBench", "bench", "conv_ranges", "kernel_times",
           "run_worker"]

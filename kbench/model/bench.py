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
between CUDA events: the step time's median and interquartile range; then one step under the torch
profiler: the share of the step's CUDA time spent in convolutions (the CUDA time under
``aten::convolution``, ``aten::convolution_backward`` and the cached path's ``kbench::conv_*`` ranges,
over all kernels' CUDA time of the step).

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

BENCH_SCHEMA_VERSION = 1
STEPS = ("train", "inference")
CONV_OPS = ("aten::convolution", "aten::convolution_backward", "kbench::conv_F", "kbench::conv_B", "kbench::conv_W")
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
    conv_share: float | None = Field(None, description="conv CUDA time over the step's CUDA time (one profiled step)")
    conv_cuda_ms: float | None = None
    step_cuda_ms: float | None = None
    use_plans_stats: dict | None = Field(None, description="use_plans' stats after the run (cache modes)")
    wall_s: float | None = None
    notes: list[str] = Field(default_factory=list)


class ModelBench(BaseModel):
    """``raw/models/NAME.json``: one model's step times per mode on one GPU."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int = BENCH_SCHEMA_VERSION
    record: Literal["kbench-model-bench"] = "kbench-model-bench"
    kbench_version: str = __version__
    created: str = Field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    model: str
    input_shape: list[int]
    dtype: str
    autocast: str | None = None
    memory_format: str
    warmup: int
    steps: int
    step_definitions: dict[str, str] = Field(default_factory=lambda: dict(STEP_TEXT))
    protocol: str = Field(default="each (mode, step) in its own process; first step on the host clock; warmup "
                                  "steps; timed steps between CUDA events; one profiled step for the conv share")
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
    model = model.to(device="cuda", dtype=dtype)
    # as `kbench model trace` does: restride the tensors of the format's rank only (model.to would refuse a
    # model that also holds tensors of the other rank)
    rank = {"channels_last": 4, "channels_last_3d": 5}.get(spec["memory_format"])
    for tensor in [*model.parameters(), *model.buffers()]:
        if rank is not None and tensor.ndim == rank:
            tensor.data = tensor.data.contiguous(memory_format=fmt)
    x = torch.randn(spec["input_shape"], device="cuda", dtype=dtype).contiguous(memory_format=fmt)
    return model, x


def _step_fn(model, x, step: str, autocast: str | None):
    import torch
    from torch.utils._pytree import tree_flatten
    cast = getattr(torch, {"fp16": "float16", "bf16": "bfloat16"}[autocast]) if autocast else None

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


def _profile_share(torch, run) -> tuple[float, float]:
    """(conv CUDA ms, all kernels' CUDA ms) of one step under the profiler."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    events = prof.key_averages()

    def total(e):
        return getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)

    def self_time(e):
        return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0)
    conv = sum(total(e) for e in events if e.key in CONV_OPS)
    whole = sum(self_time(e) for e in events)
    return conv / 1e3, whole / 1e3


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
        times = []
        for _ in range(int(spec["steps"])):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            run()
            e.record()
            e.synchronize()
            times.append(float(s.elapsed_time(e)))
        med, q1, q3 = _quartiles(times)
        out.update(step_ms=times, step_ms_median=med, step_ms_q1=q1, step_ms_q3=q3, step_ms_iqr=q3 - q1)
        conv, whole = _profile_share(torch, run)
        out.update(conv_cuda_ms=conv, step_cuda_ms=whole, conv_share=conv / whole if whole > 0 else None)
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


__all__ = ["CONV_OPS", "ModeResult", "ModelBench", "bench", "run_worker"]

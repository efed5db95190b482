"""``kbench model check``: every convolution layer of a model, run through a plan cache's plans, against
PyTorch's own path, both measured against the layer computed in float64.

**What is compared.** One training step of the model as ``kbench model bench`` runs it (built on the
device with random weights, seed 0, in the dtype and memory format given, forward under the autocast
dtype, backward of the sum of its outputs) runs on PyTorch's own path, and a hook on each convolution
module (``nn.Conv1d/2d/3d``, ``nn.ConvTranspose1d/2d/3d``: what :func:`kbench.model.use_plans.use_plans`
wraps) keeps its first call's input (with its strides and whether it needs a gradient) and the
gradient that reached its output. Then each layer is run alone three times on those tensors:

* the **reference**: the layer in float64, on the values the kernel reads (input, weight and bias cast
  to the compute dtype first: the autocast dtype, else the model's), backward with the kept gradient;
* **PyTorch**: a copy of the layer on its own path, under the same autocast;
* **kbench**: a copy of the layer under ``use_plans`` with the cache, under the same autocast.

Per direction (``F`` the output, ``B`` the input's gradient where the model needs it, ``W`` the
weight's gradient, and the bias's gradient) the relative L2 error ``|a - ref| / |ref|`` of PyTorch's
and of kbench's result. A layer passes when every kbench error is within the collector's tolerance of
its compute dtype (:data:`kbench.collect.measure.cudnn.candidates.TOLERANCE`, the rule by which a plan
counts as correct), and the record also says which directions went through the cache and which fell
back to PyTorch (then kbench's result is PyTorch's own).

The record (:class:`ModelCheck`) is written once every layer is checked.
"""

from __future__ import annotations

import copy
import sys
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kbench.core.errors import KbenchInputError
from kbench.core.output_files import atomic_write_text, check_output
from kbench.model.bench import ModelRun

CHECK_SCHEMA_VERSION = 1


class LayerCheck(BaseModel):
    """One convolution module: its errors per direction against the float64 reference."""

    model_config = ConfigDict(extra="forbid")
    layer: str
    kind: str
    input_shape: list[int]
    compute_dtype: str
    tolerance: float
    kbench_error: dict[str, float] = Field(description="direction (F, B, W, bias) -> relative L2 error")
    pytorch_error: dict[str, float]
    through_cache: dict[str, int] = Field(description="calls per direction that ran a cache plan")
    fallback: dict[str, int] = Field(description="fallback calls by reason (then kbench ran PyTorch's own op)")
    within_tolerance: bool


class ModelCheck(ModelRun):
    """A model's every convolution layer through a plan cache against PyTorch's path and float64."""

    schema_version: int = CHECK_SCHEMA_VERSION
    record: Literal["kbench-model-check"] = "kbench-model-check"
    cache: dict = Field(description="the cache's path and its header's filled_by and source")
    gpu: dict = Field(default_factory=dict, description="kbench.collect.measure.environment's record of the GPU")
    layers: list[LayerCheck] = Field(default_factory=list)
    summary: dict = Field(default_factory=dict)


def relative_error(a, ref) -> float:
    """|a - ref| / |ref| (L2, in float64); 0 where both are zero."""
    diff = (a.double() - ref).norm()
    scale = ref.norm()
    return float(diff / scale) if float(scale) > 0 else float(diff)


def capture_layers(model, x, autocast: str | None) -> list[dict]:
    """Run one training step on PyTorch's path and keep, per convolution module, its first call's input,
    keyword arguments and output gradient (in call order)."""
    import torch

    from kbench.model.bench import _step_fn
    from kbench.model.use_plans import conv_module_kinds
    kept: dict[str, dict] = {}
    hooks = []

    def hook(name):
        def on_forward(module, args, kwargs, output):
            if name in kept or not args:
                return
            entry = kept[name] = {"name": name, "module": module, "input": args[0].detach().clone(),
                                  "input_grad": bool(args[0].requires_grad), "kwargs": dict(kwargs), "grad": None}
            if output.requires_grad:
                def on_grad(g):
                    entry["grad"] = g.detach().clone()
                output.register_hook(on_grad)
        return on_forward

    for name, module in model.named_modules():
        if isinstance(module, conv_module_kinds(torch)):
            hooks.append(module.register_forward_hook(hook(name), with_kwargs=True))
    try:
        _step_fn(model, x, "train", autocast)()
    finally:
        for h in hooks:
            h.remove()
    missing = [k for k, v in kept.items() if v["grad"] is None]
    if missing:
        raise KbenchInputError(f"kbench model check: no gradient reached the output of {', '.join(missing[:5])}; "
                               "the check runs a training step, so every convolution's output must feed the loss.")
    return list(kept.values())


def _run_layer(module, entry: dict, cast, planned_cache=None):
    """(output, {direction: gradient}, stats) of ``module`` on ``entry``'s tensors, under autocast ``cast``
    (a torch dtype or None), through ``planned_cache``'s plans when given."""
    import torch
    handle = None
    if planned_cache is not None:
        from kbench.model.use_plans import use_plans
        # check_model refused (or, with allow_mismatch, accepted) the cache's environment once, up front
        handle = use_plans(module, planned_cache, check=False)
    x = entry["input"].clone().requires_grad_(entry["input_grad"])
    try:
        if cast is not None:
            with torch.autocast(x.device.type, dtype=cast):
                y = module(x, **entry["kwargs"])
        else:
            y = module(x, **entry["kwargs"])
        wanted = {}
        if module.weight.requires_grad:
            wanted["W"] = module.weight
        if module.bias is not None and module.bias.requires_grad:
            wanted["bias"] = module.bias
        if entry["input_grad"]:
            wanted["B"] = x
        grads = torch.autograd.grad(y, list(wanted.values()), entry["grad"].to(y.dtype))
        stats = handle.stats() if handle is not None else None
    finally:
        if handle is not None:
            handle.remove()
    return y.detach(), dict(zip(wanted, grads, strict=True)), stats


def check_layer(entry: dict, cache, cast) -> LayerCheck:
    """One module against its float64 reference, on PyTorch's path and through ``cache``."""
    from kbench.collect.measure.cudnn.candidates import TOLERANCE
    from kbench.model.use_plans import CUDNN_DTYPES
    module, x = entry["module"], entry["input"]
    compute = cast if cast is not None else x.dtype
    reference = copy.deepcopy(module).double()
    # the values the kernel reads (cast to the compute dtype, then widened), in the default layout: the
    # result does not depend on it, and float64 has cuDNN kernels in that one
    for name, p in module.named_parameters(recurse=False):
        getattr(reference, name).data = p.detach().to(compute).double().contiguous()
    ref_entry = {**entry, "input": x.to(compute).double().contiguous(), "grad": entry["grad"].double().contiguous()}
    y_ref, g_ref, _ = _run_layer(reference, ref_entry, None)
    y_pt, g_pt, _ = _run_layer(copy.deepcopy(module), entry, cast)
    y_kb, g_kb, stats = _run_layer(copy.deepcopy(module), entry, cast, cache)
    errors = {"F": (relative_error(y_kb, y_ref), relative_error(y_pt, y_ref))}
    for d in g_ref:
        errors[d] = (relative_error(g_kb[d], g_ref[d]), relative_error(g_pt[d], g_ref[d]))
    dtype_name = CUDNN_DTYPES[str(compute).removeprefix("torch.")]
    tol = TOLERANCE[dtype_name]
    kb = {d: e[0] for d, e in errors.items()}
    return LayerCheck(layer=entry["name"], kind=type(module).__name__, input_shape=list(x.shape),
                      compute_dtype=dtype_name, tolerance=tol, kbench_error=kb,
                      pytorch_error={d: e[1] for d, e in errors.items()},
                      through_cache={d: n for d, n in stats["through_cache"].items() if n},
                      fallback={r: n for r, n in stats["fallback"].items() if n},
                      within_tolerance=all(e <= tol for e in kb.values()))


def summarise(layers: list[LayerCheck]) -> dict:
    """Counts over the layers: checked, within tolerance, every direction through the cache, the worst
    error as a share of its tolerance (kbench's and PyTorch's), and fallbacks by reason."""
    def worst(attr):
        rows = [(getattr(lc, attr)[d] / lc.tolerance, lc.layer, d) for lc in layers for d in getattr(lc, attr)]
        share, layer, d = max(rows) if rows else (0.0, None, None)
        return {"share_of_tolerance": share, "layer": layer, "direction": d}
    fallback: dict[str, int] = {}
    for lc in layers:
        for reason, n in lc.fallback.items():
            fallback[reason] = fallback.get(reason, 0) + n
    # a layer ran all on the cache when every cuDNN direction it computed (F, and B and W where needed) did
    on_cache = [set(lc.through_cache) >= {d for d in lc.kbench_error if d in ("F", "B", "W")} for lc in layers]
    return {"layers": len(layers), "within_tolerance": sum(lc.within_tolerance for lc in layers),
            "all_through_cache": sum(on_cache),
            "worst_kbench": worst("kbench_error"), "worst_pytorch": worst("pytorch_error"), "fallback": fallback}


def check_model(model: str, input_shape, *, cache_path, out=None, dtype: str = "fp32", autocast: str | None = None,
                memory_format: str = "contiguous", device: str = "cuda", allow_mismatch: bool = False,
                progress: bool = True) -> ModelCheck:
    """Check every convolution layer of ``model`` through the cache at ``cache_path`` (see the module doc)."""
    import torch

    from kbench.model.bench import _build, autocast_dtype
    from kbench.model.plan_cache import check_environment, current_environment, load_plan_cache
    if out is not None:
        out = check_output(out, [cache_path], option="--out")
    cache = load_plan_cache(cache_path)
    if device == "cuda" and not torch.cuda.is_available():
        raise KbenchInputError("kbench model check runs the cache's plans on a CUDA GPU, and PyTorch sees none here. "
                               "Run it on the GPU machine.")
    gpu: dict = {}
    if device == "cuda":
        try:
            import cudnn
        except ImportError:
            cudnn = None
        if cudnn is not None and not allow_mismatch:
            check_environment(cache, current_environment(), where=f"plan cache {cache_path}")
        from kbench.collect.measure.environment import environment as gpu_environment
        gpu = dict(gpu_environment(torch, cudnn))
    net, x = _build({"model": model, "input_shape": list(input_shape), "dtype": dtype,
                     "memory_format": memory_format, "device": device})
    entries = capture_layers(net, x, autocast)
    if not entries:
        raise KbenchInputError(f"kbench model check: {model} runs no convolution module on input "
                               f"{list(input_shape)}; nothing to check.")
    cast = autocast_dtype(torch, autocast)
    record = ModelCheck(model=model, input_shape=list(input_shape), dtype=dtype, autocast=autocast,
                        memory_format=memory_format, gpu=gpu,
                        cache={"path": str(cache_path), "filled_by": cache.header.filled_by,
                               "source": cache.header.source})
    for i, entry in enumerate(entries):
        record.layers.append(check_layer(entry, cache, cast))
        entry.clear()  # its tensors: a large model's kept inputs and gradients need not outlive their check
        if progress:
            lc = record.layers[-1]
            print(f"kbench model check: {i + 1}/{len(entries)} {lc.layer}: worst "
                  f"{max(lc.kbench_error.values()) / lc.tolerance:.3f} of the tolerance"
                  f"{'' if lc.within_tolerance else '  OVER'}", file=sys.stderr)
    record.summary = summarise(record.layers)
    if out is not None:
        atomic_write_text(out, record.model_dump_json(indent=2) + "\n")
    return record

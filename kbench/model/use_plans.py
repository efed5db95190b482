"""Run a model's convolutions with a plan cache's cuDNN plans: ``kbench.torch.use_plans(model, cache)``.

Every ``nn.Conv1d/2d/3d`` and ``nn.ConvTranspose1d/2d/3d`` of the model gets a forward that calls a
``torch.autograd.Function`` whose forward, backward-data and backward-weights each run one cuDNN
frontend graph (``conv_fprop``, ``conv_dgrad``, ``conv_wgrad``) with the plan the cache names for
that problem, found among the plans cuDNN offers (heuristic modes A, B and fallback, as the collector
lists them) by its name (``get_plan_name_at_index``). The problem key of each call is the one
``kbench model trace`` gives it (:func:`kbench.model.trace.trace_problem_ids`): a transposed conv is
the equivalent convolution (its forward that conv's backward-data, its grad_input a forward), a 1d
conv a 2D one with H = 1, the layout PyTorch's cuDNN rule (channels-last where the input or the
weight is). Tensors reach cuDNN as PyTorch hands them: made contiguous in that memory format, with
the dense strides ATen's descriptors carry (:func:`kbench.collect.measure.strides.pytorch_strides`, and the
same rule for 5D). Graphs and built plans are cached per problem; the cuDNN handle runs on PyTorch's
current stream, the workspace comes from PyTorch's caching allocator. Bias (and its gradient) is
added with PyTorch ops; autocast casts the inputs as it does for ``F.conv*``.

**Fallback.** A direction runs PyTorch's own op (``aten.convolution`` / ``aten.convolution_backward``,
exactly what autograd calls for ``F.conv*``) where it cannot run the cached plan, counted per reason
(:data:`FALLBACK_REASONS`): ``no_cudnn`` (a CPU tensor, or no ``cudnn`` module), ``dtype_or_layout``
(a dtype other than FP32/FP16/BF16, mixed dtypes), ``not_in_cache``, ``plan_not_offered`` (cuDNN does not
offer the cached plan for these tensors), ``build_failed``, and ``unbuilt_during_capture`` (a plan met
first inside CUDA-graph capture, where nothing may be built: run one eager warm-up step first).

**CUDA graphs.** Nothing on the cached path synchronises the host or allocates outside PyTorch's
allocator, so a step captured after one eager step (which builds every plan) replays the plans.

**torch.compile.** The injected forward is wrapped in ``torch.compiler.disable``: Dynamo breaks the
graph there and runs each convolution eagerly through this path (the frontend's graph objects and the
per-stride plan choice are not traceable; a registered custom op would need fake kernels for each
direction and would still run eagerly inside the compiled graph).
"""

from __future__ import annotations

import types
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kbench.collect.measure.strides import pytorch_strides
from kbench.core.errors import KbenchInputError
from kbench.model.plan_cache import (
    PlanCache,
    check_environment,
    current_environment,
    environment_mismatches,
    load_plan_cache,
)

DIRECTIONS = ("F", "B", "W")
FALLBACK_REASONS = ("no_cudnn", "dtype_or_layout", "not_in_cache", "plan_not_offered", "build_failed",
                    "unbuilt_during_capture")
CUDNN_DTYPES = {"float32": "FP32", "float16": "FP16", "bfloat16": "BF16"}


def dense_strides(shape, channels_last: bool) -> tuple[int, ...]:
    """The strides ATen's cuDNN descriptor carries for a 4D or 5D tensor (size-1 dimensions included):
    :func:`kbench.collect.measure.strides.pytorch_strides` of its memory format."""
    layouts = {4: ("NHWC", "NCHW"), 5: ("NDHWC", "NCDHW")}[len(shape)]
    return pytorch_strides(shape, layouts[0] if channels_last else layouts[1])


def build_graph(cudnn, handle, direction: str, data_type, x, w, y, padding, stride, dilation):
    """One frontend graph of the convolution (x: its input, w: filter, y: output; each ``(dims, strides)``):
    ``conv_fprop`` for F, ``conv_dgrad`` for B, ``conv_wgrad`` for W, FLOAT compute. The graph of
    ``kbench/collect/cudnn/plans.py`` (``PlanLists._graph``), for 4D and 5D tensors. Returns
    (graph, {"X"|"W"|"DY": tensor, "O": output tensor})."""
    g = cudnn.pygraph(io_data_type=data_type, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    kw = dict(padding=list(padding), stride=list(stride), dilation=list(dilation),
              compute_data_type=cudnn.data_type.FLOAT)

    def tensor(name, desc):
        return g.tensor(name=name, dim=list(desc[0]), stride=list(desc[1]), data_type=data_type)

    if direction == "F":
        X, W = tensor("X", x), tensor("W", w)
        result = g.conv_fprop(image=X, weight=W, name="conv", **kw)
        out, ports = y, {"X": X, "W": W}
    elif direction == "B":
        DY, W = tensor("DY", y), tensor("W", w)
        result = g.conv_dgrad(loss=DY, filter=W, name="dgrad", **kw)
        out, ports = x, {"DY": DY, "W": W}
    else:
        X, DY = tensor("X", x), tensor("DY", y)
        result = g.conv_wgrad(image=X, loss=DY, name="wgrad", **kw)
        out, ports = w, {"X": X, "DY": DY}
    result.set_output(True).set_dim(list(out[0])).set_stride(list(out[1])).set_data_type(data_type)
    g.validate()
    g.build_operation_graph()
    return g, {**ports, "O": result}


def offered_plans(cudnn, g) -> list[str]:
    """The plans cuDNN offers for graph ``g`` (modes A, B and fallback, as the collector lists them)."""
    hm = cudnn.heur_mode
    g.create_execution_plans([hm.A, hm.B, hm.FALLBACK])
    return [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]


class _Frontend:
    """The cuDNN frontend, imported on first use; one handle per device."""

    def __init__(self):
        self._module = None
        self._tried = False
        self.handles: dict[int, object] = {}

    @property
    def cudnn(self):
        if not self._tried:
            self._tried = True
            try:
                import cudnn
                self._module = cudnn
            except ImportError:
                self._module = None
        return self._module

    @staticmethod
    def runs_on(tensor) -> bool:
        """Whether the frontend can run on ``tensor``'s device (a CUDA GPU)."""
        return tensor.device.type == "cuda"

    @staticmethod
    def capturing() -> bool:
        """Whether PyTorch's current CUDA stream is capturing a CUDA graph (nothing may be built then)."""
        import torch
        return torch.cuda.is_current_stream_capturing()

    def data_type(self, dtype: str):
        dt = self.cudnn.data_type
        return {"FP32": dt.FLOAT, "FP16": dt.HALF, "BF16": dt.BFLOAT16}[dtype]

    def handle(self, device):
        """The device's handle, set to PyTorch's current stream (a capture stream during capture)."""
        import torch
        index = device.index if device.index is not None else torch.cuda.current_device()
        h = self.handles.get(index)
        if h is None:
            h = self.handles[index] = self.cudnn.create_handle()
        self.cudnn.set_stream(handle=h, stream=torch.cuda.current_stream(device).cuda_stream)
        return h


@dataclass
class _DirectionPlan:
    """One direction of one problem: the cached plan, built on first use, or why it falls back."""

    direction: str
    key: str
    plan: str | None
    reason: str | None = None  # a fallback reason, fixed once known
    graph: object = None
    ports: dict = field(default_factory=dict)
    index: int = -1
    workspace: int = 0


@dataclass
class _Geometry:
    """A module's call with given input and weight shapes, strides and dtypes, in cuDNN's form."""

    transposed: bool
    dims: int               # the module's spatial dims (1, 2, 3); cuDNN sees 1d as 2D
    channels_last: bool
    dtype: str
    x: tuple                # the equivalent convolution's input, output and filter shapes (4D/5D)
    y: tuple
    w: tuple
    padding: list
    stride: list
    dilation: list
    groups: int
    output_padding: list
    directions: dict[str, _DirectionPlan]
    device: object = None

    def memory_format(self):
        import torch
        if not self.channels_last:
            return torch.contiguous_format
        return torch.channels_last if len(self.w) == 4 else torch.channels_last_3d

    def desc(self, shape) -> tuple:
        return (tuple(shape), dense_strides(shape, self.channels_last))


class PlanStats:
    """Calls per direction through the cache and fallbacks per reason (host counts: a CUDA-graph replay adds none)."""

    def __init__(self):
        self.through_cache: Counter = Counter()
        self.fallback: Counter = Counter()
        self.fallback_by_direction: Counter = Counter()
        self.problems: dict[str, dict] = {}

    def count(self, d: _DirectionPlan, reason: str | None) -> None:
        entry = self.problems.setdefault(d.key or f"(no key) {d.direction}",
                                         {"direction": d.direction, "plan": d.plan, "through_cache": 0,
                                          "fallback": {}})
        if reason is None:
            self.through_cache[d.direction] += 1
            entry["through_cache"] += 1
        else:
            self.fallback[reason] += 1
            self.fallback_by_direction[d.direction] += 1
            entry["fallback"][reason] = entry["fallback"].get(reason, 0) + 1

    def as_dict(self) -> dict:
        return {"through_cache": {d: self.through_cache[d] for d in DIRECTIONS},
                "fallback": {r: self.fallback[r] for r in FALLBACK_REASONS},
                "fallback_by_direction": {d: self.fallback_by_direction[d] for d in DIRECTIONS},
                "calls": {d: self.through_cache[d] + self.fallback_by_direction[d] for d in DIRECTIONS},
                "problems": {k: dict(v, fallback=dict(v["fallback"])) for k, v in self.problems.items()}}


class _Runner:
    """The state ``use_plans`` shares among the wrapped modules: the cache, the frontend, geometries, stats."""

    def __init__(self, cache: PlanCache):
        self.cache = cache
        self.frontend = _Frontend()
        self.stats = PlanStats()
        self.geometries: dict[tuple, _Geometry] = {}

    # -- which plan ------------------------------------------------------------------------------
    def geometry(self, module, x, w, output_padding) -> _Geometry:
        sig = (id(module), tuple(x.shape), x.stride(), x.dtype, x.device, tuple(w.shape), w.stride(), w.dtype,
               tuple(output_padding))
        geo = self.geometries.get(sig)
        if geo is None:
            geo = self.geometries[sig] = self._new_geometry(module, x, w, output_padding)
        return geo

    def _new_geometry(self, module, x, w, output_padding) -> _Geometry:
        import torch

        from kbench.model.trace import _channels_last, _problem_fields, trace_problem_ids
        dims = w.ndim - 2
        transposed = bool(module.transposed)
        pad, stride, dil = list(module.padding), list(module.stride), list(module.dilation)
        sizes = list(x.shape[2:])
        k = list(w.shape[2:])
        if transposed:  # the equivalent conv's input is the transposed conv's output
            out = [(i - 1) * s - 2 * p + d * (kk - 1) + op + 1
                   for i, s, p, d, kk, op in zip(sizes, stride, pad, dil, k, output_padding)]
            n_out = int(w.shape[1]) * int(module.groups)
            conv_x, conv_y = (int(x.shape[0]), n_out, *out), tuple(x.shape)
        else:
            out = [(i + 2 * p - d * (kk - 1) - 1) // s + 1 for i, s, p, d, kk in zip(sizes, stride, pad, dil, k)]
            conv_x, conv_y = tuple(x.shape), (int(x.shape[0]), int(w.shape[0]), *out)
        dtype = CUDNN_DTYPES.get(str(x.dtype).removeprefix("torch."))
        cl = _channels_last(x, w) if x.dtype == w.dtype else False
        layout = ("NDHWC" if dims == 3 else "NHWC") if cl else ("NCDHW" if dims == 3 else "NCHW")
        keys = {d: "" for d in DIRECTIONS}
        if dtype is not None and x.dtype == w.dtype:
            a = {"padding": pad, "stride": stride, "dilation": dil, "groups": int(module.groups)}
            meta = {"x": torch.empty(conv_x, device="meta"), "y": torch.empty(conv_y, device="meta"),
                    "w": torch.empty(tuple(w.shape), device="meta")}
            fields = _problem_fields(meta["x"], meta["y"], meta["w"], a)
            import pandas as pd
            rows = pd.DataFrame([{**fields, "direction": d, "dtype": dtype, "layout": layout} for d in DIRECTIONS])
            keys = dict(zip(DIRECTIONS, trace_problem_ids(rows).tolist()))

        def cudnn_form(shape):  # ATen's view4d: a 1d conv is a 2D one with H = 1
            return (*shape[:2], 1, *shape[2:]) if dims == 1 else tuple(shape)

        if dims == 1:
            pad, stride, dil = [0, *pad], [1, *stride], [1, *dil]
        directions = {}
        for d in DIRECTIONS:
            reason = None
            if self.frontend.cudnn is None or not self.frontend.runs_on(x):
                reason = "no_cudnn"
            elif dtype is None or x.dtype != w.dtype:
                reason = "dtype_or_layout"
            elif keys[d] not in self.cache.plans:
                reason = "not_in_cache"
            plan = self.cache.plan_for(keys[d]) if keys[d] else None
            directions[d] = _DirectionPlan(d, keys[d], plan, reason)
        return _Geometry(transposed, dims, cl, dtype or "", cudnn_form(conv_x), cudnn_form(conv_y),
                         cudnn_form(tuple(w.shape)), pad, stride, dil, int(module.groups), list(output_padding),
                         directions, device=x.device)

    def ready(self, geo: _Geometry, direction: str) -> str | None:
        """None where ``direction`` can run its cached plan now (building it on first use), else the reason."""
        d = geo.directions[direction]
        if d.reason is not None or d.graph is not None:
            return d.reason
        if self.frontend.capturing():
            return "unbuilt_during_capture"
        cudnn = self.frontend.cudnn
        try:
            g, ports = build_graph(cudnn, self.frontend.handle(geo.device), direction,
                                   self.frontend.data_type(geo.dtype), geo.desc(geo.x), geo.desc(geo.w),
                                   geo.desc(geo.y), geo.padding, geo.stride, geo.dilation)
            names = offered_plans(cudnn, g)
        except Exception:  # noqa: BLE001 - a graph cuDNN does not support: PyTorch's path runs it
            d.reason = "plan_not_offered"
            return d.reason
        if d.plan not in names:
            d.reason = "plan_not_offered"
            return d.reason
        index = names.index(d.plan)
        try:
            g.build_plan_at_index(index)
            d.workspace = int(g.get_workspace_size_plan_at_index(index))
        except Exception:  # noqa: BLE001 - the plan does not build here: PyTorch's path runs it
            d.reason = "build_failed"
            return d.reason
        d.graph, d.ports, d.index = g, ports, index
        return None

    # -- running ---------------------------------------------------------------------------------
    def execute(self, geo: _Geometry, direction: str, inputs: dict, out_shape, device):
        """Run the built plan of ``direction`` on ``inputs`` (port name -> tensor in cuDNN's form); the output."""
        import torch
        d = geo.directions[direction]
        fmt = geo.memory_format()
        out = torch.empty(out_shape, dtype=next(iter(inputs.values())).dtype, device=device, memory_format=fmt)
        pack = {d.ports[name]: t.contiguous(memory_format=fmt) for name, t in inputs.items()}
        pack[d.ports["O"]] = out
        workspace = torch.empty(max(d.workspace, 1), dtype=torch.uint8, device=device)
        with torch.profiler.record_function(f"kbench::conv_{direction}"):
            d.graph.execute_plan_at_index(pack, workspace, index=d.index, handle=self.frontend.handle(device))
        return out


def _to_cudnn_form(t, geo: _Geometry):
    return t.unsqueeze(2) if geo.dims == 1 else t


def _from_cudnn_form(t, geo: _Geometry):
    return t.squeeze(2) if geo.dims == 1 else t


def _conv_function():
    import torch

    class PlannedConvolution(torch.autograd.Function):
        """Forward, backward-data and backward-weights of one convolution, each by a cached plan or PyTorch's op."""

        @staticmethod
        def forward(ctx, x, w, b, runner: _Runner, geo: _Geometry):
            ctx.runner, ctx.geo = runner, geo
            ctx.save_for_backward(x, w)
            ctx.bias_shape = None if b is None else list(b.shape)
            direction = "B" if geo.transposed else "F"  # a transposed conv's forward is the equivalent conv's B
            plan = geo.directions[direction]
            reason = runner.ready(geo, direction)
            runner.stats.count(plan, reason)
            if reason is not None:
                return torch.ops.aten.convolution(x, w, b, _module_list(geo.stride, geo), _module_list(geo.padding, geo),
                                                  _module_list(geo.dilation, geo), geo.transposed,
                                                  geo.output_padding, geo.groups)
            xc, wc = _to_cudnn_form(x, geo), _to_cudnn_form(w, geo)
            if geo.transposed:
                out = runner.execute(geo, "B", {"DY": xc, "W": wc}, geo.x, x.device)
            else:
                out = runner.execute(geo, "F", {"X": xc, "W": wc}, geo.y, x.device)
            if b is not None:
                out.add_(b.view(1, -1, *([1] * (out.ndim - 2))))
            return _from_cudnn_form(out, geo)

        @staticmethod
        def backward(ctx, grad):
            runner, geo = ctx.runner, ctx.geo
            x, w = ctx.saved_tensors
            need_in, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
            need_b = ctx.bias_shape is not None and ctx.needs_input_grad[2]
            # the grad of the module's input is the equivalent conv's B, or its F for a transposed conv
            d_in = "F" if geo.transposed else "B"
            reasons = {}
            for wanted, d in ((need_in, d_in), (need_w, "W")):
                if wanted:
                    reasons[d] = runner.ready(geo, d)
                    runner.stats.count(geo.directions[d], reasons[d])
            fb_in = need_in and reasons.get(d_in) is not None
            fb_w = need_w and reasons.get("W") is not None
            g_in = g_w = g_b = None
            if fb_in or fb_w:
                g_in, g_w, g_b = torch.ops.aten.convolution_backward(
                    grad, x, w, ctx.bias_shape if need_b else None, _module_list(geo.stride, geo),
                    _module_list(geo.padding, geo), _module_list(geo.dilation, geo), geo.transposed,
                    geo.output_padding, geo.groups, [fb_in, fb_w, need_b])
            elif need_b:
                g_b = grad.sum(dim=[0, *range(2, grad.ndim)])
            gc, xc, wc = _to_cudnn_form(grad, geo), _to_cudnn_form(x, geo), _to_cudnn_form(w, geo)
            if need_in and not fb_in:
                if geo.transposed:  # the transposed conv's input is the equivalent conv's output
                    g_in = runner.execute(geo, "F", {"X": gc, "W": wc}, geo.y, grad.device)
                else:
                    g_in = runner.execute(geo, "B", {"DY": gc, "W": wc}, geo.x, grad.device)
                g_in = _from_cudnn_form(g_in, geo)
            if need_w and not fb_w:
                inputs = {"X": gc, "DY": xc} if geo.transposed else {"X": xc, "DY": gc}
                g_w = _from_cudnn_form(runner.execute(geo, "W", inputs, geo.w, grad.device), geo)
            return g_in, g_w, g_b, None, None

    return PlannedConvolution


def _module_list(values, geo: _Geometry) -> list:
    """pad/stride/dilation as the module has them (the 1d conv's inserted H dimension dropped)."""
    return list(values[1:]) if geo.dims == 1 else list(values)


_FUNCTION = None


def _planned_forward(runner: _Runner):
    """The forward each wrapped module gets (one closure over the shared runner)."""
    import torch
    global _FUNCTION
    if _FUNCTION is None:
        _FUNCTION = _conv_function()
    fn = _FUNCTION

    def forward(module, input, output_size=None):
        x, w, b = input, module.weight, module.bias
        device_type = x.device.type
        if torch.is_autocast_enabled(device_type) and x.is_floating_point():
            # what autocast does for F.conv*: the inputs in its lower precision
            dt = torch.get_autocast_dtype(device_type)
            x, w = x.to(dt), w.to(dt)
            b = None if b is None else b.to(dt)
        output_padding = [0] * (w.ndim - 2)
        if module.transposed:
            output_padding = module._output_padding(input, output_size, module.stride, module.padding,
                                                    module.kernel_size, w.ndim - 2, module.dilation)
        geo = runner.geometry(module, x, w, output_padding)
        with torch.autocast(device_type, enabled=False):
            return fn.apply(x, w, b, runner, geo)

    return torch.compiler.disable(forward)


def _why_not_wrapped(module) -> str | None:
    if module.padding_mode != "zeros":
        return f"padding_mode {module.padding_mode!r} (PyTorch pads the input itself first)"
    if isinstance(module.padding, str):
        return f"padding {module.padding!r} (PyTorch may pad the input asymmetrically first)"
    return None


class PlanHandle:
    """What ``use_plans`` returns: ``stats()`` and ``remove()`` (also a context manager)."""

    def __init__(self, model, runner: _Runner, wrapped: list, not_wrapped: list, warnings: list):
        self.model, self.runner = model, runner
        self.wrapped, self.not_wrapped, self.warnings = wrapped, not_wrapped, warnings
        self.removed = False

    @property
    def cache(self) -> PlanCache:
        return self.runner.cache

    def stats(self) -> dict:
        """Calls through the cache per direction, fallbacks per reason (and per direction), per problem."""
        out = self.runner.stats.as_dict()
        out["modules"] = len(self.wrapped)
        out["not_wrapped"] = [f"{name}: {why}" for name, why in self.not_wrapped]
        out["warnings"] = list(self.warnings)
        return out

    def remove(self) -> None:
        """Give every wrapped module its own forward back."""
        for module, had, previous in self.wrapped:
            if had:
                module.forward = previous
            else:
                module.__dict__.pop("forward", None)
        self.removed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def first_buildable_plans(module, x) -> dict[str, str]:
    """{problem id: plan} for each direction of ``module``'s call on ``x`` (a CUDA tensor): the first plan cuDNN
    offers that builds. Not a tuned choice: for tests and overhead measurements, where any working plan will do."""
    import torch
    empty = PlanCache.model_construct(header=None, plans={}, missing=[])
    runner = _Runner(empty)
    w = module.weight
    if torch.is_autocast_enabled(x.device.type):
        dt = torch.get_autocast_dtype(x.device.type)
        x, w = x.to(dt), w.to(dt)
    output_padding = list(getattr(module, "output_padding", [0] * (w.ndim - 2))) if module.transposed else \
        [0] * (w.ndim - 2)
    geo = runner.geometry(module, x, w, output_padding)
    cudnn = runner.frontend.cudnn
    handle = runner.frontend.handle(x.device)
    out = {}
    for d, plan in geo.directions.items():
        g, _ = build_graph(cudnn, handle, d, runner.frontend.data_type(geo.dtype), geo.desc(geo.x), geo.desc(geo.w),
                           geo.desc(geo.y), geo.padding, geo.stride, geo.dilation)
        for i, name in enumerate(offered_plans(cudnn, g)):
            try:
                g.build_plan_at_index(i)
            except Exception:  # noqa: BLE001 - the next one
                continue
            out[plan.key] = name
            break
    return out


def use_plans(model, cache, *, check: bool = True, allow_mismatch: bool = False) -> PlanHandle:
    """Run ``model``'s convolutions with the plans of ``cache`` (a :class:`PlanCache` or its file); see the module
    docstring. ``check``: on a machine with CUDA and the frontend, refuse a cache made for another GPU model or
    library version (:func:`kbench.model.plan_cache.check_environment`); ``allow_mismatch`` turns the refusal
    into a warning in ``stats()["warnings"]``."""
    import torch
    nn = torch.nn
    if not isinstance(cache, PlanCache):
        cache = load_plan_cache(Path(cache))
    runner = _Runner(cache)
    warnings: list[str] = []
    if check and torch.cuda.is_available() and runner.frontend.cudnn is not None:
        env = current_environment()
        if allow_mismatch:
            warnings += environment_mismatches(cache, env)
        else:
            check_environment(cache, env)
    if not isinstance(model, nn.Module):
        raise KbenchInputError(f"use_plans: expected an nn.Module, got {type(model).__name__}.")
    forward = _planned_forward(runner)
    kinds = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
    wrapped, not_wrapped = [], []
    for name, module in model.named_modules():
        if not isinstance(module, kinds):
            continue
        why = _why_not_wrapped(module)
        if why is not None:
            not_wrapped.append((name, why))
            continue
        had = "forward" in module.__dict__
        wrapped.append((module, had, module.__dict__.get("forward")))
        module.forward = types.MethodType(forward, module)
    return PlanHandle(model, runner, wrapped, not_wrapped, warnings)


__all__ = ["DIRECTIONS", "FALLBACK_REASONS", "PlanHandle", "PlanStats", "build_graph", "dense_strides",
           "first_buildable_plans", "offered_plans", "use_plans"]

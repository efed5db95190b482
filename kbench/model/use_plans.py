"""Run a model's convolutions with a plan cache's cuDNN plans: ``kbench.torch.use_plans(model, cache)``.

Every ``nn.Conv1d/2d/3d`` and ``nn.ConvTranspose1d/2d/3d`` of the model gets a forward that runs its
forward, backward-data and backward-weights each through one cuDNN frontend graph (``conv_fprop``,
``conv_dgrad``, ``conv_wgrad``) with the plan the cache names for that problem, found among the plans
cuDNN offers (heuristic modes A, B and fallback, as the collector lists them) by its name
(``get_plan_name_at_index``). The problem key of each call is the one ``kbench model trace`` gives it
(:func:`kbench.model.trace.trace_problem_ids`): a transposed conv is the equivalent convolution (its
forward that conv's backward-data, its grad_input a forward), a 1d conv a 2D one with H = 1, the
layout PyTorch's cuDNN rule (channels-last where the input or the weight is). Tensors reach cuDNN as
PyTorch hands them: made contiguous in that memory format, with the dense strides ATen's descriptors
carry (:func:`kbench.collect.measure.strides.pytorch_strides`, and the same rule for 5D). Bias (and its
gradient) is added with PyTorch ops; autocast casts the inputs as it does for ``F.conv*``.

**Once per (module, input geometry)** (the input's shape, strides, dtype and device, the weight's dtype
and strides): the problem keys, the cuDNN-form shapes, strides and convolution arguments, the memory
format and the fallback's arguments (:class:`_Geometry`); per direction, on its first call, the graph,
the plan list, the built plan, its workspace size and the graph's port tensors (:class:`_Direction`).

**Per call** on the cached path, nothing else is built or derived: the weight and bias read from the
module's parameter dictionary, one dictionary lookup of the geometry, the handle fetched once per
module call, a built plan's call counted inline (an int, no method call); per direction one output
``torch.empty`` in the geometry's memory format, the inputs' ``.contiguous(memory_format)`` (a no-op
for tensors already in it, as PyTorch's own cuDNN path makes them), a workspace ``torch.empty`` only for a plan that needs one, the handle's stream set only when
PyTorch's current stream changed, and one ``execute_plan_at_index`` in the frontend's ordered form (the
buffers as a tuple with the graph's tensor uids; the dictionary of the variant pack where the frontend
has no such form); a ``kbench::conv_<direction>``
profiler range only while the profiler runs. In training an ``autograd.Function`` saves the input and
weight (what backward-data and backward-weights read); without gradients (``no_grad`` or no input
requiring one) the forward runs without it. The Function is applied through the C++ apply that
``Function.apply`` ends in (its Python wrapper runs only under a functorch transform). No
synchronisation, no zero fill, no memory-format copy of a tensor PyTorch would not copy.

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
#: the graph's two input ports of each direction, in the order the cached path passes the tensors
PORTS = {"F": ("X", "W"), "B": ("DY", "W"), "W": ("X", "DY")}


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
    """The cuDNN frontend, imported on first use; one handle per device, set to PyTorch's current stream."""

    def __init__(self):
        self._module = None
        self._tried = False
        self._torch = None
        self._raw_stream = None                 # torch._C._cuda_getCurrentRawStream, bound on first use
        self.handles: dict[int, list] = {}      # per device index: [its handle, the stream it is set to]
        self.no_workspace: dict[object, object] = {}  # per device: a 1-byte tensor for plans needing none

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
        """The device's handle, on PyTorch's current stream (a capture stream during capture); the handle's
        stream is set only when that stream changed since the last call."""
        torch = self._torch
        if torch is None:
            import torch
            self._torch = torch
            self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        index = device.index
        if index is None:
            index = torch.cuda.current_device()
        entry = self.handles.get(index)
        if entry is None:
            entry = self.handles[index] = [self.cudnn.create_handle(), None]
        raw = self._raw_stream
        stream = raw(index) if raw is not None else torch.cuda.current_stream(device).cuda_stream
        if entry[1] != stream:
            self.cudnn.set_stream(handle=entry[0], stream=stream)
            entry[1] = stream
        return entry[0]

    def empty_workspace(self, device):
        """A 1-byte tensor on ``device``, made once: the workspace argument of a plan that needs none (never
        written)."""
        ws = self.no_workspace.get(device)
        if ws is None:
            import torch
            ws = self.no_workspace[device] = torch.empty(1, dtype=torch.uint8, device=device)
        return ws


def port_uids(ports: tuple) -> tuple | None:
    """The uids of a built graph's port tensors (``get_uid``), for the ordered execute; None where the
    frontend's tensors have none."""
    try:
        return tuple(int(port.get_uid()) for port in ports)
    except (AttributeError, TypeError, RuntimeError):
        return None


@dataclass(eq=False)
class _Direction:
    """One direction of one geometry: the cached plan, built on its first call, or why it falls back; its
    calls through the cache and fallbacks per reason."""

    direction: str
    key: str
    plan: str | None
    out_shape: tuple = ()
    reason: str | None = None  # a fallback reason, fixed once known
    graph: object = None
    ports: tuple = ()          # the graph's (first input, second input, output) tensors
    uids: tuple | None = None  # their uids, for the frontend's ordered execute; None: the dictionary form
    index: int = -1
    workspace: int = 0
    no_workspace: object = None  # the device's 1-byte tensor, handed to a plan that needs no workspace
    label: str = ""            # the profiler range
    through: int = 0
    fallback: Counter = field(default_factory=Counter)


@dataclass(eq=False)
class _Geometry:
    """A module's call with given input and weight shapes, strides and dtypes, in cuDNN's form, and what its
    calls need, derived once."""

    transposed: bool
    dims: int               # the module's spatial dims (1, 2, 3); cuDNN sees 1d as 2D
    channels_last: bool
    dtype: str
    x: tuple                # the equivalent convolution's input, output and filter shapes (4D/5D)
    y: tuple
    w: tuple
    padding: list           # cuDNN form (a 1d conv's inserted H dimension included)
    stride: list
    dilation: list
    groups: int
    output_padding: list
    directions: dict[str, _Direction]
    device: object = None
    fmt: object = None      # the memory format of every tensor handed to cuDNN
    module_args: tuple = ()  # (stride, padding, dilation) as the module has them, for PyTorch's ops
    bias_view: tuple = ()   # the bias as a broadcastable view of the cuDNN-form output
    bias_dims: tuple = ()   # the output's dims the bias gradient sums over
    forward: _Direction | None = None    # the module's forward: F (a transposed conv's: B)
    grad_input: _Direction | None = None  # its grad_input: B (a transposed conv's: F)
    wgrad: _Direction | None = None       # its grad_weight: W
    runner: object = None                 # the _Runner that made it (the autograd.Function's one argument)

    def memory_format(self):
        return self.fmt

    def desc(self, shape) -> tuple:
        return (tuple(shape), dense_strides(shape, self.channels_last))


class PlanStats:
    """Calls per direction through the cache and fallbacks per reason, summed over the runner's geometries
    (host counts: a CUDA-graph replay adds none)."""

    def __init__(self, geometries: list):
        self.geometries = geometries

    def as_dict(self) -> dict:
        through, fallback, by_direction, problems = Counter(), Counter(), Counter(), {}
        for geo in self.geometries:
            for d in geo.directions.values():
                n_fallback = sum(d.fallback.values())
                if not d.through and not n_fallback:
                    continue
                entry = problems.setdefault(d.key or f"(no key) {d.direction}",
                                            {"direction": d.direction, "plan": d.plan, "through_cache": 0,
                                             "fallback": {}})
                entry["through_cache"] += d.through
                for reason, n in d.fallback.items():
                    entry["fallback"][reason] = entry["fallback"].get(reason, 0) + n
                through[d.direction] += d.through
                fallback.update(d.fallback)
                by_direction[d.direction] += n_fallback
        return {"through_cache": {d: through[d] for d in DIRECTIONS},
                "fallback": {r: fallback[r] for r in FALLBACK_REASONS},
                "fallback_by_direction": {d: by_direction[d] for d in DIRECTIONS},
                "calls": {d: through[d] + by_direction[d] for d in DIRECTIONS},
                "problems": problems}


class _Runner:
    """The state ``use_plans`` shares among the wrapped modules: the cache, the frontend, geometries, stats."""

    def __init__(self, cache: PlanCache):
        import torch
        self.torch = torch
        self.cache = cache
        self.frontend = _Frontend()
        self.all_geometries: list[_Geometry] = []
        self.stats = PlanStats(self.all_geometries)
        self.profiling = torch.autograd._profiler_enabled

    # -- which plan, once per geometry -----------------------------------------------------------
    def new_geometry(self, module, x, w, output_padding) -> _Geometry:
        torch = self.torch

        from kbench.model.trace import _channels_last, _problem_fields, trace_problem_ids
        dims = w.ndim - 2
        transposed = bool(module.transposed)
        pad, stride, dil = list(module.padding), list(module.stride), list(module.dilation)
        module_args = (list(stride), list(pad), list(dil))
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
        shapes = {"F": cudnn_form(conv_y), "B": cudnn_form(conv_x), "W": cudnn_form(tuple(w.shape))}
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
            directions[d] = _Direction(d, keys[d], plan, shapes[d], reason, label=f"kbench::conv_{d}")
        rank = len(shapes["W"])
        fmt = torch.contiguous_format if not cl else (torch.channels_last if rank == 4 else torch.channels_last_3d)
        geo = _Geometry(transposed, dims, cl, dtype or "", cudnn_form(conv_x), cudnn_form(conv_y), shapes["W"],
                        pad, stride, dil, int(module.groups), list(output_padding), directions, device=x.device,
                        fmt=fmt, module_args=module_args, bias_view=(1, -1, *([1] * (rank - 2))),
                        bias_dims=(0, *range(2, dims + 2)),
                        forward=directions["B" if transposed else "F"],
                        grad_input=directions["F" if transposed else "B"], wgrad=directions["W"], runner=self)
        self.all_geometries.append(geo)
        return geo

    def ready(self, geo: _Geometry, d: _Direction) -> str | None:
        """None where ``d`` can run its cached plan now (building it on its first call), else the reason."""
        if d.reason is not None or d.graph is not None:
            return d.reason
        if self.frontend.capturing():
            return "unbuilt_during_capture"
        cudnn = self.frontend.cudnn
        try:
            g, ports = build_graph(cudnn, self.frontend.handle(geo.device), d.direction,
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
            d.no_workspace = self.frontend.empty_workspace(geo.device)
        except Exception:  # noqa: BLE001 - the plan does not build here: PyTorch's path runs it
            d.reason = "build_failed"
            return d.reason
        first, second = PORTS[d.direction]
        d.graph, d.ports, d.index = g, (ports[first], ports[second], ports["O"]), index
        d.uids = port_uids(d.ports)
        return None

    def _usable(self, geo: _Geometry, d: _Direction) -> bool:
        """Count one call of ``d``: through the cache (True) or a fallback (False, its reason counted). The
        callers count a built plan's call themselves (``d.through += 1``) and call this only otherwise."""
        reason = self.ready(geo, d)
        if reason is None:
            d.through += 1
            return True
        d.fallback[reason] += 1
        return False

    # -- running ---------------------------------------------------------------------------------
    def execute(self, geo: _Geometry, d: _Direction, a, b, handle):
        """Run the built plan of ``d`` on its two inputs (cuDNN's form, in :data:`PORTS` order) with ``handle``
        (the frontend's, on PyTorch's current stream: fetched once per module call); the output."""
        torch = self.torch
        fmt, device = geo.fmt, geo.device
        out = torch.empty(d.out_shape, dtype=a.dtype, device=device, memory_format=fmt)
        buffers = (a.contiguous(memory_format=fmt), b.contiguous(memory_format=fmt), out)
        ws = torch.empty(d.workspace, dtype=torch.uint8, device=device) if d.workspace else d.no_workspace
        if self.profiling():
            with torch.profiler.record_function(d.label):
                self._run(d, buffers, ws, handle)
        else:
            self._run(d, buffers, ws, handle)
        return out

    @staticmethod
    def _run(d: _Direction, buffers: tuple, ws, handle) -> None:
        """One execution of ``d``'s plan on ``buffers`` (in ``d.ports`` order). The frontend's ordered form
        (the buffers as a tuple with their uids) skips the variant pack's dictionary: on the H200 it cut the
        frontend's host time per call by 24% (conv2d) and 38% (conv3d), with the same output (bench/results/use_plans_overhead.json,
        ``frontend_execute_forward_ordered``); a frontend without it gets the dictionary, from then on."""
        if d.uids is not None:
            try:
                d.graph.execute_plan_at_index(buffers, ws, index=d.index, handle=handle, tensor_uids=d.uids)
                return
            except TypeError:  # this frontend's execute takes no tensor_uids: nothing ran
                d.uids = None
        d.graph.execute_plan_at_index(dict(zip(d.ports, buffers)), ws, index=d.index, handle=handle)

    def forward(self, geo: _Geometry, x, w, b):
        """The module's output: its forward direction's plan, or PyTorch's ``aten.convolution``."""
        d = geo.forward
        if d.graph is not None:
            d.through += 1
        elif not self._usable(geo, d):
            stride, padding, dilation = geo.module_args
            return self.torch.ops.aten.convolution(x, w, b, stride, padding, dilation, geo.transposed,
                                                   geo.output_padding, geo.groups)
        one_d = geo.dims == 1
        out = self.execute(geo, d, x.unsqueeze(2) if one_d else x, w.unsqueeze(2) if one_d else w,
                           self.frontend.handle(geo.device))
        if b is not None:
            out.add_(b.view(geo.bias_view))
        return out.squeeze(2) if one_d else out

    def backward(self, geo: _Geometry, grad, x, w, need_in: bool, need_w: bool, need_b: bool):
        """(grad_input, grad_weight, grad_bias): each wanted one by its plan, or PyTorch's op for those whose
        plan cannot run."""
        d_in, d_w = geo.grad_input, geo.wgrad
        # a built plan's call is counted here, inline, as in forward: this runs per call on the hot path,
        # and a method call per direction is most of what the cached path costs over PyTorch's
        run_in = run_w = False
        if need_in:
            if d_in.graph is not None:
                d_in.through += 1
                run_in = True
            else:
                run_in = self._usable(geo, d_in)
        if need_w:
            if d_w.graph is not None:
                d_w.through += 1
                run_w = True
            else:
                run_w = self._usable(geo, d_w)
        fb_in, fb_w = need_in and not run_in, need_w and not run_w
        g_in = g_w = g_b = None
        if fb_in or fb_w:
            stride, padding, dilation = geo.module_args
            g_in, g_w, g_b = self.torch.ops.aten.convolution_backward(
                grad, x, w, [w.shape[1] * geo.groups if geo.transposed else w.shape[0]] if need_b else None,
                stride, padding, dilation, geo.transposed, geo.output_padding, geo.groups, [fb_in, fb_w, need_b])
        elif need_b:
            g_b = grad.sum(dim=geo.bias_dims)
        if run_in or run_w:
            one_d = geo.dims == 1
            gc = grad.unsqueeze(2) if one_d else grad
            handle = self.frontend.handle(geo.device)
            if run_in:  # (grad, w) in both cases: B's (DY, W), or a transposed conv's F (X, W)
                g_in = self.execute(geo, d_in, gc, w.unsqueeze(2) if one_d else w, handle)
                g_in = g_in.squeeze(2) if one_d else g_in
            if run_w:  # W's (X, DY): the transposed conv's input is the equivalent conv's output
                xc = x.unsqueeze(2) if one_d else x
                g_w = self.execute(geo, d_w, *((gc, xc) if geo.transposed else (xc, gc)), handle)
                g_w = g_w.squeeze(2) if one_d else g_w
        return g_in, g_w, g_b


def _conv_function():
    import torch

    class PlannedConvolution(torch.autograd.Function):
        """Forward, backward-data and backward-weights of one convolution, each by a cached plan or PyTorch's op."""

        @staticmethod
        def forward(ctx, x, w, b, geo: _Geometry):
            ctx.geo, ctx.has_bias = geo, b is not None
            ctx.save_for_backward(x, w)
            return geo.runner.forward(geo, x, w, b)

        @staticmethod
        def backward(ctx, grad):
            x, w = ctx.saved_tensors
            need = ctx.needs_input_grad
            return (*ctx.geo.runner.backward(ctx.geo, grad, x, w, need[0], need[1], ctx.has_bias and need[2]),
                    None)

    functorch_active = torch._C._are_functorch_transforms_active
    unwrap_if_dead = torch._C._functorch.unwrap_if_dead
    c_apply = super(torch.autograd.Function, PlannedConvolution).apply  # the C++ apply Function.apply ends in

    def apply(x, w, b, geo):
        """``PlannedConvolution.apply(x, w, b, geo)`` without its generic Python wrapper: with no functorch
        transform active, that wrapper only unwraps dead functorch wrappers of the tensor arguments and
        calls the C++ apply (no ``setup_context`` is defined, so no default-argument binding); this does
        the same for the three tensors. Under a transform, the wrapper itself runs."""
        if functorch_active():
            return PlannedConvolution.apply(x, w, b, geo)
        return c_apply(unwrap_if_dead(x), unwrap_if_dead(w), None if b is None else unwrap_if_dead(b), geo)

    return apply


_APPLY = None


def _planned_forward(runner: _Runner, module):
    """The forward ``module`` gets: its geometries by input signature, then the cached path."""
    torch = runner.torch
    global _APPLY
    if _APPLY is None:
        _APPLY = _conv_function()
    apply, new_geometry, run_forward = _APPLY, runner.new_geometry, runner.forward
    # the parameters are read from the module's own dictionary (an attribute read through nn.Module's
    # __getattr__ is a Python call per tensor); a weight not there (pruned, parametrized) is read as before
    parameters = module._parameters
    transposed = bool(module.transposed)
    autocast_on, autocast_dtype, grad_on = torch.is_autocast_enabled, torch.get_autocast_dtype, torch.is_grad_enabled
    float64 = torch.float64
    no_output_padding = [0] * (module.weight.ndim - 2)
    geometries: dict[tuple, _Geometry] = {}

    def cast(t, dt):  # autocast's rule for F.conv*: floating tensors but float64 in its lower precision
        return t.to(dt) if t is not None and t.is_floating_point() and t.dtype != float64 else t

    def forward(module, input, output_size=None):
        x = input
        w = parameters.get("weight")
        if w is None:
            w = module.weight
        b = parameters["bias"] if "bias" in parameters else module.bias
        device_type = x.device.type
        if autocast_on(device_type):
            dt = autocast_dtype(device_type)
            x, w, b = cast(x, dt), cast(w, dt), cast(b, dt)
        if transposed:
            output_padding = module._output_padding(input, output_size, module.stride, module.padding,
                                                    module.kernel_size, w.ndim - 2, module.dilation)
            sig = (x.shape, x.stride(), x.dtype, x.device, w.shape, w.stride(), w.dtype, tuple(output_padding))
        else:
            output_padding = no_output_padding
            sig = (x.shape, x.stride(), x.dtype, x.device, w.shape, w.stride(), w.dtype)
        geo = geometries.get(sig)
        if geo is None:
            geo = geometries[sig] = new_geometry(module, x, w, output_padding)
        if grad_on() and (x.requires_grad or w.requires_grad or (b is not None and b.requires_grad)):
            return apply(x, w, b, geo)
        return run_forward(geo, x, w, b)

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
    geo = runner.new_geometry(module, x, w, output_padding)
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


def conv_module_kinds(torch) -> tuple:
    """The module classes whose convolutions :func:`use_plans` runs."""
    nn = torch.nn
    return (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


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
    kinds = conv_module_kinds(torch)
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
        module.forward = types.MethodType(_planned_forward(runner, module), module)
    return PlanHandle(model, runner, wrapped, not_wrapped, warnings)


__all__ = ["DIRECTIONS", "FALLBACK_REASONS", "PlanHandle", "PlanStats", "build_graph", "dense_strides",
           "first_buildable_plans", "offered_plans", "use_plans"]

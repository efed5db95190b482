"""Trace a PyTorch model's convolutions into kbench problems: ``kbench model trace``.

One forward pass (and, in training mode, one backward pass of the sum of the outputs) runs on
*fake* tensors (``torch._subclasses.FakeTensorMode``: shapes, strides and dtypes, no data, no
arithmetic, CPU only). A ``TorchDispatchMode`` under autograd sees every ``aten.convolution`` and
``aten.convolution_backward`` call autograd really issues, with the real tensors' shapes, strides
and dtypes (autocast included), and records each one:

* ``aten.convolution`` -> direction **F**; ``aten.convolution_backward`` -> **B** where its
  ``output_mask`` asks for grad_input, **W** where it asks for grad_weight (a first layer whose
  input needs no gradient has no B; a frozen weight has no W).
* **Transposed** convolutions (``ConvTranspose*``) are problems of the equivalent convolution, the
  one whose input is the transposed conv's output: its forward is that convolution's **B**
  (cuDNN runs it as backward-data), its grad_input a **F**, its grad_weight a **W**; the rows say
  ``transposed=1`` and ``calls.csv`` keeps the call as issued.
* **1d** convolutions are 2D problems with H = 1 (ATen's cuDNN path views them so: ``view4d``),
  **3d** ones 3D problems with the depth fields.
* **Layout** follows ATen's ``cudnn_conv_suggest_memory_format``: channels-last (NHWC / NDHWC)
  when the input or the weight suggests it, from their real strides; conv outputs and grad_inputs
  are then made channels-last as cuDNN returns them on a GPU, so later layers see what they would.
* Each call is named by the innermost module running it (global module hooks); a backward call by
  the forward call whose saved input and weight it receives.

``problems.csv`` is a problems file ``kbench collect cudnn --problems`` reads (one row per distinct
problem-direction, ``problem_id`` the key it builds); ``calls.csv`` lists every call in order and
``trace.json`` what was traced. ``docs/model.md`` documents the columns.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.collect.measure.cudnn.problems import canonical, problem_keys
from kbench.core.errors import KbenchInputError
from kbench.core.output_files import atomic_write_text, check_output_folder
from kbench.core.version import __version__
from kbench.sources.problem import to_miopen_key

TRACE_FORMAT = "kbench-model-trace-1"
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
KBENCH_DTYPE = {"float32": "FP32", "float16": "FP16", "bfloat16": "BF16"}
MEMORY_FORMATS = ("contiguous", "channels_last", "channels_last_3d")
MODES = ("train", "inference")
SPATIAL = ("d", "h", "w")
PARAMS = ("pad", "stride", "dil")
#: the problems file's columns; 2D-only traces leave out the depth ones (``load_problems`` reads 2D rows)
PROBLEM_COLUMNS = (["n", "c", "k", "groups", "x_d", "x_h", "x_w", "y_d", "y_h", "y_w", "fil_d", "fil_h", "fil_w"]
                   + [f"{p}_{s}" for p in PARAMS for s in SPATIAL]
                   + ["dtype", "layout", "direction", "spatial_dims", "transposed", "depthwise", "multiplicity", "layers",
                      "problem_id", "order", "kind", "sources"])
DEPTH_COLUMNS = [f"{p}_d" for p in ("x", "y", "fil", *PARAMS)]
#: calls.csv: the call as issued first, then the geometry of the convolution it is a problem of
CALL_COLUMNS = ["call", "op", "layer", "module", "transposed", "conv_dims", "directions", "problem_ids", "output_mask",
                "forward_call", "input_shape", "input_strides", "weight_shape", "weight_strides", "output_shape",
                "grad_output_shape", "torch_dtype", "dtype", "layout", "stride", "padding", "dilation",
                "output_padding", "groups", "has_bias", "cudnn", "depthwise"]


@dataclass
class Trace:
    """What one traced step issued: ``calls`` (one row per aten call, in order), ``problems`` (one row per
    distinct problem-direction) and ``info`` (what was traced, for ``trace.json``)."""

    calls: pd.DataFrame
    problems: pd.DataFrame
    info: dict = field(default_factory=dict)


def parse_input_shape(text: str) -> tuple[int, ...]:
    """``"32,3,224,224"`` -> (32, 3, 224, 224); N, C and 1 to 3 spatial sizes, each a positive integer."""
    parts = [p.strip() for p in str(text).replace("x", ",").split(",") if p.strip()]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if not 3 <= len(shape) <= 5 or min(shape) < 1:
        raise KbenchInputError(f"--input-shape {text!r}: give N,C and 1 to 3 spatial sizes as positive integers, "
                               "e.g. 32,3,224,224 (2D), 16,3,16,112,112 (3D: N,C,D,H,W) or 8,64,1000 (1D).")
    return shape


# ----------------------------------------------------------------------------- recording
def _memory_format_of(tensor):
    """ATen's ``suggest_memory_format`` of a tensor from its strides (``torch._prims_common`` mirrors it)."""
    import torch
    try:
        from torch._prims_common import suggest_memory_format
        return suggest_memory_format(tensor)
    except ImportError:  # a torch without the mirror: channels-last where the strides are exactly that
        for fmt, ndim in ((torch.channels_last, 4), (torch.channels_last_3d, 5)):
            if tensor.ndim == ndim and tensor.is_contiguous(memory_format=fmt) and not tensor.is_contiguous():
                return fmt
        return torch.contiguous_format


def _channels_last(inp, weight) -> bool:
    """ATen's ``cudnn_conv_suggest_memory_format``: channels-last when the input or the weight suggests it
    (never for float64). A 1d convolution is judged on its 4D view (N, C, 1, L), as ATen's cuDNN path runs it."""
    import torch
    if inp.dtype == torch.float64 or weight.dtype == torch.float64:
        return False
    if weight.ndim == 3:
        inp, weight = inp.unsqueeze(2), weight.unsqueeze(2)
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(weight.ndim)
    return fmt is not None and fmt in (_memory_format_of(inp), _memory_format_of(weight))


def _output_padding_big(a: dict) -> bool:
    """ATen's ``ConvParams::is_output_padding_big``: a transposed conv with output_padding >= stride in some
    dimension (PyTorch allows it where the dilation is larger) never runs on cuDNN (``use_cudnn`` is false;
    ATen's own slow kernel does it), and no convolution's output-size rule gives its input back."""
    return bool(a["transposed"]) and any(int(p) >= int(s) for p, s in zip(a["output_padding"], a["stride"]))


def _depthwise(inp, weight, a: dict) -> bool:
    """ATen's ``ConvParams::is_depthwise``: on a GPU such a conv runs on cuDNN only where
    ``use_cudnn_depthwise`` says so (FP16 2D, a workload rule), else on PyTorch's own depthwise kernels."""
    groups = int(a["groups"])
    return (not a["transposed"] and inp.ndim in (4, 5) and groups > 1 and int(inp.shape[1]) == groups
            and int(weight.shape[0]) % groups == 0)


def _schema_args(func, args, kwargs) -> dict:
    bound = {a.name: v for a, v in zip(func._schema.arguments, args)}
    bound.update(kwargs or {})
    return bound


def _problem_fields(conv_x, conv_y, weight, a: dict) -> dict:
    """The equivalent convolution's geometry (x: its input, y: its output), 1d as H = 1, 2d with depth 1."""
    dims = weight.ndim - 2
    pad, stride, dil = list(a["padding"]), list(a["stride"]), list(a["dilation"])
    if len(pad) == 1:
        pad, stride, dil = [0] + pad, [1] + stride, [1] + dil  # ATen's view4d: the new H is 1, pad 0
    x_sp, y_sp, f_sp = list(conv_x.shape[2:]), list(conv_y.shape[2:]), list(weight.shape[2:])
    if dims == 1:
        x_sp, y_sp, f_sp = [1] + x_sp, [1] + y_sp, [1] + f_sp
    if len(x_sp) == 2:  # a 2D problem is a 3D one of depth 1
        x_sp, y_sp, f_sp, pad, stride, dil = ([1] + x_sp, [1] + y_sp, [1] + f_sp, [0] + pad, [1] + stride,
                                              [1] + dil)
    out = {"n": int(conv_x.shape[0]), "c": int(weight.shape[1]) * int(a["groups"]), "k": int(weight.shape[0]),
           "groups": int(a["groups"]), "spatial_dims": 3 if dims == 3 else 2}
    for name, values in (("x", x_sp), ("y", y_sp), ("fil", f_sp), ("pad", pad), ("stride", stride), ("dil", dil)):
        out.update({f"{name}_{s}": int(v) for s, v in zip(SPATIAL, values)})
    return out


class _ConvRecorder:
    """The dispatch mode's state: the calls so far and the forward calls' (input, weight) for backward."""

    def __init__(self):
        self.calls: list[dict] = []
        self.layer_stack: list[tuple[str, str]] = []
        self.forward_of: dict[tuple[int, int], int] = {}
        # the forward calls' tensors stay referenced until the trace ends, so that their ids are not
        # reused and autograd hands backward the same Python objects
        self.keep: list = []
        self.dtype_error: str | None = None

    def record(self, func, args, kwargs, out):
        import torch
        aten = torch.ops.aten
        if func is aten.convolution.default:
            a = _schema_args(func, args, kwargs)
            inp, weight = a["input"], a["weight"]
            index = len(self.calls)
            self.forward_of[(id(inp), id(weight))] = index
            self.keep += [inp, weight]
            layer, module = self.layer_stack[-1] if self.layer_stack else ("", "")
            transposed = bool(a["transposed"])
            # cuDNN computes a transposed conv's forward as backward-data of the conv from its output
            conv_x, conv_y = (out, inp) if transposed else (inp, out)
            directions = ["B" if transposed else "F"]
            call = self._call("convolution", a, layer, module, inp, weight, out, None, directions)
            call.update(_problem_fields(conv_x, conv_y, weight, a))
            self.calls.append(call)
            return self._restride(out, inp, weight)
        if func is aten.convolution_backward.default:
            a = _schema_args(func, args, kwargs)
            grad_out, inp, weight = a["grad_output"], a["input"], a["weight"]
            fwd = self.forward_of.get((id(inp), id(weight)))
            layer, module = (self.calls[fwd]["layer"], self.calls[fwd]["module"]) if fwd is not None else ("?", "?")
            transposed = bool(a["transposed"])
            mask = [bool(m) for m in a["output_mask"]]
            # grad_input of a transposed conv is the forward of the equivalent conv
            directions = (["F" if transposed else "B"] if mask[0] else []) + (["W"] if mask[1] else [])
            conv_x, conv_y = (grad_out, inp) if transposed else (inp, grad_out)
            call = self._call("convolution_backward", a, layer, module, inp, weight, grad_out, mask, directions)
            call["forward_call"] = -1 if fwd is None else fwd
            call.update(_problem_fields(conv_x, conv_y, weight, a))
            self.calls.append(call)
            if mask[0] and out[0] is not None:
                out = (self._restride(out[0], inp, weight), *out[1:])
            return out
        return out

    def _call(self, op, a, layer, module, inp, weight, other, mask, directions) -> dict:
        dtype = KBENCH_DTYPE.get(str(inp.dtype).removeprefix("torch."))
        if dtype is None and self.dtype_error is None:
            self.dtype_error = (f"layer {layer or '(model)'} runs a convolution in {inp.dtype}; kbench problems are "
                                "FP32, FP16 or BF16: choose --dtype fp32|fp16|bf16 or --autocast.")
        channels_last = _channels_last(inp, weight)
        dims = weight.ndim - 2
        layout = ("NDHWC" if dims == 3 else "NHWC") if channels_last else ("NCDHW" if dims == 3 else "NCHW")

        def text(values):
            return "x".join(str(int(v)) for v in values)

        return {"call": len(self.calls), "op": op, "layer": layer, "module": module,
                "transposed": int(bool(a["transposed"])), "conv_dims": dims,
                "input_shape": text(inp.shape), "input_strides": text(inp.stride()),
                "weight_shape": text(weight.shape), "weight_strides": text(weight.stride()),
                ("output_shape" if op == "convolution" else "grad_output_shape"): text(other.shape),
                "torch_dtype": str(inp.dtype).removeprefix("torch."), "dtype": dtype or "",
                "layout": layout, "stride": text(a["stride"]), "padding": text(a["padding"]),
                "dilation": text(a["dilation"]), "output_padding": text(a["output_padding"]),
                "groups": int(a["groups"]),
                "has_bias": int(a.get("bias") is not None) if op == "convolution" else int(mask[2]),
                "output_mask": "" if mask is None else "".join("1" if m else "0" for m in mask),
                "directions": ";".join(directions), "forward_call": -1,
                "cudnn": int(not _output_padding_big(a)), "depthwise": int(_depthwise(inp, weight, a))}

    @staticmethod
    def _restride(tensor, inp, weight):
        """A conv output or grad_input in the memory format cuDNN returns it in on a GPU.

        The CPU kernels' shape rules make an output channels-last only where the input is; ATen's cuDNN
        path does so where the input or the weight is, so a channels-last model fed a contiguous input
        runs channels-last from its first layer on.
        """
        import torch
        if tensor is None or not _channels_last(inp, weight) or tensor.ndim not in (4, 5):
            return tensor
        fmt = torch.channels_last if tensor.ndim == 4 else torch.channels_last_3d
        return tensor if tensor.is_contiguous(memory_format=fmt) else tensor.contiguous(memory_format=fmt)


def _dispatch_mode(recorder: _ConvRecorder):
    from torch.utils._python_dispatch import TorchDispatchMode

    class ConvDispatchMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return recorder.record(func, args, kwargs, out)

    return ConvDispatchMode()


def _module_hooks(model, recorder: _ConvRecorder):
    """Global forward hooks that keep the stack of modules running (name, class) for naming calls."""
    from torch.nn.modules import module as nn_module
    names = {id(m): name for name, m in model.named_modules()}

    def pre(mod, _inputs):
        recorder.layer_stack.append((names.get(id(mod), type(mod).__name__), type(mod).__name__))

    def post(_mod, _inputs, _output):
        if recorder.layer_stack:
            recorder.layer_stack.pop()

    return [nn_module.register_module_forward_pre_hook(pre), nn_module.register_module_forward_hook(post)]


def _fake_state(model, fake_mode, dtype, memory_format):
    """The model's parameters and buffers as fake tensors, cast and restrided as ``model.to`` would.

    ``model.to(memory_format=...)`` restrides the tensors of the format's rank (4 for channels_last, 5 for
    channels_last_3d); the user's model itself is never changed.
    """
    import torch
    rank = {torch.channels_last: 4, torch.channels_last_3d: 5}.get(memory_format)
    state, fakes = {}, {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in fakes:  # a tied weight: one fake for all its names, as functional_call requires
            state[name] = fakes[id(tensor)]
            continue
        fake = fake_mode.from_tensor(tensor)
        with fake_mode:
            if fake.is_floating_point():
                fake = fake.to(dtype)
            if rank is not None and fake.ndim == rank:
                fake = fake.contiguous(memory_format=memory_format)
            if isinstance(tensor, torch.nn.Parameter):
                fake = fake.detach().requires_grad_(tensor.requires_grad)
        fakes[id(tensor)] = fake
        state[name] = fake
    return state


def trace_model(model, input_shape, *, dtype: str = "fp32", autocast: str | None = None,
                memory_format: str = "contiguous", mode: str = "train", spec: str = "") -> Trace:
    """Trace one step of ``model`` (an ``nn.Module``) on an input of ``input_shape``: see the module docstring."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._pytree import tree_flatten
    shown = spec or type(model).__name__
    if dtype not in DTYPES:
        raise KbenchInputError(f"--dtype {dtype!r}: choose {', '.join(DTYPES)}.")
    if autocast is not None and autocast not in ("fp16", "bf16"):
        raise KbenchInputError(f"--autocast {autocast!r}: choose fp16 or bf16.")
    if memory_format not in MEMORY_FORMATS:
        raise KbenchInputError(f"--memory-format {memory_format!r}: choose {', '.join(MEMORY_FORMATS)}.")
    if mode not in MODES:
        raise KbenchInputError(f"--mode {mode!r}: choose train or inference.")
    shape = tuple(int(s) for s in input_shape)
    fmt = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last,
           "channels_last_3d": torch.channels_last_3d}[memory_format]
    needed_rank = {"channels_last": 4, "channels_last_3d": 5}.get(memory_format)
    if needed_rank is not None and len(shape) != needed_rank:
        raise KbenchInputError(f"--memory-format {memory_format} needs a {needed_rank}D input "
                               f"({'N,C,H,W' if needed_rank == 4 else 'N,C,D,H,W'}); --input-shape has "
                               f"{len(shape)} sizes. Use {'channels_last_3d' if len(shape) == 5 else 'contiguous'} "
                               "for this input.")
    torch_dtype = getattr(torch, DTYPES[dtype])
    training = mode == "train"
    recorder = _ConvRecorder()
    # a plain tensor attribute of a module (a mask, a constant) is real: the fake mode converts it on use
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    # each module's own mode, restored as it was (a frozen BatchNorm may sit in eval mode inside a training model)
    modes = [(m, m.training) for m in model.modules()]
    hooks = _module_hooks(model, recorder)
    try:
        state = _fake_state(model, fake_mode, torch_dtype, fmt)
        model.train(training)
        with fake_mode:
            x = torch.empty(shape, dtype=torch_dtype).contiguous(memory_format=fmt)
            grad = torch.enable_grad() if training else torch.no_grad()
            cast = torch.autocast("cpu", dtype=getattr(torch, DTYPES[autocast])) if autocast else None
            with _dispatch_mode(recorder), grad:
                try:
                    if cast is not None:
                        with cast:
                            out = torch.func.functional_call(model, state, (x,))
                    else:
                        out = torch.func.functional_call(model, state, (x,))
                except KbenchInputError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a shape the model cannot take is the user's input
                    raise KbenchInputError(
                        f"{shown}: the forward pass on an input of shape {','.join(map(str, shape))} "
                        f"({dtype}, {memory_format}) failed: {type(exc).__name__}: {_first_line(exc)}. Check "
                        "--input-shape (N,C,H,W for 2D models, N,C,D,H,W for 3D ones; a batch of 1 fails "
                        "BatchNorm in train mode where the spatial size reaches 1x1).") from None
                backward = False
                if training:
                    leaves = [t for t in tree_flatten(out)[0]
                              if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
                    if leaves:
                        sum(t.float().sum() for t in leaves).backward()
                        backward = True
    finally:
        for h in hooks:
            h.remove()
        for module, was_training in modes:
            module.training = was_training
    if recorder.dtype_error:
        raise KbenchInputError(f"{shown}: {recorder.dtype_error}")
    if not recorder.calls:
        raise KbenchInputError(f"{shown}: the model ran no convolution on an input of shape "
                               f"{','.join(map(str, shape))}; kbench problems are convolutions (Conv1d/2d/3d, "
                               "ConvTranspose, F.conv*). Trace a model that has some.")
    calls, problems = _tables(recorder.calls, spec or shown)
    info = {"format": TRACE_FORMAT, "kbench": __version__, "model": spec or shown,
            "input_shape": list(shape), "dtype": dtype, "autocast": autocast, "memory_format": memory_format,
            "mode": mode, "backward_ran": backward, "torch": torch.__version__,
            "python": sys.version.split()[0],
            "counts": {"calls": int(len(calls)),
                       "forward_calls": int((calls["op"] == "convolution").sum()),
                       "backward_calls": int((calls["op"] == "convolution_backward").sum()),
                       "problem_directions": int(len(problems)),
                       "by_direction": {d: int((problems["direction"] == d).sum()) for d in ("F", "B", "W")},
                       "calls_by_direction": {d: int(problems.loc[problems["direction"] == d, "multiplicity"].sum())
                                              for d in ("F", "B", "W")},
                       "transposed_calls": int(calls["transposed"].sum()),
                       "calls_not_on_cudnn": int((calls["cudnn"] == 0).sum()),
                       "spatial_dims": sorted(int(v) for v in problems["spatial_dims"].unique())}}
    return Trace(calls, problems, info)


def _first_line(exc) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]


def trace_problem_ids(rows: pd.DataFrame) -> pd.Series:
    """The problem key of each row: 2D rows exactly as ``load_problems`` keys them (:func:`problem_keys`), 3D
    rows the same canonical columns with their depth fields (:func:`kbench.sources.problem.to_miopen_key`)."""
    keys = problem_keys(rows)
    deep = (rows["spatial_dims"] == 3).to_numpy()
    if deep.any():
        can = canonical(rows[deep])
        can["spatial_dims"] = np.int8(3)
        for col in DEPTH_COLUMNS:
            can[col] = rows.loc[deep, col].astype(np.int64)
        keys[deep] = to_miopen_key(can).to_numpy()
    return keys


def _tables(records: list[dict], source: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(calls, problems): one row per call; one row per distinct problem-direction, with its calls per step."""
    calls = pd.DataFrame(records)
    geometry = PROBLEM_COLUMNS[:PROBLEM_COLUMNS.index("dtype")]
    # one row per (call, direction) it issues: a backward call computing grad_input and grad_weight is two
    # calls that never run on cuDNN are listed in calls.csv but make no problem
    terms = calls[calls["cudnn"] == 1]
    terms = terms.assign(direction=terms["directions"].str.split(";")).explode("direction")
    terms = terms[terms["direction"].fillna("") != ""]
    terms = terms[["call", "layer", "direction", "dtype", "layout", "transposed", "depthwise", *geometry,
                   "spatial_dims"]]
    terms = terms.reset_index(drop=True)
    terms["problem_id"] = trace_problem_ids(terms)
    ids = terms.groupby("call", sort=False)["problem_id"].agg(";".join)
    calls["problem_ids"] = calls["call"].map(ids).fillna("")
    calls = calls.reindex(columns=CALL_COLUMNS + [c for c in calls.columns if c not in CALL_COLUMNS])
    grouped = terms.groupby("problem_id", sort=False)
    problems = grouped.first().reset_index()
    problems["multiplicity"] = grouped.size().to_numpy()
    problems["layers"] = grouped["layer"].agg(lambda s: ";".join(dict.fromkeys(s))).to_numpy()
    problems["transposed"] = grouped["transposed"].max().to_numpy()
    problems["order"] = np.arange(len(problems))
    problems["kind"] = "model"
    problems["sources"] = source
    columns = PROBLEM_COLUMNS
    if not (problems["spatial_dims"] == 3).any():
        columns = [c for c in columns if c not in DEPTH_COLUMNS]
    return calls, problems[columns]


def write_trace(trace: Trace, out) -> Path:
    """Write ``problems.csv``, ``calls.csv`` and ``trace.json`` into folder ``out`` (each atomically)."""
    out = check_output_folder(out, option="--out")
    atomic_write_text(out / "problems.csv", trace.problems.to_csv(index=False))
    atomic_write_text(out / "calls.csv", trace.calls.to_csv(index=False))
    atomic_write_text(out / "trace.json", json.dumps(trace.info, indent=2) + "\n")
    return out

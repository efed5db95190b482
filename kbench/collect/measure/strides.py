"""The strides the collector hands cuDNN for a problem's tensors, and which problems they change.

A size-1 dimension's stride never moves a pointer, so any value describes the same memory, but
cuDNN reads the descriptor as given and picks different kernels for different strides. What PyTorch
passes is fixed by ATen:

* ``cudnn_convolution`` and its backward make their inputs ``.contiguous(memory_format)``, the format
  ``cudnn_conv_suggest_memory_format`` gives (channels-last when the input or weight is), and allocate
  the output (``y``, ``grad_input`` or ``grad_weight``) dense in that format
  (``aten/src/ATen/native/cudnn/ConvShared.cpp``);
* every cuDNN tensor descriptor, inputs and output alike, is built by
  ``getTensorDescriptorWithTypeVirtual`` (``aten/src/ATen/native/cudnn/Conv_v8.cpp``), which first calls
  ``fixSizeOneDimStride(dim, sizes, strides, channels_last)`` (``aten/src/ATen/cudnn/Descriptors.h``):
  walking the dimensions from the innermost outwards in the memory format's order (channels-last
  C, W, H, N; contiguous W, H, C, N), a size-1 dimension gets the product of the sizes inside it.

So every tensor reaches cuDNN with the dense strides of its layout, size-1 dimensions included
(:func:`pytorch_strides`): a channels-last 1x1 filter ``[128, 64, 1, 1]`` as ``(64, 1, 64, 64)``.

5-D tensors follow the same two functions: ``cudnn_conv_suggest_memory_format`` gives
``ChannelsLast3d`` when the input or the 5-D weight suggests it (``aten/src/ATen/native/ConvUtils.h``),
``getTensorDescriptorWithTypeVirtual`` counts ``ChannelsLast3d`` as channels-last, and
``fixSizeOneDimStride`` walks C, W, H, D, N (channels-last) or W, H, D, C, N (contiguous): the dense
strides of NDHWC or NCDHW, size-1 dimensions included (a channels-last 1x1x1 filter ``[64, 32, 1, 1, 1]``
as ``(32, 1, 32, 32, 32)``).

The ``legacy`` convention is what the collector passed before: an NCHW-dense tensor made
``.contiguous(memory_format=torch.channels_last)``, which PyTorch returns unchanged when it already
counts as channels-last contiguous (channel count 1, or height and width 1), so those tensors kept
NCHW strides for their size-1 dimensions (``[128, 64, 1, 1]`` as ``(64, 1, 1, 1)``). On NCHW problems
the two conventions agree; on NHWC ones they differ exactly where :func:`strides_differ` says.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: ``tensor_strides`` values of a run's environment record; a record without the key is ``legacy``
STRIDE_CONVENTIONS = ("pytorch", "legacy")
#: the convention of a run whose environment record has no ``tensor_strides`` key
UNRECORDED_CONVENTION = "legacy"

# dimensions of an [N, C, H, W] tensor from the innermost outwards
_ORDER = {"NHWC": (1, 3, 2, 0), "NCHW": (3, 2, 1, 0), "NDHWC": (1, 4, 3, 2, 0), "NCDHW": (4, 3, 2, 1, 0)}


def _dense(shape, order) -> tuple[int, ...]:
    strides = [0] * len(shape)
    inner = 1
    for d in order:
        strides[d] = inner
        inner *= max(int(shape[d]), 1)
    return tuple(strides)


def pytorch_strides(shape, layout: str) -> tuple[int, ...]:
    """The strides PyTorch's cuDNN descriptor carries for an [N, C, H, W] tensor of ``layout`` (NCHW,
    NHWC), or an [N, C, D, H, W] one (NCDHW, NDHWC)."""
    if len(shape) != len(_ORDER[layout]):
        raise ValueError(f"a {layout} tensor has {len(_ORDER[layout])} dimensions, not {len(shape)}")
    return _dense(shape, _ORDER[layout])


def legacy_strides(shape, layout: str) -> tuple[int, ...]:
    """The strides the collector passed before PyTorch's convention was adopted (2D runs only: every 3D
    run used PyTorch's)."""
    if len(shape) != 4:
        raise ValueError("the legacy stride convention exists for 2D problems only; 3D problems are "
                         "measured with the pytorch convention")
    n, c, h, w = (int(v) for v in shape)
    keeps_nchw = layout == "NHWC" and (c == 1 or (h == 1 and w == 1))
    return _dense(shape, _ORDER["NCHW" if keeps_nchw else layout])


def tensor_strides(shape, layout: str, convention: str) -> tuple[int, ...]:
    if convention not in STRIDE_CONVENTIONS:
        raise ValueError(f"tensor stride convention {convention!r}: expected one of {STRIDE_CONVENTIONS}")
    return (pytorch_strides if convention == "pytorch" else legacy_strides)(shape, layout)


def problem_tensor_shapes(problems: pd.DataFrame) -> dict[str, np.ndarray]:
    """``{"x", "w", "y"}`` -> (rows, 4) [N, C, H, W] shapes of each problem's input, filter and output."""
    col = {k: problems[k].to_numpy(np.int64) for k in ("n", "c", "k", "groups", "x_h", "x_w",
                                                        "fil_h", "fil_w", "y_h", "y_w")}
    return {"x": np.stack([col["n"], col["c"], col["x_h"], col["x_w"]], axis=1),
            "w": np.stack([col["k"], col["c"] // col["groups"], col["fil_h"], col["fil_w"]], axis=1),
            "y": np.stack([col["n"], col["k"], col["y_h"], col["y_w"]], axis=1)}


def strides_differ(problems: pd.DataFrame) -> pd.DataFrame:
    """Per problem and tensor (``x``, ``w``, ``y``), whether the two conventions give it different
    strides, and ``any``. Needs the geometry columns, ``y_h``, ``y_w`` and ``layout``.

    The vectorised form of comparing :func:`pytorch_strides` with :func:`legacy_strides`: they
    differ only for an NHWC tensor that the legacy path left NCHW-strided (C == 1, or H == W == 1)
    and whose NCHW and channels-last dense strides are not the same (a ``[N, 1, 1, 1]`` tensor's are)."""
    # the collector's problems say NHWC, the packaged tables NHWC-NHWC-NHWC (x, w and y alike)
    nhwc = problems["layout"].astype(str).str.startswith("NHWC").to_numpy()
    out = {}
    for name, s in problem_tensor_shapes(problems).items():
        n, c, h, w = (np.maximum(s[:, i], 1) for i in range(4))
        kept = nhwc & ((c == 1) | ((h == 1) & (w == 1)))
        # dense strides of the two orders (N's is c*h*w in both)
        nchw = np.stack([c * h * w, h * w, w, np.ones_like(w)], axis=1)
        nhwc_s = np.stack([c * h * w, np.ones_like(c), w * c, c], axis=1)
        out[name] = kept & (nchw != nhwc_s).any(axis=1)
    df = pd.DataFrame(out, index=problems.index)
    df["any"] = df[["x", "w", "y"]].any(axis=1)
    return df


def size_one_class(problems: pd.DataFrame) -> pd.Series:
    """A short name for which tensors the conventions tell apart and why, e.g. ``W:filter[C=1]``
    (a depthwise filter) or ``F:input[1x1]+filter[1x1]+output[1x1]``: the direction, then each
    differing tensor with its size-1 channel count (``C=1``) or 1x1 spatial size; ``-`` where none."""
    differ = strides_differ(problems)
    shapes = problem_tensor_shapes(problems)
    names = {"x": "input", "w": "filter", "y": "output"}
    parts = pd.Series("", index=problems.index)
    for k, label in names.items():
        why = np.where(shapes[k][:, 1] == 1, label + "[C=1]", label + "[1x1]")
        parts = parts.where(~differ[k], parts + np.where(parts == "", "", "+") + why)
    return pd.Series(np.where(differ["any"], problems["direction"].astype(str) + ":" + parts, "-"),
                     index=problems.index, name="size_one_class")


def run_conventions(env: pd.DataFrame) -> pd.Series:
    """Each run's tensor-stride convention (its start record; a run without the key is ``legacy``)."""
    start = env[env["phase"] == "start"].drop_duplicates("run_id", keep="last") if "phase" in env else env.iloc[:0]
    conv = start["tensor_strides"] if "tensor_strides" in start else pd.Series(index=start.index, dtype=object)
    return pd.Series(conv.fillna(UNRECORDED_CONVENTION).astype(str).to_numpy(), index=start["run_id"].astype(str))


def strides_row(env: pd.DataFrame, retimed: dict | None = None) -> str:
    """A machine-table row of the tensor-stride conventions of the runs (each run's start record; one
    without the ``tensor_strides`` key is ``legacy``, docs/tensor_strides.md). Empty when the runs differ
    and no re-timing explains it, as :func:`settings_rows` then lists each run's."""
    counts = run_conventions(env).value_counts().sort_index()
    if len(counts) != 1 and not retimed:
        return ""
    parts = [f"`{name}` ({n} run{'s' if n != 1 else ''})" for name, n in counts.items()]
    why = ""
    if len(counts) != 1:
        why = (f"; the {retimed['problem_directions']:,} problem-directions whose strides differ between the two "
               f"were all measured again with `pytorch` ({', '.join(f'`{r}`' for r in retimed['raw'])}), and on "
               "the others both conventions hand cuDNN the same strides")
    return ("| tensor strides handed to cuDNN (docs/tensor_strides.md) | " + ", ".join(parts)
            + ": `pytorch` as PyTorch's cuDNN descriptors carry them, `legacy` with NCHW strides kept for the "
            f"size-1 dimensions of NHWC tensors with one channel or a 1x1 size{why} |\n")

"""The two tensor-stride conventions (kbench.collect.measure.strides): worked by hand, against PyTorch's own
stride rules on the CPU, and the vectorised table against the scalar functions."""

import itertools

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbench.collect.measure.strides import (
    legacy_strides,
    problem_tensor_shapes,
    pytorch_strides,
    size_one_class,
    strides_differ,
    tensor_strides,
)


def test_worked_examples():
    # the example: a channels-last 1x1 filter [128, 64, 1, 1]
    assert pytorch_strides((128, 64, 1, 1), "NHWC") == (64, 1, 64, 64)
    assert legacy_strides((128, 64, 1, 1), "NHWC") == (64, 1, 1, 1)
    # a depthwise filter [32, 1, 3, 3]: channels-last C=1 -> stride 1, W -> 1, H -> 3, N -> 9
    assert pytorch_strides((32, 1, 3, 3), "NHWC") == (9, 1, 3, 1)
    assert legacy_strides((32, 1, 3, 3), "NHWC") == (9, 9, 3, 1)
    # no size-1 dimension: both conventions are the dense channels-last strides
    assert pytorch_strides((2, 3, 4, 5), "NHWC") == legacy_strides((2, 3, 4, 5), "NHWC") == (60, 1, 15, 3)
    # NCHW: both are the contiguous strides, size-1 dimensions included
    assert pytorch_strides((8, 1, 1, 1), "NCHW") == legacy_strides((8, 1, 1, 1), "NCHW") == (1, 1, 1, 1)
    assert pytorch_strides((8, 16, 1, 1), "NCHW") == (16, 1, 1, 1)


def test_unknown_convention_is_refused():
    with pytest.raises(ValueError, match="expected one of"):
        tensor_strides((1, 1, 1, 1), "NHWC", "channels_last")


def _fix_size_one_dim_stride(shape, strides, nhwc):
    """ATen's fixSizeOneDimStride (aten/src/ATen/cudnn/Descriptors.h), transcribed for 4-d tensors."""
    order = ([1] if nhwc else []) + [3, 2] + ([] if nhwc else [1]) + [0]
    strides, z = list(strides), 1
    for d in order:
        if shape[d] == 1:
            strides[d] = z
        else:
            z *= shape[d]
    return tuple(strides)


dims = st.integers(min_value=1, max_value=6).map(lambda v: v if v < 4 else v * 7)  # 1, 2, 3, 28, 35, 42


@settings(max_examples=120, deadline=None)
@given(st.tuples(dims, dims, dims, dims))
def test_against_pytorch(shape):
    torch = pytest.importorskip("torch")
    cl = torch.channels_last
    # what PyTorch hands cuDNN: the tensor made contiguous in the memory format, then fixSizeOneDimStride
    for layout, fmt in (("NHWC", cl), ("NCHW", torch.contiguous_format)):
        user = torch.empty(shape, device="meta").contiguous(memory_format=fmt)
        assert pytorch_strides(shape, layout) == _fix_size_one_dim_stride(shape, user.stride(), layout == "NHWC")
        out = torch.empty(shape, device="meta", memory_format=fmt)  # an output ATen allocates
        assert pytorch_strides(shape, layout) == _fix_size_one_dim_stride(shape, out.stride(), layout == "NHWC")
    # what the collector passed before: an NCHW-dense tensor made channels-last contiguous
    legacy = torch.empty(shape, device="meta").contiguous(memory_format=cl).stride()
    assert legacy_strides(shape, "NHWC") == legacy


def _problems(rows):
    cols = ["direction", "layout", "n", "c", "k", "groups", "x_h", "x_w", "fil_h", "fil_w", "y_h", "y_w"]
    return pd.DataFrame(rows, columns=cols)


def test_strides_differ_worked():
    probs = _problems([
        ("W", "NHWC", 32, 64, 128, 1, 56, 56, 1, 1, 56, 56),        # 1x1 filter
        ("F", "NHWC", 32, 64, 64, 64, 56, 56, 3, 3, 56, 56),        # depthwise filter (C/g = 1)
        ("B", "NHWC", 8, 256, 10, 1, 1, 1, 1, 1, 1, 1),             # 1x1 input, filter and output
        ("F", "NHWC", 1, 64, 64, 1, 56, 56, 3, 1, 56, 56),          # N = 1 and a 3x1 filter: same strides
        ("W", "NCHW", 32, 64, 128, 1, 56, 56, 1, 1, 56, 56),        # NCHW: never
        ("F", "NHWC-NHWC-NHWC", 4, 1, 1, 1, 1, 1, 1, 1, 1, 1),      # [4,1,1,1] everywhere: dense both ways
    ])
    d = strides_differ(probs)
    assert d["any"].tolist() == [True, True, True, False, False, False]
    assert d.loc[0, ["x", "w", "y"]].tolist() == [False, True, False]
    assert size_one_class(probs).tolist() == ["W:filter[1x1]", "F:filter[C=1]",
                                             "B:input[1x1]+filter[1x1]+output[1x1]", "-", "-", "-"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("FBW"), st.sampled_from(["NCHW", "NHWC"]), dims, dims, dims,
                          st.sampled_from([1, 2]), dims, dims, st.integers(1, 3), st.integers(1, 3), dims, dims),
                min_size=1, max_size=20))
def test_vectorised_matches_scalar(rows):
    rows = [(d, lay, n, c * g, k * g, g, h, w, r, s, yh, yw) for d, lay, n, c, k, g, h, w, r, s, yh, yw in rows]
    probs = _problems(rows)
    d = strides_differ(probs)
    shapes = problem_tensor_shapes(probs)
    for i, lay in enumerate(probs["layout"]):
        for t in ("x", "w", "y"):
            shape = tuple(int(v) for v in shapes[t][i])
            assert bool(d[t].iloc[i]) == (pytorch_strides(shape, lay) != legacy_strides(shape, lay))


def test_batch_stride_is_one_sample():
    # every dense stride is the product of the sizes inside it: N's is one sample's C*H*W
    for shape in itertools.product([1, 2, 5], repeat=4):
        for lay in ("NHWC", "NCHW"):
            s = pytorch_strides(shape, lay)
            assert s[0] == shape[1] * shape[2] * shape[3]


def test_card_row_names_the_shared_convention():
    from kbench.collect.measure.strides import strides_row
    legacy = pd.DataFrame([{"run_id": "a", "phase": "start"}, {"run_id": "b", "phase": "start"}])
    assert strides_row(legacy).startswith("| tensor strides handed to cuDNN (docs/tensor_strides.md) | `legacy` (2 runs):")
    mixed = legacy.assign(tensor_strides=[None, "pytorch"])
    assert strides_row(mixed) == ""  # settings_rows lists each run's convention instead

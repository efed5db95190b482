"""MIOpen key parsing: hand-worked keys and a round-trip property."""

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbench.core.errors import KbenchInputError
from kbench.sources.problem import expected_output_size, parse_miopen_keys, to_miopen_key


def parse_one(key):
    return parse_miopen_keys(pd.Series([key])).iloc[0]


def test_forward_key_fields():
    # x: N=32, C=64, 28x28; w: 128x64x3x3; pad 1, stride 2 -> y 14x14
    p = parse_one("64-28-28-3x3-128-14-14-32-1x1-2x2-1x1-0-NCHW-FP16-F")
    assert (p.n, p.c, p.k, p.x_h, p.x_w, p.y_h, p.y_w) == (32, 64, 128, 28, 28, 14, 14)
    assert (p.fil_h, p.pad_h, p.stride_h, p.dil_h, p.groups) == (3, 1, 2, 1, 1)
    assert (p["direction"], p["dtype"], p["layout"], p["spatial_dims"]) == ("F", "FP16", "NCHW", 2)
    assert p.output_size_ok and p.output_size_status == "ok"


def test_backward_keys_describe_y_first():
    # The same convolution keyed for backward data and weights: MIOpen puts dy first.
    f = parse_one("64-28-28-3x3-128-14-14-32-1x1-2x2-1x1-0-NCHW-FP16-F")
    for d in "BW":
        b = parse_one(f"128-14-14-3x3-64-28-28-32-1x1-2x2-1x1-0-NCHW-FP16-{d}")
        assert (b.c, b.k, b.x_h, b.y_h) == (64, 128, 28, 14)
        assert b.geometry_id == f.geometry_id
        assert b.output_size_ok


def test_three_layout_key_has_17_fields_and_true_layouts():
    key = "64-28-28-3x3-128-28-28-16-1x1-1x1-1x1-0-NHWC-NCHW-NCHW-FP32-B"
    assert len(key.split("-")) == 17
    p = parse_one(key)
    # direction B: the first layout is dy's (y), the last dx's (x)
    assert (p.layout_y, p.layout_w, p.layout_x) == ("NHWC", "NCHW", "NCHW")
    assert p.c == 128 and p.k == 64


def test_3d_key_and_depth1_twin_share_geometry():
    k3 = "64-1-28-28-1x3x3-128-1-28-28-16-0x1x1-1x1x1-1x1x1-0-NCDHW-FP32-F"
    k2 = "64-28-28-3x3-128-28-28-16-1x1-1x1-1x1-0-NCHW-FP32-F"
    p3, p2 = parse_one(k3), parse_one(k2)
    assert p3.spatial_dims == 3 and p2.spatial_dims == 2
    assert (p3.x_d, p3.fil_d, p3.pad_d) == (1, 1, 0)
    assert p3.geometry_id == p2.geometry_id


def test_groups_and_cast_suffixes():
    p = parse_one("32-56-56-3x3-32-56-56-8-1x1-1x1-1x1-0-NCHW-FP16-F_g32_ciFP8")
    assert p.groups == 32 and p.cast == "_ciFP8"


def test_clamped_output_size_is_flagged():
    # filter 7x7 on a 1x1 input, no padding: rule gives -5, MIOpen records 1
    p = parse_one("4-1-1-7x7-3-1-1-64-0x0-1x1-1x1-0-NCHW-FP32-F")
    assert not p.output_size_ok and p.output_size_status == "clamped"
    assert expected_output_size(1, 7, 0, 1, 1) == -5


def test_bad_key_error_names_the_key():
    with pytest.raises(KbenchInputError, match="1 problem key.*not-a-key"):
        parse_miopen_keys(pd.Series(["64-28-28-3x3-128-14-14-32-1x1-2x2-1x1-0-NCHW-FP16-F", "not-a-key"]))


dims = st.integers(1, 512)


@st.composite
def problems(draw):
    is3d = draw(st.booleans())
    row = {"direction": draw(st.sampled_from("FBW")), "dtype": draw(st.sampled_from(["FP32", "FP16", "BF16"])),
           "spatial_dims": 3 if is3d else 2, "n": draw(dims), "c": draw(dims), "k": draw(dims),
           "groups": draw(st.sampled_from([1, 1, 2, 32])), "bias": 0, "cast": ""}
    for s in ("d", "h", "w"):
        flat = s == "d" and not is3d
        row[f"x_{s}"] = 1 if flat else draw(st.integers(1, 300))
        row[f"fil_{s}"] = 1 if flat else draw(st.integers(1, 7))
        row[f"pad_{s}"] = 0 if flat else draw(st.integers(0, 3))
        row[f"stride_{s}"] = 1 if flat else draw(st.integers(1, 3))
        row[f"dil_{s}"] = 1 if flat else draw(st.integers(1, 2))
        row[f"y_{s}"] = max(1, expected_output_size(row[f"x_{s}"], row[f"fil_{s}"], row[f"pad_{s}"],
                                                    row[f"stride_{s}"], row[f"dil_{s}"]))
    default = "NCDHW" if is3d else "NCHW"
    layout = draw(st.sampled_from([default, "NHWC"])) if not is3d else default
    row["layout_x"] = row["layout_w"] = row["layout_y"] = layout
    return row


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(problems(), min_size=1, max_size=20))
def test_round_trip_key_parse_serialise(rows):
    df = pd.DataFrame(rows)
    keys = to_miopen_key(df)
    back = parse_miopen_keys(keys)
    cols = [c for c in df.columns if c not in ("layout_x", "layout_w", "layout_y")]
    pd.testing.assert_frame_equal(back[cols].reset_index(drop=True),
                                  df[cols].astype(back[cols].dtypes.to_dict()).reset_index(drop=True))
    assert (back["layout_x"].to_numpy() == df["layout_x"].to_numpy()).all()
    assert (to_miopen_key(back) == keys).all()


def test_round_trip_on_real_keys(mi100):
    sample = mi100.problems.sample(5000, random_state=0)
    assert (to_miopen_key(sample).to_numpy() == sample["problem_id"].to_numpy()).all()


def test_same_padding_output_size_is_flagged():
    # x 10, filter 3, pad 0, stride 2: the rule gives 4; MIOpen's "same" mode gives ceil(10 / 2) = 5
    p = parse_one("128-10-10-3x3-256-5-5-100-0x0-2x2-1x1-0-NCHW-FP32-F")
    assert expected_output_size(10, 3, 0, 2, 1) == 4
    assert not p.output_size_ok and p.output_size_status == "same_padding"

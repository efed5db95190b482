"""Feature engineering: hand-worked problems, and identities that hold for any problem."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbench.core.errors import KbenchInputError
from kbench.sources.problem import parse_miopen_keys, to_miopen_key
from kbench_baselines.features import Standardizer, dtype_bytes, problem_features


def feats(*keys):
    return problem_features(parse_miopen_keys(pd.Series(keys)))


def test_forward_fp32_by_hand():
    # x: N=2, C=4, 5x5; w: K=8, 3x3; pad 1, stride 1 -> y: 2 x 8 x 5x5
    f = feats("4-5-5-3x3-8-5-5-2-1x1-1x1-1x1-0-NCHW-FP32-F").iloc[0]
    assert f["flops"] == 2 * 2 * 8 * 25 * 4 * 9 == 28800
    assert f["bytes_x"] == 2 * 4 * 25 * 4 == 800
    assert f["bytes_w"] == 8 * 4 * 9 * 4 == 1152
    assert f["bytes_y"] == 2 * 8 * 25 * 4 == 1600
    assert f["arith_intensity"] == pytest.approx(28800 / (800 + 1152 + 1600))
    assert (f["gemm_m"], f["gemm_n"], f["gemm_k"]) == (8, 50, 36)  # K, N*Ho*Wo, C*R*S
    assert f["out_pixels"] == 50 and f["in_pixels"] == 50 and f["filter_size"] == 9
    assert f["is_3x3"] == 1 and f["is_1x1"] == 0 and f["stride1"] == 1 and f["pad0"] == 0
    assert f["dir_F"] == 1 and f["dtype_FP32"] == 1 and f["layout_nhwc"] == 0
    assert f["log_flops"] == pytest.approx(np.log2(1 + 28800))
    assert f["tz_kg"] == 3 and f["tz_cg"] == 2 and f["tz_n"] == 1  # 8 = 2^3, 4 = 2^2, 2 = 2^1


def test_backward_directions_by_hand():
    # the same convolution: MIOpen keys of B and W describe y first ("in" = y)
    b, w = feats("8-5-5-3x3-4-5-5-2-1x1-1x1-1x1-0-NCHW-FP32-B",
                 "8-5-5-3x3-4-5-5-2-1x1-1x1-1x1-0-NCHW-FP32-W").to_dict("records")
    for f in (b, w):
        assert (f["c"], f["k"], f["flops"], f["bytes_x"], f["bytes_y"]) == (4, 8, 28800, 800, 1600)
    assert (b["gemm_m"], b["gemm_n"], b["gemm_k"]) == (4, 50, 72)   # C, N*Hi*Wi, K*R*S
    assert (w["gemm_m"], w["gemm_n"], w["gemm_k"]) == (8, 36, 50)   # K, C*R*S, N*Ho*Wo
    assert b["dir_B"] == 1 and w["dir_W"] == 1


def test_grouped_strided_fp16_by_hand():
    # x: N=1, C=4, 6x6; K=8, groups 2, 3x3, pad 1, stride 2 -> y 3x3
    f = feats("4-6-6-3x3-8-3-3-1-1x1-2x2-1x1-0-NCHW-FP16-F_g2").iloc[0]
    assert f["c_per_group"] == 2 and f["k_per_group"] == 4
    assert f["flops"] == 2 * 1 * 8 * 9 * 2 * 9 == 2592
    assert (f["bytes_x"], f["bytes_w"], f["bytes_y"]) == (1 * 4 * 36 * 2, 8 * 2 * 9 * 2, 1 * 8 * 9 * 2)
    assert (f["gemm_m"], f["gemm_n"], f["gemm_k"]) == (4, 9, 18)
    assert f["grouped"] == 1 and f["depthwise"] == 0 and f["stride1"] == 0 and f["dtype_FP16"] == 1


def test_depthwise_nhwc_3d():
    f = feats("16-1-8-8-1x3x3-16-1-8-8-4-0x1x1-1x1x1-1x1x1-0-NHWC-NHWC-NHWC-BF16-F_g16").iloc[0]
    assert f["depthwise"] == 1 and f["layout_nhwc"] == 1 and f["is_3d"] == 1 and f["dtype_BF16"] == 1
    assert f["bytes_x"] == 4 * 16 * 64 * 2


def test_mixed_dtype_sizes_follow_the_key_order():
    p = parse_miopen_keys(pd.Series(["4-5-5-3x3-8-5-5-2-1x1-1x1-1x1-0-NCHW-FP32-F"]))
    p.loc[0, "dtype"] = "INT8INT8INT32"
    bx, bw, by, unknown = dtype_bytes(p)
    assert (bx[0], bw[0], by[0], unknown[0]) == (1, 1, 4, 0)
    p.loc[0, "direction"] = "B"  # "in" is y for backward: y is INT8, x is INT32
    bx, bw, by, _ = dtype_bytes(p)
    assert (bx[0], by[0]) == (4, 1)


def test_missing_columns_is_an_input_error():
    with pytest.raises(KbenchInputError, match="missing"):
        problem_features(pd.DataFrame({"direction": ["F"]}))


conv = st.fixed_dictionaries({
    "n": st.integers(1, 64), "cg": st.integers(1, 64), "kg": st.integers(1, 64), "g": st.integers(1, 4),
    "h": st.integers(1, 40), "w": st.integers(1, 40), "r": st.sampled_from([1, 3, 5]), "s": st.sampled_from([1, 3]),
    "pad": st.integers(0, 2), "stride": st.integers(1, 3), "direction": st.sampled_from("FBW"),
    "dtype": st.sampled_from(["FP32", "FP16", "BF16"])})


def _problem_row(c) -> dict | None:
    ho = (c["h"] + 2 * c["pad"] - c["r"]) // c["stride"] + 1
    wo = (c["w"] + 2 * c["pad"] - c["s"]) // c["stride"] + 1
    if ho < 1 or wo < 1:
        return None
    return {"direction": c["direction"], "dtype": c["dtype"], "cast": "", "layout": "NCHW",
            "layout_x": "NCHW", "layout_w": "NCHW", "layout_y": "NCHW", "spatial_dims": 2,
            "n": c["n"], "c": c["cg"] * c["g"], "k": c["kg"] * c["g"], "groups": c["g"],
            "x_d": 1, "x_h": c["h"], "x_w": c["w"], "y_d": 1, "y_h": ho, "y_w": wo,
            "fil_d": 1, "fil_h": c["r"], "fil_w": c["s"], "pad_d": 0, "pad_h": c["pad"], "pad_w": c["pad"],
            "stride_d": 1, "stride_h": c["stride"], "stride_w": c["stride"],
            "dil_d": 1, "dil_h": 1, "dil_w": 1, "bias": 0}


@settings(max_examples=20, deadline=None)
@given(st.lists(conv, min_size=1, max_size=40))
def test_gemm_sizes_match_the_flops(convs):
    rows = [r for r in map(_problem_row, convs) if r is not None]
    if not rows:
        return
    p = pd.DataFrame(rows)
    # the rows survive a round trip through MIOpen's key format: same features
    again = parse_miopen_keys(to_miopen_key(p))
    f = problem_features(p)
    pd.testing.assert_frame_equal(problem_features(again), f)
    groups = p["groups"].to_numpy()
    gemm = 2 * f["gemm_m"].to_numpy() * f["gemm_n"].to_numpy() * f["gemm_k"].to_numpy() * groups
    exact = (p["direction"] != "B").to_numpy() | (f["in_pixels"] == f["out_pixels"]).to_numpy()
    np.testing.assert_allclose(gemm[exact], f["flops"].to_numpy()[exact])
    # flops, bytes and sizes are positive and finite for every valid convolution
    assert np.isfinite(f.to_numpy()).all()
    assert (f[["flops", "bytes_x", "bytes_w", "bytes_y", "gemm_m", "gemm_n", "gemm_k"]] > 0).all().all()


def test_standardizer_round_trip():
    f = feats("4-5-5-3x3-8-5-5-2-1x1-1x1-1x1-0-NCHW-FP32-F", "64-28-28-1x1-32-28-28-16-0x0-1x1-1x1-0-NCHW-FP16-F")
    s = Standardizer().fit(f, ["log_c", "log_k", "dir_B"])
    z = s.transform(f)
    assert np.allclose(z.mean(axis=0), 0) and np.all(z[:, 2] == 0)  # constant column stays 0
    assert Standardizer.from_dict(s.to_dict()) == s


# ------------------------------------------------------------------------------------ kernel features
def test_kernel_features_engine_knobs_by_hand():
    from kbench_baselines.features import KNOB_ABSENT, kernel_features

    t = kernel_features(["eng10_k2=23_k13=0", "eng0", "eng7_k13=-1"])
    assert list(t.columns) == ["engine=eng0", "engine=eng7", "engine=eng10", "knob_k2", "knob_k13"]
    assert t.to_numpy().tolist() == [
        [0, 0, 1, 23, 0],
        [1, 0, 0, KNOB_ABSENT, KNOB_ABSENT],
        [0, 1, 0, KNOB_ABSENT, -1],
    ]


def test_kernel_features_one_hot_for_named_solvers():
    from kbench_baselines.features import kernel_features

    names = ["ConvBinWinograd3x3U", "eng0", "GemmFwd1x1_0_1"]  # not all engine configurations
    t = kernel_features(names)
    assert list(t.columns) == [f"kernel={k}" for k in names]
    assert (t.to_numpy() == np.eye(3)).all()
    assert list(kernel_features(["eng0", "eng3"], "onehot").columns) == ["kernel=eng0", "kernel=eng3"]


def test_kernel_features_refuses_what_it_cannot_encode():
    from kbench_baselines.features import kernel_features

    with pytest.raises(KbenchInputError, match="GemmFwd1x1_0_1"):
        kernel_features(["eng0", "GemmFwd1x1_0_1"], "engine_knobs")
    with pytest.raises(KbenchInputError, match="one of"):
        kernel_features(["eng0"], "hashing")


@given(st.lists(st.tuples(st.integers(0, 60), st.dictionaries(st.integers(0, 30), st.integers(-1, 2000),
                                                              max_size=5)),
                min_size=1, max_size=30))
@settings(deadline=None)  # a shared 2-core machine made one example take 390 ms: timings are not under test
def test_engine_knob_features_identify_each_configuration(configs):
    """Two names get the same feature row only when they are the same configuration."""
    from kbench_baselines.features import kernel_features

    names = sorted({f"eng{e}" + "".join(f"_k{k}={v}" for k, v in sorted(knobs.items())) for e, knobs in configs})
    rows = kernel_features(names, "engine_knobs").to_numpy()
    assert len({tuple(r) for r in rows}) == len(names)

"""3D convolutions in the collector: the problems file, the 5-D strides, the records, the 3D corpus,
the batch-free splits and the refusal to mix 2D and 3D. Values worked by hand or from definitions."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbench.collect.measure import corpus3d
from kbench.collect.measure.cudnn import conv_args, conv_flop, load_problems, record_columns, tensor_shapes
from kbench.collect.measure.strides import legacy_strides, pytorch_strides
from kbench.core.errors import KbenchInputError
from kbench.sources.problem import parse_miopen_keys
from kbench.sources.splits import HELD_OUT_NETWORKS_3D, assign_held_out_networks_split, assign_random_split

STEM = {"n": 4, "c": 3, "k": 64, "x_d": 16, "x_h": 112, "x_w": 112, "fil_d": 3, "fil_h": 7, "fil_w": 7,
        "pad_d": 1, "pad_h": 3, "pad_w": 3, "stride_d": 1, "stride_h": 2, "stride_w": 2}


def _csv(tmp_path, rows, name="p.csv"):
    path = tmp_path / name
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_a_3d_problems_file_gives_3d_keys(tmp_path):
    # r3d_18's stem: 16x112x112 -> 16x56x56 (floor((112 + 6 - 7) / 2) + 1 = 56; depth (16 + 2 - 3) + 1 = 16)
    df = load_problems(_csv(tmp_path, [STEM]), dtypes=("BF16",), layouts=("NDHWC",))
    assert list(df["direction"]) == ["F", "B", "W"]
    assert (df["spatial_dims"] == 3).all() and df.loc[0, "y_d"] == 16 and df.loc[0, "y_h"] == 56
    assert df.loc[0, "key"] == "3-16-112-112-3x7x7-64-16-56-56-4-1x3x3-1x2x2-1x1x1-0-NDHWC-NDHWC-NDHWC-BF16-F"
    # B and W keys are direction-relative: their leading fields describe the output y
    assert df.loc[1, "key"].startswith("64-16-56-56-3x7x7-3-16-112-112-4-")
    back = parse_miopen_keys(df["key"])
    assert (back["spatial_dims"] == 3).all()
    assert back[["c", "k", "x_d", "y_d", "fil_d", "pad_d", "stride_h"]].iloc[0].tolist() == [3, 64, 16, 16, 3, 1, 2]


def test_layouts_name_memory_formats_in_either_rank(tmp_path):
    # NHWC asked of a 3D file means channels-last: NDHWC; NCDHW asked of a 2D file means NCHW
    three = load_problems(_csv(tmp_path, [STEM]), dtypes=("FP32",), layouts=("NHWC",))
    assert set(three["layout"]) == {"NDHWC"}
    two = load_problems(_csv(tmp_path, [{"n": 1, "c": 8, "k": 8, "x_h": 8, "x_w": 8, "fil_h": 3, "fil_w": 3}], "two.csv"),
                        dtypes=("FP32",), layouts=("NCDHW",))
    assert set(two["layout"]) == {"NCHW"} and "spatial_dims" not in two


@pytest.mark.parametrize("row, words", [
    ({**STEM, "layout": "NHWC"}, "column layout has ['NHWC']"),  # a 2D layout in a 3D file
    ({**STEM, "x_d": 2, "fil_d": 5, "pad_d": 0}, "not valid convolutions"),  # empty output depth
])
def test_bad_3d_rows(tmp_path, row, words):
    with pytest.raises(KbenchInputError, match=words.replace("[", r"\[").replace("]", r"\]")):
        load_problems(_csv(tmp_path, [row]))


def test_a_depth_column_without_x_d_is_refused(tmp_path):
    row = {"n": 1, "c": 8, "k": 8, "x_h": 8, "x_w": 8, "fil_h": 3, "fil_w": 3, "fil_d": 3}
    with pytest.raises(KbenchInputError, match="without x_d"):
        load_problems(_csv(tmp_path, [row]))


def test_shapes_arguments_and_flop_of_a_3d_problem(tmp_path):
    p = load_problems(_csv(tmp_path, [STEM]), dtypes=("FP16",), layouts=("NCDHW",)).iloc[0].to_dict()
    assert tensor_shapes(p) == ((4, 3, 16, 112, 112), (64, 3, 3, 7, 7), (4, 64, 16, 56, 56))
    assert conv_args(p) == {"stride": (1, 2, 2), "padding": (1, 3, 3), "dilation": (1, 1, 1), "groups": 1}
    # 2 * N * K * C * FD*FH*FW * YD*YH*YW
    assert conv_flop(p) == 2.0 * 4 * 64 * 3 * (3 * 7 * 7) * (16 * 56 * 56)
    assert record_columns(p)[-7:] == ["spatial_dims", "x_d", "fil_d", "pad_d", "stride_d", "dil_d", "y_d"]


def test_a_2d_problem_keeps_its_record_and_flop(tmp_path):
    p = load_problems(_csv(tmp_path, [{"n": 2, "c": 8, "k": 16, "x_h": 9, "x_w": 7, "fil_h": 3, "fil_w": 1,
                                       "groups": 2}]), dtypes=("FP32",), layouts=("NHWC",)).iloc[0].to_dict()
    assert "x_d" not in record_columns(p) and record_columns(p)[-2:] == ["y_h", "y_w"]
    assert conv_args(p) == {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 2}
    # the formula every 2D record was made with: 2 * n * k * (c // g) * fh * fw * yh * yw
    assert conv_flop(p) == 2.0 * 2 * 16 * (8 // 2) * 3 * 1 * 7 * 7


def test_5d_strides_worked_examples():
    # a channels-last 1x1x1 filter [64, 32, 1, 1, 1]: C 1, W/H/D 32 (size-1 dims get the product inside), N 32
    assert pytorch_strides((64, 32, 1, 1, 1), "NDHWC") == (32, 1, 32, 32, 32)
    # a depthwise filter [56, 1, 3, 3, 3] channels-last: C 1, W 1, H 3, D 9, N 27
    assert pytorch_strides((56, 1, 3, 3, 3), "NDHWC") == (27, 1, 9, 3, 1)
    assert pytorch_strides((2, 3, 4, 5, 6), "NCDHW") == (360, 120, 30, 6, 1)
    with pytest.raises(ValueError, match="5 dimensions"):
        pytorch_strides((2, 3, 4, 5), "NDHWC")
    with pytest.raises(ValueError, match="2D problems only"):
        legacy_strides((2, 3, 4, 5, 6), "NDHWC")


def _fix_size_one_dim_stride(shape, strides, channels_last):
    """ATen's fixSizeOneDimStride (aten/src/ATen/cudnn/Descriptors.h), transcribed for any rank: the walk
    C, then the spatial dimensions from the innermost, then N (channels-last), or spatial, C, N."""
    spatial = list(range(len(shape) - 1, 1, -1))
    order = ([1] + spatial if channels_last else spatial + [1]) + [0]
    strides, z = list(strides), 1
    for d in order:
        if shape[d] == 1:
            strides[d] = z
        else:
            z *= shape[d]
    return tuple(strides)


dims = st.integers(min_value=1, max_value=5).map(lambda v: v if v < 3 else v * 5)  # 1, 2, 15, 20, 25


@settings(max_examples=120, deadline=None)
@given(st.tuples(dims, dims, dims, dims, dims), st.sampled_from(["NCDHW", "NDHWC"]))
def test_5d_strides_against_pytorch(shape, layout):
    torch = pytest.importorskip("torch")
    fmt = torch.channels_last_3d if layout == "NDHWC" else torch.contiguous_format
    # what PyTorch hands cuDNN: the tensor made dense in the memory format, then fixSizeOneDimStride
    dense = torch.empty(shape, memory_format=fmt).stride()
    assert pytorch_strides(shape, layout) == _fix_size_one_dim_stride(shape, dense, layout == "NDHWC")


def _layers():
    """Two tiny traced networks: a video stem shared by both at two batch kinds, and one layer of each."""
    base = {"groups": 1, "pad_d": 1, "pad_h": 1, "pad_w": 1, "stride_d": 1, "stride_h": 1, "stride_w": 1,
            "dil_d": 1, "dil_h": 1, "dil_w": 1, "fil_d": 3, "fil_h": 3, "fil_w": 3, "x_d": 8, "x_h": 28, "x_w": 28}
    rows = [dict(base, network="r3d_18", kind="video", layer="layer1.0", c=64, k=64),
            dict(base, network="s3d", kind="video", layer="b.0", c=64, k=64),
            dict(base, network="unet3d", kind="volumetric", layer="enc1", c=32, k=32),
            dict(base, network="x3d_m", kind="video", layer="dw", c=48, k=48, groups=48)]
    for network in HELD_OUT_NETWORKS_3D:
        if network not in {r["network"] for r in rows}:
            rows.append(dict(base, network=network, kind="volumetric", layer="l", c=16, k=24))
    return pd.DataFrame(rows)


def test_network_geometries_take_their_kinds_batches_and_name_every_source():
    geo = corpus3d.network_geometries(_layers())
    shared = geo[(geo["c"] == 64) & (geo["n"] == 4)]
    assert shared["sources"].tolist() == ["r3d_18/layer1.0;s3d/b.0"]
    assert sorted(geo.loc[geo["c"] == 64, "n"]) == [1, 4, 16]  # video: 1, 4 and 16 clips
    assert sorted(geo.loc[geo["c"] == 32, "n"]) == [1, 2, 4]  # volumetric: 1, 2 and 4 patches


def test_the_corpus_alternates_kinds_and_leaves_out_ncdhw_depthwise():
    report = {}
    corpus = corpus3d.build_corpus_3d(_layers(), n_random=30, seed=0, report=report)
    assert corpus.equals(corpus3d.build_corpus_3d(_layers(), n_random=30, seed=0))  # deterministic
    head = corpus.head(2 * min(report["network"]["rows"], report["random"]["rows"]))
    assert (head["kind"].iloc[::2] == "network").all() and (head["kind"].iloc[1::2] == "random").all()
    depthwise = (corpus["groups"] == corpus["c"]) & (corpus["groups"] > 1)
    assert not (depthwise & (corpus["layout"] == "NCDHW")).any()
    assert (depthwise & (corpus["layout"] == "NDHWC")).any()
    # x3d_m's depthwise layer: 3 batches x 3 dtypes left out in NCDHW
    assert report["network"]["left_out_not_cudnn"] == 9
    assert list(corpus.columns) == corpus3d.CORPUS_COLUMNS_3D


def test_the_corpus_round_trips_through_the_problems_reader(tmp_path):
    corpus = corpus3d.build_corpus_3d(_layers(), n_random=5, seed=1)
    path = tmp_path / "c.csv"
    corpus.to_csv(path, index=False)
    problems = load_problems(path)
    assert len(problems) == 3 * len(corpus) and (problems["spatial_dims"] == 3).all()
    assert (problems["y_d"].to_numpy() == corpus.loc[corpus.index.repeat(3), "y_d"].to_numpy()).all()


def _problems(layers, batches=(1, 4, 16)):
    from kbench.sources.problem import geometry_ids
    rows = layers.drop(columns=["network", "kind", "layer"]).merge(pd.DataFrame({"n": list(batches)}), how="cross")
    for s in ("d", "h", "w"):
        rows[f"y_{s}"] = rows[f"x_{s}"]
    rows["geometry_id"] = geometry_ids(rows)
    return rows


def test_splits_ignore_the_batch_and_hold_out_whole_networks():
    layers = _layers()
    prob = _problems(layers)
    random = assign_random_split(prob, ignore_batch=True)
    # every layer sits in one part at all its batch sizes
    assert prob.assign(part=random).groupby(["c", "k", "groups"])["part"].nunique().max() == 1
    networks = assign_held_out_networks_split(prob, layers)
    held = prob["c"].isin([64, 32, 16])  # r3d_18's layer (shared with s3d), unet3d's, the other held-out ones'
    assert (networks[held] == "test").all() and (networks[~held] != "test").all()
    with pytest.raises(ValueError, match="no layer"):
        assign_held_out_networks_split(prob, layers, held_out=("no_such_net",))


def test_merge_refuses_to_mix_2d_and_3d_folders(tmp_path):
    from collect_fakes import SyntheticCollector, write_problems_csv

    from kbench.collect.measure.cudnn import collect
    from kbench.collect.raw_store.merge import merge
    from kbench.collect.raw_store.writer import load_records
    two = write_problems_csv(tmp_path / "two.csv", 2)
    three = _csv(tmp_path, [STEM], "three.csv")
    collect(two, tmp_path / "raw2", progress=False, make_collector=SyntheticCollector)
    collect(three, tmp_path / "raw3", dtypes=("BF16",), layouts=("NDHWC",), progress=False,
            make_collector=SyntheticCollector)
    recorded = load_records(tmp_path / "raw3", "problems")
    assert (recorded["spatial_dims"] == 3).all() and recorded["x_d"].tolist() == [16, 16, 16]
    with pytest.raises(KbenchInputError, match="mix 2D and 3D convolutions") as err:
        merge([tmp_path / "raw2", tmp_path / "raw3"], out=tmp_path / "merged")
    assert "raw2: 2D" in str(err.value) and "raw3: 3D" in str(err.value)
    assert not (tmp_path / "merged").exists()
    # one kind merges
    merge([tmp_path / "raw3"], out=tmp_path / "merged3")
    assert len(load_records(tmp_path / "merged3", "problems")) == 3

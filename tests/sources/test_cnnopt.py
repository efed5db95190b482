"""The PACT 2022 tile-size converter (kbench.sources.cnnopt) on synthetic text and on the real files."""

import math

import numpy as np
import pandas as pd
import pytest

from kbench.core.errors import KbenchInputError
from kbench.sources.cnnopt import (
    CUDNN_FWD_ALGOS,
    REFERENCE_ALL,
    REFERENCE_STANDARD,
    RS_FAILED_LAUNCH_LINE,
    SPLIT_NAME,
    canonical_problems,
    read_cudnn_profile,
    read_tile_text,
    resolve_gpu,
)
from kbench.sources.cnnopt_card import render_data_card
from kbench.sources.cnnopt_features import GPU_SPECS
from kbench.sources.splits import assign_networks_split

GPUS = ("v100", "rtx2080ti")


# ----------------------------------------------------------------------------- parsing, synthetic


def test_read_tile_text_header_error_lines_and_blank_lines():
    text = ("K,H,W,C,R,TK,TH,TW,BK,BH,BW,CMult,Time\n"
            "64, 8, 8, 16, 3, 1, 1, 8, 32, 1, 1, 1, 0.5\n"
            f"{RS_FAILED_LAUNCH_LINE}\n"
            "64, 8, 8, 16, 3, 2, 1, 8, 32, 1, 1, 1, 0.01\n"
            "\n"
            "64, 8, 8, 16, 3, 4, 1, 8, 32, 1, 1, 2, 0.25 \n")
    rows, stats = read_tile_text(text, "RS")
    assert stats == {"lines": 5, "error_lines": 1, "header": True, "rows": 3}
    assert rows["TK"].tolist() == [1, 2, 4]
    assert rows["CMult"].tolist() == [1, 1, 2]
    assert rows["time_ms"].tolist() == [0.5, 0.01, 0.25]
    assert rows["line"].tolist() == [2, 4, 6]
    assert rows["after_error"].tolist() == ["", RS_FAILED_LAUNCH_LINE, ""]


def test_read_tile_text_without_header_s_schema():
    rows, stats = read_tile_text("512, 936, 936, 16, 3, 1, 9, 2, 1, 8, 4, 1, 13, 1, 16.656416 \n", "S")
    assert not stats["header"]
    assert rows.iloc[0][["K", "H", "C", "R", "TW", "TK", "WW", "WK", "BW", "BK"]].tolist() == \
        [512, 936, 16, 3, 9, 2, 8, 4, 13, 1]


@pytest.mark.parametrize("text", [
    "K,H,W,C,R,TH,TW,TK,WH,WW,WK,BH,BW,BK,Time\n1,1,1,1,1,1,1,1,1,1,1,1,1,1\n",  # S header for RS
    "64, 8, 8, 16, 3, 1, 1, 8, 32, 1, 1, 0.5\n",  # one field short
    "64, 8, 8, 16, 3, 1, 1, 8, 32, 1, 1, 1, x\n",  # non-numeric time
])
def test_read_tile_text_rejects_malformed(text):
    with pytest.raises(KbenchInputError):
        read_tile_text(text, "RS")


def test_problem_key_is_the_padding_free_convolution():
    geo = pd.DataFrame({"K": [64, 64], "H": [56, 112], "W": [56, 112], "C": [64, 3], "R": [3, 7],
                        "stride": [1, 2]})
    p = canonical_problems(geo)
    # stride 1: x = 56 + 3 - 1 = 58; stride 2: x = (112 - 1) * 2 + 7 = 229; pad 0
    assert p["problem_id"].tolist() == [
        "64-58-58-3x3-64-56-56-1-0x0-1x1-1x1-0-NCHW-FP32-F",
        "3-229-229-7x7-64-112-112-1-0x0-2x2-1x1-0-NCHW-FP32-F",
    ]
    assert p["output_size_ok"].all()


def test_resolve_gpu_accepts_dataset_names():
    assert resolve_gpu("v100-tiles") == "v100"
    with pytest.raises(KbenchInputError, match="Did you mean"):
        resolve_gpu("v10")


# ----------------------------------------------------------------------------- real files, hand-checked rows


def _row(tables, pid, kernel):
    rt = tables["runtimes"]
    return rt[(rt["problem_id"] == pid) & (rt["kernel"] == kernel)]


def test_hand_checked_rows_v100(tiles):
    tables, _ = tiles["v100"]
    # lop-v100/dir_rs3_half_dataset/Reg.timesForProblem128x28x28_128_3.csv.gz, line 2:
    # 128,28,28,128,3,2,7,7,32,4,1,8,0.11827
    r = _row(tables, "128-30-30-3x3-128-28-28-1-0x0-1x1-1x1-0-NCHW-FP32-F", "RS_TK2_TH7_TW7_BK32_BH4_BW1_CM8")
    assert len(r) == 1 and r["time_ms"].iloc[0] == pytest.approx(0.11827)
    assert r[["tile_k", "tile_h", "tile_w", "warp_k", "warp_h", "warp_w", "block_k", "block_h", "block_w",
              "c_split"]].iloc[0].tolist() == [2, 7, 7, 32, 1, 1, 1, 4, 1, 8]
    # lop-v100/dir_s3_half_dataset/Reg.timesForProblem128x28x28_128_3.csv.gz, line 2:
    # 128,28,28,128,3,1,7,4,1,4,8,4,1,1,0.15974  (TH,TW,TK,WH,WW,WK,BH,BW,BK)
    r = _row(tables, "128-30-30-3x3-128-28-28-1-0x0-1x1-1x1-0-NCHW-FP32-F", "S_TH1_TW7_TK4_WH1_WW4_WK8_BH4_BW1_BK1")
    assert len(r) == 1 and r["time_ms"].iloc[0] == pytest.approx(0.15974)
    assert r[["tile_k", "tile_w", "warp_k", "warp_w", "block_h", "c_split"]].iloc[0].tolist() == [4, 7, 8, 4, 4, 1]
    # lop-v100/dir_st2_dataset/Reg.timesForProblem64x112x112_3_7.csv.gz, line 2: 64,112,112,3,7,2,1,4,32,1,2,3,0.10035
    r = _row(tables, "3-229-229-7x7-64-112-112-1-0x0-2x2-1x1-0-NCHW-FP32-F", "RS2_TK2_TH1_TW4_BK32_BH1_BW2_CM3")
    assert len(r) == 1 and r["time_ms"].iloc[0] == pytest.approx(0.10035)
    assert r["schema"].iloc[0] == "RS2"


def test_failed_launch_row_after_rs_error_is_dropped(tiles):
    tables, report = tiles["v100"]
    pid = "32-67-67-3x3-1024-65-65-1-0x0-1x1-1x1-0-NCHW-FP32-F"
    # train_set_c_rskernel.csv.gz lines 613-615: a valid row, the error line, the failed row (0.014240 ms)
    assert _row(tables, pid, "RS_TK4_TH1_TW13_BK32_BH13_BW1_CM1")["time_ms"].tolist() == [pytest.approx(0.513408)]
    assert _row(tables, pid, "RS_TK4_TH5_TW5_BK32_BH13_BW1_CM1").empty
    assert report["failed_launch_rows_dropped"] > 0
    assert report["failed_launch_rows_below_problem_median"] == report["failed_launch_rows_dropped"]


def test_time_below_peak_floor_is_dropped(tiles):
    tables, report = tiles["v100"]
    # test_set_3_skernel.csv.gz line 4: 512,936,936,16,3, 1,9,16,1,8,4,1,13,1, 0.002016 ms, while
    # 2*512*16*936*936*9 FLOPs at V100 peak take > 8 ms: a launch that did not run.
    pid = "16-938-938-3x3-512-936-936-1-0x0-1x1-1x1-0-NCHW-FP32-F"
    assert _row(tables, pid, "S_TH1_TW9_TK16_WH1_WW8_WK4_BH1_BW13_BK1").empty
    assert _row(tables, pid, "S_TH1_TW9_TK2_WH1_WW8_WK4_BH1_BW13_BK1")["time_ms"].tolist() == [pytest.approx(16.656416)]
    assert report["below_floor_rows_dropped"] > 0


@pytest.mark.parametrize("gpu", GPUS)
def test_no_kept_time_beats_the_peak_fp32_rate(tiles, gpu):
    tables, _ = tiles[gpu]
    rt = tables["runtimes"].merge(tables["problems"], on="problem_id")
    flops = 2.0 * rt["k"] * rt["c"] * rt["y_h"] * rt["y_w"] * rt["fil_h"] * rt["fil_w"]
    assert (rt["time_ms"] * 1e-3 >= flops / GPU_SPECS[gpu].peak_fp32_flops).all()


def test_row_after_s_harness_error_is_kept(tiles):
    tables, _ = tiles["rtx2080ti"]
    # lop-2080/dir_s3_half_dataset/train_set_3_skernel.csv.gz lines 15-16: an error line, then a valid row
    r = _row(tables, "256-266-266-3x3-128-264-264-1-0x0-1x1-1x1-0-NCHW-FP32-F",
             "S_TH1_TW11_TK2_WH1_WW2_WK16_BH1_BW12_BK1")
    assert r["time_ms"].tolist() == [pytest.approx(5.727520)]


@pytest.mark.parametrize("gpu", GPUS)
def test_benchmark_layers_are_the_reg_files(tiles, cnnopt_raw, gpu):
    from kbench.sources.cnnopt import FOLDER_SCHEMA, SCHEMAS
    from kbench.sources.cnnopt import GPUS as CFG

    files = list((cnnopt_raw / CFG[gpu]["tiles"]).glob("*/Reg.timesForProblem*.csv.gz"))
    # a layer = (stride of its folder's schema, K x H x W _ C _ R of its name)
    expected = {(SCHEMAS[FOLDER_SCHEMA[f.parent.name]]["stride"], f.name) for f in files}
    tables, report = tiles[gpu]
    pr = tables["problems"]
    layers = pr[pr["role"] == "layer"]
    assert len(layers) == len(expected) == report["benchmark_layers"]
    assert layers["complete"].all() and not pr.loc[pr["role"] == "random", "complete"].any()
    assert (layers["network"] != "").all() and (layers["layer"] != "").all()
    assert not pr["censored"].any()


def test_overlap_of_training_and_test_removed(tiles):
    _, rep_v = tiles["v100"]
    tables, rep = tiles["rtx2080ti"]
    assert rep_v["overlap_problems"] == []
    # ResNet-18 res2 (3x3, 64->64, 56x56) is also a random-size S-kernel training problem on the 2080 Ti
    pid = "64-58-58-3x3-64-56-56-1-0x0-1x1-1x1-0-NCHW-FP32-F"
    assert rep["overlap_problems"] == [pid]
    p = tables["problems"].set_index("problem_id").loc[pid]
    assert p["role"] == "layer"
    # the layer keeps exactly its two Reg files: 2317 - 1 RS rows and 114 - 1 S rows (header lines)
    assert p["n_listed"] == 2316 + 113


@pytest.mark.parametrize("gpu", GPUS)
def test_runtime_table_integrity(tiles, gpu):
    tables, _ = tiles[gpu]
    rt, pr, kn = tables["runtimes"], tables["problems"], tables["kernels"]
    assert (rt["time_ms"] > 0).all()
    assert not rt.duplicated(["problem_id", "kernel"]).any()
    assert set(rt["problem_id"]) == set(pr["problem_id"]) and pr["problem_id"].is_unique
    assert set(rt["kernel"]) == set(kn["kernel"])
    # rank: 0..n-1 in time order within each problem
    srt = rt.sort_values(["problem_id", "rank"])
    assert (srt.groupby("problem_id")["rank"].transform(lambda s: (s.to_numpy() == np.arange(len(s))).all())).all()
    assert (srt.groupby("problem_id")["time_ms"].diff().dropna() >= 0).all()
    counts = rt.groupby("problem_id").size()
    assert (pr.set_index("problem_id")["n_listed"] == counts.reindex(pr["problem_id"]).to_numpy()).all()
    assert (pr["n_raw"] >= pr["n_listed"]).all()
    assert (kn.set_index("kernel")["n_problems"] == rt.groupby("kernel").size().reindex(kn["kernel"]).to_numpy()).all()
    assert kn["n_best"].sum() == len(pr)


@pytest.mark.parametrize("gpu", GPUS)
def test_split_properties(tiles, gpu):
    tables, _ = tiles[gpu]
    pr, sp = tables["problems"], tables["splits"]
    assert sp["problem_id"].is_unique and set(sp["problem_id"]) == set(pr["problem_id"])
    assert set(sp[SPLIT_NAME]) == {"train", "valid", "test"}
    m = pr.merge(sp, on="problem_id")
    assert (m["role"].eq("layer") == m[SPLIT_NAME].eq("test")).all()
    # grouped: one part per geometry; no geometry on both sides of train/valid vs test
    assert (m.groupby("geometry_id")[SPLIT_NAME].nunique() == 1).all()
    train_geo = set(m.loc[m[SPLIT_NAME] != "test", "geometry_id"])
    assert not train_geo & set(m.loc[m[SPLIT_NAME] == "test", "geometry_id"])
    # stable: the project's networks split with the layers as network layers
    again = assign_networks_split(pr, pr[pr["role"] == "layer"])
    assert (again.to_numpy() == m.set_index("problem_id").loc[pr["problem_id"], SPLIT_NAME].to_numpy()).all()


# ----------------------------------------------------------------------------- cuDNN reference


def test_cudnn_profile_sums_kernel_launches(cnnopt_raw):
    import gzip

    text = gzip.open(cnnopt_raw / "cuDNN/profile-v100/cres2-algo1.csv.gz", "rt").read()
    rec = read_cudnn_profile(text)
    # five launches (layout transforms + the conv kernel): 7,392 + 6,080 + 3,872 + 47,648 + 6,624 ns
    assert rec["n_launches"] == 5
    assert rec["time_ms"] == pytest.approx((7392 + 6080 + 3872 + 47648 + 6624) * 1e-6)
    assert rec["algorithm_line"] == CUDNN_FWD_ALGOS[1] == "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM"
    assert rec["input"] == (1, 64, 58, 58) and rec["output"] == (1, 64, 56, 56)
    unsupported = read_cudnn_profile(gzip.open(cnnopt_raw / "cuDNN/profile-v100/cres2-algo3.csv.gz", "rt").read())
    assert math.isnan(unsupported["time_ms"]) and "NOT_SUPPORTED" in unsupported["error"]


def test_reference_times_hand_checked(tiles):
    tables, _ = tiles["v100"]
    ref = tables["references"].set_index(["problem_id", "reference"])
    pid = "64-58-58-3x3-64-56-56-1-0x0-1x1-1x1-0-NCHW-FP32-F"  # ResNet-18 res2
    # algo0 130,752 ns; algo1 71,616 ns (above); algo2 66,240 + 98,592 ns; algo3 not supported
    std = ref.loc[(pid, REFERENCE_STANDARD)]
    assert std["time_ms"] == pytest.approx(0.071616) and std["algorithm"] == CUDNN_FWD_ALGOS[1]
    # WINOGRAD: 6,784 + 32,896 ns, faster than every other algorithm of this layer
    best = ref.loc[(pid, REFERENCE_ALL)]
    assert best["time_ms"] == pytest.approx(0.03968) and best["algorithm"] == CUDNN_FWD_ALGOS[6]


@pytest.mark.parametrize("gpu", GPUS)
def test_references_cover_the_layers(tiles, gpu):
    tables, _ = tiles[gpu]
    pr, ref = tables["problems"], tables["references"]
    layers = set(pr.loc[pr["role"] == "layer", "problem_id"])
    for name in (REFERENCE_STANDARD, REFERENCE_ALL):
        sub = ref[ref["reference"] == name]
        assert set(sub["problem_id"]) == layers and sub["problem_id"].is_unique
    std = ref[ref["reference"] == REFERENCE_STANDARD]
    assert not std["algorithm"].str.contains("FFT|WINOGRAD").any()
    both = std.merge(ref[ref["reference"] == REFERENCE_ALL], on="problem_id", suffixes=("_s", "_a"))
    assert (both["time_ms_a"] <= both["time_ms_s"]).all()


# ----------------------------------------------------------------------------- data card


@pytest.mark.parametrize("gpu", GPUS)
def test_data_card_numbers_come_from_the_tables(tiles, gpu):
    tables, report = tiles[gpu]
    card = render_data_card(gpu, tables, report)
    assert f"All {len(tables['problems'])} problems" in card
    assert "7e118b5e7827ffa1254cc681a2c98f2dac67f92d" in card and "none stated" in card
    layers = tables["problems"].query("role == 'layer'")
    assert all(f"`{pid}`" in card for pid in layers["problem_id"])
    # kernel schemas per split part: the table rows and the multi-schema counts come from the tables
    pr, sp = tables["problems"], tables["splits"].set_index("problem_id")["networks"]
    part = sp.reindex(pr["problem_id"]).to_numpy()
    for q in ("train", "valid", "test"):
        sch = pr.loc[part == q, "schemas"].astype(str)
        assert f"{q} {int(sch.str.contains(',').sum())} of {len(sch)}" in card
        row = f"| {q} | " + " | ".join(str(int((sch == c).sum())) for c in ("RS", "RS2", "S", "RS,S")) + " |"
        assert row in card
    assert "| part | RS | RS2 | S | RS,S |" in card

"""The analytic kernel model of the tile datasets (kbench.sources.cnnopt_features), worked by hand."""

import numpy as np
import pandas as pd
import pytest

from kbench.core.errors import KbenchInputError
from kbench.sources.cnnopt_features import FEATURE_COLUMNS, GPU_SPECS, kernel_model, tile_features

PROBLEM = {"k": 128, "c": 128, "y_h": 28, "y_w": 28, "fil_h": 3, "fil_w": 3, "stride_h": 1, "stride_w": 1}
# RS_TK2_TH7_TW7_BK32_BH4_BW1_CM8: 2x7x7 outputs per thread, warp 32 threads along K, block 1x4x1 warps, C split 8
RS = {"schema": "RS", "tile_k": 2, "tile_h": 7, "tile_w": 7, "warp_k": 32, "warp_h": 1, "warp_w": 1,
      "block_k": 1, "block_h": 4, "block_w": 1, "c_split": 8}
# S_TH1_TW7_TK4_WH1_WW4_WK8_BH4_BW1_BK1
S = {"schema": "S", "tile_k": 4, "tile_h": 1, "tile_w": 7, "warp_k": 8, "warp_h": 1, "warp_w": 4,
     "block_k": 1, "block_h": 4, "block_w": 1, "c_split": 1}


def _one(tile, gpu):
    return kernel_model(pd.DataFrame([{**PROBLEM, **tile}]), gpu).iloc[0]


def test_spec_derived_rates():
    v = GPU_SPECS["v100"]
    assert v.peak_fp32_flops == 2 * 5120 * 1530e6
    assert v.shared_bandwidth_bytes_s == 80 * 32 * 4 * 1530e6
    t = GPU_SPECS["rtx2080ti"]
    assert t.peak_fp32_flops == 2 * 4352 * 1545e6
    assert t.max_warps_per_sm == 32 and v.max_warps_per_sm == 64


def test_rs_configuration_worked_by_hand_v100():
    f = _one(RS, "v100")
    # block output tile: K 2*32*1 = 64, H 7*1*4 = 28, W 7*1*1 = 7; input window 30 x 9
    assert (f.block_out_k, f.block_out_h, f.block_out_w, f.in_tile_h, f.in_tile_w) == (64, 28, 7, 30, 9)
    # blocks: (128/64) * (28/28) * (28/7) * 8 = 64; 32*4 = 128 threads, 4 warps
    assert (f.n_blocks, f.threads_per_block, f.warps_per_block) == (64, 128, 4)
    # registers: 2*7*7 accumulators + 9*9 input + 1 = 180 per thread, 180*128 per block
    assert (f.regs_per_thread, f.regs_per_block) == (180, 23040)
    # shared: input 30*9 + output buffer 28*7*(32+1) words = 6738 words
    assert f.smem_bytes_per_block == 6738 * 4
    # blocks/SM: warps 64//4 = 16, shared 98304//26952 = 3, registers 65536//23040 = 2 -> 2
    assert (f.blocks_per_sm_warps, f.blocks_per_sm_smem, f.blocks_per_sm_regs, f.blocks_per_sm) == (16, 3, 2, 2)
    assert f.occupancy == pytest.approx(2 * 4 / 64)
    # 64 blocks on 80 SMs x 2 = 160 slots: one wave, 40% of the slots busy
    assert f.waves == 1 and f.wave_efficiency == pytest.approx(64 / 160)
    assert f.flops == 2 * 128 * 128 * 28 * 28 * 9
    # global: input rows of 9 words (36 B -> 2 sectors), 30 rows, 16 channels per block, 64 blocks
    assert f.g2s_input_bytes == 64 * 16 * 30 * 2 * 32
    # weights to registers: 64 blocks * 4 warps * 16 channels * 9 taps * 2 k-slots, 128 B each
    assert f.g2r_weight_bytes == 64 * 4 * 16 * 9 * 2 * 128
    assert f.g2s_weight_bytes == 0 and f.s2r_weight_bytes == 0
    # output: 64 k * 28 rows of 7 words (28 B -> 1 sector) per block
    assert f.s2g_output_bytes == 64 * (64 * 28) * 1 * 32
    # shared -> registers: a 9x9 patch per warp per channel; registers -> shared: 98 outputs per warp
    assert f.s2r_input_bytes == 64 * 4 * 16 * 81 * 128
    assert f.r2s_output_bytes == 64 * 4 * 98 * 128
    glob = 64 * 16 * 30 * 2 * 32 + 64 * 4 * 16 * 9 * 2 * 128 + 64 * 64 * 28 * 32
    shared = 64 * 4 * 16 * 81 * 128 + 64 * 4 * 98 * 128
    assert (f.global_bytes, f.shared_bytes) == (glob, shared)
    assert f.global_time_s == pytest.approx(glob / 900e9)
    assert f.shared_time_s == pytest.approx(shared / (80 * 128 * 1530e6))
    assert f.analytical_time_s == pytest.approx(max(glob / 900e9, shared / (80 * 128 * 1530e6)))


def test_rs_configuration_occupancy_rtx2080ti():
    f = _one(RS, "rtx2080ti")
    # warps 32//4 = 8, shared 65536//26952 = 2, registers 65536//23040 = 2, block limit 16 -> 2
    assert (f.blocks_per_sm_warps, f.blocks_per_sm_smem, f.blocks_per_sm_regs, f.blocks_per_sm) == (8, 2, 2, 2)
    assert f.occupancy == pytest.approx(8 / 32)
    assert f.waves == 1 and f.wave_efficiency == pytest.approx(64 / (68 * 2))


def test_s_configuration_worked_by_hand_v100():
    f = _one(S, "v100")
    # block tile: K 4*8*1 = 32, H 1*1*4 = 4, W 7*4*1 = 28 (full width); input window 6 x 30
    assert (f.block_out_k, f.block_out_h, f.block_out_w, f.in_tile_h, f.in_tile_w) == (32, 4, 28, 6, 30)
    assert (f.n_blocks, f.threads_per_block, f.warps_per_block) == (4 * 7 * 1, 128, 4)
    # registers: 4*1*7 + (7+3-1) + 2 = 39
    assert f.regs_per_thread == 39
    # shared: 2*6*30 input + (8*1)*4*28 output + 2*9*32 weights = 1832 words
    assert f.smem_bytes_per_block == 1832 * 4
    # blocks/SM: warps 16, shared 98304//7328 = 13, registers 65536//(39*128) = 13, limit 32 -> 13
    assert f.blocks_per_sm == 13 and f.occupancy == pytest.approx(13 * 4 / 64)
    # global: full-width input window = one run of 180 words (720 B -> 23 sectors) per channel
    assert f.g2s_input_bytes == 28 * 128 * 23 * 32
    # weights to shared: 9 runs of 32 words (128 B = 4 sectors) per channel
    assert f.g2s_weight_bytes == 28 * 128 * 9 * 4 * 32 and f.g2r_weight_bytes == 0
    # output: 32 k-planes of 4*28 = 112 contiguous words (448 B = 14 sectors)
    assert f.s2g_output_bytes == 28 * 32 * 14 * 32
    # shared -> registers per warp and channel: R rows of 9 inputs, R*S*tk weights
    assert f.s2r_input_bytes == 28 * 4 * 128 * 3 * 9 * 128
    assert f.s2r_weight_bytes == 28 * 4 * 128 * 9 * 4 * 128
    assert f.r2s_output_bytes == 28 * 4 * 28 * 128


def test_unknown_schema_and_missing_columns_raise():
    with pytest.raises(KbenchInputError, match="schema"):
        kernel_model(pd.DataFrame([{**PROBLEM, **RS, "schema": "XX"}]), "v100")
    with pytest.raises(KbenchInputError, match="missing"):
        kernel_model(pd.DataFrame([PROBLEM]), "v100")
    with pytest.raises(KbenchInputError, match="unknown GPU"):
        kernel_model(pd.DataFrame([{**PROBLEM, **RS}]), "a100")


@pytest.mark.parametrize("gpu", ["v100", "rtx2080ti"])
def test_features_on_the_whole_dataset(tiles, gpu):
    tables, _ = tiles[gpu]
    rt = tables["runtimes"]
    f = tile_features(rt, tables["problems"], gpu)
    assert list(f.columns) == FEATURE_COLUMNS and f.index.equals(rt.index)
    assert not f.isna().any().any()
    spec = GPU_SPECS[gpu]
    # definitions: waves cover all blocks; the occupancy limit is the tightest of the four
    slots = spec.sm_count * np.maximum(f["blocks_per_sm"], 1)
    assert (f["waves"] == -(-f["n_blocks"] // slots)).all()
    lim = np.minimum.reduce([f["blocks_per_sm_warps"], f["blocks_per_sm_smem"], f["blocks_per_sm_regs"],
                             np.full(len(f), spec.max_blocks_per_sm)])
    assert (f["blocks_per_sm"] == lim).all()
    assert (f["threads_per_block"] <= 1024).all()
    # every block tile divides the problem exactly (the generators force an exact fit)
    pr = tables["problems"].set_index("problem_id").loc[rt["problem_id"]]
    assert (f["n_blocks"].to_numpy() * f["block_out_k"].to_numpy() * f["block_out_h"].to_numpy()
            * f["block_out_w"].to_numpy()
            == pr["k"].to_numpy() * pr["y_h"].to_numpy() * pr["y_w"].to_numpy() * rt["c_split"].to_numpy()).all()


def test_feature_groups_split_the_inputs(tiles):
    from kbench.sources.cnnopt_features import feature_groups

    tables, _ = tiles["rtx2080ti"]
    rt = tables["runtimes"].head(500)
    x, groups = feature_groups(rt, tables["problems"], "rtx2080ti")
    assert x.index.equals(rt.index)
    assert list(x.columns) == groups["problem"] + groups["tile"] + groups["analytic"]
    assert (x[["schema_RS", "schema_RS2", "schema_S"]].sum(axis=1) == 1).all()
    assert "time_ms" not in x.columns and "rank" not in x.columns

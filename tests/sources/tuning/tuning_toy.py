"""A small hand-made MIOpen perf-db and find-db for the tuning tests."""

from __future__ import annotations

import bz2
import sqlite3

import pandas as pd

# MIOpen's perf-db schema (as in the shipped gfx906_60.db).
CONFIG_SQL = (
    "CREATE TABLE `config` (`id` INTEGER PRIMARY KEY ASC,`layout` TEXT NOT NULL,"
    "`data_type` TEXT NOT NULL,`direction` TEXT NOT NULL,`spatial_dim` INT NOT NULL,"
    "`in_channels` INT NOT NULL,`in_h` INT NOT NULL,`in_w` INT NOT NULL,`in_d` INT NOT NULL,"
    "`fil_h` INT NOT NULL,`fil_w` INT NOT NULL,`fil_d` INT NOT NULL,`out_channels` INT NOT NULL,"
    " `batchsize` INT NOT NULL,`pad_h` INT NOT NULL,`pad_w` INT NOT NULL,`pad_d` INT NOT NULL,"
    "`conv_stride_h` INT NOT NULL,`conv_stride_w` INT NOT NULL,`conv_stride_d` INT NOT NULL,"
    "`dilation_h` INT NOT NULL,`dilation_w` INT NOT NULL,`dilation_d` INT NOT NULL,"
    "`bias` INT NOT NULL,`group_count` INT NOT NULL)"
)
PERF_SQL = ("CREATE TABLE `perf_db` (`id` INTEGER PRIMARY KEY ASC,`solver` TEXT NOT NULL,"
            "`config` INTEGER NOT NULL, `params` TEXT NOT NULL)")

# (id, layout, dtype, dir, spatial, in_c, in_h, in_w, in_d, fil_h, fil_w, fil_d, out_c, n,
#  pad_h, pad_w, pad_d, s_h, s_w, s_d, d_h, d_w, d_d, bias, groups)
CONFIGS = [
    # 1: forward FP32 1x1, C=64 -> K=64, 14x14, N=16
    (1, "NCHW", "FP32", "F", 2, 64, 14, 14, 1, 1, 1, 1, 64, 16, 0, 0, 0, 1, 1, 0, 1, 1, 0, 0, 1),
    # 2: backward data, stride 2: dy 14x14 with K=128 channels, dx has C=64; x is 27 or 28
    (2, "NCHW", "FP32", "B", 2, 128, 14, 14, 1, 1, 1, 1, 64, 8, 0, 0, 0, 2, 2, 0, 1, 1, 0, 0, 1),
    # 3: like 2 with N=4; both candidate keys are in the find-db below
    (3, "NCHW", "FP32", "B", 2, 128, 14, 14, 1, 1, 1, 1, 64, 4, 0, 0, 0, 2, 2, 0, 1, 1, 0, 0, 1),
    # 4: backward weights 3x3 pad 1 stride 1: x = y
    (4, "NCHW", "FP16", "W", 2, 32, 7, 7, 1, 3, 3, 1, 16, 2, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0, 1),
    # 5: grouped NHWC forward
    (5, "NHWC", "FP16", "F", 2, 64, 8, 8, 1, 3, 3, 1, 64, 1, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0, 32),
    # 6: degenerate: 2x2 input, 3x3 filter, no pad -> empty output; dropped
    (6, "NCHW", "FP32", "F", 2, 4, 2, 2, 1, 3, 3, 1, 3, 32, 0, 0, 0, 2, 2, 0, 1, 1, 0, 0, 1),
    # 7: backward data stride 2, neither candidate in the find-db
    (7, "NCHW", "FP32", "B", 2, 128, 7, 7, 1, 1, 1, 1, 64, 2, 0, 0, 0, 2, 2, 0, 1, 1, 0, 0, 1),
]
PERF = [
    (1, "ConvAsm1x1U", 1, "4,16,4,16,2,1,1,1"),
    (2, "ConvMlirIgemmFwd", 1, "256,128,128,16,4,4"),
    (3, "ConvAsm1x1U", 2, "1,4,1,16,1,1,1,1"),
    (4, "ConvAsm1x1U", 3, "1,2,3"),  # malformed: 3 fields
    (5, "ConvBinWinogradRxSf2x3", 4, "8"),
    (6, "ConvAsmBwdWrW3x3", 4, "0,0,8,4,6,4"),  # no grammar: raw only
    (7, "ConvBinWinogradRxSf3x2", 5, "59"),
    (8, "ConvOclDirectFwd", 6, "32,8,32,32,1,4,8,4,2"),
    (9, "ConvAsm1x1U", 7, "1,4,1,16,1,1,1,1"),
]
# Expected keys, written from ProblemDescription::Serialize by hand.
KEY1 = "64-14-14-1x1-64-14-14-16-0x0-1x1-1x1-0-NCHW-FP32-F"
KEY2_28 = "128-14-14-1x1-64-28-28-8-0x0-2x2-1x1-0-NCHW-FP32-B"
KEY3_27 = "128-14-14-1x1-64-27-27-4-0x0-2x2-1x1-0-NCHW-FP32-B"
KEY3_28 = "128-14-14-1x1-64-28-28-4-0x0-2x2-1x1-0-NCHW-FP32-B"
KEY4 = "32-7-7-3x3-16-7-7-2-1x1-1x1-1x1-0-NCHW-FP16-W"
KEY5 = "64-8-8-3x3-64-8-8-1-1x1-1x1-1x1-0-NHWC-NHWC-NHWC-FP16-F_g32"
KEY7_13 = "128-7-7-1x1-64-13-13-2-0x0-2x2-1x1-0-NCHW-FP32-B"
FIND_DB_LINES = [
    f"{KEY1}=ConvAsm1x1U:0.01,0,miopenConvolutionFwdAlgoDirect",
    f"{KEY2_28}=ConvAsm1x1U:0.02,100,miopenConvolutionBwdDataAlgoDirect",
    f"{KEY3_27}=ConvAsm1x1U:0.02,100,miopenConvolutionBwdDataAlgoDirect",
    f"{KEY3_28}=ConvAsm1x1U:0.02,100,miopenConvolutionBwdDataAlgoDirect",
]


def make_perfdb(folder, name="gfxtest_1.db", compress=True):
    path = folder / name
    con = sqlite3.connect(path)
    con.execute(CONFIG_SQL)
    con.execute(PERF_SQL)
    con.executemany(f"INSERT INTO config VALUES ({','.join('?' * 25)})", CONFIGS)
    con.executemany("INSERT INTO perf_db VALUES (?,?,?,?)", PERF)
    con.commit()
    con.close()
    if not compress:
        return path
    out = folder / (name + ".bz2")
    out.write_bytes(bz2.compress(path.read_bytes()))
    path.unlink()
    return out


def problem(direction="F", dtype="FP32", n=16, c=64, k=64, x=14, y=14):
    """One canonical problem row (1x1, stride 1: x and y given separately)."""
    return pd.DataFrame([dict(
        direction=direction, dtype=dtype, cast="", layout="NCHW", spatial_dims=2, n=n, c=c, k=k,
        groups=1, x_d=1, x_h=x, x_w=x, y_d=1, y_h=y, y_w=y, fil_d=1, fil_h=1, fil_w=1,
        pad_d=0, pad_h=0, pad_w=0, stride_d=1, stride_h=1, stride_w=1,
        dil_d=1, dil_h=1, dil_w=1, bias=0)])

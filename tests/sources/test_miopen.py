"""The find-db converter on small hand-written files, both entry formats."""

import bz2

import pytest

from kbench.core.errors import KbenchInputError
from kbench.sources.miopen import convert_finddb

F = "64-28-28-3x3-128-14-14-32-1x1-2x2-1x1-0-NCHW-FP32-F"
B = "128-14-14-3x3-64-28-28-32-1x1-2x2-1x1-0-NCHW-FP32-B"
W = "128-14-14-3x3-64-28-28-32-1x1-2x2-1x1-0-NCHW-FP32-W"
X = "64-28-28-1x1-128-28-28-32-0x0-1x1-1x1-0-NCHW-FP32-F"
FWD = "miopenConvolutionFwdAlgo"


def write(tmp_path, lines, name="t.fdb.txt.bz2"):
    path = tmp_path / name
    with bz2.open(path, "wt") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def test_conversion_cleaning_and_censoring(tmp_path):
    lines = [
        # 4 entries: censored
        f"{F}=A:0.1,0,{FWD}GEMM;B:0.2,64,{FWD}Direct;C:0.3,0,{FWD}Winograd;ConvDirectNaiveConvFwd:5.0,0,{FWD}Direct",
        # 2 entries: complete; the same solver twice keeps the first
        f"{B}=A:1.0,0,miopenConvolutionBwdDataAlgoGEMM;A:2.0,0,miopenConvolutionBwdDataAlgoGEMM",
        # a zero time first: the fastest is unknown, the problem is dropped
        f"{W}=G:0.0,0,miopenConvolutionBwdWeightsAlgoGEMM;H:0.5,0,miopenConvolutionBwdWeightsAlgoDirect",
        # exact tie for fastest
        f"{X}=A:0.4,0,{FWD}GEMM;B:0.4,0,{FWD}Direct",
    ]
    tables, report = convert_finddb(write(tmp_path, lines))
    p = tables["problems"].set_index("problem_id")
    assert list(p.index) == [F, B, X]
    assert p.loc[F, "censored"] and not p.loc[B, "censored"] and not p.loc[X, "censored"]
    assert (p.loc[F, "n_raw"], p.loc[B, "n_raw"], p.loc[B, "n_listed"]) == (4, 2, 1)
    assert report["problems_dropped_time_le_0"] == 1 and report["entries_time_le_0"] == 1
    assert report["duplicate_solver_entries_dropped"] == 1
    assert report["problems_with_exact_tie_for_fastest"] == 1
    assert report["entries_ge_1000x_fastest"] == 0
    rt = tables["runtimes"]
    assert rt[rt.problem_id == F]["kernel"].tolist() == ["A", "B", "C", "ConvDirectNaiveConvFwd"]
    assert rt[rt.problem_id == F]["rank"].tolist() == [0, 1, 2, 3]
    k = tables["kernels"].set_index("kernel")
    assert k.loc["ConvDirectNaiveConvFwd", "family"] == "naive"
    assert k.loc["C", "family"] == "winograd"
    assert k.loc["A", "directions"] == "B,F" and k.loc["A", "n_best"] == 3


def test_old_entry_format(tmp_path):
    line = (f"{F}={FWD}GEMM:GemmFwd1x1_0_1,0.25,128,{FWD}GEMM,<unused>;"
            f"{FWD}Direct:ConvOclDirectFwd,0.5,0,{FWD}Direct,not used")
    tables, _ = convert_finddb(write(tmp_path, [line]))
    rt = tables["runtimes"]
    assert rt["kernel"].tolist() == ["GemmFwd1x1_0_1", "ConvOclDirectFwd"]
    assert rt["time_ms"].tolist() == [0.25, 0.5]
    assert rt["workspace_bytes"].tolist() == [128, 0]
    assert rt["algorithm"].tolist() == [f"{FWD}GEMM", f"{FWD}Direct"]


def test_malformed_entry_names_the_line(tmp_path):
    path = write(tmp_path, [f"{F}=A:0.1,0,{FWD}GEMM", f"{X}=A:0.1"])
    with pytest.raises(KbenchInputError, match="line 2"):
        convert_finddb(path)


def test_input_file_is_not_modified(tmp_path):
    path = write(tmp_path, [f"{F}=A:0.1,0,{FWD}GEMM"])
    before = path.read_bytes()
    convert_finddb(path)
    assert path.read_bytes() == before

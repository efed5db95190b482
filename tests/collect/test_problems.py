import pandas as pd
import pytest

from kbench.collect.measure import cudnn
from kbench.core.errors import KbenchInputError


def _csv(tmp_path, rows):
    path = tmp_path / "p.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_keys_are_miopen_keys_from_the_true_geometry(tmp_path):
    # 3x3, pad 1, stride 2 on 56x56 -> 28x28 (floor((56 + 2 - 2 - 1) / 2) + 1 = 28)
    path = _csv(tmp_path, [dict(n=32, c=64, k=128, x_h=56, x_w=56, fil_h=3, fil_w=3, pad_h=1, pad_w=1,
                                stride_h=2, stride_w=2, dtype="FP16", layout="NCHW")])
    df = cudnn.load_problems(path)
    keys = dict(zip(df["direction"], df["key"]))
    assert keys["F"] == "64-56-56-3x3-128-28-28-32-1x1-2x2-1x1-0-NCHW-FP16-F"
    # backward keys describe dy first, as MIOpen does
    assert keys["B"] == "128-28-28-3x3-64-56-56-32-1x1-2x2-1x1-0-NCHW-FP16-B"
    assert keys["W"] == "128-28-28-3x3-64-56-56-32-1x1-2x2-1x1-0-NCHW-FP16-W"


def test_expansion_groups_and_nhwc(tmp_path):
    path = _csv(tmp_path, [dict(n=1, c=32, k=32, groups=32, h=7, w=7, r=3, s=3, pad_h=1, pad_w=1)])
    df = cudnn.load_problems(path, directions=("F",), dtypes=("FP32",), layouts=("NHWC",))
    assert df["key"].tolist() == ["32-7-7-3x3-32-7-7-1-1x1-1x1-1x1-0-NHWC-NHWC-NHWC-FP32-F_g32"]
    all_ = cudnn.load_problems(path)
    assert len(all_) == 3 * 2 * 3  # dtypes x layouts x directions


@pytest.mark.parametrize("row, words", [
    (dict(n=1, c=3, k=8, x_h=4, x_w=4, fil_h=5), "missing column"),
    (dict(n=1, c=3, k=8, x_h=4, x_w=4, fil_h=5, fil_w=5), "not valid convolutions"),
    (dict(n=1, c=6, k=8, groups=4, x_h=8, x_w=8, fil_h=1, fil_w=1), "not valid convolutions"),
    (dict(n=1, c=4, k=8, x_h=8, x_w=8, fil_h=1, fil_w=1, dtype="FP64"), "allowed"),
])
def test_bad_problem_files(tmp_path, row, words):
    with pytest.raises(KbenchInputError, match=words):
        cudnn.load_problems(_csv(tmp_path, [row]))


def test_cli_bad_input_exit_code_2(tmp_path, capsys):
    from kbench.cli import main
    assert main(["collect", "cudnn", "--problems", str(tmp_path / "none.csv"), "--out", str(tmp_path)]) == 2
    path = _csv(tmp_path, [dict(n=1, c=4, k=8, x_h=8, x_w=8, fil_h=1, fil_w=1)])
    assert main(["collect", "cudnn", "--problems", str(path), "--out", str(tmp_path), "--dtypes", "FP8"]) == 2
    assert main(["collect", "cudnn", "--problems", str(path), "--out", str(tmp_path), "--limit", "0"]) == 2
    assert "error" in capsys.readouterr().err

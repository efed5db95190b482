"""``kbench collect autotune-problems``: the valid and test parts of a dataset's splits as the problems file
``kbench collect autotune`` probes, keyed exactly as the dataset keys them (or the records match nothing)."""

import gzip

import pandas as pd

import kbench
from kbench.cli import main
from kbench.collect.measure.cudnn.problems import load_problems


def _union(names, splits=("random", "networks"), parts=("valid", "test")) -> set[str]:
    out = set()
    for name in names:
        ds = kbench.load(name)
        for split in splits:
            for part in parts:
                out |= set(map(str, ds.split(split)[part]))
    return out


def test_the_3d_sets_valid_and_test_parts_round_trip_to_their_keys(tmp_path, capsys):
    out = tmp_path / "problems.csv.gz"
    assert main(["collect", "autotune-problems", "--datasets", "h200-3d,h200-3d-pytorch", "--out", str(out)]) == 0
    expected = _union(["h200-3d", "h200-3d-pytorch"])
    assert f"{len(expected):,} problem-directions" in capsys.readouterr().out
    probed = load_problems(out)  # as kbench collect autotune reads it: one row per problem-direction
    assert set(probed["key"]) == expected and len(probed) == len(expected)
    assert (probed["spatial_dims"] == 3).all()
    # a seeded order, the same bytes on every run (gzip without a time stamp)
    again = tmp_path / "again.csv.gz"
    assert main(["collect", "autotune-problems", "--datasets", "h200-3d,h200-3d-pytorch", "--out", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()
    rows = pd.read_csv(gzip.open(out))
    assert rows["order"].tolist() == list(range(len(rows))) and rows["problem_id"].tolist() != sorted(
        rows["problem_id"]
    )


def test_one_part_of_one_split(tmp_path):
    out = tmp_path / "p.csv"
    assert (
        main(
            [
                "collect",
                "autotune-problems",
                "--datasets",
                "h200-3d",
                "--splits",
                "random",
                "--parts",
                "test",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert set(load_problems(out)["key"]) == _union(["h200-3d"], ["random"], ["test"])


def test_bad_input_is_refused_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "p.csv"
    for argv, said in (
        (["--datasets", "h200-3d", "--splits", "randm"], "Did you mean 'random'"),
        (["--datasets", "h200-3d", "--parts", "tests"], "--parts 'tests'"),
        (["--datasets", "h200,h200-3d"], "mix 2D and 3D convolutions"),
    ):
        assert main(["collect", "autotune-problems", *argv, "--out", str(out)]) == 2
        assert said in capsys.readouterr().err and not out.exists()

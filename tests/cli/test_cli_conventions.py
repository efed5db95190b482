"""One CLI convention: ``--json [PATH|-]`` everywhere, integers in JSON, tables that fit the terminal,
progress bars on a terminal only, a failing baseline named in one clear error."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

import kbench
from kbench.cli import main
from kbench.cli.console import _water_fill, json_ready, print_frame
from kbench.data.build import write_dataset

sys.path.insert(0, str(Path(__file__).parents[1] / "leaderboard"))
from lbtoy import FakeBaseline, make_toy  # noqa: E402


def _stdout_json(capsys, argv):
    assert main(argv) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


@pytest.mark.parametrize("form", [["--json"], ["--json", "-"]])
def test_json_to_stdout_everywhere(capsys, tmp_path, form):
    rows, _ = _stdout_json(capsys, ["datasets", *form])
    mi100 = next(r for r in rows if r["name"] == "mi100")
    manifest = json.loads((Path(kbench.__file__).parent / "datasets/mi100/manifest.json").read_text())
    assert mi100["kernels"] == manifest["files"]["kernels.parquet"]["rows"] == 70
    assert type(mi100["kernels"]) is int and type(mi100["problems"]) is int  # not 70.0
    assert mi100["targets"] is None
    info, _ = _stdout_json(capsys, ["info", "mi300x", *form])
    assert info["name"] == "mi300x" and info["files"]["runtimes.parquet"]["rows"] == 37792
    listing, _ = _stdout_json(capsys, ["baseline", "list", *form])
    assert "xgboost" in {r["baseline"] for r in listing["baselines"]}
    ds = kbench.load("mi300x")
    test = ds.split("random")["test"]
    preds = tmp_path / "preds.csv"
    ds.best[ds.best["problem_id"].isin(test)][["problem_id", "kernel"]].to_csv(preds, index=False)
    record, _ = _stdout_json(capsys, ["evaluate", str(preds), "-d", "mi300x", *form])
    assert record["metrics"]["overall"]["top1"] == 1.0 and record["counts"]["scored"] == len(test) == 2028
    verdict, _ = _stdout_json(capsys, ["validate", str(preds), "-d", "mi300x", *form])
    assert verdict["covered"] == verdict["problems_in_part"] == 2028 and verdict["valid"] is True


def test_json_to_a_file_and_the_info_name_after_json(capsys, tmp_path):
    out = tmp_path / "datasets.json"
    assert main(["datasets", "--json", str(out)]) == 0
    assert capsys.readouterr().out == ""
    assert {r["name"] for r in json.loads(out.read_text())} >= {"mi100", "h200"}
    info, _ = _stdout_json(capsys, ["info", "--json", "mi300x"])  # the name, not a path: JSON to stdout
    assert info["name"] == "mi300x"
    assert main(["info"]) == 2
    assert "give a dataset name" in capsys.readouterr().err


def test_info_source_line(capsys):
    assert main(["info", "h100"]) == 0
    out = capsys.readouterr().out
    source = next(line for line in out.splitlines() if line.startswith("source:"))
    assert source != "source:  @ " and "kbench collect cudnn" in source
    assert "kernels 4,134" in out
    assert main(["info", "mi100"]) == 0
    assert "source: https://github.com/ROCm/MIOpen @ 2d1fd997" in capsys.readouterr().out


def test_json_ready_turns_numpy_and_missing_values_into_json():
    import numpy as np
    got = json_ready({"a": np.int64(3), "b": np.float64("nan"), "c": [pd.NA, np.bool_(True), 1.5], 4: None})
    assert got == {"a": 3, "b": None, "c": [None, True, 1.5], "4": None}
    assert type(got["a"]) is int


# ----------------------------------------------------------------------------- tables
def _datasets_frame():
    df = kbench.list_datasets()
    cols = ["name", "aliases", "device", "task", "problems", "kernels", "runtimes", "targets", "censoring", "license"]
    return df[cols].astype({c: "Int64" for c in ("problems", "kernels", "runtimes", "targets")})


@settings(max_examples=30, deadline=None)
@given(width=st.integers(min_value=30, max_value=220))
def test_tables_fit_the_terminal(width):
    df = _datasets_frame()
    console = Console(width=width, record=True, force_terminal=False)
    print_frame(df, title="kbench datasets", console=console)
    text = console.export_text()
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines)
    for n in df["problems"]:  # numbers are never cut, and carry thousands separators
        assert f"{int(n):,}" in text
    assert "182,427" in text
    names = [h for h in df.columns]
    header = lines[1] if lines[0].strip() == "kbench datasets" else lines[0]
    shown = header.split()
    if shown[0] == "name":  # a table: every header shown is whole, the left-out ones are named
        assert all(h in names for h in shown)
        left = [h for h in names if h not in shown]
        assert not left or "left out" in text
        rows = [line for line in lines if line.split() and line.split()[0] in set(df["name"])]
        assert len(rows) == len(df)  # one line per row: the names are never cut
    else:  # a block per row: every field name in full
        assert all(f"  {h}" in text for h in ("device", "problems", "censoring"))


def test_table_at_100_columns_keeps_headers_whole():
    console = Console(width=100, record=True)
    print_frame(_datasets_frame(), console=console)
    text = console.export_text()
    assert "proble…" not in text and "problems" in text and "device" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    assert len(text.splitlines()) <= len(_datasets_frame()) + 4  # one line per row, no wrapped cells


@given(natural=st.lists(st.integers(1, 60), min_size=1, max_size=12), slack=st.integers(0, 200))
def test_water_fill_cuts_the_widest_first(natural, slack):
    minimum = [min(n, 5) for n in natural]
    available = sum(minimum) + slack
    widths = _water_fill(natural, minimum, available)
    assert sum(widths) <= available
    assert all(m <= w <= n for w, m, n in zip(widths, minimum, natural))
    if sum(natural) <= available:
        assert widths == natural
    else:  # one cap: a cut column sits at the cap (or its minimum), an uncut one is no wider than the cap
        cut = [(w, m) for w, m, n in zip(widths, minimum, natural) if w < n]
        cap = max(w for w, _ in cut)
        assert all(w == max(cap, m) for w, m in cut)
        assert all(n <= cap or m >= n for w, m, n in zip(widths, minimum, natural) if w == n)


# ----------------------------------------------------------------------------- baselines
class Boom(FakeBaseline):
    stochastic = False
    name = "boom"

    def fit(self, dataset, train_ids, valid_ids=None, seed=0):
        raise ValueError("the model diverged")


@pytest.fixture
def toy_folder(tmp_path_factory):
    ds = make_toy()
    path = tmp_path_factory.mktemp("toy") / "toy"
    write_dataset(path, ds.tables, {k: v for k, v in ds.manifest.items() if k != "checksum"})
    return path


@pytest.fixture
def boom_registry(monkeypatch):
    from kbench_baselines import base
    reg = {"boom": Boom, "toy-model": type("ToyModel", (FakeBaseline,), {"name": "toy-model", "stochastic": True})}
    monkeypatch.setattr(base, "BASELINES", reg)
    monkeypatch.setattr(base, "discover", lambda: base.BASELINES)
    monkeypatch.setattr(base, "UNAVAILABLE", {})
    return reg


def test_failing_baseline_is_one_clear_error(capsys, tmp_path, toy_folder, boom_registry):
    rc = main(["baseline", "run", "boom", "--dataset", str(toy_folder), "--out", str(tmp_path)])
    assert rc == 1
    err = capsys.readouterr().err
    log = tmp_path / "toy" / "random" / "boom" / "error.log"
    assert err.startswith("kbench: error: baseline 'boom' failed on toy/random, seed 0: ValueError: the model "
                          "diverged; traceback in ")
    assert str(log) in err and "Traceback" not in err and "internal error" not in err
    assert "Traceback (most recent call last)" in log.read_text() and "the model diverged" in log.read_text()
    # kbench run goes on with the others and names the failed one; its JSON lists the failure
    rc = main(["run", "--dataset", str(toy_folder), "--baselines", "boom", "toy-model", "--seeds", "0",
               "--out", str(tmp_path / "r"), "--json", "-"])
    assert rc == 1
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert [r["method"] for r in doc["results"]] == ["toy-model"]
    assert doc["failed"] == {"boom": "seed 0: ValueError: the model diverged"}
    assert "kbench: error: baseline 'boom' failed on toy/random" in captured.err
    assert "\r" not in captured.err  # no progress bar: stderr is not a terminal here


def test_baseline_run_json_is_the_record(capsys, tmp_path, toy_folder, boom_registry):
    record, err = _stdout_json(capsys, ["baseline", "run", "toy-model", "--dataset", str(toy_folder), "--seeds", "0",
                                        "1", "--out", str(tmp_path), "--json"])
    assert record["method"] == "toy-model" and record["seeds"]["seeds"] == [0, 1]
    assert record["environment"]["packages"]["numpy"] and record["schema_version"] == 3
    assert "\r" not in err
    assert not (tmp_path / "toy" / "random" / "toy-model" / "error.log").exists()

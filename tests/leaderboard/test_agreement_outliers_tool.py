"""tools/agreement_outliers.py: which re-timed plans are over 1.5x from the table, on hand-made runs."""

import gzip
import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("agreement_outliers", ROOT / "tools" / "agreement_outliers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(folder: Path, table: dict, rows: list[dict]) -> Path:
    folder.mkdir(parents=True)
    plan = {"problems": [{"problem_id": pid, "table_ms": ms} for pid, ms in table.items()]}
    with gzip.open(folder / "plan.json.gz", "wt") as fh:
        json.dump(plan, fh)
    with gzip.open(folder / "raw.jsonl.gz", "wt") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in [{"kind": "run"}, *rows]))
    return folder


def test_only_plans_over_one_and_a_half_times_off_with_a_table_time_of_005_ms_or_more(tmp_path):
    tool = _tool()
    table = {"p1": {"a": 0.10, "b": 0.20}, "p2": {"c": 0.04}}
    rows = [  # a: graph medians 0.10 (agrees), eager 0.25 (2.5x off); b: 0.14 = 0.7x, inside 1/1.5;
              # c: 10x off but its table time is under 0.05 ms
        *({"kind": "time", "problem_id": "p1", "plan": "a", "ms": ms} for ms in (0.09, 0.10, 0.11)),
        {"kind": "eager", "problem_id": "p1", "plan": "a", "ms": 0.25},  # a run writes one eager time a plan
        {"kind": "time", "problem_id": "p1", "plan": "b", "ms": 0.14},
        {"kind": "time", "problem_id": "p2", "plan": "c", "ms": 0.40},
    ]
    off = tool.run_outliers(_run(tmp_path / "run", table, rows))
    assert off[["problem_id", "plan", "timing"]].values.tolist() == [["p1", "a", "eager"]]
    assert off["ratio"].tolist() == pytest.approx([2.5])


def test_kernel_counts_mark_a_list_the_collector_cut():
    tool = _tool()
    # names of 98 characters, 99 with their bar: 20 whole ones fill 1,980 characters, and 20 of a 21st follow
    cut = "|".join(["k" * 98] * 25)[: tool.KERNEL_NAMES_KEPT]
    assert tool.kernels_launched(pd.Series(["x|y", "x", "", None, cut])).tolist() == ["2", "1", "0", "0", "20+"]


def test_a_folder_without_the_run_files_exits_2_naming_it(tmp_path, capsys):
    tool = _tool()
    assert tool.main([str(tmp_path / "missing"), "--raw", str(tmp_path)]) == 2
    assert "missing/plan.json.gz: not found" in capsys.readouterr().err

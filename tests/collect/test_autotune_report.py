"""tools/autotune_report.py: docs/autotune.md's r3d_18 tables are generated from the committed records (never
stale), the per-problem positions follow from the recorded lists, and a dataset's pytorch_autotune against
autotune_top10 is worked by hand on a four-problem dataset."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kbench.data.dataset import Dataset

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))  # the tool imports its sibling report.py, as when run from tools/
# a script of tools/, which the package never imports: loaded from its file
_SPEC = importlib.util.spec_from_file_location("autotune_report", ROOT / "tools" / "autotune_report.py")
R = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(R)


def test_the_docs_block_is_what_the_records_give():
    text = (ROOT / "docs" / "autotune.md").read_text()
    block = text.split(R.START, 1)[1].split(R.END, 1)[0].strip("\n")
    assert block == R.folder_markdown(R.DEFAULT).strip("\n"), (
        "run: python tools/autotune_report.py --write docs/autotune.md"
    )


def test_positions_are_where_the_matched_plans_sit_in_mode_a():
    rec = {"mode_a": "x;y;z;w", "torch_autotune_plans": "z;w;q"}
    assert R.positions(rec) == [2, 3]  # q is not in the list
    lines = [json.loads(x) for x in (R.DEFAULT / "autotune.jsonl").read_text().splitlines()]
    first = lines[0]
    assert R.positions(first) == [first["mode_a"].split(";").index(first["torch_autotune_plans"])]


def test_dataset_breakdown_hand_worked():
    """p1: mode A C 4, B 2, A 1 -> autotune_top10 A (1); PyTorch settled on B (2): 2x, not the same plan, in
    the first 10. p2: mode A C 8, A 2, B 1 -> B (1); PyTorch B: the same. p3 has no record."""
    ids = ["p1", "p2", "p3"]
    runtimes = pd.DataFrame(
        [
            ("p1", "A", 1.0),
            ("p1", "B", 2.0),
            ("p1", "C", 4.0),
            ("p2", "A", 2.0),
            ("p2", "B", 1.0),
            ("p2", "C", 8.0),
            ("p3", "A", 1.0),
        ],
        columns=["problem_id", "kernel", "time_ms"],
    )
    heur = pd.DataFrame(
        [
            (p, "cudnn_mode_a", r, k)
            for p, order in (("p1", "CBA"), ("p2", "CAB"), ("p3", "A"))
            for r, k in enumerate(order)
        ]
        + [("p1", "pytorch_autotune", 0, "B"), ("p2", "pytorch_autotune", 0, "B")],
        columns=["problem_id", "heuristic", "rank", "kernel"],
    )
    autotune = pd.DataFrame({"problem_id": ["p1", "p2"], "first_call_cost_ms": [30.0, 50.0]})
    ds = Dataset(
        "three",
        {
            "problems": pd.DataFrame({"problem_id": ids}),
            "runtimes": runtimes,
            "splits": pd.DataFrame({"problem_id": ids, "random": "test"}),
            "heuristics": heur,
            "autotune": autotune,
        },
        {"name": "three"},
    )
    out = R.dataset_breakdown(ds)
    assert out["part_problems"] == 3 and out["with_pytorch_autotune"] == 2
    assert out["same_plan_as_autotune_top10"] == 0.5 and out["in_mode_a_first_10"] == 1.0
    assert out["pytorch_autotune_over_autotune_top10"] == pytest.approx(np.sqrt(2))
    assert out["pytorch_autotune_over_oracle"] == pytest.approx(np.sqrt(2)) and out["autotune_top10_over_oracle"] == 1.0
    assert out["first_call_cost_ms"] == {"sum": 80.0, "median": 40.0}

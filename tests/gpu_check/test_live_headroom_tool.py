"""tools/live_headroom.py: the per-group figures of a run are the record's, hand-worked; bad input gets one
message and exit code 2."""

import math
import subprocess
import sys
from pathlib import Path

import pytest
from test_timed_top import _timed_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tool(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import live_headroom
    return live_headroom


def _run_folder(tmp_path):
    import json
    plan = _timed_run(tmp_path)  # p1 (input and filter depth > 1), p2 (filter depth 1), raw files written
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    return plan


def test_first_choice_and_timed_figures_hand_worked(tmp_path, tool):
    _run_folder(tmp_path)
    df, _ = tool.per_problem(tmp_path)
    table = tool.breakdown(df).set_index(["by", "group"])
    # the first choice c1 over real autotune, every round of its pass: 1.8 / 1.1 and 3 / 1
    assert table.loc[("all", "all"), "entry/pytorch_autotune"] == pytest.approx(math.sqrt(1.8 / 1.1 * 3))
    # p1 alone: over PyTorch's op 4 / median(2, 1); its oracle 4 / 0.5, closing log(8/3) / log(8)
    deep = table.loc[("depth", "input and filter depth > 1")]
    assert deep["problems"] == 1 and deep["entry/pytorch_op"] == pytest.approx(4 / 1.5)
    assert deep["closed/pytorch_op"] == pytest.approx(math.log(4 / 1.5) / math.log(8))
    timed = tool.breakdown(tool.per_problem(tmp_path, timed=True)[0]).set_index(["by", "group"])
    # the timed selector: each pass's own first-round pick, measured on round 1 (as the record's timed_top)
    assert timed.loc[("all", "all"), "entry/pytorch_autotune"] == pytest.approx(math.sqrt(3))
    assert timed.loc[("all", "all"), "entry/live_mode_b"] == pytest.approx(math.sqrt(2 / 0.8))


def test_a_folder_without_the_autotune_pass_is_named_with_exit_code_2(tmp_path):
    _run_folder(tmp_path)
    (tmp_path / "raw_autotune.jsonl").unlink()
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "live_headroom.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "raw_autotune.jsonl" in run.stderr and "Traceback" not in run.stderr

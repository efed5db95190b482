"""tools/three_d_headroom.py: the oracle closes all of the headroom; bad input gets one message and exit code 2."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_an_entry_without_stored_predictions_is_named_with_exit_code_2():
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "three_d_headroom.py"), "--dataset", "h200-3d-pytorch",
                          "--split", "random", "--method", "no-such-entry"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert "leaderboard/h200-3d-pytorch/random/no-such-entry/preds.parquet" in run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""


def test_the_oracle_entry_closes_all_of_the_headroom_first_choice_or_timed_top_k(monkeypatch):
    """By definition: the oracle's rankings put a fastest plan first, so its choice and its best of 5 are t_best."""
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import three_d_headroom
    for k in (1, 5):
        table = three_d_headroom.breakdown("h200-3d-pytorch", "random", "oracle", best_of=k)
        overall = table[table["by"] == "all"].iloc[0]
        assert overall["closed/pt"] == pytest.approx(1.0) and overall["closed/at"] == pytest.approx(1.0)
        assert overall["entry/pt"] == pytest.approx(overall["oracle/pt"])
        # real autotune, over the problems it was recorded for: a subset of the group, closed all the same
        assert 0 < overall["problems/ra"] <= overall["problems"]
        assert overall["closed/ra"] == pytest.approx(1.0) and overall["entry/ra"] == pytest.approx(overall["oracle/ra"])

"""tools/three_d_headroom.py on bad input: one message naming the file, exit code 2, no traceback."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_an_entry_without_stored_predictions_is_named_with_exit_code_2():
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "three_d_headroom.py"), "--dataset", "h200-3d-pytorch",
                          "--split", "random", "--method", "no-such-entry"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert "leaderboard/h200-3d-pytorch/random/no-such-entry/preds.parquet" in run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""

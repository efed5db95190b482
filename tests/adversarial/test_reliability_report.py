"""docs/reliability.md holds the table of the cases this suite declares.

The declarations are read by collecting the suite (``pytest --collect-only``, which runs no test),
so the check holds whatever subset of the suite this run selected, and the suite is not run twice.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from reliability import END, START, section

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reliability.md"


def test_reliability_table_is_up_to_date(tmp_path):
    out = tmp_path / "cases.json"
    env = {**os.environ, "KBENCH_RELIABILITY_JSON": str(out), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           str(REPO / "tests" / "adversarial")], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    cases = json.loads(out.read_text())
    text = DOC.read_text()
    current = text[text.index(START): text.index(END) + len(END)]
    assert current == section(cases), "docs/reliability.md is stale: run python tools/reliability_report.py"


def test_the_table_counts_by_hand():
    cases = [{"id": "m::a", "category": "data", "outcome": "error", "fixed": True, "limit": None},
             {"id": "m::b", "category": "data", "outcome": "accepted", "fixed": False, "limit": "slow"},
             {"id": "m::c", "category": "predictions", "outcome": "fuzz", "fixed": False, "limit": None}]
    lines = section(cases).splitlines()
    assert "| predictions | 1 | 0 | 0 | 1 | 0 | 0 |" in lines
    assert "| data | 2 | 1 | 1 | 0 | 1 | 1 |" in lines
    assert "| **total** | 3 | 1 | 1 | 1 | 1 | 1 |" in lines
    assert "- data: slow" in lines and "- data: `m::a`" in lines

"""Run the adversarial suite once and write its table into docs/reliability.md.

    python tools/reliability_report.py            # runs tests/adversarial, rewrites the table
    python tools/reliability_report.py --check    # exit 1 when docs/reliability.md is out of date

The counts come from the ``adversarial`` markers of the collected tests (category, outcome, fixed,
limit: tests/adversarial/reliability.py); the run must pass for the table to be written. The per-case
results go to tools/results/reliability.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "adversarial"))
from reliability import END, START, section  # noqa: E402

DOC = REPO / "docs" / "reliability.md"
RESULTS = REPO / "tools" / "results" / "reliability.json"


def replace_section(text: str, new: str) -> str:
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    return head + new + tail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare with the last results file")
    args = parser.parse_args()
    if not args.check:
        env = {**os.environ, "KBENCH_RELIABILITY_JSON": str(RESULTS), "PYTHONPATH": str(REPO)}
        code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                str(REPO / "tests" / "adversarial"), "--deselect",
                                "tests/adversarial/test_reliability_report.py::test_reliability_table_is_up_to_date"],
                               env=env, cwd=REPO)
        if code != 0:
            print("the adversarial suite failed: table not written", file=sys.stderr)
            return code
    cases = json.loads(RESULTS.read_text())
    failed = [c["id"] for c in cases if c.get("result") != "passed"]
    if failed:
        print(f"cases that did not pass: {failed}", file=sys.stderr)
        return 1
    new = replace_section(DOC.read_text(), section(cases))
    if args.check:
        ok = new == DOC.read_text()
        print("docs/reliability.md is up to date" if ok else "docs/reliability.md is out of date")
        return 0 if ok else 1
    DOC.write_text(new)
    print(f"wrote {DOC.relative_to(REPO)} ({len(cases)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

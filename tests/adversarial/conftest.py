"""The adversarial suite's plugin: the ``adversarial`` marker, and the per-case outcomes as JSON.

With KBENCH_RELIABILITY_JSON=PATH the run writes every declared case and whether its test passed
(``tools/reliability_report.py`` sets it and writes docs/reliability.md from the file).
"""

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for extra in (HERE, HERE.parent / "leaderboard", HERE.parent / "hub", HERE.parent / "collect"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from reliability import case_id, declared_cases  # noqa: E402

_OUTCOMES: dict[str, str] = {}


def pytest_configure(config):
    config.addinivalue_line("markers", "adversarial(category, outcome, fixed=False, limit=None): a case of the "
                                       "adversarial suite (see tests/adversarial/reliability.py)")


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _OUTCOMES[case_id(report.nodeid)] = report.outcome


def pytest_sessionfinish(session):
    path = os.environ.get("KBENCH_RELIABILITY_JSON")
    if not path:
        return
    cases = declared_cases(session.items)
    for case in cases:
        case["result"] = _OUTCOMES.get(case["id"], "not run")
    Path(path).write_text(json.dumps(cases, indent=2) + "\n")

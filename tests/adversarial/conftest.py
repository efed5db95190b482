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

import shutil  # noqa: E402

import pytest  # noqa: E402
from lbtoy import registered_toy, run_fakes  # noqa: E402
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


# ----------------------------------------------------------------------------- the toy run (test_trust, test_trust2)
@pytest.fixture(scope="module")
def toy_run(tmp_path_factory) -> Path:
    """`kbench run --update-leaderboard` of the fake baselines on the toy data: results/ and leaderboard/."""
    tmp = tmp_path_factory.mktemp("trust")
    run_fakes(tmp / "results", tmp / "leaderboard")
    return tmp


@pytest.fixture
def toy():
    yield from registered_toy()


@pytest.fixture
def run_dir(toy_run, toy, tmp_path):
    """A writable copy of the toy run of toy-model: result.json, meta.json, seed-<k>/ (5 seeds)."""
    dst = tmp_path / "sub" / "toy-model"
    shutil.copytree(toy_run / "results" / "toy" / "random" / "toy-model", dst)
    return dst


@pytest.fixture
def board(toy_run, toy, tmp_path):
    """A writable copy of the toy leaderboard (every entry stores every seed)."""
    root = tmp_path / "board"
    shutil.copytree(toy_run / "leaderboard", root)
    return root

"""Fixtures of the leaderboard tests: the toy dataset, a fake baseline registry, a built toy leaderboard."""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from lbtoy import base, fake_classes, registered_toy, run_fakes  # noqa: E402


@pytest.fixture
def toy():
    yield from registered_toy()


@pytest.fixture
def fakes(monkeypatch):
    """A registry holding only the fake baselines (what `kbench run` iterates)."""
    classes = fake_classes()
    monkeypatch.setattr(base, "BASELINES", dict(classes))
    monkeypatch.setattr(base, "discover", lambda: base.BASELINES)
    monkeypatch.setattr(base, "UNAVAILABLE", {})
    return classes


@pytest.fixture(scope="session")
def toy_board(tmp_path_factory):
    """A leaderboard folder built by `kbench run --update-leaderboard` on the toy data (shared, read-only)."""
    tmp = tmp_path_factory.mktemp("board")
    run_fakes(tmp / "results", tmp / "leaderboard")
    return tmp / "leaderboard"

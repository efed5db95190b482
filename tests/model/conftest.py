"""The model tests' shared stand-in: the cached path of ``use_plans`` on the CPU through ``fake_cudnn``."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def fake_frontend(monkeypatch):
    """The cached path on the CPU: the stand-in frontend of ``fake_cudnn`` for every tensor."""
    import fake_cudnn

    from kbench.model import use_plans as up
    monkeypatch.setattr(up._Frontend, "cudnn", property(lambda self: fake_cudnn))
    monkeypatch.setattr(up._Frontend, "runs_on", staticmethod(lambda tensor: True))
    monkeypatch.setattr(up._Frontend, "handle", lambda self, device: "handle")
    monkeypatch.setattr(up._Frontend, "capturing", staticmethod(lambda: False))
    fake_cudnn.executed.clear()
    fake_cudnn.counts.clear()
    return fake_cudnn

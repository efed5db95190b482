"""Shared fixtures, and the markers that skip themselves: ``gpu`` (a CUDA GPU with the cuDNN
frontend) and ``shared_data`` (the raw source data in ``../shared/data``). A test that takes the
``raw_data`` fixture is marked ``shared_data`` here, so ``-m "not shared_data"`` leaves it out.
The markers are registered in ``pyproject.toml`` (``--strict-markers``)."""

import functools
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RAW = REPO.parent / "shared" / "data"


@functools.cache
def gpu_missing() -> str | None:
    """Why the ``gpu`` tests cannot run here, or None where PyTorch sees a CUDA GPU and the cuDNN frontend."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible (CI has none): the collector is tested on CPU with recorded output"
    if importlib.util.find_spec("cudnn") is None:
        return "the cuDNN frontend (nvidia-cudnn-frontend) is not installed"
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "raw_data" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.shared_data)


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None and gpu_missing() is not None:
        pytest.skip(gpu_missing())
    if item.get_closest_marker("shared_data") is not None and not RAW.exists():
        pytest.skip(f"raw data folder {RAW} not present (it sits beside the repository in CI)")


@pytest.fixture(scope="session")
def raw_data() -> Path:
    if not (RAW / "miopen").exists():
        pytest.skip(f"raw data folder {RAW} not present (it sits beside the repository in CI)")
    return RAW


@pytest.fixture(scope="session")
def mi100():
    import kbench
    return kbench.load("mi100")

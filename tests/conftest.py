from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RAW = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def raw_data() -> Path:
    if not (RAW / "miopen").exists():
        pytest.skip(f"raw data folder {RAW} not present (it sits beside the repository in CI)")
    return RAW


@pytest.fixture(scope="session")
def mi100():
    import kbench
    return kbench.load("mi100")

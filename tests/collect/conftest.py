from pathlib import Path

import pytest

FIXTURES = Path(__file__).with_name("fixtures")
RAW_SAMPLE = FIXTURES / "raw_sample"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.fixture
def raw_sample(tmp_path):
    """A writable copy of the real H100 collector output sample."""
    import shutil
    dst = tmp_path / "raw"
    shutil.copytree(RAW_SAMPLE, dst)
    return dst

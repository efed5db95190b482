import pytest


@pytest.fixture(scope="session")
def cnnopt_raw(raw_data):
    path = raw_data / "cnnopt"
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


@pytest.fixture(scope="session")
def tiles(cnnopt_raw):
    """Both tile datasets, converted once per session: {gpu: (tables, report)}."""
    from kbench.sources.cnnopt import convert_tiles

    return {gpu: convert_tiles(gpu, cnnopt_raw) for gpu in ("v100", "rtx2080ti")}

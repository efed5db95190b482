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


def _raw_encoding_problems(path) -> list[str]:
    """What in the parquet file ``path`` departs from the raw-table encoding (writer.PARQUET_ENCODING):
    every column zstd-compressed, a dictionary page on the text columns and on no other."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    pf = pq.ParquetFile(path)
    text = {f.name for f in pf.schema_arrow if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)}
    problems = []
    for g in range(pf.metadata.num_row_groups):
        for c in range(pf.metadata.num_columns):
            col = pf.metadata.row_group(g).column(c)
            if col.compression != "ZSTD":
                problems.append(f"{col.path_in_schema}: {col.compression}")
            if col.has_dictionary_page != (col.path_in_schema in text):
                problems.append(f"{col.path_in_schema}: dictionary page {col.has_dictionary_page}")
    return problems


@pytest.fixture
def raw_encoding_problems():
    """The check that a raw parquet table kbench wrote has the raw-table encoding ([] when it has)."""
    return _raw_encoding_problems

"""Fixtures for the tuning tests: a small hand-made perf-db and the real ones."""

from __future__ import annotations

import bz2

import pytest
from tuning_toy import FIND_DB_LINES, make_perfdb


@pytest.fixture()
def toy_db(tmp_path):
    """A bz2 perf-db plus its sibling find-db (``gfxtest_1.HIP.fdb.txt.bz2``)."""
    db = make_perfdb(tmp_path)
    (tmp_path / "gfxtest_1.HIP.fdb.txt.bz2").write_bytes(
        bz2.compress(("\n".join(FIND_DB_LINES) + "\n").encode()))
    return db


@pytest.fixture(scope="session")
def real_tables(raw_data):
    """perfdb_tables of both shipped perf-dbs (built once per session)."""
    from kbench.sources.perfdb import perfdb_tables

    return {name: perfdb_tables(raw_data / "miopen" / f"{name}.db.bz2")
            for name in ("gfx906_60", "gfx942130")}

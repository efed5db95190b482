"""`kbench leaderboard restamp`: records carried over to a new dataset version whose scored data is the same
(a split added), only the version and checksum strings changing; refused, with every file put back, where
the new version's labels give other figures."""

import json
import shutil

import pytest
from lbtoy import make_toy

from kbench.cli import main
from kbench.core.errors import KbenchInputError
from kbench.data.dataset import Dataset
from kbench.leaderboard import store
from kbench.leaderboard.rescorer import validate_board
from kbench.leaderboard.restamp import _restamped_text, restamp
from kbench.scoring.records import DatasetRef

NEW_CHECKSUM = "cd" * 32


@pytest.fixture
def board(toy_board, tmp_path):
    dst = tmp_path / "leaderboard"
    shutil.copytree(toy_board, dst)
    return dst


def toy_version(version: str, checksum: str, runtimes_scale: float = 1.0) -> Dataset:
    """The toy dataset at another version: the same tables and a ``shapes`` split column added (its parts are
    the ``random`` ones reversed, any column will do), the test part's first problem's times scaled."""
    old = make_toy()
    tables = {name: table.copy() for name, table in old.tables.items()}
    tables["splits"]["shapes"] = tables["splits"]["random"].map({"train": "test", "test": "train", "valid": "valid"})
    if runtimes_scale != 1.0:
        first = tables["splits"].loc[tables["splits"]["random"] == "test", "problem_id"].iloc[0]
        rt = tables["runtimes"]
        fastest = rt[rt["problem_id"] == first]["time_ms"].idxmin()
        rt.loc[fastest, "time_ms"] *= runtimes_scale  # its fastest kernel becomes slower: the oracle changes
    return Dataset("toy", tables, {**old.manifest, "version": version, "checksum": checksum})


@pytest.fixture
def installed():
    """Install a toy version for the test (``installed(ds)``); the registry is put back afterwards."""
    def install(ds):
        store.unregister_dataset("toy")
        store.register_dataset(ds)
    yield install
    store.unregister_dataset("toy")


def files_of(board):
    return {p.relative_to(board): p.read_bytes() for p in sorted(board.rglob("*")) if p.is_file()}


def test_a_split_added_is_carried_over_and_only_the_version_lines_change(board, installed):
    before = files_of(board)
    installed(toy_version("1.1.0", NEW_CHECKSUM))
    with pytest.raises(KbenchInputError, match=r"version '1\.0\.0' in the record, '1\.1\.0' installed"):
        validate_board(board)
    counts = restamp(board, ["toy"], progress=False)
    after = files_of(board)
    records = [p for p in before if p.name in ("result.json", "meta.json")]
    assert counts["entries"] == 4 and counts["files"] == len(records) == 8
    for path in records:
        old, new = before[path].decode().splitlines(), after[path].decode().splitlines()
        changed = [(a.strip(), b.strip()) for a, b in zip(old, new, strict=True) if a != b]
        assert changed == [('"version": "1.0.0",', '"version": "1.1.0",'),
                           (f'"checksum": "{"ab" * 32}"', f'"checksum": "{NEW_CHECKSUM}"')]
        assert json.loads(after[path])["dataset"] == {"name": "toy", "version": "1.1.0", "checksum": NEW_CHECKSUM}
    assert {p: b for p, b in after.items() if p not in records} == {p: b for p, b in before.items()
                                                                   if p not in records}
    assert validate_board(board)["rescored"] == 4
    assert restamp(board, ["toy"], progress=False)["files"] == 0  # nothing left to carry over


def test_other_labels_are_refused_and_every_file_is_put_back(board, installed):
    before = files_of(board)
    installed(toy_version("1.1.0", NEW_CHECKSUM, runtimes_scale=50.0))
    with pytest.raises(KbenchInputError, match="not the data they were scored on; every file is as it was"):
        restamp(board, ["toy"], progress=False)
    assert files_of(board) == before


def test_the_command_names_an_unknown_dataset_and_exits_2(board, capsys):
    assert main(["leaderboard", "restamp", "no-such-set", "--leaderboard", str(board)]) == 2
    assert "no-such-set" in capsys.readouterr().err


def test_only_the_dataset_block_changes_in_the_text():
    """A figure keeps the digits it was written with (json.dumps would write 2.1e-05), and a block naming
    another dataset or version is left alone."""
    text = ('{\n  "dataset": {\n    "name": "toy",\n    "version": "1.0.0",\n    "checksum": "aa"\n  },\n'
            '  "x": 0.000021,\n  "source": {"name": "toy", "version": "0.9.0", "checksum": "99"}\n}\n')
    out = _restamped_text(text, DatasetRef(name="toy", version="1.0.0", checksum="aa"),
                          DatasetRef(name="toy", version="1.1.0", checksum="bb"), "t.json")
    assert out == text.replace('"1.0.0"', '"1.1.0"').replace('"aa"', '"bb"')
    with pytest.raises(KbenchInputError, match="not written as kbench writes one"):
        _restamped_text(text, DatasetRef(name="toy", version="2.0.0", checksum="cc"),
                        DatasetRef(name="toy", version="2.1.0", checksum="dd"), "t.json")

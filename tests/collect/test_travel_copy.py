"""``kbench collect travel-copy``: a raw folder cut to what a collecting call resumes from.

A call resumed from the copy must do exactly what it does when resumed from the full folder: the
same done set and unfinished starts, the same notes cache, the same shard assignments. Checked on
``raw/h200`` itself, on the two-shard fixture recorded on an H200, and end to end with the stand-in
collector (sharded runs from the copy and from the full folder, then the merge into the full one).
"""

import hashlib
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from kbench.collect.measure import cudnn
from kbench.collect.measure.notes_cache import NotesCache
from kbench.collect.raw_store import shard, writer
from kbench.collect.raw_store.merge import merge
from kbench.collect.raw_store.travel_copy import MARKER, RESUME_COLUMNS, travel_copy
from kbench.core.errors import KbenchInputError

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from collect_fakes import SyntheticCollector, write_problems_csv  # noqa: E402

RAW_H200 = HERE.parents[1] / "raw" / "h200"
TWO_SHARDS = HERE / "fixtures" / "two_shards"


def _tree_digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _same_resume_inputs(full: Path, copy: Path) -> None:
    assert writer.resume_state(copy) == writer.resume_state(full)
    a, b = NotesCache(), NotesCache()
    assert cudnn.seed_notes_cache(a, [copy]) == cudnn.seed_notes_cache(b, [full])
    assert (a.known, a.dropped) == (b.known, b.dropped)


def test_raw_h200_copy_resumes_like_the_full_folder(tmp_path):
    before = _tree_digest(RAW_H200)
    summary = travel_copy(RAW_H200, tmp_path / "h200")
    assert _tree_digest(RAW_H200) == before  # the source is only read
    copy = tmp_path / "h200"
    _same_resume_inputs(RAW_H200, copy)
    full_keys = writer.load_records(RAW_H200, "problems", ["key"])["key"]
    assert summary["problem_directions"] == full_keys.nunique()
    assert summary["plan_records"] == len(writer.load_records(RAW_H200, "plans", ["key"]))
    for kind, columns in RESUME_COLUMNS.items():
        assert list(pd.read_parquet(copy / f"{kind}-0000.parquet").columns) == columns
    for name in ("journal.txt", "env.jsonl"):
        assert (copy / name).read_bytes() == (RAW_H200 / name).read_bytes()
    # the point of the copy: it is a small part of what it replaces
    assert summary["bytes"] * 5 < sum(p.stat().st_size for p in RAW_H200.iterdir() if p.is_file())


def test_fixture_copy_keeps_the_recorded_notes(tmp_path, raw_encoding_problems):
    """The two-shard fixture's shard folders are batch parts (not compacted): the copy reads them too."""
    for name in ("shard-0-of-2", "shard-1-of-2"):
        travel_copy(TWO_SHARDS / name, tmp_path / name)
        _same_resume_inputs(TWO_SHARDS / name, tmp_path / name)
        plans = pd.read_parquet(tmp_path / name / "plans-0000.parquet")
        assert raw_encoding_problems(tmp_path / name / "plans-0000.parquet") == []
        assert plans["numeric_notes"].notna().any()  # probed notes were recorded on the GPU and kept


def _full_folder(tmp_path) -> tuple[Path, Path]:
    csv = write_problems_csv(tmp_path / "p.csv", 8)
    full = tmp_path / "full"
    cudnn.collect(csv, full, limit=5, progress=False, make_collector=SyntheticCollector)
    writer.compact(full)
    return csv, full


def test_sharded_calls_from_the_copy_match_calls_from_the_full_folder(tmp_path):
    csv, full = _full_folder(tmp_path)
    reference = tmp_path / "reference"
    shutil.copytree(full, reference)
    travel_copy(full, tmp_path / "copy")
    copy = tmp_path / "copy"
    measured = {}
    for root in (reference, copy):
        fakes = [SyntheticCollector() for _ in range(2)]
        for k, fake in enumerate(fakes):
            cudnn.collect(csv, root, shard=shard.Shard(k, 2), limit=6, progress=False, make_collector=lambda o, f=fake: f)
        measured[root.name] = [f.measured for f in fakes]
        assert [shard.read_manifest(root / f"shard-{k}-of-2")["assigned"] for k in range(2)] == measured[root.name]
    assert measured["copy"] == measured["reference"]
    done = set(writer.load_records(full, "problems")["key"])
    new = [k for keys in measured["copy"] for k in keys]
    assert len(new) == 6 and done.isdisjoint(new)
    # what the call brings back goes into the full folder: every key once
    record = merge([copy / "shard-0-of-2", copy / "shard-1-of-2"], into=full)
    assert record["problem_directions"] == 6
    keys = writer.load_records(full, "problems")["key"]
    assert keys.is_unique and set(keys) == done | set(new)


def test_refusals_leave_everything_as_it_was(tmp_path):
    csv, full = _full_folder(tmp_path)
    copy = tmp_path / "copy"
    travel_copy(full, copy)
    before = {p: _tree_digest(p) for p in (full, copy)}
    with pytest.raises(KbenchInputError, match="exists and is not empty"):
        travel_copy(full, copy)
    with pytest.raises(KbenchInputError, match="is itself a travelling copy"):
        travel_copy(copy, tmp_path / "again")
    with pytest.raises(KbenchInputError, match="lies inside"):
        travel_copy(full, full / "sub")
    with pytest.raises(KbenchInputError, match="not a raw collector folder"):
        travel_copy(tmp_path / "p.csv", tmp_path / "x")
    with pytest.raises(KbenchInputError, match="a travelling copy .* --shard"):
        cudnn.collect(csv, copy, progress=False, make_collector=SyntheticCollector)
    cudnn.collect(csv, copy, shard=shard.Shard(0, 1), progress=False, make_collector=SyntheticCollector)
    with pytest.raises(KbenchInputError, match="merge into the full raw folder"):
        merge([copy / "shard-0-of-1"], into=copy)
    shutil.rmtree(copy / "shard-0-of-1")
    with pytest.raises(KbenchInputError, match="without shard folders"):
        merge([copy], into=full)
    assert {p: _tree_digest(p) for p in (full, copy)} == before
    assert not (tmp_path / "again").exists() and not (tmp_path / "x").exists() and not (full / "sub").exists()


def test_cli_writes_the_copy_and_refuses_with_exit_2(tmp_path, capsys):
    from kbench.cli import main
    _, full = _full_folder(tmp_path)
    assert main(["collect", "travel-copy", str(full), str(tmp_path / "copy")]) == 0
    assert (tmp_path / "copy" / MARKER).exists()
    capsys.readouterr()
    assert main(["collect", "travel-copy", str(full), str(tmp_path / "copy")]) == 2
    err = capsys.readouterr().err
    assert "copy: exists and is not empty" in err and "Traceback" not in err

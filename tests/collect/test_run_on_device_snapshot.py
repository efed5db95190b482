"""The device script's shard snapshot (kbench/collect/run_on_device.sh, torchrun mode).

A call the lent machine stops at its own limit never reaches the script's packing step; the
snapshot it refreshes every minute is what comes back. Run here on a hand-made shard folder: the
snapshot holds every finished batch and none of the half-written ('.NAME.tmp') files or locks.
"""

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "kbench" / "collect" / "run_on_device.sh"


def _snapshot_function() -> str:
    lines = SCRIPT.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "snapshot_shards() {")
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "}")
    return "\n".join(lines[start:end + 1])


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_snapshot_keeps_finished_batches_and_leaves_out_temporary_files_and_locks(tmp_path):
    raw, out = tmp_path / "raw", tmp_path / "out"
    parts = raw / "shard-1-of-3" / "parts"
    parts.mkdir(parents=True)
    out.mkdir()
    (parts / "r1-0000.plans.jsonl.gz").write_bytes(b"plans")
    (parts / "r1-0000.problems.jsonl.gz").write_bytes(b"problems")
    (parts / ".r1-0001.plans.jsonl.gz.tmp").write_bytes(b"half a batch")
    (raw / "shard-1-of-3" / "journal.txt").write_text("start r1\n")
    (raw / "shard-1-of-3" / ".lock").write_text("")
    (raw / "shard-0-of-2").mkdir()  # another launch's layout: not this one's N, left out
    (raw / "shard-0-of-2" / "journal.txt").write_text("other\n")
    script = f"RAW={raw}\nOUT={out}\nNR=3\n{_snapshot_function()}\nsnapshot_shards\n"
    subprocess.run(["bash", "-c", script], check=True, cwd=tmp_path)
    with tarfile.open(out / "raw_shards.tgz") as tar:
        files = sorted(m.name for m in tar.getmembers() if m.isfile())
    assert files == ["shard-1-of-3/journal.txt", "shard-1-of-3/parts/r1-0000.plans.jsonl.gz",
                     "shard-1-of-3/parts/r1-0000.problems.jsonl.gz"]
    assert not (out / "raw_shards.part").exists()

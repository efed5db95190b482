"""Hostile raw collector folders (issue 22, "Collector folders"): torn batches, two writers, mixed shards.

Category ``collector`` of the reliability table (docs/reliability.md)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from advkit import adversarial
from collect_fakes import HERE, RAW_SAMPLE, ReplayCollector, SyntheticCollector, replay_problems_csv, write_problems_csv

from kbench.collect.measure import cudnn
from kbench.collect.measure.cudnn import run as collect_run
from kbench.collect.packaging import package
from kbench.collect.raw_store import writer
from kbench.collect.raw_store.lock import PID_LOCK, FolderLock, holder
from kbench.collect.raw_store.merge import merge
from kbench.collect.raw_store.shard import Shard
from kbench.core.errors import KbenchInputError

ROOT = HERE.parents[1]


# ---------------------------------------------------------------------------- torn batches
@pytest.fixture(scope="module")
def three_batches(tmp_path_factory):
    """A raw folder of 3 complete batches (2 problem-directions each) written by the collector."""
    base = tmp_path_factory.mktemp("torn")
    csv = write_problems_csv(base / "p.csv", 2)  # 2 geometries x 3 directions = 6
    cudnn.collect(csv, base / "raw", batch_size=2, progress=False, make_collector=SyntheticCollector)
    stems = sorted(f.name.split(".")[0] for f in (base / "raw" / writer.PARTS).glob("*.problems.jsonl.gz"))
    assert len(stems) == 3
    keys = {s: [r["key"] for r in writer._read_batch_file(base / "raw" / writer.PARTS / f"{s}.problems.jsonl.gz")[0]]
            for s in stems}
    return base, csv, stems, keys


@pytest.mark.slow
@adversarial("collector", "accepted", fixed=True)
@pytest.mark.parametrize("kind", ["problems", "plans"])
def test_torn_last_batch_at_every_byte_is_dropped_said_and_redone(three_batches, tmp_path, kind, capsys,
                                                                  monkeypatch):
    """kill -9 mid-write of the last batch, simulated by cutting its file at every byte boundary."""
    base, csv, stems, keys = three_batches
    todo = cudnn.load_problems(csv)
    # parsed once, not under test here: patched in the module whose collect() looks it up
    monkeypatch.setattr(collect_run, "load_problems", lambda *a, **k: todo.copy())
    last = stems[-1]
    whole = (base / "raw" / writer.PARTS / f"{last}.{kind}.jsonl.gz").read_bytes()
    complete = set(keys[stems[0]]) | set(keys[stems[1]])
    for cut in range(len(whole)):
        raw = tmp_path / f"cut{cut}"
        shutil.copytree(base / "raw", raw)
        (raw / writer.PARTS / f"{last}.{kind}.jsonl.gz").write_bytes(whole[:cut])
        parts = writer.read_parts(raw)
        assert list(parts.torn) == [last], cut
        done, _ = writer.resume_state(raw)
        assert done == complete, cut  # every complete batch kept, the torn one not counted
        fake = SyntheticCollector()
        summary = cudnn.collect(csv, raw, batch_size=2, progress=False, make_collector=lambda o: fake)  # noqa: B023 (called within this iteration)
        assert sorted(fake.measured) == sorted(keys[last]), cut  # the torn batch, and only it, is redone
        assert any(f"dropped torn batch {raw / writer.PARTS / last}" in n for n in summary["notes"]), cut
        assert (raw / writer.PARTS / "torn" / f"{last}.{kind}.jsonl.gz").read_bytes() == whole[:cut]  # kept aside
        problems = writer.load_records(raw, "problems")
        assert sorted(problems["key"]) == sorted(complete | set(keys[last])), cut  # each once
        shutil.rmtree(raw)
    assert "dropped torn batch" in capsys.readouterr().err  # said on the console too


@adversarial("collector", "accepted", fixed=True)
def test_torn_batch_is_skipped_by_readers_without_moving_it(three_batches, tmp_path):
    base, _, stems, keys = three_batches
    raw = tmp_path / "raw"
    shutil.copytree(base / "raw", raw)
    path = raw / writer.PARTS / f"{stems[0]}.plans.jsonl.gz"
    path.write_bytes(path.read_bytes()[:-3])
    before = sorted(p.name for p in (raw / writer.PARTS).iterdir())
    assert set(writer.load_records(raw, "problems")["key"]) == set(keys[stems[1]]) | set(keys[stems[2]])
    counts = writer.compact(raw)  # compacts the complete batches, leaves the torn one where it is
    assert counts["problems"] == 4 and path.exists()
    assert sorted(p.name for p in (raw / writer.PARTS).iterdir()) == sorted(n for n in before if n.startswith(stems[0]))


@adversarial("collector", "error", fixed=True)
def test_damaged_compacted_file_is_named(three_batches, tmp_path):
    base, _, _, _ = three_batches
    raw = tmp_path / "raw"
    shutil.copytree(base / "raw", raw)
    writer.compact(raw)
    pq = raw / "problems-0000.parquet"
    pq.write_bytes(pq.read_bytes()[:100])
    with pytest.raises(KbenchInputError, match="problems-0000.parquet: cannot read this compacted batch file"):
        writer.resume_state(raw)


# ---------------------------------------------------------------------------- two writers
SLOW_COLLECTOR = """
import sys
sys.path.insert(0, {here!r})
from collect_fakes import SyntheticCollector
from kbench.collect.measure import cudnn
cudnn.collect({csv!r}, {raw!r}, batch_size=1, progress=False, make_collector=lambda o: SyntheticCollector(delay_s=0.3))
"""


@adversarial("collector", "error", fixed=True)
def test_second_collector_on_the_same_folder_is_refused(tmp_path, capsys):
    csv = write_problems_csv(tmp_path / "p.csv", 4)  # 12 problem-directions, about 3.6 s
    raw = tmp_path / "raw"
    code = SLOW_COLLECTOR.format(here=str(HERE), csv=str(csv), raw=str(raw))
    first = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 60
    while holder(raw) is None:
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.02)
    assert f"pid {first.pid} on host {socket.gethostname()}" in holder(raw)
    second = SyntheticCollector()
    with pytest.raises(KbenchInputError, match=f"another kbench process is writing this folder \\(pid {first.pid}"):
        cudnn.collect(csv, raw, progress=False, make_collector=lambda o: second)
    from kbench.cli import main
    assert main(["collect", "compact", str(raw)]) == 2
    assert f"(pid {first.pid} on host {socket.gethostname()} since" in capsys.readouterr().err
    assert holder(raw).endswith("a collector")
    assert first.wait(timeout=60) == 0
    assert second.measured == []
    runs = {p.name.rsplit("-", 1)[0] for p in (raw / writer.PARTS).glob("*.problems.jsonl.gz")}
    assert len(runs) == 1  # never interleaved: every batch is the first collector's
    assert holder(raw) is None and writer.resume_state(raw)[0] == set(cudnn.load_problems(csv)["key"])


@adversarial("collector", "accepted", fixed=True)
def test_lock_of_a_killed_collector_is_gone(tmp_path):
    holder_proc = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from kbench.collect.raw_store.lock import FolderLock; "
        f"FolderLock({str(tmp_path)!r}).acquire(); print('held', flush=True); time.sleep(60)")],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    assert holder_proc.stdout.readline().strip() == "held"
    with pytest.raises(KbenchInputError, match=f"pid {holder_proc.pid}"):
        FolderLock(tmp_path).acquire()
    holder_proc.send_signal(signal.SIGKILL)
    holder_proc.wait()
    with FolderLock(tmp_path) as lock:  # the kernel dropped the dead process's flock
        assert lock.notes == []


@adversarial("collector", "accepted", fixed=True)
def test_pid_lock_fallback_takes_over_stale_locks_only(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here = socket.gethostname()
    (tmp_path / PID_LOCK).write_text(f"pid {dead.pid} on host {here} since 2026-01-01T00:00:00Z\n")
    with FolderLock(tmp_path, use_flock=False) as lock:
        assert lock.notes and "removed a stale lock" in lock.notes[0]
        with pytest.raises(KbenchInputError, match=f"pid {os.getpid()}"):
            FolderLock(tmp_path, use_flock=False).acquire()
    assert not (tmp_path / PID_LOCK).exists()
    (tmp_path / PID_LOCK).write_text("pid 12345 on host elsewhere-node since 2026-01-01T00:00:00Z\n")
    with pytest.raises(KbenchInputError, match=f"delete {tmp_path / PID_LOCK}"):
        FolderLock(tmp_path, use_flock=False).acquire()


# ---------------------------------------------------------------------------- merging shards
def _two_shards(root: Path, csv: Path, env1: dict | None = None) -> None:
    """Shards 0/2 and 1/2 of the recorded sample, replayed through the real collector loop."""
    for k, env in ((0, None), (1, env1)):
        cudnn.collect(csv, root, shard=Shard(k, 2), progress=False,
                  make_collector=lambda o, env=env: ReplayCollector(env=env))


@pytest.fixture(scope="module")
def two_shard_root(tmp_path_factory):
    """A two-shard raw root cut from the real H100 runs (tests/collect/fixtures/raw_sample, from raw/h100).

    Its records were measured on one H100 by single-GPU runs and are replayed
    here through the sharded collector; they were not recorded on a two-GPU
    machine.
    """
    base = tmp_path_factory.mktemp("two")
    csv = replay_problems_csv(base / "p.csv")
    _two_shards(base / "raw", csv)
    return base / "raw", csv


@adversarial("collector", "accepted")
def test_two_shard_fixture_packages_like_the_unsharded_sample(two_shard_root, tmp_path):
    root, _ = two_shard_root
    sizes = [len(writer.load_records(root / f"shard-{k}-of-2", "problems")) for k in range(2)]
    assert min(sizes) > 0 and sum(sizes) == len(writer.load_records(RAW_SAMPLE, "problems"))
    report = merge([root], tmp_path / "merged")
    assert report["gaps"] == [] and report["problem_directions"] == sum(sizes)
    assert report["versions"]["gpu"] == "NVIDIA H100 80GB HBM3"
    assert sorted(f.name for f in (tmp_path / "merged").glob("*.parquet")) == ["plans-0000.parquet",
                                                                              "problems-0000.parquet"]
    merged, _ = package.build_tables(*package.load_raw(tmp_path / "merged")[:2], None)
    direct, _ = package.build_tables(*package.load_raw(RAW_SAMPLE)[:2], None)
    for name in ("problems", "runtimes", "kernels", "heuristics", "splits"):
        a = merged[name].sort_values(list(merged[name].columns[:2])).reset_index(drop=True)
        b = direct[name].sort_values(list(direct[name].columns[:2])).reset_index(drop=True)
        pd.testing.assert_frame_equal(a, b, check_like=True)
    from kbench.cli import main
    assert main(["collect", "package", str(tmp_path / "merged"), "--name", "h100", "--out", str(tmp_path / "ds"),
                 "--mituna", str(tmp_path / "none")]) == 0
    with pytest.raises(KbenchInputError, match="holds shard folders .*'kbench collect merge "):
        package.load_raw(root)  # the unmerged root is refused, not read without its shards


@pytest.mark.parametrize("field, value, what", [
    ("gpu", "NVIDIA H200", "GPU model"), ("smi_driver_version", "590.1", "driver"),
    ("cudnn_backend", "9.20.0", "cuDNN"), ("cudnn_frontend", "1.33.0", "cuDNN frontend")])
@adversarial("collector", "error")
def test_merge_refuses_shards_from_different_gpus_or_versions(tmp_path, field, value, what, capsys):
    csv = replay_problems_csv(tmp_path / "p.csv")
    _two_shards(tmp_path / "raw", csv, env1={field: value})
    with pytest.raises(KbenchInputError) as err:
        merge([tmp_path / "raw"], tmp_path / "merged")
    msg = str(err.value)
    assert f"{tmp_path / 'raw' / 'shard-1-of-2'}: {what} {value!r} differs from" in msg
    assert f"in {tmp_path / 'raw' / 'shard-0-of-2'} ({field})" in msg and "Nothing was written" in msg
    assert not (tmp_path / "merged").exists()
    from kbench.cli import main
    assert main(["collect", "merge", str(tmp_path / "raw"), "--out", str(tmp_path / "m2")]) == 2
    assert "shard-1-of-2" in capsys.readouterr().err and not (tmp_path / "m2").exists()


@adversarial("collector", "error")
def test_merge_refuses_duplicates_and_reports_gaps(two_shard_root, tmp_path):
    root, _ = two_shard_root
    with pytest.raises(KbenchInputError, match="measured in more than one folder"):
        merge([root, RAW_SAMPLE], tmp_path / "m")  # the same records again
    with pytest.raises(KbenchInputError, match=r"shard\(s\) 1/2 not given: their folders shard-1-of-2"):
        merge([root / "shard-0-of-2"], tmp_path / "m")
    report = merge([root / "shard-0-of-2"], tmp_path / "m", allow_gaps=True)
    assert len(report["gaps"]) == 1 and report["sources"][0]["shard"] == "0/2"
    # a shard that left assigned work unmeasured (its last batch lost)
    cut = tmp_path / "cut"
    shutil.copytree(root, cut)
    shard1 = cut / "shard-1-of-2"
    batch = sorted((shard1 / writer.PARTS).glob("*.problems.jsonl.gz"))[-1]
    lost = [r["key"] for r in writer._read_batch_file(batch)[0]]
    batch.unlink()
    with pytest.raises(KbenchInputError, match=f"shard-1-of-2: {len(lost)} of .* assigned problem-directions not "
                                               f"measured .*--shard 1/2 --out {cut}"):
        merge([cut], tmp_path / "m2")
    # a torn batch is named as a gap too
    shutil.copytree(root, tmp_path / "torn")
    plans = sorted((tmp_path / "torn" / "shard-0-of-2" / writer.PARTS).glob("*.plans.jsonl.gz"))[-1]
    plans.write_bytes(plans.read_bytes()[:10])
    with pytest.raises(KbenchInputError, match="torn batch"):
        merge([tmp_path / "torn"], tmp_path / "m3")


@adversarial("collector", "error")
def test_merge_refuses_busy_inputs_and_existing_output(two_shard_root, tmp_path):
    root, _ = two_shard_root
    with FolderLock(root / "shard-1-of-2"):
        with pytest.raises(KbenchInputError, match="shard-1-of-2: still being written"):
            merge([root], tmp_path / "m")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "x").write_text("mine")
    with pytest.raises(KbenchInputError, match="exists and is not empty"):
        merge([root], tmp_path / "m")
    assert (tmp_path / "m" / "x").read_text() == "mine"
    with pytest.raises(KbenchInputError, match="not a folder"):
        merge([tmp_path / "nothing"], tmp_path / "m4")
    env = json.loads((root / "shard-0-of-2" / writer.ENV).read_text().splitlines()[0])
    assert env["gpu"] == "NVIDIA H100 80GB HBM3"


@adversarial("collector", "accepted")
def test_merge_writes_files_of_at_most_chunk_problem_directions(two_shard_root, tmp_path, monkeypatch):
    from kbench.collect.raw_store import merge as merge_module
    root, _ = two_shard_root
    monkeypatch.setattr(merge_module, "CHUNK", 5)
    report = merge([root], tmp_path / "m")
    n = report["problem_directions"]  # 12: files of 5, 5 and 2
    probs = [pd.read_parquet(f) for f in sorted((tmp_path / "m").glob("problems-*.parquet"))]
    plans = [pd.read_parquet(f) for f in sorted((tmp_path / "m").glob("plans-*.parquet"))]
    assert [p["key"].nunique() for p in probs] == [5, 5, n - 10]
    assert [set(q["key"]) for q in plans] == [set(p["key"]) for p in probs]  # each file pair complete
    assert sum(len(q) for q in plans) == len(writer.load_records(RAW_SAMPLE, "plans"))


@adversarial("collector", "accepted")
def test_merge_into_grows_a_raw_folder_without_rewriting_it(two_shard_root, tmp_path, capsys):
    root, csv = two_shard_root
    first = merge([root / "shard-0-of-2"], tmp_path / "grown", allow_gaps=True)
    assert first["gaps"]
    before = {f.name: f.read_bytes() for f in (tmp_path / "grown").iterdir() if f.suffix == ".parquet"}
    from kbench.cli import main
    assert main(["collect", "merge", str(root / "shard-1-of-2"), "--into", str(tmp_path / "grown")]) == 0
    after = sorted(f.name for f in (tmp_path / "grown").glob("*.parquet"))
    assert after == ["plans-0000.parquet", "plans-0001.parquet", "problems-0000.parquet", "problems-0001.parquet"]
    assert all((tmp_path / "grown" / n).read_bytes() == b for n, b in before.items())  # never rewritten
    grown, _ = package.build_tables(*package.load_raw(tmp_path / "grown")[:2], None)
    direct, _ = package.build_tables(*package.load_raw(RAW_SAMPLE)[:2], None)
    assert sorted(grown["runtimes"]["problem_id"]) == sorted(direct["runtimes"]["problem_id"])
    # the same shard again: its problem-directions are in the target already
    assert main(["collect", "merge", str(root / "shard-1-of-2"), "--into", str(tmp_path / "grown")]) == 2
    assert "measured in more than one folder" in capsys.readouterr().err
    # a shard of another GPU is refused against the target's own environment
    other = tmp_path / "other"
    _two_shards(other, replay_problems_csv(tmp_path / "p.csv"), env1={"gpu": "NVIDIA H200"})
    with pytest.raises(KbenchInputError, match=f"{other / 'shard-1-of-2'}: GPU model 'NVIDIA H200' differs from "
                                               f"'NVIDIA H100 80GB HBM3' in {tmp_path / 'grown'}"):
        merge([other / "shard-1-of-2"], into=tmp_path / "grown")
    with pytest.raises(KbenchInputError, match="either --out"):
        merge([root], tmp_path / "x", into=tmp_path / "grown")

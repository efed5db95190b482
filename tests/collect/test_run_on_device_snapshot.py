"""The device script's shard snapshot (tools/device/run_on_device.sh, torchrun mode).

A call the lent machine stops at its own limit never reaches the script's packing step; the
snapshot it refreshes every minute is what comes back. Run here on a hand-made shard folder: the
snapshot holds every finished batch and none of the half-written ('.NAME.tmp') files or locks.
"""

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "device" / "run_on_device.sh"


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
    script = f"RAW={raw}\nOUT={out}\nNGPU=1\nRPG=3\nNR=3\n{_snapshot_function()}\nsnapshot_shards\n"
    subprocess.run(["bash", "-c", script], check=True, cwd=tmp_path)
    with tarfile.open(out / "raw_shards.tgz") as tar:
        files = sorted(m.name for m in tar.getmembers() if m.isfile())
    assert files == ["shard-1-of-3/journal.txt", "shard-1-of-3/parts/r1-0000.plans.jsonl.gz",
                     "shard-1-of-3/parts/r1-0000.problems.jsonl.gz"]
    assert not (out / "raw_shards.part").exists()


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_snapshot_of_a_multi_gpu_host_is_one_archive_per_gpu(tmp_path):
    """Two GPUs, two ranks each: shards 0-1 (GPU 0) and 2-3 (GPU 1) travel in archives of their own, so no
    file outgrows what a call brings back; a GPU whose ranks have written nothing yet gets none."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    out.mkdir()
    for k in (0, 1, 2, 3):
        (raw / f"shard-{k}-of-4").mkdir(parents=True)
        (raw / f"shard-{k}-of-4" / "journal.txt").write_text(f"start r{k}\n")
    script = f"RAW={raw}\nOUT={out}\nNGPU=2\nRPG=2\nNR=4\n{_snapshot_function()}\nsnapshot_shards\n"
    subprocess.run(["bash", "-c", script], check=True, cwd=tmp_path)
    held = {}
    for name in ("raw_shards_gpu0.tgz", "raw_shards_gpu1.tgz"):
        with tarfile.open(out / name) as tar:
            held[name] = sorted(m.name for m in tar.getmembers() if m.isfile())
    assert held == {"raw_shards_gpu0.tgz": ["shard-0-of-4/journal.txt", "shard-1-of-4/journal.txt"],
                    "raw_shards_gpu1.tgz": ["shard-2-of-4/journal.txt", "shard-3-of-4/journal.txt"]}
    assert sorted(p.name for p in out.iterdir()) == ["raw_shards_gpu0.tgz", "raw_shards_gpu1.tgz"]
    for k in (2, 3):
        shutil.rmtree(raw / f"shard-{k}-of-4")
    (out / "raw_shards_gpu1.tgz").unlink()
    subprocess.run(["bash", "-c", script], check=True, cwd=tmp_path)
    assert sorted(p.name for p in out.iterdir()) == ["raw_shards_gpu0.tgz"]


def _verify_mode() -> str:
    """The script's verify_one function and its verify mode block."""
    lines = SCRIPT.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("verify_one() {"))
    block = next(i for i, line in enumerate(lines) if line.strip() == 'if [ "$MODE" = verify ]; then')
    end = next(i for i in range(block, len(lines)) if lines[i] == "fi")
    return "\n".join(lines[start:end + 1])


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash and timeout")
def test_verify_deals_run_folders_over_the_gpus(tmp_path):
    """Three run folders on a two-GPU host: the first and third on GPU 0 one after the other, the second on
    GPU 1 beside them. A stand-in python3 records each call's GPU and writes what the real steps write;
    the timings and the record come back, the plan (it came with the call) does not."""
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir()
    out.mkdir()
    (bin_dir / "python3").write_text(
        "#!/bin/bash\n"
        'while [ $# -gt 0 ]; do case "$1" in --out) dir=$2; shift;; --time-only) step=time;; '
        "--score-only) step=score;; esac; shift; done\n"
        'echo "$step $(basename $dir) gpu=$CUDA_VISIBLE_DEVICES nvml=$KBENCH_NVML_DEVICE" >> "$CALLS"\n'
        '[ "$step" = time ] && echo "{}" > "$dir/raw.jsonl"; [ "$step" = score ] && echo "{}" > "$dir/verification.json"\n'
        "exit 0\n")
    (bin_dir / "python3").chmod(0o755)
    runs = []
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "plan.json").write_text("{}")
        runs.append(str(tmp_path / name))
    script = (f"export PATH={bin_dir}:$PATH CALLS={tmp_path / 'calls'}\nOUT={out}\nNGPU=2\nBUDGET=300\nMARGIN=20\n"
              f"T0=$(date +%s)\nMODE=verify\nPROBLEMS={','.join(runs)}\n"
              "left() { echo $(( BUDGET - ($(date +%s) - T0) )); }\n" + _verify_mode() + "\n")
    subprocess.run(["bash", "-c", script], check=True, cwd=tmp_path, capture_output=True)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert sorted(calls) == sorted(f"{step} {name} gpu={gpu} nvml={gpu}" for name, gpu in (("a", 0), ("b", 1), ("c", 0))
                                   for step in ("time", "score"))
    assert calls.index("score a gpu=0 nvml=0") < calls.index("time c gpu=0 nvml=0")  # one GPU: one after another
    for name in ("a", "b", "c"):
        assert sorted(p.name for p in (out / name).iterdir()) == ["raw.jsonl.gz", "verification.json"]


def _ladder_mode() -> str:
    """The script's ladder mode block."""
    lines = SCRIPT.read_text().splitlines()
    block = next(i for i, line in enumerate(lines) if line.strip() == 'if [ "$MODE" = ladder ]; then')
    end = next(i for i in range(block, len(lines)) if lines[i] == "fi")
    return "\n".join(lines[block:end + 1])


def _ladder_calls(tmp_path, env: str) -> list[str]:
    """Run the ladder block on a stand-in host of 2 GPUs and 16 cores: taskset, torchrun and python3 record
    their arguments; returns the launches as 'cores=FIRST-LAST gpus=DEVICES nproc=N limit=L'."""
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir()
    out.mkdir()
    stand_ins = {
        "nproc": "echo 16\n",
        "taskset": 'shift; echo "cores=$1" >> "$CALLS.pin"; shift; exec "$@"\n',
        "torchrun": ('while [ $# -gt 0 ]; do case "$1" in --nproc-per-node=*) n=${1#*=};; --limit) l=$2; shift;; '
                     "esac; shift; done\n"
                     'echo "$(tail -1 "$CALLS.pin") gpus=$CUDA_VISIBLE_DEVICES nproc=$n limit=$l" >> "$CALLS"\n'),
        "python3": "exit 0\n",
        "pgrep": "exit 1\n",
    }
    for name, body in stand_ins.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    script = (f"export PATH={bin_dir}:$PATH CALLS={tmp_path / 'calls'}\nOUT={out}\nRAW={tmp_path / 'raw'}\n"
              "NGPU=2\nBUDGET=600\nMARGIN=20\nRPG=3\nBASE=none\nPROBLEMS=corpus.csv.gz\nT0=$(date +%s)\nMODE=ladder\n"
              "left() { echo $(( BUDGET - ($(date +%s) - T0) )); }\n" + env + "\n" + _ladder_mode() + "\n")
    subprocess.run(["bash", "-c", script], check=True, cwd=tmp_path, capture_output=True)
    return (tmp_path / "calls").read_text().splitlines()


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_ladder_steps_over_gpus_with_the_hosts_share_of_cores(tmp_path):
    """The default ladder: 1 then 2 GPUs, each pinned to 16 / 2 = 8 cores per GPU, a shard count per step."""
    calls = _ladder_calls(tmp_path, "export STEP_S=40 AGREE_S=0 AGREE_ROUNDS=0")
    assert calls == ["cores=0-7 gpus=0 nproc=3 limit=400", "cores=0-15 gpus=0,1 nproc=6 limit=800"]
    assert sorted(p.name for p in (tmp_path / "out").glob("*.tgz")) == ["ladder_1gpu.tgz", "ladder_2gpu.tgz"]


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_cores_ladder_keeps_the_gpus_and_varies_the_cores(tmp_path):
    """CORES_LADDER="8 1 32 2": one GPU pinned to 8, then 1, then 2 cores; the same shard count (3 ranks)
    every step, whose one assignment has room for the three steps that run (3 x 400); the step that does
    not fit the host (one GPU with 32 cores on 16) is skipped and takes no share of the budget."""
    calls = _ladder_calls(tmp_path, 'export STEP_S=40 AGREE_S=0 AGREE_ROUNDS=0 CORES_LADDER="8 1 32 2" LADDER_GPUS=1')
    assert calls == ["cores=0-7 gpus=0 nproc=3 limit=1200", "cores=0-0 gpus=0 nproc=3 limit=1200",
                     "cores=0-1 gpus=0 nproc=3 limit=1200"]
    assert [p.name for p in (tmp_path / "out").glob("*.tgz")] == ["ladder_1gpu_cores.tgz"]
    assert "step 1:32 does not fit this host" in (tmp_path / "out" / "ladder.log").read_text()


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_ladder_without_pinning_runs_every_step_on_all_cores(tmp_path):
    """CORES_PER_GPU=0 turns pinning off (as a host without taskset does): every step runs unpinned on all
    the host's cores, and none is skipped for want of cores."""
    calls = _ladder_calls(tmp_path, "export STEP_S=40 AGREE_S=0 AGREE_ROUNDS=0 CORES_PER_GPU=0")
    assert [c.split(" ", 1)[1] for c in calls] == ["gpus=0 nproc=3 limit=400", "gpus=0,1 nproc=6 limit=800"]
    assert not (tmp_path / "calls.pin").exists()


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_ladder_without_agreement_keeps_no_time_for_it(tmp_path):
    """AGREE_ROUNDS=0 (or a one-GPU host) keeps no agreement time back: with 55 s left, two steps of
    (55 - 30) / 2 = 12 s each both run, where keeping half of the default AGREE_S of 90 would skip them."""
    calls = _ladder_calls(tmp_path, 'export AGREE_ROUNDS=0 CORES_LADDER="8 1" LADDER_GPUS=1 BUDGET=55')
    assert [c.split(" gpus")[0] for c in calls] == ["cores=0-7", "cores=0-0"]


def _autotune_mode() -> str:
    """The script's autotune_one function and its autotune mode block."""
    lines = SCRIPT.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("autotune_one() {"))
    block = next(i for i, line in enumerate(lines) if line.strip() == 'if [ "$MODE" = autotune ]; then')
    end = next(i for i in range(block, len(lines)) if lines[i] == "fi")
    return "\n".join(lines[start:end + 1])


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash and timeout")
def test_autotune_runs_a_shard_per_gpu_seeded_with_the_carried_records(tmp_path):
    """A two-GPU host, one dataset's autotune folder carried with a record file and env.jsonl of an earlier
    call. A stand-in python3 notes the shard and GPU of each call and whether the carried records were in
    its output folder, and writes a record and a start line as the probe does; what comes back is each
    shard's records gzipped under the call's stamp (never the carried file's name) and env.jsonl, old and
    new lines."""
    import gzip
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir()
    out.mkdir()
    (bin_dir / "python3").write_text(
        "#!/bin/bash\n"
        'while [ $# -gt 0 ]; do case "$1" in --out) dir=$2; shift;; --shard) shard=$2; shift;; esac; shift; done\n'
        'k=${shard%/*}; n=${shard#*/}\n'
        '[ -f "$dir/autotune-20261202T000000-0-of-2.jsonl.gz" ] && seen=carried || seen=none\n'
        'echo "shard=$shard gpu=$CUDA_VISIBLE_DEVICES $seen" >> "$CALLS"\n'
        'echo "{\\"key\\": \\"k$k\\"}" >> "$dir/autotune-$k-of-$n.jsonl"\n'
        'echo "{\\"phase\\": \\"start\\", \\"shard\\": \\"$shard\\"}" >> "$dir/env.jsonl"\n'
        "exit 0\n")
    (bin_dir / "python3").chmod(0o755)
    folder = tmp_path / "raw" / "h200" / "autotune"
    folder.mkdir(parents=True)
    (folder / "problems.csv.gz").write_bytes(b"")
    (folder / "autotune-20261202T000000-0-of-2.jsonl.gz").write_bytes(gzip.compress(b'{"key": "old"}\n'))
    (folder / "env.jsonl").write_text('{"phase": "start", "shard": "0/2"}\n')
    script = (f"export PATH={bin_dir}:$PATH CALLS={tmp_path / 'calls'} AT_WORK={tmp_path / 'work'} SNAPSHOT_S=3600\n"
              f"OUT={out}\nNGPU=2\nBUDGET=300\nMARGIN=20\nT0=$(date +%s)\nMODE=autotune\n"
              f"PROBLEMS={folder / 'problems.csv.gz'}\n"
              "left() { echo $(( BUDGET - ($(date +%s) - T0) )); }\n" + _autotune_mode() + "\n")
    subprocess.run(["bash", "-c", script], check=True, cwd=tmp_path, capture_output=True)
    assert sorted((tmp_path / "calls").read_text().splitlines()) == ["shard=0/2 gpu=0 carried", "shard=1/2 gpu=1 carried"]
    back = out / "autotune" / "h200"
    names = sorted(p.name for p in back.iterdir())
    assert names[-1] == "env.jsonl" and len(names) == 3
    assert [n.split("-", 2)[2] for n in names[:2]] == ["0-of-2.jsonl.gz", "1-of-2.jsonl.gz"]
    assert "20261202T000000" not in " ".join(names)  # the carried file stays where it is, not sent back
    assert gzip.decompress((back / names[1]).read_bytes()) == b'{"key": "k1"}\n'
    env = (back / "env.jsonl").read_text().splitlines()
    assert env[0] == '{"phase": "start", "shard": "0/2"}' and len(env) == 3

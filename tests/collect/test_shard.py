"""Sharding of a collection: the split, the cost model, the launcher mapping, kills and resumes."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from collect_fakes import HERE, SyntheticCollector, write_problems_csv
from hypothesis import given, settings
from hypothesis import strategies as st

from kbench.collect.measure import cudnn
from kbench.collect.raw_store import shard, writer
from kbench.core.errors import KbenchInputError

ROOT = HERE.parents[1]


# ---------------------------------------------------------------------------- --shard K/N
def test_parse_shard():
    assert shard.parse_shard("0/2") == shard.Shard(0, 2) and shard.parse_shard(" 3 / 4 ") == shard.Shard(3, 4)
    assert shard.Shard(1, 8).folder_name == "shard-1-of-8" and str(shard.Shard(1, 8)) == "1/8"
    for bad, msg in (("2/2", "does not exist"), ("-1/2", "does not exist"), ("0/0", ">= 1"),
                     ("1", "expected K/N"), ("a/b", "expected K/N"), ("1/2/3", "expected K/N")):
        with pytest.raises(KbenchInputError, match=msg):
            shard.parse_shard(bad)


# ---------------------------------------------------------------------------- the split
def test_assign_hand_worked():
    # costs 3,1,1,1,2 dealt in order to the least-loaded of 2 shards (ties: the lower shard):
    # 3 -> s0 (0,0 tie) [3,0]; 1 -> s1 [3,1]; 1 -> s1 [3,2]; 1 -> s1 [3,3]; 2 -> s0 (tie) [5,3]
    assert shard.assign([3, 1, 1, 1, 2], 2).tolist() == [0, 1, 1, 1, 0]
    assert shard.assign([1, 1, 1], 1).tolist() == [0, 0, 0]
    assert shard.assign([], 3).tolist() == []


@given(st.lists(st.floats(0.01, 100.0), max_size=60), st.integers(1, 9))
def test_assign_balance_bound(costs, n):
    # greedy list scheduling: the most loaded shard is at most one item above the least loaded one
    loads = np.bincount(shard.assign(costs, n), weights=costs, minlength=n)
    assert loads.max() - loads.min() <= (max(costs) if costs else 0) + 1e-9


def test_expected_seconds_hand_worked():
    row = pd.DataFrame([dict(n=1, c=2, k=3, groups=1, fil_h=1, fil_w=1, y_h=1, y_w=1, direction="W", dtype="FP32",
                             layout="NHWC")])
    m = shard.COST_MODEL
    # flop = 2*1*3*2*1*1*1*1 = 12; W, FP32, NHWC, not grouped
    log_t = m["intercept"] + m["log_flop"] * np.log(12.0) + m["direction_W"] + m["dtype_FP32"] + m["layout_NHWC"]
    assert shard.expected_seconds(row)[0] == pytest.approx(np.exp(log_t))


def test_fit_recovers_a_known_model():
    rng = np.random.default_rng(0)
    n = 200
    df = pd.DataFrame({"flop": 10.0 ** rng.uniform(6, 12, n), "direction": rng.choice(list("FBW"), n),
                       "dtype": rng.choice(["FP16", "BF16", "FP32"], n), "layout": rng.choice(["NCHW", "NHWC"], n),
                       "groups": rng.choice([1, 4], n), "status": "ok"})
    truth = {"intercept": -2.0, "log_flop": 0.1, "direction_B": 0.2, "direction_W": 0.5, "dtype_BF16": -0.1,
             "dtype_FP32": -0.4, "layout_NHWC": 0.1, "grouped": 0.3}
    df["t_total_s"] = shard.expected_seconds(df, truth)
    model, r2 = shard.fit_cost_model(df)
    assert model == pytest.approx(truth, abs=1e-4) and r2 == pytest.approx(1.0)


def test_shipped_cost_model_is_the_fit_on_raw_h100s_first_15_runs():
    problems = writer.load_records(ROOT / "raw" / "h100", "problems")
    first_runs = sorted(problems["run_id"].unique())[:shard.COST_MODEL_RUNS]  # run ids start with their UTC time
    fitted_on = problems[problems["run_id"].isin(first_runs)]
    assert len(fitted_on) == 5523
    model, _ = shard.fit_cost_model(fitted_on)
    assert model == pytest.approx(shard.COST_MODEL, abs=2e-4)


@pytest.fixture(scope="module")
def todo(tmp_path_factory):
    path = write_problems_csv(tmp_path_factory.mktemp("p") / "p.csv", 12)
    return cudnn.load_problems(path, dtypes=("FP16", "FP32"))  # 12 geometries x 2 dtypes x 3 directions = 72


def _done_folder(folder: Path, keys) -> None:
    w = writer.RawWriter(folder, run_id="earlier", batch_size=1000)
    for k in keys:
        w.add({"key": k, "status": "ok"}, [])
    w.close()


@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=st.integers(1, 9))
def test_shards_partition_the_pending_work(todo, data, n):
    """Every pending problem-direction is in exactly one shard, for any N; the split is deterministic."""
    done = data.draw(st.lists(st.sampled_from(todo["key"].tolist()), unique=True, max_size=30))
    limit = data.draw(st.one_of(st.none(), st.integers(1, 80)))
    with tempfile.TemporaryDirectory() as root:
        root = Path(root)
        if done:
            _done_folder(root, done)
        parts = [shard.plan_shard(todo, root, shard.Shard(k, n), limit)["key"].tolist() for k in range(n)]
        again = [shard.plan_shard(todo, root, shard.Shard(k, n), limit)["key"].tolist() for k in range(n)]
    pending = [k for k in todo["key"] if k not in set(done)]
    pending = pending if limit is None else pending[:limit]
    flat = [k for p in parts for k in p]
    assert sorted(flat) == sorted(pending) and len(flat) == len(set(flat))
    assert parts == again
    # each shard keeps corpus order
    pos = {k: i for i, k in enumerate(todo["key"])}
    assert all([pos[k] for k in p] == sorted(pos[k] for k in p) for p in parts)


def test_split_ignores_siblings_progress(todo, tmp_path):
    """A rank that starts after its sibling wrote batches computes the same split."""
    before = [shard.plan_shard(todo, tmp_path, shard.Shard(k, 3))["key"].tolist() for k in range(3)]
    _done_folder(tmp_path / "shard-1-of-3", before[1][:5])
    after = [shard.plan_shard(todo, tmp_path, shard.Shard(k, 3))["key"].tolist() for k in range(3)]
    assert after == before
    # a folder of another shard count is the base of a new split
    _done_folder(tmp_path / "shard-0-of-2", before[0][:4])
    base = shard.base_done(tmp_path, 3)
    assert base == set(before[0][:4])
    assert sorted(k for k in range(3) for k in shard.plan_shard(todo, tmp_path, shard.Shard(k, 3))["key"]) == sorted(
        set(todo["key"]) - base)


# ---------------------------------------------------------------------------- launchers
@pytest.mark.parametrize("explicit, env, expected_shard, source, local", [
    (None, {}, None, "none", None),
    (None, {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, shard.Shard(1, 4), "torchrun", 1),
    ("2/3", {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, shard.Shard(2, 3), "--shard", 1),  # explicit wins
    (None, {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "0"},
     shard.Shard(5, 8), "slurm-array", None),
    (None, {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "1"},
     shard.Shard(2, 4), "slurm-array", None),  # --array=1-4
    (None, {"SLURM_ARRAY_TASK_ID": "6", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0",
            "SLURM_ARRAY_TASK_STEP": "2"}, shard.Shard(3, 4), "slurm-array", None),  # --array=0-6:2
    # torchrun (2 GPUs) inside array task 3 of 4 hosts: shard 3*2+1 of 4*2
    (None, {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "SLURM_ARRAY_TASK_ID": "3",
            "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0"}, shard.Shard(7, 8), "torchrun+slurm-array", 1),
])
def test_launch_mapping(explicit, env, expected_shard, source, local):
    launch = shard.resolve_launch(explicit, env)
    assert (launch.shard, launch.source, launch.local_rank) == (expected_shard, source, local)
    if expected_shard is not None:
        assert launch.info["shard"] == str(expected_shard)


@pytest.mark.parametrize("explicit, env, msg", [
    ("3/2", {}, "shard 3 of 2 does not exist"),
    ("x", {}, "expected K/N"),
    (None, {"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 is not below WORLD_SIZE=2"),
    (None, {"RANK": "one", "WORLD_SIZE": "2"}, "RANK='one' is not an integer"),
    (None, {"RANK": "0"}, "RANK is set but WORLD_SIZE is not"),
    (None, {"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE='0' must be >= 1"),
    (None, {"SLURM_ARRAY_TASK_ID": "2"}, "SLURM_ARRAY_TASK_COUNT is not"),
    (None, {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "0",
            "SLURM_ARRAY_TASK_STEP": "2"}, "not one of an evenly spaced range"),
    (None, {"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "0"},
     "not one of an evenly spaced range"),  # --array=0,1,9 (a list)
])
def test_launch_mapping_refuses_bad_values(explicit, env, msg):
    with pytest.raises(KbenchInputError, match=msg):
        shard.resolve_launch(explicit, env)


def test_select_gpu():
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}
    assert shard.select_gpu(shard.resolve_launch(None, env), env) == "1"
    assert (env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"], env["KBENCH_NVML_DEVICE"]) == (
        "1", "PCI_BUS_ID", "1")
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb"}
    assert shard.select_gpu(shard.resolve_launch(None, env), env) == "GPU-bbb" and "CUDA_DEVICE_ORDER" not in env
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "3"}
    with pytest.raises(KbenchInputError, match="LOCAL_RANK=1 but CUDA_VISIBLE_DEVICES='3' lists 1 GPU"):
        shard.select_gpu(shard.resolve_launch(None, env), env)
    env = {}
    assert shard.select_gpu(shard.resolve_launch("0/2", env), env) is None and env == {}


def test_cli_bad_shard_exits_2(tmp_path, capsys, monkeypatch):
    from kbench.cli import main
    csv = write_problems_csv(tmp_path / "p.csv", 2)
    assert main(["collect", "cudnn", "--problems", str(csv), "--out", str(tmp_path / "o"), "--shard", "2/2"]) == 2
    err = capsys.readouterr().err
    assert "shard 2 of 2 does not exist" in err and "Traceback" not in err
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["collect", "cudnn", "--problems", str(csv), "--out", str(tmp_path / "o")]) == 2
    assert "RANK=3 is not below WORLD_SIZE=2" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # refused before anything was written


# ---------------------------------------------------------------------------- run, kill, resume
def test_sharded_runs_write_own_folders_and_cover_the_work(tmp_path):
    csv = write_problems_csv(tmp_path / "p.csv", 10)
    root = tmp_path / "raw"
    fakes = {}
    for k in range(3):
        fakes[k] = SyntheticCollector()
        s = cudnn.collect(csv, root, shard=shard.Shard(k, 3), progress=False, make_collector=lambda o, f=fakes[k]: f)
        assert s["shard"] == f"{k}/3" and s["measured"] == s["pending"]
    todo = cudnn.load_problems(csv)
    measured = [k for f in fakes.values() for k in f.measured]
    assert sorted(measured) == sorted(todo["key"]) and len(set(measured)) == len(measured)
    for k in range(3):
        folder = root / f"shard-{k}-of-3"
        manifest = shard.read_manifest(folder)
        assert manifest["assigned"] == fakes[k].measured  # corpus order, all of it
        assert set(writer.load_records(folder, "problems")["key"]) == set(fakes[k].measured)
    # nothing left: a re-run of any shard, or an unsharded run into the root, measures nothing
    assert cudnn.collect(csv, root, shard=shard.Shard(1, 3), progress=False, make_collector=SyntheticCollector)["pending"] == 0
    assert cudnn.collect(csv, root, progress=False, make_collector=SyntheticCollector)["pending"] == 0


def test_a_shard_folder_with_work_left_is_resumed_only_under_its_own_limit(tmp_path):
    """Another --limit would re-plan the folder's assignment around its own measured keys and drop the rest."""
    csv = write_problems_csv(tmp_path / "p.csv", 10)  # 30 problem-directions
    root = tmp_path / "raw"
    folder = root / "shard-0-of-1"
    todo = cudnn.load_problems(csv)
    folder.mkdir(parents=True)
    shard.write_manifest(folder, shard.Shard(0, 1), todo.head(12), {"limit": 12})  # a launch cut short, none measured
    fake = SyntheticCollector()
    with pytest.raises(KbenchInputError, match=r"assigned 12 problem-directions with --limit 12, and 12 of them"):
        cudnn.collect(csv, root, shard=shard.Shard(0, 1), limit=5, progress=False, make_collector=lambda o: fake)
    assert fake.measured == [] and shard.read_manifest(folder)["n_assigned"] == 12  # refused before any change
    s = cudnn.collect(csv, root, shard=shard.Shard(0, 1), limit=12, progress=False, make_collector=lambda o: fake)
    assert s["measured"] == 12 and fake.measured == todo["key"].head(12).tolist()
    # once its assignment is measured, a launch under another limit takes the next pending ones
    more = SyntheticCollector()
    s = cudnn.collect(csv, root, shard=shard.Shard(0, 1), limit=20, progress=False, make_collector=lambda o: more)
    assert more.measured == todo["key"].iloc[12:20].tolist()


KILLED_RANK = """
import sys
sys.path.insert(0, {here!r})
from collect_fakes import SyntheticCollector
from kbench.collect.measure import cudnn
from kbench.collect.raw_store.shard import Shard
fake = SyntheticCollector(delay_s=0.05, log={log!r})
cudnn.collect({csv!r}, {root!r}, shard=Shard(0, 2), batch_size=3, progress=False, make_collector=lambda o: fake)
"""


def test_killed_rank_loses_nothing_and_resumes_only_its_missing_work(tmp_path):
    csv = write_problems_csv(tmp_path / "p.csv", 14)  # 42 problem-directions, about 21 for shard 0/2
    root, log = tmp_path / "raw", tmp_path / "measured.log"
    folder = root / "shard-0-of-2"
    code = KILLED_RANK.format(here=str(HERE), log=str(log), csv=str(csv), root=str(root))
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 60
    while len(list((folder / writer.PARTS).glob("*.problems.jsonl.gz"))) < 2:  # two batches written, then kill -9
        assert time.monotonic() < deadline and proc.poll() is None, "the rank ended before it was killed"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before, unfinished = writer.resume_state(folder)
    started = log.read_text().split()
    assert len(done_before) >= 6 and set(done_before) <= set(started)
    lost_in_memory = set(started) - done_before  # the batch held in memory at the kill
    assigned = shard.read_manifest(folder)["assigned"]
    fake = SyntheticCollector()
    summary = cudnn.collect(csv, root, shard=shard.Shard(0, 2), batch_size=3, progress=False, make_collector=lambda o: fake)
    assert sorted(fake.measured) == sorted(set(assigned) - done_before)  # only the missing work of its shard
    assert lost_in_memory <= set(fake.measured)
    assert summary["already_done"] == len(done_before)
    problems = writer.load_records(folder, "problems")
    assert sorted(problems["key"]) == sorted(assigned)  # every assigned key exactly once
    assert not (root / "shard-1-of-2").exists()


def test_torchrun_ranks_take_their_gpu_and_shard(tmp_path):
    """Real torchrun (CPU, 2 ranks) running the CLI: each rank its shard, its GPU index, no overlap."""
    pytest.importorskip("torch.distributed.run")
    csv = write_problems_csv(tmp_path / "p.csv", 6)
    root = tmp_path / "raw"
    script = tmp_path / "rank.py"
    script.write_text(f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from collect_fakes import SyntheticCollector
from kbench.collect.measure.cudnn import run
import os
# collect() looks the class up in its own module
run.CudnnCollector = lambda options: SyntheticCollector(env={{"visible": os.environ.get("CUDA_VISIBLE_DEVICES")}})
from kbench.collect.command import main
sys.exit(main(["cudnn", "--problems", {str(csv)!r}, "--out", {str(root)!r}]))
""")
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    keys = []
    for k in range(2):
        folder = root / f"shard-{k}-of-2"
        env_rec = writer.load_env(folder).iloc[0]
        assert (env_rec["shard"], env_rec["shard_source"], env_rec["gpu_selected"], env_rec["visible"]) == (
            f"{k}/2", "torchrun", str(k), str(k))
        keys += writer.load_records(folder, "problems")["key"].tolist()
    assert sorted(keys) == sorted(cudnn.load_problems(csv)["key"])


def test_time_budget_counts_the_start_up(tmp_path):
    """--time-budget counts from the command's start: a rank whose start-up (loading records, CUDA) ate the
    budget starts no problem, so a launcher's limit set a margin above the budget is not overrun."""
    csv = write_problems_csv(tmp_path / "p.csv", 4)

    def slow_start(options):
        time.sleep(0.6)
        return SyntheticCollector(options)
    s = cudnn.collect(csv, tmp_path / "late", time_budget_s=0.3, make_collector=slow_start, progress=False)
    assert (s["pending"], s["measured"]) == (12, 0)  # 4 geometries x 3 directions, none started
    s = cudnn.collect(csv, tmp_path / "ample", time_budget_s=60, make_collector=slow_start, progress=False)
    assert s["measured"] == 12

"""Ranks sharing a GPU take turns at it (kbench.collect.measure.gpu_turn): exclusion across processes, release on kill."""

import json
import multiprocessing as mp
import os
import signal
import time

import numpy as np
import pandas as pd
import pytest

from kbench.collect.measure.gpu_turn import GpuTurn, turn_path
from kbench.collect.raw_store import shard, writer
from kbench.collect.studies import scaling
from kbench.core.errors import KbenchInputError


def _take_turns(path, log, n, hold_s):
    turn = GpuTurn(path)
    for _ in range(n):
        with turn.hold():
            with open(log, "a") as fh:
                fh.write(f"start {os.getpid()}\n")
                fh.flush()
                time.sleep(hold_s)
                fh.write(f"end {os.getpid()}\n")
        time.sleep(hold_s)  # the host-only part: the other rank's turn


def test_two_processes_never_hold_the_turn_together(tmp_path):
    path, log = turn_path(tmp_path, "0"), tmp_path / "log.txt"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_take_turns, args=(path, log, 8, 0.02)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = log.read_text().split()
    events = list(zip(lines[0::2], lines[1::2]))  # ("start", pid), ("end", pid), ...
    assert len(events) == 2 * 2 * 8
    # every start is followed by the same process's end: the holds never overlap
    for (what_a, pid_a), (what_b, pid_b) in zip(events[0::2], events[1::2]):
        assert (what_a, what_b) == ("start", "end") and pid_a == pid_b
    assert {pid for _, pid in events} == {str(p.pid) for p in procs}


def _hold_forever(path, ready):
    turn = GpuTurn(path)
    with turn.hold():
        ready.set()
        time.sleep(600)


def test_a_killed_holder_releases_the_turn(tmp_path):
    path = turn_path(tmp_path, "GPU-abc")
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_forever, args=(path, ready))
    holder.start()
    assert ready.wait(60)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(30)
    turn = GpuTurn(path)
    with turn.hold():  # would block for ever if the dead holder kept it
        pass
    assert path.name == ".gpu-turn-GPU-abc.lock"


def test_without_a_path_hold_does_nothing_and_holds_nest(tmp_path):
    free = GpuTurn()
    with free.hold():
        with free.hold():
            pass
    assert not free.shared and free.waited_s == 0.0
    turn = GpuTurn(tmp_path / "t.lock")
    with turn.hold():
        with turn.hold():  # an inner hold of the same process does not wait for itself
            pass
        assert turn._depth == 1
    assert turn.shared and turn._depth == 0
    fd = os.open(turn.path, os.O_RDWR)  # released: another holder gets it at once
    try:
        import fcntl
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_select_gpu_with_ranks_per_gpu():
    # 4 ranks on a host of 2 GPUs at 2 ranks per GPU: local ranks 2 and 3 take GPU 1
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "3"}
    assert shard.select_gpu(shard.resolve_launch(None, env), env, ranks_per_gpu=2) == "1"
    env = {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}
    assert shard.select_gpu(shard.resolve_launch(None, env), env, ranks_per_gpu=2) == "GPU-b"
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "5"}
    assert shard.select_gpu(shard.resolve_launch(None, env), env, ranks_per_gpu=2) == "5"  # both ranks on GPU 5
    env = {"RANK": "4", "WORLD_SIZE": "5", "LOCAL_RANK": "4", "CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}
    with pytest.raises(KbenchInputError, match="lists 2 GPU.*start at most 4 ranks per host at 2 ranks per GPU"):
        shard.select_gpu(shard.resolve_launch(None, env), env, ranks_per_gpu=2)


def _env(folder, measured, elapsed, ranks_per_gpu=None):
    folder.mkdir(parents=True)
    start = {"run_id": "r", "phase": "start", "gpu": "G"}
    if ranks_per_gpu is not None:
        start["ranks_per_gpu"] = ranks_per_gpu
    lines = [start, {"run_id": "r", "phase": "end", "measured": measured, "elapsed_s": elapsed}]
    (folder / writer.ENV).write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_throughput_counts_ranks_sharing_a_gpu_as_one_gpu(tmp_path):
    _env(tmp_path / "shard-0-of-2", 33, 60.0, ranks_per_gpu=2)
    _env(tmp_path / "shard-1-of-2", 31, 58.0, ranks_per_gpu=2)
    t = scaling.throughput([tmp_path])
    # 64 problem-directions over the longer rank's 60 s = 64 per minute, all on one GPU
    assert (t["gpus"], t["measured"], t["per_minute"], t["per_minute_per_gpu"]) == (1, 64, 64.0, 64.0)
    assert [r["ranks_per_gpu"] for r in t["ranks"]] == [2, 2]


def test_cli_ranks_per_gpu_sets_the_turn_and_refuses_zero(tmp_path, monkeypatch, capsys):
    from kbench.cli import main
    from kbench.collect.measure import cudnn
    seen = {}

    def fake_collect(problems, out, *a, options=None, launch_info=None, **kw):
        seen.update(turn=options.gpu_turn, info=launch_info)
        return {"measured": 0}
    monkeypatch.setattr(cudnn, "collect", fake_collect)
    for k, v in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(k, v)
    for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "KBENCH_NVML_DEVICE"):  # select_gpu sets them
        monkeypatch.delenv(k, raising=False)
    out = tmp_path / "o"
    assert main(["collect", "cudnn", "--problems", "p.csv", "--out", str(out), "--ranks-per-gpu", "2"]) == 0
    assert seen["turn"] == str(out / ".gpu-turn-0.lock")  # local rank 1 of 2 shares GPU 0
    assert seen["info"]["ranks_per_gpu"] == 2 and seen["info"]["gpu_selected"] == "0"
    assert main(["collect", "cudnn", "--problems", "p.csv", "--out", str(out), "--ranks-per-gpu", "0"]) == 2
    err = capsys.readouterr().err
    assert "--ranks-per-gpu must be > 0" in err and "Traceback" not in err


def test_gpu_seconds_count_a_shared_launch_once():
    runs = pd.DataFrame({"run_id": ["a", "b", "c", "d", "e"],
                         "time": [0.0, 1.0, 100.0, 500.0, 500.5],
                         "ranks_per_gpu": [2, 2, 1, 2, 2],
                         "elapsed_s": [60.0, 50.0, 30.0, 20.0, np.nan],
                         "measured": [30, 25, 10, 8, np.nan]})
    # launch a+b: 60 s on one GPU; c alone: 30 s; d (e never ended): 20 s at half a GPU
    assert scaling.gpu_seconds(runs) == 60.0 + 30.0 + 10.0
    assert scaling.gpu_seconds(runs.iloc[:2]) == 60.0  # 55 problem-directions in 60 GPU-seconds: 55 per minute


def test_run_starts_reads_sharing_and_ends(tmp_path):
    lines = [{"run_id": "r1", "phase": "start", "time": 5.0, "ranks_per_gpu": 2, "WORLD_SIZE": "4"},
             {"run_id": "r1", "phase": "end", "measured": 7, "elapsed_s": 30.0},
             {"run_id": "r0", "phase": "end", "measured": 3, "elapsed_s": 12.0}]  # no start record
    env = pd.DataFrame(lines)
    r = scaling.run_starts(env).set_index("run_id")
    assert list(r.columns) == ["time", "ranks_per_gpu", "world_size", "elapsed_s", "measured"]
    assert r.loc["r1"].tolist() == [5.0, 2, 4, 30.0, 7.0]  # torchrun's WORLD_SIZE, recorded as text
    assert r.loc["r0"].tolist() == [0.0, 1, 1, 12.0, 3.0]


def test_timing_repeatability_hand_worked():
    plans = pd.DataFrame({"key": ["a", "a", "b", "b", "c"],
                          "repeat_ms": [np.exp(0.02), np.nan, 1.0, np.nan, np.nan],
                          "precise_ms": [1.0, 2.0, 1.0, 3.0, np.nan],
                          "first_ms": [1.0, 2.0, 1.0, 3.0, 4.0],
                          "verify_ms": [np.exp(0.1), 2.0, 1.0, 3.0, np.nan],
                          "verify2_ms": [1.0, np.nan, np.nan, np.nan, np.nan]})
    out = scaling._timing_repeatability(plans)
    assert out["repeat_abs_log_ratio"] == {"n": 2, "median": pytest.approx(0.01), "p90": pytest.approx(0.018)}
    assert out["verify_abs_log_ratio"]["n"] == 4 and out["verify_abs_log_ratio"]["median"] == 0.0
    assert out["third_timing_share"] == 0.5  # a needed a third timing, b did not; c was never verified
    assert scaling._timing_repeatability(plans.drop(columns=["verify_ms", "verify2_ms"]))["third_timing_share"] is None

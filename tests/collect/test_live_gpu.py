"""Live GPU tests (marker ``gpu``): they run only where PyTorch sees a CUDA GPU and the cuDNN frontend."""

import pandas as pd
import pytest


@pytest.mark.gpu
def test_collect_two_problem_directions(tmp_path):
    from kbench.collect.measure import cudnn
    from kbench.collect.raw_store.writer import load_records
    path = tmp_path / "p.csv"
    pd.DataFrame([dict(n=2, c=16, k=16, x_h=8, x_w=8, fil_h=3, fil_w=3, pad_h=1, pad_w=1,
                       dtype="FP16", layout="NHWC")]).to_csv(path, index=False)
    s = cudnn.collect(path, tmp_path / "raw", directions=("F", "W"), progress=False)
    assert s["measured"] == 2
    plans = load_records(tmp_path / "raw", "plans")
    assert plans["correct"].any() and (plans["coarse_ms"].dropna() > 0).all()
    # the verification pass ran: each problem's label plan has a verification flag and a label time
    problems = load_records(tmp_path / "raw", "problems")
    assert (problems["t_verify_s"] >= 0).all() and (problems["n_verified"] >= 1).all()
    checked = plans[plans["verified"].isin(["agree", "disagree-resolved"])]
    assert set(checked["key"]) == set(problems["key"]) and (checked["verified_ms"] > 0).all()
    again = cudnn.collect(path, tmp_path / "raw", directions=("F", "W"), progress=False)
    assert again["pending"] == 0


def _fewer_than_two_gpus() -> bool:
    import torch
    return torch.cuda.device_count() < 2


@pytest.mark.gpu
def test_torchrun_two_gpus_one_shard_each(tmp_path):
    """Real torchrun on two GPUs: each rank times its own GPU, its own shard, nothing twice."""
    if _fewer_than_two_gpus():
        pytest.skip("fewer than 2 CUDA GPUs visible")
    import os
    import subprocess
    import sys

    from kbench.collect.measure import cudnn
    from kbench.collect.raw_store.merge import merge
    from kbench.collect.raw_store.writer import load_env, load_records
    path = tmp_path / "p.csv"
    pd.DataFrame([dict(n=2, c=16, k=16 * (i + 1), x_h=8, x_w=8, fil_h=3, fil_w=3, pad_h=1, pad_w=1,
                       dtype="FP16", layout="NHWC") for i in range(2)]).to_csv(path, index=False)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE")}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          "-m", "kbench.collect", "cudnn", "--problems", str(path), "--out", str(tmp_path / "raw"),
                          "--directions", "F,W", "--no-torch-choice"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    starts = [load_env(tmp_path / "raw" / f"shard-{k}-of-2").iloc[0] for k in range(2)]
    assert [s["gpu_selected"] for s in starts] == ["0", "1"]
    assert starts[0]["smi_pci_bus_id"] != starts[1]["smi_pci_bus_id"]  # two GPUs, each its own
    keys = [k for s in range(2) for k in load_records(tmp_path / "raw" / f"shard-{s}-of-2", "problems")["key"]]
    assert sorted(keys) == sorted(cudnn.load_problems(path, directions=("F", "W"))["key"])
    assert merge([tmp_path / "raw"], tmp_path / "merged")["problem_directions"] == 4

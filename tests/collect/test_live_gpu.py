"""Live GPU test: runs only where PyTorch sees a CUDA GPU and the cuDNN frontend is installed."""

import importlib.util

import pandas as pd
import pytest


def _gpu_reason():
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible (CI has none): the collector is tested on CPU with recorded output"
    if importlib.util.find_spec("cudnn") is None:
        return "the cuDNN frontend (nvidia-cudnn-frontend) is not installed"
    return None


REASON = _gpu_reason()


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_collect_two_problem_directions(tmp_path):
    from kbench.collect import cudnn as C
    from kbench.collect.writer import load_records
    path = tmp_path / "p.csv"
    pd.DataFrame([dict(n=2, c=16, k=16, x_h=8, x_w=8, fil_h=3, fil_w=3, pad_h=1, pad_w=1,
                       dtype="FP16", layout="NHWC")]).to_csv(path, index=False)
    s = C.collect(path, tmp_path / "raw", directions=("F", "W"), progress=False)
    assert s["measured"] == 2
    plans = load_records(tmp_path / "raw", "plans")
    assert plans["correct"].any() and (plans["coarse_ms"].dropna() > 0).all()
    # the verification pass ran: each problem's label plan has a verification flag and a label time
    problems = load_records(tmp_path / "raw", "problems")
    assert (problems["t_verify_s"] >= 0).all() and (problems["n_verified"] >= 1).all()
    checked = plans[plans["verified"].isin(["agree", "disagree-resolved"])]
    assert set(checked["key"]) == set(problems["key"]) and (checked["verified_ms"] > 0).all()
    again = C.collect(path, tmp_path / "raw", directions=("F", "W"), progress=False)
    assert again["pending"] == 0

"""The kernel-cache check's comparison of two raw folders (kbench.collect.kernel_cache_check)."""

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kbench.collect import kernel_cache_check as K
from kbench.collect.writer import ENV, load_records
from kbench.errors import KbenchInputError

RAW_SAMPLE = Path(__file__).with_name("fixtures") / "raw_sample"


def _folder(tmp_path, name, problems, plans):
    """A raw folder holding these records as compacted batch files, with the sample's env.jsonl."""
    d = tmp_path / name
    d.mkdir()
    problems.to_parquet(d / "problems-0000.parquet")
    plans.to_parquet(d / "plans-0000.parquet")
    shutil.copy(RAW_SAMPLE / ENV, d / ENV)
    return d


@pytest.fixture()
def records():
    return load_records(RAW_SAMPLE, "problems"), load_records(RAW_SAMPLE, "plans")


def test_plan_lists_hand_worked():
    plans = pd.DataFrame({"key": ["p", "p", "p", "q"], "plan": ["x", "y", "z", "x"],
                          "rank_a": [1, 0, -1, 0]})
    lists = K.plan_lists(plans, "rank_a")
    assert lists.to_dict() == {"p": ("y", "x"), "q": ("x",)}  # z is not in mode A's list


def test_a_run_compared_with_itself_is_usable(records, tmp_path):
    problems, plans = records
    off = _folder(tmp_path, "off", problems, plans)
    on = _folder(tmp_path, "on", problems, plans)
    res = K.compare(off, on)
    n = problems.loc[problems["status"] == "ok", "key"].nunique()
    assert res["problem_directions"] == n
    assert all(v == {"problems": n, "same_list": n, "same_set": n, "differ": []} for v in res["plan_lists"].values())
    assert res["timing"]["cross_gpu_abs_log_ratio"]["median"] == 0.0 and res["usable"] is True
    assert res["phase_means_s"]["off"] == res["phase_means_s"]["on"]


def test_changed_lists_and_timings_are_caught(records, tmp_path):
    problems, plans = records
    key = problems.loc[problems["status"] == "ok", "key"].iloc[0]
    on_plans = plans.copy()
    # mode A's first two plans of one problem swap places: same set, other order
    mine = on_plans.index[(on_plans["key"] == key) & on_plans["rank_a"].isin([0, 1])]
    on_plans.loc[mine, "rank_a"] = 1 - on_plans.loc[mine, "rank_a"]
    # one plan leaves mode B's list of the same problem
    gone = on_plans.index[(on_plans["key"] == key) & (on_plans["rank_b"] == 0)]
    on_plans.loc[gone, "rank_b"] = -1
    # and every plan runs 1.5 times slower
    for c in ("precise_ms", "repeat_ms"):
        on_plans[c] = on_plans[c] * 1.5
    res = K.compare(_folder(tmp_path, "off", problems, plans), _folder(tmp_path, "on", problems, on_plans))
    n = res["problem_directions"]
    assert res["plan_lists"]["a"]["same_list"] == n - 1 and res["plan_lists"]["a"]["same_set"] == n
    assert res["plan_lists"]["a"]["differ"] == [key]
    assert res["plan_lists"]["b"]["same_set"] == n - 1
    assert res["plan_lists"]["fallback"]["same_list"] == n
    assert res["timing"]["cross_gpu_abs_log_ratio"]["median"] == pytest.approx(np.log(1.5))
    assert res["usable"] is False


def test_folders_without_shared_problems_are_refused(records, tmp_path, capsys):
    problems, plans = records
    half = problems["key"].unique()[:2]
    off = _folder(tmp_path, "off", problems[problems["key"].isin(half)], plans[plans["key"].isin(half)])
    on = _folder(tmp_path, "on", problems[~problems["key"].isin(half)], plans[~plans["key"].isin(half)])
    with pytest.raises(KbenchInputError, match="share no measured problem-direction"):
        K.compare(off, on)
    assert K.main([str(off), str(on)]) == 2
    assert "share no measured" in capsys.readouterr().err

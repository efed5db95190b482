"""The kernel-cache check's comparison of two raw folders (tools/collect/kernel_cache_check.py)."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kbench.collect.raw_store.writer import ENV, load_records
from kbench.core.errors import KbenchInputError

# a diagnostic script of tools/, which the package never imports: loaded from its file
_SPEC = importlib.util.spec_from_file_location(
    "kernel_cache_check", Path(__file__).resolve().parents[2] / "tools" / "collect" / "kernel_cache_check.py")
K = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(K)
RAW_SAMPLE = Path(__file__).with_name("fixtures") / "raw_sample"


def _folder(tmp_path, name, problems, plans):
    """A raw folder holding these records as compacted batch files, with the sample's env.jsonl."""
    d = tmp_path / name
    d.mkdir()
    problems.to_parquet(d / "problems-0000.parquet")
    plans.to_parquet(d / "plans-0000.parquet")
    # the sample's env.jsonl without its first run, which was cut short (a start, no end)
    lines = (RAW_SAMPLE / ENV).read_text().splitlines()
    ended = {json.loads(x)["run_id"] for x in lines if json.loads(x)["phase"] == "end"}
    (d / ENV).write_text("".join(x + "\n" for x in lines if json.loads(x)["run_id"] in ended))
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


def test_kernel_cache_topology_separates_operation_type_and_layout_but_not_sizes():
    from kbench.collect.measure.cudnn import kernel_cache_topology
    base = {"direction": "F", "dtype": "BF16", "layout": "NCHW", "groups": 1, "n": 64, "c": 192}
    assert kernel_cache_topology(base) == ("F", "BF16", "NCHW", False)
    # other sizes: the same cache (what the kernel cache is for)
    assert kernel_cache_topology({**base, "n": 8, "c": 3}) == kernel_cache_topology(base)
    # the crash on the H100 came when an NHWC forward graph met the cache an NCHW one had filled
    assert kernel_cache_topology({**base, "layout": "NHWC"}) != kernel_cache_topology(base)
    for change in ({"direction": "B"}, {"direction": "W"}, {"dtype": "FP32"}, {"groups": 2}):
        assert kernel_cache_topology({**base, **change}) != kernel_cache_topology(base)
    assert kernel_cache_topology({**base, "groups": 2}) == kernel_cache_topology({**base, "groups": 1152})


def test_plans_missing_in_one_run_and_killed_processes_are_reported(records, tmp_path):
    """What the H100 check met: the cached run offers no plan for some problems and one of its processes died."""
    problems, plans = records
    ok = problems.loc[problems["status"] == "ok", "key"].drop_duplicates()
    gone = ok.iloc[0]
    on_problems = problems.copy()
    on_problems.loc[on_problems["key"] == gone, ["status", "n_plans"]] = ["no_plans", 0]
    on_plans = plans[plans["key"] != gone]
    off = _folder(tmp_path, "off", problems, plans)
    on = _folder(tmp_path, "on", on_problems, on_plans)
    with (on / ENV).open("a") as f:  # a process that started and never wrote its end record
        f.write(json.dumps({"run_id": "20261125T030847-d0646c", "phase": "start"}) + "\n")
    res = K.compare(off, on)
    n = len(ok)
    assert res["problem_directions"] == n and res["ok_in_both"] == n - 1
    assert res["outcomes"]["off"]["status"] == {"ok": n}
    assert res["outcomes"]["on"]["status"] == {"no_plans": 1, "ok": n - 1}
    assert res["outcomes"]["off"]["processes"] == {"started": 1, "ended": 1, "killed": 0, "fatal_cuda_error": 0}
    assert res["outcomes"]["on"]["processes"] == {"started": 2, "ended": 1, "killed": 1, "fatal_cuda_error": 0}
    # the problem without plans has the empty list in every mode, so no mode's lists are all the same
    assert all(v["same_list"] == n - 1 and v["differ"] == [gone] for v in res["plan_lists"].values())
    n_off = problems.set_index("key").loc[list(ok), "n_plans"].astype(float)
    assert res["outcomes"]["on"]["plans_offered_mean"] == pytest.approx((n_off.sum() - n_off[gone]) / n)
    assert res["usable"] is False


def test_offered_plans_of_a_run_compared_with_itself(records, tmp_path):
    """Identical runs: the same plans offered, none new, and the same fastest plan (ratio 1) everywhere."""
    problems, plans = records
    res = K.compare(_folder(tmp_path, "off", problems, plans), _folder(tmp_path, "on", problems, plans))
    offered = res["offered_ok_in_both"]
    assert offered["off"] == offered["on"] and offered["on_plans_not_offered_off"] == 0
    assert offered["on_plans"] == int(plans["key"].isin(problems.loc[problems["status"] == "ok", "key"]).sum())
    fastest = offered["fastest"]
    assert fastest["same_plan"] == fastest["problems"] > 0 and fastest["geomean_on_over_off"] == pytest.approx(1.0)
    n = problems.loc[problems["status"] == "ok", "key"].nunique()
    by_dir = res["outcomes"]["on"]["by_direction"]
    assert sum(v["problems"] for v in by_dir.values()) == n and all(v["no_plans"] == 0 for v in by_dir.values())

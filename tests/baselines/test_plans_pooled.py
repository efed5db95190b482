"""Pooled cuDNN-plans model over h100 and h200: device columns from the manifest, which rows, lodo."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import kbench_baselines.plans_pooled as plans_pooled
import kbench_baselines.pooled as pooled
from kbench.core.errors import KbenchInputError
from kbench_baselines import get_baseline
from kbench_baselines.plans_pooled import DEVICE_COLUMNS, device_spec_columns, pooled_view, tagged
from tests.baselines.helpers import small_subset

REPO = Path(__file__).resolve().parents[2]


def test_manifests_carry_the_collectors_device_spec():
    # the shipped values are the collector's records (tools/collect/manifest_device_spec.py --check)
    import sys
    sys.path.insert(0, str(REPO / "tools" / "collect"))
    import manifest_device_spec as tool
    paths = tool.collected_manifests()
    assert {p.parent.name for p in paths} == {"h100", "h100-pytorch", "h200", "h200-pytorch", "h200-3d",
                                              "h200-3d-pytorch"}
    for path in paths:
        manifest = json.loads(path.read_text())
        assert manifest["device_spec"] == tool.spec_of(manifest)
    h100 = json.loads((REPO / "kbench/datasets/h100/manifest.json").read_text())["device_spec"]
    h200 = json.loads((REPO / "kbench/datasets/h200/manifest.json").read_text())["device_spec"]
    # the cards say so too: 132 SMs each, L2 50 and 60 MiB
    assert h100["sm_count"] == h200["sm_count"] == 132
    assert (h100["l2_bytes"], h200["l2_bytes"]) == (50 * 2**20, 60 * 2**20)


def test_siblings_keep_2d_sets_apart_and_give_a_3d_set_its_gpus_2d_set():
    import kbench
    from kbench_baselines.pooled import sibling_names
    assert sibling_names(kbench.load("h200")) == ["h100", "h200"]
    assert sibling_names(kbench.load("h200", variant="pytorch")) == ["h100-pytorch", "h200-pytorch"]
    assert sibling_names(kbench.load("h200-3d")) == ["h200", "h200-3d"]
    assert sibling_names(kbench.load("h200-3d", variant="pytorch")) == ["h200-pytorch", "h200-3d-pytorch"]


def test_device_spec_columns_and_a_missing_spec():
    spec = {"sm_count": 132, "l2_bytes": 62914560, "memory_bytes": 150109880320, "clock_max_sm_mhz": 1980,
            "clock_max_mem_mhz": 3201}
    got = device_spec_columns({"name": "x", "device_spec": spec})
    assert list(got) == list(DEVICE_COLUMNS) and got["device_l2_bytes"] == 62914560.0
    with pytest.raises(KbenchInputError, match="device_spec lacks clock_max_mem_mhz"):
        device_spec_columns({"name": "x", "device_spec": {k: v for k, v in spec.items() if k != "clock_max_mem_mhz"}})


@pytest.fixture(scope="module")
def two_gpus():
    import kbench
    h100 = small_subset(kbench.load("h100"), n_train=300, n_valid=80, n_test=120, seed=0)
    h200 = small_subset(kbench.load("h200"), n_train=300, n_valid=80, n_test=120, seed=1)
    return h100, h200


@pytest.fixture()
def family(two_gpus, monkeypatch, tmp_path):
    h100, h200 = two_gpus
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(plans_pooled, "sibling_names", lambda ds: [h100.name, h200.name])
    monkeypatch.setattr(pooled, "_LOADED", {h100.name: h100, h200.name: h200})
    return h100, h200


def test_pooled_view_keeps_devices_apart(two_gpus):
    h100, h200 = two_gpus
    view = pooled_view({h100.name: h100, h200.name: h200})
    assert len(view.problems) == len(h100.problems) + len(h200.problems)
    some = str(h100.problems["problem_id"].iloc[0])
    row = view.problems.set_index("problem_id").loc[f"{h100.name}|{some}"]
    assert row["device_memory_bytes"] == h100.info["device_spec"]["memory_bytes"]
    assert set(view.heuristics["problem_id"].str.split("|").str[0]) == {h100.name, h200.name}


def test_fit_predict_and_leave_one_out(family, tmp_path):
    h100, h200 = family
    parts = h200.split("random")
    model = get_baseline("xgboost-plans-pooled", max_rounds=20)
    model.fit(h200, parts["train"], parts["valid"], seed=0)
    assert model.fit_info["devices"] == {h100.name: [300, 80], h200.name: [300, 80]}
    assert model.columns[-len(DEVICE_COLUMNS):] == list(DEVICE_COLUMNS)
    preds = model.predict(h200, parts["test"])
    assert list(preds["problem_id"]) == list(parts["test"])  # the target's own ids, in order
    # every ranking holds plans cuDNN proposed for that problem
    first = preds.iloc[0]
    proposed = set(h200.heuristics.loc[h200.heuristics["problem_id"].astype(str) == first["problem_id"], "kernel"]
                   .astype(str))
    assert set(str(first["ranking"]).split(";")) <= proposed
    # saved and loaded, the same rankings
    model.save(tmp_path / "m")
    back = type(model).load(tmp_path / "m")
    pd.testing.assert_frame_equal(back.predict(h200, parts["test"]), preds)
    # leave-one-device-out: trained on h100 alone
    lodo = get_baseline("xgboost-plans-pooled-lodo", max_rounds=20).fit(h200, parts["train"], parts["valid"], seed=0)
    assert lodo.fit_info["devices"] == {h100.name: [300, 80]}
    assert list(lodo.predict(h200, parts["test"])["problem_id"]) == list(parts["test"])


def test_one_pooled_training_scores_both_gpus_from_the_cache(family):
    h100, h200 = family
    fit = dict(seed=0)
    first = get_baseline("xgboost-plans-pooled", max_rounds=20)
    first.fit(h200, h200.split("random")["train"], h200.split("random")["valid"], **fit)
    assert "cached_training_time_s" not in first.fit_info and first.fit_info["training_time_s"] > 0
    # the same rows whichever GPU is the target (the splits are a hash of the geometry): h100's
    # board loads h200's training, and it says what that training took
    other = get_baseline("xgboost-plans-pooled", max_rounds=20)
    other.fit(h100, h100.split("random")["train"], h100.split("random")["valid"], **fit)
    assert other.fit_info["cache"] == first.fit_info["cache"]
    assert other.fit_info["cached_training_time_s"] == first.fit_info["training_time_s"]
    assert other.fit_info["devices"] == first.fit_info["devices"]
    test = h100.split("random")["test"]
    fresh = get_baseline("xgboost-plans-pooled", max_rounds=20, cache=False)
    fresh.fit(h100, h100.split("random")["train"], h100.split("random")["valid"], **fit)
    pd.testing.assert_frame_equal(other.predict(h100, test), fresh.predict(h100, test))
    # another seed or setting is another training; leave-one-out trains on the other GPU only
    seed1 = get_baseline("xgboost-plans-pooled", max_rounds=20)
    seed1.fit(h200, h200.split("random")["train"], h200.split("random")["valid"], seed=1)
    assert seed1.fit_info["cache"] != first.fit_info["cache"] and "cached_training_time_s" not in seed1.fit_info
    lodo = [get_baseline("xgboost-plans-pooled-lodo", max_rounds=20).fit(ds, ds.split("random")["train"],
                                                                          ds.split("random")["valid"], seed=0)
            for ds in (h100, h200)]
    assert lodo[0].fit_info["cache"] != lodo[1].fit_info["cache"]


def test_supports_only_collected_sets_with_a_device_spec():
    import kbench
    model = get_baseline("xgboost-plans-pooled")
    assert model.supports(kbench.load("h200-pytorch"))
    assert not model.supports(kbench.load("mi100"))
    # the AMD pooled model's descriptors (SMs, sm_<major><minor>) cannot tell H100 from H200
    assert not get_baseline("xgboost-pooled").supports(kbench.load("h100"))
    assert get_baseline("xgboost-pooled").supports(kbench.load("mi100"))
    assert pooled.sibling_names(kbench.load("h100-pytorch")) == ["h100-pytorch", "h200-pytorch"]


def test_tagged_ids():
    assert list(tagged("h100", ["a", "b"])) == ["h100|a", "h100|b"]
    assert np.array_equal(tagged("x", []).to_numpy(), np.array([], dtype=object))

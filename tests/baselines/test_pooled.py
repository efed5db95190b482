"""Pooled XGBoost: device descriptors, which rows it trains on, leave-one-device-out, caching."""

import numpy as np
import pandas as pd
import pytest

import kbench_baselines.pooled as pooled
from kbench_baselines import get_baseline
from kbench_baselines.pooled import device_descriptors
from tests.baselines.helpers import small_subset


@pytest.mark.parametrize("device, arch, want", [
    ("AMD Instinct MI100 (gfx908, 120 CUs)", "gfx908", (120, 9, 0, 8)),
    ("AMD Instinct MI210 / MI250 GCD (gfx90a, 104 CUs)", "gfx90a", (104, 9, 0, 10)),  # a = 10
    ("AMD Instinct MI300X (gfx942, 304 CUs)", "gfx942", (304, 9, 4, 2)),
    ("AMD RDNA2 gfx1030 (36 CUs)", "gfx1030", (36, 10, 3, 0)),                        # two-digit major
    ("NVIDIA H100 80GB HBM3 (SXM, 132 SMs)", "sm_90", (132, 9, 0, 0)),
])
def test_device_descriptors_by_hand(device, arch, want):
    got = device_descriptors({"device": device, "arch": arch})
    assert tuple(got[c] for c in pooled.DEVICE_COLUMNS) == want


def test_device_descriptors_missing_fields_are_nan():
    got = device_descriptors({"device": "some GPU", "arch": "unknown"})
    assert all(np.isnan(v) for v in got.values())


@pytest.fixture(scope="module")
def family():
    """Two small AMD 'GPUs' (mi300x and gfx1030 slices) standing in for the vendor's datasets."""
    import kbench
    target = small_subset(kbench.load("mi300x"), n_train=1200, n_valid=200, n_test=300, seed=0)
    sibling = small_subset(kbench.load("gfx1030"), n_train=1500, n_valid=200, n_test=200, seed=0)
    return target, sibling


@pytest.fixture()
def two_gpus(family, monkeypatch, tmp_path):
    target, sibling = family
    monkeypatch.setattr(pooled, "sibling_names", lambda ds: [target.name, sibling.name])
    monkeypatch.setattr(pooled, "_LOADED", {sibling.name: sibling})
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path))
    return target, sibling


def _geometries(ds, ids):
    return set(ds.problems.set_index("problem_id")["geometry_id"].reindex(ids))


def test_training_parts_hold_no_held_out_geometry(two_gpus):
    target, sibling = two_gpus
    parts = target.split("random")
    model = get_baseline("xgboost-pooled")
    rows = model.training_parts(target, pd.Index(parts["train"]), pd.Index(parts["valid"]), seed=0)
    assert set(rows) == {target.name, sibling.name}
    assert list(rows[target.name][0]) == list(parts["train"])
    held_out = _geometries(target, list(parts["valid"]) + list(parts["test"]))
    assert not (_geometries(sibling, rows[sibling.name][0]) & held_out)
    # the split is a hash of the geometry: the sibling's train part is its own train part
    assert set(rows[sibling.name][0]) == set(sibling.split("random")["train"])


def test_leave_out_trains_on_no_target_row_and_subsets_scale_siblings(two_gpus):
    target, sibling = two_gpus
    parts = target.split("random")
    half = pd.Index(parts["train"][: len(parts["train"]) // 2])
    rows = get_baseline("xgboost-pooled-lodo").training_parts(target, half, pd.Index(parts["valid"]), seed=0)
    assert set(rows) == {sibling.name}
    # half of the target's train part: half of every sibling's as well (rounded)
    assert len(rows[sibling.name][0]) == round(len(half) / len(parts["train"]) * len(sibling.split("random")["train"]))


def test_train_ids_outside_a_standard_split_are_an_input_error(two_gpus):
    from kbench.core.errors import KbenchInputError
    target, _ = two_gpus
    parts = target.split("random")
    with pytest.raises(KbenchInputError, match="standard"):
        get_baseline("xgboost-pooled").infer_split(target, set(parts["train"]) | set(parts["test"][:1]))


def test_fit_predict_cache_and_save_round_trip(two_gpus, tmp_path):
    target, _ = two_gpus
    parts = target.split("random")
    model = get_baseline("xgboost-pooled", max_rounds=3).fit(target, parts["train"], parts["valid"], seed=0)
    preds = model.predict(target, parts["test"])
    allowed = model.space.allowed(target.problems.set_index("problem_id").loc[preds["problem_id"]].reset_index())
    assert (preds["ranking"].str.count(";") + 1).tolist() == allowed.sum(axis=1).tolist()  # every allowed kernel
    again = get_baseline("xgboost-pooled", max_rounds=3).fit(target, parts["train"], parts["valid"], seed=0)
    assert again.fit_info["cache"] == model.fit_info["cache"]
    # the loaded fit says what its training took (kbench run records it), the trained one does not
    assert "cached_training_time_s" not in model.fit_info
    assert again.fit_info["cached_training_time_s"] == model.fit_info["training_time_s"] > 0
    pd.testing.assert_frame_equal(again.predict(target, parts["test"]), preds)
    model.save(tmp_path / "m")
    loaded = type(model).load(tmp_path / "m")
    pd.testing.assert_frame_equal(loaded.predict(target, parts["test"]), preds)


def test_leave_out_model_never_reads_the_target_labels(two_gpus):
    target, _ = two_gpus
    parts = target.split("random")
    shuffled = target.subset(list(target.problems["problem_id"]))
    shuffled.name = target.name
    rt = shuffled.tables["runtimes"].copy()
    rt["time_ms"] = np.random.default_rng(0).permutation(rt["time_ms"].to_numpy())
    shuffled.tables["runtimes"] = rt
    kw = dict(max_rounds=3, cache=False)
    a = get_baseline("xgboost-pooled-lodo", **kw).fit(target, parts["train"], parts["valid"], seed=0)
    b = get_baseline("xgboost-pooled-lodo", **kw).fit(shuffled, parts["train"], parts["valid"], seed=0)
    pd.testing.assert_frame_equal(a.predict(target, parts["test"]), b.predict(target, parts["test"]))

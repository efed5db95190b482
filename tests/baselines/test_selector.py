"""The deployable selector: scalar features equal the vectorised ones, exported rankings equal the model's."""

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbench import selector
from kbench.core.errors import KbenchInputError
from kbench_baselines import get_baseline
from kbench_baselines.features import problem_features
from tests.baselines.helpers import small_subset


def _same_features(rows: pd.DataFrame) -> None:
    want = problem_features(rows)
    for i, (_, row) in enumerate(rows.iterrows()):
        got = selector.problem_vector(row.to_dict())
        assert list(got) == list(want.columns)
        np.testing.assert_allclose([got[c] for c in want.columns], want.iloc[i].to_numpy(), rtol=1e-12,
                                   err_msg=str(row.to_dict()))


def test_problem_vector_equals_problem_features_on_real_problems(mi100):
    p = mi100.problems
    # every (direction, dtype, layout, spatial dims) kind at least once, plus a random sample
    kinds = p.drop_duplicates(["direction", "dtype", "layout_x", "spatial_dims", "groups"]).head(150)
    _same_features(pd.concat([kinds, p.sample(150, random_state=0)]))


@settings(max_examples=60, deadline=None)
@given(direction=st.sampled_from("FBW"), dtype=st.sampled_from(["FP32", "FP16", "BF16", "INT8", "FP16FP16FP32",
                                                                 "INT8INT8INT32", "weird"]),
       sizes=st.lists(st.integers(1, 512), min_size=6, max_size=6), groups=st.sampled_from([1, 2, 4]),
       fil=st.sampled_from([1, 3, 5]), stride=st.sampled_from([1, 2]), pad=st.integers(0, 2), layout=st.booleans())
def test_problem_vector_equals_problem_features_generated(direction, dtype, sizes, groups, fil, stride, pad, layout):
    n, c, k, h, w, d = sizes
    c, k = c * groups, k * groups
    row = {"direction": direction, "dtype": dtype, "layout_x": "NHWC" if layout else "NCHW", "layout_w": "NCHW",
           "layout_y": "NCHW", "spatial_dims": 2, "n": n, "c": c, "k": k, "groups": groups,
           "x_d": 1, "x_h": h, "x_w": w, "y_d": 1, "y_h": max(1, (h + 2 * pad - fil) // stride + 1),
           "y_w": max(1, (w + 2 * pad - fil) // stride + 1), "fil_d": 1, "fil_h": fil, "fil_w": fil,
           "pad_d": 0, "pad_h": pad, "pad_w": pad, "stride_d": 1, "stride_h": stride, "stride_w": stride,
           "dil_d": 1, "dil_h": 1, "dil_w": 1, "bias": d % 2}
    _same_features(pd.DataFrame([row]))


def test_forest_margins_equal_xgboost_with_missing_values():
    import xgboost as xgb
    rng = np.random.default_rng(0)
    x = rng.random((400, 4)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan
    booster = xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 4, "seed": 0},
                        xgb.DMatrix(x, label=rng.integers(0, 3, 400)), 5)
    forest = selector.Forest.from_xgboost_json(json.loads(booster.save_raw("json")))
    want = booster.predict(xgb.DMatrix(x[:60]), output_margin=True)
    np.testing.assert_allclose([forest.margins(r) for r in x[:60]], want, atol=1e-5)
    assert forest.depth == 4
    # the trees walked by torch (kbench.selector_device.DeviceForest) give the numpy walk's margins
    np.testing.assert_allclose(forest.on_device("cpu").margins_rows(x), forest.margins_rows(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("max_depth", [1, 3, 7])
def test_forest_margins_rows_equal_xgboost_regression(max_depth):
    """Uneven trees (leaves above the last level, a constant feature never split on) walked as complete
    ones give xgboost's margins, missing values included."""
    import xgboost as xgb
    rng = np.random.default_rng(max_depth)
    x = rng.random((300, 5)).astype(np.float32)
    x[:, 4] = 1.0
    x[rng.random(x.shape) < 0.15] = np.nan
    y = np.where(x[:, 0] > 0.5, 2.0, 0.0) + np.nan_to_num(x[:, 1]) ** 2
    booster = xgb.train({"objective": "reg:squarederror", "max_depth": max_depth, "seed": 0, "min_child_weight": 5},
                        xgb.DMatrix(x, label=y), 12)
    forest = selector.Forest.from_xgboost_json(json.loads(booster.save_raw("json")))
    want = booster.predict(xgb.DMatrix(x), output_margin=True)
    np.testing.assert_allclose(forest.margins_rows(x)[:, 0], want, atol=1e-5)
    np.testing.assert_allclose(forest.margins(x[7]), want[7:8], atol=1e-5)


def _hand_forest() -> "selector.Forest":
    """One tree: x0 < 0.5 (missing: left) -> leaf 1.0; else x1 < 2 (missing: right) -> leaf 10 / leaf 20;
    base score 0.5. Node order as xgboost writes it: 0 root, 1 left leaf, 2 right split, 3 and 4 its leaves."""
    return selector.Forest(left=[1, -1, 3, -1, -1], right=[2, -1, 4, -1, -1], feature=[0, 0, 1, 0, 0],
                           threshold=[0.5, 1.0, 2.0, 10.0, 20.0], default_left=[True, False, False, False, False],
                           roots=[0], group=[0], base=[0.5], depth=2)


#: rows of _hand_forest and their margins, worked by hand: 1.0 + 0.5, 10 + 0.5, 20 + 0.5, and the missing
#: values' default directions (x1 missing goes right: 20.5; x0 missing goes left: 1.5)
HAND_ROWS = np.array([[0.2, 5.0], [0.7, 1.0], [0.7, 3.0], [0.7, np.nan], [np.nan, 0.0]], np.float32)
HAND_MARGINS = [1.5, 10.5, 20.5, 20.5, 1.5]


@pytest.mark.parametrize("walk", ["numpy", "torch-cpu"])
def test_forest_walks_a_hand_worked_tree(walk):
    forest = _hand_forest()
    scorer = forest if walk == "numpy" else forest.on_device("cpu")
    assert scorer.margins_rows(HAND_ROWS)[:, 0].tolist() == HAND_MARGINS
    assert scorer.margins_rows(HAND_ROWS[:3])[:, 0].tolist() == HAND_MARGINS[:3]  # no missing value: no NaN rule


@pytest.mark.gpu
def test_forest_on_the_gpu_walks_the_hand_worked_tree():
    assert _hand_forest().on_device("cuda").margins_rows(HAND_ROWS)[:, 0].tolist() == HAND_MARGINS


def test_exported_selector_ranks_as_the_model(mi100, tmp_path):
    small = small_subset(mi100, n_train=2000, n_valid=300, n_test=200, seed=3)
    parts = small.split("random")
    model = get_baseline("xgboost-compact", max_rounds=4).fit(small, parts["train"], parts["valid"], seed=0)
    sel = selector.load(selector.export(model, tmp_path / "sel"))
    preds = model.predict(small, parts["test"])
    problems = small.problems.set_index("problem_id").loc[preds["problem_id"]].reset_index()
    got = [";".join(sel.choose(row)) for row in problems.to_dict("records")]
    assert got == preds["ranking"].tolist()
    assert sel.size_bytes() == sum(p.stat().st_size for p in (tmp_path / "sel").iterdir())


def test_unknown_selector_and_missing_columns_are_input_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path))
    with pytest.raises(KbenchInputError, match="no dataset 'nosuch'"):
        selector.load("nosuch")
    with pytest.raises(KbenchInputError, match="python -m kbench.selector export NAME"):
        selector.load(tmp_path / "no" / "such")
    with pytest.raises(KbenchInputError, match="no selector for a tuning dataset"):
        selector.load("mi50-tuning")
    with pytest.raises(KbenchInputError, match="lacks"):
        selector.problem_vector({"direction": "F"})


def _heuristic_lists(heuristics: pd.DataFrame, problem_id: str) -> dict[str, list[str]]:
    """cuDNN's lists of one problem as a framework would pass them: plan names in each heuristic's order."""
    h = heuristics[(heuristics["problem_id"] == problem_id) & heuristics["heuristic"].isin(selector.HEURISTIC_LISTS)]
    return {str(name): g.sort_values("rank", kind="stable")["kernel"].astype(str).tolist()
            for name, g in h.groupby("heuristic", observed=True)}


def test_plan_selector_constants_are_the_baselines():
    from kbench_baselines.features import KNOB_ABSENT
    from kbench_baselines.xgb_plans import HEURISTIC_LISTS
    assert selector.HEURISTIC_LISTS == HEURISTIC_LISTS and selector.KNOB_ABSENT == KNOB_ABSENT


@settings(max_examples=60, deadline=None)
@given(engines=st.lists(st.tuples(st.integers(0, 90), st.dictionaries(st.integers(0, 30), st.integers(-3, 70),
                                                                        max_size=4)), min_size=1, max_size=6))
def test_plan_vector_equals_kernel_features(engines):
    from kbench_baselines.features import kernel_features
    names = [f"eng{e}" + "".join(f"_k{k}={v}" for k, v in sorted(knobs.items())) for e, knobs in engines]
    want = kernel_features(names, "engine_knobs")
    for i, name in enumerate(names):
        got = selector.plan_vector(name)
        row = {c: v for c, v in want.iloc[i].items() if (c.startswith("engine=") and v == 1.0)
               or (c.startswith("knob_") and v != -1000.0)}
        assert got == row


def test_plan_vector_refuses_a_name_that_is_no_engine_configuration():
    with pytest.raises(KbenchInputError, match="not a cuDNN engine configuration"):
        selector.plan_vector("ConvBinWinograd3x3U")


@pytest.mark.parametrize("name, params", [("xgboost-plans-safe", {"max_rounds": 15}),
                                          ("xgboost-plans-safe", {"max_rounds": 15, "safe_margin": 0.0}),
                                          ("xgboost-plans", {"max_rounds": 10, "objective": "rank:pairwise"}),
                                          ("xgboost-rerank-a", {"max_rounds": 10, "top_k": 3}),
                                          ("xgboost-plans-safe", {"max_rounds": 10, "candidates": "modes_ab_top_k",
                                                                  "top_k": 2})])
def test_exported_plan_selector_ranks_as_the_model(name, params, tmp_path):
    """From the problem's canonical columns and cuDNN's lists alone, the exported folder ranks every test
    problem's plans exactly as the fitted model does (scores, safe rule, ties in the heuristics' order)."""
    import kbench
    h100 = kbench.load("h100")
    parts = h100.split("random")
    model = get_baseline(name, **params).fit(h100, parts["train"][:300], parts["valid"][:60], seed=1)
    sel = selector.load(selector.export(model, tmp_path / "sel"))
    assert isinstance(sel, selector.PlanSelector)
    ids = parts["test"][:80]
    preds = model.predict(h100, ids)
    problems = h100.problems.set_index("problem_id").loc[preds["problem_id"]].reset_index()
    heur = h100.heuristics[h100.heuristics["problem_id"].isin(ids)]
    got = [";".join(sel.choose(row, _heuristic_lists(heur, row["problem_id"]))) for row in problems.to_dict("records")]
    assert got == preds["ranking"].tolist()
    sel.to("cpu:0")  # the trees walked by torch: the same rankings
    got = [";".join(sel.choose(row, _heuristic_lists(heur, row["problem_id"]))) for row in problems.to_dict("records")]
    assert got == preds["ranking"].tolist()


def test_plan_selector_refuses_an_unknown_list(tmp_path):
    import kbench
    h100 = kbench.load("h100")
    parts = h100.split("random")
    model = get_baseline("xgboost-plans", max_rounds=3).fit(h100, parts["train"][:100], None, seed=0)
    sel = selector.load(selector.export(model, tmp_path / "sel"))
    with pytest.raises(KbenchInputError, match="unknown heuristic list"):
        sel.choose(h100.problems.iloc[0].to_dict(), {"mode_a": ["eng0"]})
    with pytest.raises(KbenchInputError, match="the candidate set is empty"):
        sel.choose(h100.problems.iloc[0].to_dict(), {})

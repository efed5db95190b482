"""XGBoost baselines: relevance labels, masking of unseen kernels, fit bookkeeping."""

import numpy as np
import pandas as pd
import pytest

from kbench_baselines import get_baseline
from kbench_baselines.base import train_runtimes
from kbench_baselines.xgb import relevance
from tests.baselines.helpers import small_subset


@pytest.fixture(scope="module")
def small(mi100):
    return small_subset(mi100, n_train=2000, n_valid=300, n_test=300, seed=1)


def test_relevance_labels():
    r = relevance(np.array([1.0, 2 ** 0.25, 2.0, 4.0, 100.0, 0.5]))
    assert r.tolist() == [9, 8, 5, 1, 1, 9]  # fastest 9, one step per 2^(1/4), at least 1


@pytest.mark.parametrize("name", ["xgboost", "xgboost-ranker"])
def test_unseen_kernels_rank_last(name, small):
    parts = small.split("random")
    model = get_baseline(name, max_rounds=3).fit(small, parts["train"], parts["valid"], seed=0)
    rt = train_runtimes(small, parts["train"])
    seen = rt.groupby(["direction", "dtype"])["kernel"].agg(set).to_dict()
    preds = model.predict(small, parts["test"])
    p = small.problems.set_index("problem_id").loc[preds["problem_id"]]
    for d, dt, ranking in zip(p["direction"], p["dtype"], preds["ranking"]):
        ks = ranking.split(";")
        flags = [k in seen.get((d, dt), set()) for k in ks]
        if (d, dt) in seen:  # every seen kernel comes before every unseen one
            assert flags == sorted(flags, reverse=True)
    assert model.fit_info["rounds"]


def test_unknown_parameter_is_rejected():
    with pytest.raises(TypeError, match="unknown parameters"):
        get_baseline("xgboost", max_deep=3)


def test_soft_label_weights_by_hand(mi100):
    # one problem with hand-set times: 1.00, 1.01, 1.02 and 1.10 ms
    pid = mi100.problems["problem_id"].iloc[0]
    ds = mi100.subset([pid])
    ks = ["ConvMlirIgemmFwdXdlops", "ConvHipImplicitGemmForwardV4R4Xdlops", "GemmFwdRest", "ConvOclDirectFwd"]
    ds.tables["runtimes"] = pd.DataFrame({"problem_id": [pid] * 4, "kernel": ks, "time_ms": [1.10, 1.0, 1.02, 1.01]})
    soft = get_baseline("xgboost", soft_labels=0.02).soft_targets(ds, pd.Index([pid]))
    # kept: t <= 20^0.02 t_best = 1.0617 t_best; weight (t_best/t)^50: 1, 1.01^-50 = 0.6080, 1.02^-50 = 0.3715
    assert soft["kernel"].tolist() == [ks[1], ks[3], ks[2]]
    assert soft["share"].to_numpy() == pytest.approx([1.0, 0.6080, 0.3715], abs=1e-4)


def test_soft_training_rows_split_each_problems_weight():
    from kbench_baselines.xgb import XGBoostMulticlass
    ids = pd.Index(["p", "q"])
    cidx = {"a": 0, "b": 1, "c": 2}
    # p: a fastest, b 1 % slower (share 1.01^-50 = 0.6080); q: only c; "z" is not a class kernel
    soft = pd.DataFrame({"problem_id": ["p", "p", "p", "q"], "kernel": ["a", "b", "z", "c"],
                         "share": [1.0, 0.6080, 0.5, 1.0]})
    weight = np.array([1.0, 0.5])
    rows, label, w = XGBoostMulticlass.training_rows(ids, np.array([0, 2]), weight, soft, cidx)
    assert rows.tolist() == [0, 0, 1] and label.tolist() == [0, 1, 2]
    assert w == pytest.approx([1 / 1.6080, 0.6080 / 1.6080, 0.5])
    # hard labels: one row per problem, unchanged
    rows, label, w = XGBoostMulticlass.training_rows(ids, np.array([0, 2]), weight, None, cidx)
    assert rows.tolist() == [0, 1] and label.tolist() == [0, 2] and w.tolist() == [1.0, 0.5]


def test_slowdown_costs_by_hand(mi100):
    # three problems, class kernels a, b, c (names only matter as labels here)
    pids = list(mi100.problems["problem_id"].iloc[:3])
    ds = mi100.subset(pids)
    ds.tables["problems"] = ds.problems.assign(censored=[False, False, True])
    ds.tables["runtimes"] = pd.DataFrame({
        "problem_id": [pids[0]] * 3 + [pids[1]] * 2 + [pids[2]] * 2,
        "kernel": ["a", "b", "c", "a", "b", "b", "c"],
        "time_ms": [1.0, 2.0, 4.0, 3.0, 1.0, 1.0, 1.5]})
    cost = get_baseline("xgboost").slowdown_costs(ds, pd.Index(pids), ["a", "b", "c"])
    ln = np.log
    # p0 (fastest a): 0, ln 2, ln 4. p1 (fastest b, complete list): a ln 3, c not applicable.
    # p2 (fastest b, censored): a unlisted -> at the last listed time, ln 1.5; c ln 1.5.
    # Row c: no problem has c fastest -> the column means over all three problems; C[c, c] = 0.
    expected = np.array([[0.0, ln(2), ln(4)],
                         [(ln(3) + ln(1.5)) / 2, 0.0, ln(1.5)],
                         [(0 + ln(3) + ln(1.5)) / 3, ln(2) / 3, 0.0]])
    assert cost == pytest.approx(expected)


def test_expected_slowdown_decision_round_trips(small, tmp_path):
    from kbench_baselines.base import Baseline
    parts = small.split("random")
    model = get_baseline("xgboost", max_rounds=3, decision="expected_slowdown")
    model.fit(small, parts["train"], parts["valid"], seed=0)
    assert set(model.costs) == set(model.classes)
    for d, c in model.costs.items():
        assert c.shape == (len(model.classes[d]),) * 2 and (np.diag(c) == 0).all() and (c >= 0).all()
    preds = model.predict(small, parts["test"])
    model.save(tmp_path / "m")
    again = Baseline.load(tmp_path / "m")
    pd.testing.assert_frame_equal(again.predict(small, parts["test"]), preds)


def test_unknown_decision_is_rejected():
    with pytest.raises(ValueError, match="decision must be one of"):
        get_baseline("xgboost", decision="cheapest")

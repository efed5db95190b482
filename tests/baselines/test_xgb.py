"""XGBoost baselines: relevance labels, masking of unseen kernels, fit bookkeeping."""

import numpy as np
import pytest

from baselines import get_baseline
from baselines.base import train_runtimes
from baselines.xgb import relevance
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

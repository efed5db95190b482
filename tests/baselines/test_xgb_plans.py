"""xgboost-plans / xgboost-rerank-a: hand-worked rows, features, labels and order; save/load round trip."""

import numpy as np
import pandas as pd
import pytest

from kbench.core.errors import KbenchInputError
from kbench_baselines import get_baseline
from kbench_baselines.base import Baseline
from kbench_baselines.features import KNOB_ABSENT
from kbench_baselines.xgb_plans import heuristic_features, plan_candidates, rank_rows, safe_scores

P1, P2 = "p1", "p2"
#: 2 problems x 3 plans. Mode A: p1 -> eng1, eng2_k3=1 ; p2 -> eng2_k3=0. Mode B: p1 -> eng2_k3=1, eng3.
HEUR = pd.DataFrame({
    "problem_id": [P1, P1, P1, P1, P2, P2, P2],
    "heuristic": ["cudnn_mode_a", "cudnn_mode_a", "cudnn_mode_b", "cudnn_mode_b", "cudnn_mode_a",
                  "cudnn_fallback", "cudnn_fallback"],
    "rank": [0, 1, 0, 1, 0, 0, 1],
    "kernel": ["eng1", "eng2_k3=1", "eng2_k3=1", "eng3", "eng2_k3=0", "eng1", "eng3"]})
TIMES = {(P1, "eng1"): 4.0, (P1, "eng2_k3=1"): 2.0, (P1, "eng3"): 1.0,
         (P2, "eng2_k3=0"): 3.0, (P2, "eng1"): 6.0, (P2, "eng3"): 12.0}


def test_plan_candidates_hand_worked():
    rows = plan_candidates(HEUR, pd.Index([P1, P2]))
    # heuristic order: mode A rank, then mode B rank, then fallback rank (absent last)
    assert rows[["problem_id", "kernel"]].values.tolist() == [
        [P1, "eng1"], [P1, "eng2_k3=1"], [P1, "eng3"], [P2, "eng2_k3=0"], [P2, "eng1"], [P2, "eng3"]]
    assert rows["pos"].tolist() == [0, 0, 0, 1, 1, 1]
    np.testing.assert_array_equal(rows["rank_cudnn_mode_a"], [0, 1, np.nan, 0, np.nan, np.nan])
    np.testing.assert_array_equal(rows["rank_cudnn_mode_b"], [np.nan, 0, 1, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(rows["rank_cudnn_fallback"], [np.nan, np.nan, np.nan, np.nan, 0, 1])
    top1 = plan_candidates(HEUR, pd.Index([P1, P2]), "mode_a_top_k", 1)
    assert top1["kernel"].tolist() == ["eng1", "eng2_k3=0"]  # re-ranking mode A's first plan only
    # a problem without any mode-A plan (cuDNN's mode-A query failed) keeps every candidate
    no_a = HEUR[~((HEUR["problem_id"] == P2) & (HEUR["heuristic"] == "cudnn_mode_a"))]
    top1 = plan_candidates(no_a, pd.Index([P1, P2]), "mode_a_top_k", 1)
    assert top1[["problem_id", "kernel"]].values.tolist() == [[P1, "eng1"], [P2, "eng1"], [P2, "eng3"]]


def test_heuristic_features_hand_worked():
    f = heuristic_features(plan_candidates(HEUR, pd.Index([P1, P2])))
    assert f["len_cudnn_mode_a"].tolist() == [2, 2, 2, 1, 1, 1]
    assert f["len_cudnn_fallback"].tolist() == [0, 0, 0, 2, 2, 2]
    np.testing.assert_array_equal(f["relrank_cudnn_mode_a"], [0.0, 0.5, np.nan, 0.0, np.nan, np.nan])
    assert f["n_candidates"].tolist() == [3, 3, 3, 3, 3, 3]


def test_rank_rows_orders_by_score_ties_in_heuristic_order_and_truncates():
    rows = plan_candidates(HEUR, pd.Index([P1, P2]))
    # p1: eng3 best, eng1 and eng2_k3=1 tie (heuristic order: eng1 first); p2: reversed
    score = np.array([1.0, 1.0, 5.0, 0.0, 1.0, 2.0])
    assert rank_rows(rows, score, 3, 30).tolist() == ["eng3;eng1;eng2_k3=1", "eng3;eng1;eng2_k3=0", ""]
    assert rank_rows(rows, score, 2, 2).tolist() == ["eng3;eng1", "eng3;eng1"]


def test_safe_scores_hand_worked():
    rows = plan_candidates(HEUR, pd.Index([P1, P2]))
    # mode A's first plan: p1 eng1 (score 1), p2 eng2_k3=0 (score 0); best: p1 eng3 (5, gain 4), p2 eng3 (2, gain 2)
    score = np.array([1.0, 1.0, 5.0, 0.0, 1.0, 2.0])
    np.testing.assert_array_equal(safe_scores(rows, score, 1.0), score)  # both gains exceed the margin
    # margin 3: p2's gain 2 is too small, so its mode-A plan goes on top (best 2 + 1); p1 keeps the model's pick
    assert safe_scores(rows, score, 3.0).tolist() == [1.0, 1.0, 5.0, 3.0, 1.0, 2.0]
    assert rank_rows(rows, safe_scores(rows, score, 3.0), 2, 30).tolist() == [
        "eng3;eng1;eng2_k3=1", "eng2_k3=0;eng3;eng1"]
    # margin 4: p1's gain 4 is not more than 4, so mode A's eng1 leads, then the model's order
    assert rank_rows(rows, safe_scores(rows, score, 4.0), 2, 30).tolist() == [
        "eng1;eng3;eng2_k3=1", "eng2_k3=0;eng3;eng1"]


class _Toy:
    """2 problems (real h100 problem rows for the features) x 3 plans with the times above."""

    name = "toy"
    info = {"task": "kernel-selection", "library": "cuDNN 9", "files": {"heuristics.parquet": {}}}

    def __init__(self, h100):
        self.problems = h100.problems.iloc[[0, 1]].assign(problem_id=[P1, P2]).reset_index(drop=True)
        self.heuristics = HEUR
        self.runtimes = pd.DataFrame([{"problem_id": p, "kernel": k, "time_ms": t} for (p, k), t in TIMES.items()])


@pytest.fixture(scope="module")
def h100():
    import kbench
    return kbench.load("h100")


def test_labels_and_kernel_features_hand_worked(h100):
    toy = _Toy(h100)
    model = get_baseline("xgboost-plans")
    problems, rows, ratio = model._labelled(toy, pd.Index([P1, P2]))
    # t / t_best per problem, rows in heuristic order: p1 4/1, 2/1, 1/1; p2 3/3, 6/3, 12/3
    assert ratio.tolist() == [4.0, 2.0, 1.0, 1.0, 2.0, 4.0]
    x = pd.DataFrame(model._matrix(toy, problems, rows), columns=model.columns)
    assert model.kernel_columns == ["engine=eng1", "engine=eng2", "engine=eng3", "knob_k3"]
    assert x["knob_k3"].tolist() == [KNOB_ABSENT, 1, KNOB_ABSENT, 0, KNOB_ABSENT, KNOB_ABSENT]
    assert x["engine=eng2"].tolist() == [0, 1, 0, 1, 0, 0]


@pytest.mark.parametrize("objective", ["log_ratio", "rank:pairwise"])
def test_fits_a_hand_worked_case_exactly(h100, objective):
    """Trained on the two problems themselves, with capacity to spare, the order is by time."""
    toy = _Toy(h100)
    model = get_baseline("xgboost-plans", objective=objective, max_rounds=60, learning_rate=0.5, subsample=1.0,
                         colsample_bytree=1.0, min_child_weight=0.0, reg_lambda=0.0, n_jobs=1)
    preds = model.fit(toy, [P1, P2], None, seed=0).predict(toy, [P1, P2])
    assert preds["ranking"].tolist() == ["eng3;eng2_k3=1;eng1", "eng2_k3=0;eng1;eng3"]


@pytest.mark.parametrize("margin, p1", [(1.0, "eng3;eng2_k3=1;eng1"), (1.5, "eng1;eng3;eng2_k3=1")])
def test_safe_entry_keeps_mode_a_unless_the_predicted_gain_exceeds_the_margin(h100, margin, p1):
    """Fitted exactly, p1's predicted gain of eng3 over mode A's eng1 is log(4) = 1.386: kept at margin 1.0,
    overruled at 1.5. In p2 mode A's plan is the fastest, so it leads either way."""
    toy = _Toy(h100)
    model = get_baseline("xgboost-plans-safe", safe_margin=margin, max_rounds=60, learning_rate=0.5,
                         subsample=1.0, colsample_bytree=1.0, min_child_weight=0.0, reg_lambda=0.0, n_jobs=1)
    preds = model.fit(toy, [P1, P2], None, seed=0).predict(toy, [P1, P2])
    assert preds["ranking"].tolist() == [p1, "eng2_k3=0;eng1;eng3"]


def test_rejects_bad_parameters():
    for bad in (-0.1, float("nan"), "0.01"):
        with pytest.raises(KbenchInputError, match="safe_margin"):
            get_baseline("xgboost-plans-safe", safe_margin=bad)
    with pytest.raises(KbenchInputError, match="objective"):
        get_baseline("xgboost-plans", objective="softmax")
    with pytest.raises(KbenchInputError, match="top_k"):
        get_baseline("xgboost-plans", candidates="mode_a_top_k", top_k=0)
    with pytest.raises(KbenchInputError, match="before predict"):
        get_baseline("xgboost-plans").predict(None, [])


def test_supports_cudnn_sets_only(h100):
    import kbench
    assert get_baseline("xgboost-plans").supports(h100)
    assert not get_baseline("xgboost-rerank-a").supports(kbench.load("mi100"))


@pytest.mark.parametrize("name", ["xgboost-plans", "xgboost-rerank-a", "xgboost-plans-safe"])
def test_save_load_round_trip(h100, name, tmp_path):
    parts = h100.split("random")
    model = get_baseline(name, max_rounds=15).fit(h100, parts["train"][:300], parts["valid"][:60], seed=1)
    ids = parts["test"][:80]
    before = model.predict(h100, ids)
    model.save(tmp_path / name)
    again = Baseline.load(tmp_path / name)
    assert type(again) is type(model) and again.params == model.params and again.seed == 1
    pd.testing.assert_frame_equal(again.predict(h100, ids), before)
    n_plans = before["ranking"].str.count(";") + 1
    assert n_plans.max() <= (16 if name == "xgboost-rerank-a" else 30)


def test_plan_candidates_top_k_of_modes_a_and_b_hand_worked():
    """The first place of mode A or of mode B: p1 keeps eng1 (A's first) and eng2_k3=1 (B's first), p2 its
    mode-A plan only (no mode-B list)."""
    rows = plan_candidates(HEUR, pd.Index([P1, P2]), "modes_ab_top_k", 1)
    assert rows[["problem_id", "kernel"]].values.tolist() == [[P1, "eng1"], [P1, "eng2_k3=1"], [P2, "eng2_k3=0"]]
    assert heuristic_features(rows)["len_cudnn_mode_b"].tolist() == [1, 1, 0]

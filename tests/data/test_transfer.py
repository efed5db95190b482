"""The transfer track: k-shot budget, no leakage of target held-out problems, a hand-worked zero-shot
case, and the record round trip with source / target / k."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kbench
from kbench.core.errors import KbenchInputError
from kbench.data.dataset import Dataset
from kbench.data.transfer_task import K_BUDGETS, PAIRS, Transfer, drop_leaking
from kbench.scoring.records import DatasetRef, EvaluationResult, TransferRef

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="module")
def mi300x():
    return kbench.load("mi300x")


@pytest.fixture(scope="module")
def mi100():
    return kbench.load("mi100")


# ----------------------------------------------------------------------------- k-shot budget
def test_asking_for_more_target_problems_than_k_is_refused(mi100, mi300x):
    task = kbench.transfer(mi100, mi300x, k=100, seed=3)
    assert len(task.shot_ids()) == 100
    with pytest.raises(KbenchInputError, match="budget is k=100"):
        task.shot_ids(101)
    with pytest.raises(KbenchInputError, match="budget is k=100"):
        task.target_shots(1000)
    zero = Transfer(mi100, mi300x, k=0)
    with pytest.raises(KbenchInputError, match="budget is k=0"):
        zero.shot_ids(1)
    assert len(zero.target_inputs().runtimes) == 0  # k = 0: no target time at all


def test_k_outside_the_budgets_is_an_input_error(mi100, mi300x):
    with pytest.raises(KbenchInputError, match=r"k must be one of \(0, 100, 1000\)"):
        Transfer(mi100, mi300x, k=50)
    with pytest.raises(KbenchInputError, match="both 'mi300x'"):
        Transfer(mi300x, mi300x, k=0)


def test_a_pair_across_libraries_is_refused(mi100):
    """h100's cuDNN plans and mi100's MIOpen solvers share no kernel: no choice transfers."""
    with pytest.raises(KbenchInputError, match=r"'h100' \(cuDNN .*\) and 'mi100' \(MIOpen\) share no kernel"):
        Transfer(kbench.load("h100"), mi100, k=0)


def test_the_target_inputs_hold_the_times_of_the_k_shots_only(mi100, mi300x):
    task = Transfer(mi100, mi300x, k=1000, seed=0)
    seen = task.target_inputs()
    shots = set(task.shot_ids())
    assert set(seen.runtimes["problem_id"]) == shots  # (every mi300x problem has measured times)
    assert shots <= set(mi300x.split("random")["train"])
    assert len(seen.problems) == len(mi300x.problems)  # descriptions of every problem, to predict them


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(0, 1000))
def test_the_draw_is_seeded_and_nested(mi100, mi300x, seed, n):
    a, b = Transfer(mi100, mi300x, k=1000, seed=seed), Transfer(mi100, mi300x, k=1000, seed=seed)
    np.testing.assert_array_equal(a.shot_ids(n), b.shot_ids(n))         # same seed, same shots
    np.testing.assert_array_equal(a.shot_ids(n), a.shot_ids(1000)[:n])  # the first n of one order
    small = Transfer(mi100, mi300x, k=100, seed=seed).shot_ids()
    np.testing.assert_array_equal(small, a.shot_ids(100))               # k=100 shots ⊂ k=1000 shots


# ----------------------------------------------------------------------------- no leakage
def _toy(name: str, geometry: list[str], parts: list[str]) -> Dataset:
    ids = [f"p{i}" for i in range(len(geometry))]
    problems = pd.DataFrame({"problem_id": ids, "geometry_id": geometry, "direction": "F"})
    splits = pd.DataFrame({"problem_id": ids, "random": parts})
    runtimes = pd.DataFrame({"problem_id": ids, "kernel": "A", "time_ms": 1.0})
    return Dataset(name, {"problems": problems, "splits": splits, "runtimes": runtimes}, {"name": name})


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_drop_leaking_removes_every_held_out_geometry(data):
    """Whatever the two splits (here not consistent with each other), no source problem kept shares an
    id or a geometry with a target valid/test problem, and every other source problem is kept."""
    n_src, n_tgt = data.draw(st.integers(1, 30)), data.draw(st.integers(1, 30))
    geoms = st.sampled_from(["g0", "g1", "g2", "g3", "g4", "g5"])
    part = st.sampled_from(["train", "valid", "test"])
    src = _toy("src", data.draw(st.lists(geoms, min_size=n_src, max_size=n_src)),
               data.draw(st.lists(part, min_size=n_src, max_size=n_src)))
    tgt = _toy("tgt", data.draw(st.lists(geoms, min_size=n_tgt, max_size=n_tgt)),
               data.draw(st.lists(part, min_size=n_tgt, max_size=n_tgt)))
    kept = set(drop_leaking(src, src.problems["problem_id"], tgt))
    held = tgt.tables["splits"]["random"].isin(["valid", "test"]).to_numpy()
    bad_geom = set(tgt.problems["geometry_id"][held])
    bad_ids = set(tgt.problems["problem_id"][held])
    expected = {pid for pid, g in zip(src.problems["problem_id"], src.problems["geometry_id"])
                if g not in bad_geom and pid not in bad_ids}
    assert kept == expected


@functools.cache
def _load(name: str) -> Dataset:
    return kbench.load(name)


@pytest.mark.slow
@pytest.mark.parametrize("source,target", PAIRS)
def test_real_pairs_never_train_on_a_target_held_out_problem_or_geometry(source, target):
    """Exhaustive over every problem of the shipped pairs (problem ids are shared across devices)."""
    task = Transfer(_load(source), _load(target), k=0)
    ids = task.source_ids()
    sp = task.source.problems
    trained = sp[sp["problem_id"].isin(np.concatenate([ids["train"], ids["valid"]]))]
    parts = task.target_split()
    held_ids = np.concatenate([parts["valid"], parts["test"]])
    tp = task.target.problems
    held_geom = tp.loc[tp["problem_id"].isin(held_ids), "geometry_id"]
    assert not trained["problem_id"].isin(held_ids).any()
    assert not trained["geometry_id"].isin(held_geom).any()
    # and nothing of the source's own train part was dropped for another reason
    dropped = ~sp["problem_id"].isin(ids["train"]) & sp["problem_id"].isin(task.source.split("random")["train"])
    assert (sp.loc[dropped, "geometry_id"].isin(held_geom) | sp.loc[dropped, "problem_id"].isin(held_ids)).all()


# ----------------------------------------------------------------------------- hand-worked zero-shot
def _hand_pair(mi300x):
    """Five real mi300x forward FP32 NCHW problem descriptions with hand-written times.

    Source: train t1, t2 (A fastest in both: single-best A); it measured p1 (A 1, B 2) and p2 (B 1, A 3),
    not p3. Target test: p1 (A 1, B 4), p2 (A 1, B 2), p3 (B 1, A 3).
    """
    pool = mi300x.problems
    pool = pool[(pool["direction"] == "F") & (pool["dtype"] == "FP32") & (pool["layout"] == "NCHW")
                & (pool["spatial_dims"] == 2)]
    rows = pool.drop_duplicates("geometry_id").head(5).copy()
    rows["problem_id"] = ["t1", "t2", "p1", "p2", "p3"]
    rows["geometry_id"] = ["gt1", "gt2", "gp1", "gp2", "gp3"]
    rows["censored"] = False
    kernels = pd.DataFrame({"kernel": ["A", "B"], "family": ["x", "y"], "algorithm": ["a", "b"],
                            "directions": ["F", "F"]})

    def times(table):
        return pd.DataFrame([(p, k, t) for p, kt in table.items() for k, t in kt.items()],
                            columns=["problem_id", "kernel", "time_ms"])
    src_rt = times({"t1": {"A": 1, "B": 2}, "t2": {"A": 1, "B": 5}, "p1": {"A": 1, "B": 2},
                    "p2": {"B": 1, "A": 3}})
    tgt_rt = times({"t1": {"A": 1, "B": 2}, "t2": {"A": 1, "B": 2}, "p1": {"A": 1, "B": 4},
                    "p2": {"A": 1, "B": 2}, "p3": {"B": 1, "A": 3}})
    src_split = pd.DataFrame({"problem_id": ["t1", "t2", "p1", "p2"], "random": ["train", "train", "test", "test"]})
    tgt_split = pd.DataFrame({"problem_id": ["t1", "t2", "p1", "p2", "p3"],
                              "random": ["train", "train", "test", "test", "test"]})
    src = Dataset("hand-src", {"problems": rows[rows["problem_id"] != "p3"].reset_index(drop=True),
                               "runtimes": src_rt, "kernels": kernels, "splits": src_split},
                  {"name": "hand-src", "task": "kernel-selection"})
    tgt = Dataset("hand-tgt", {"problems": rows.reset_index(drop=True), "runtimes": tgt_rt, "kernels": kernels,
                               "splits": tgt_split}, {"name": "hand-tgt", "task": "kernel-selection"})
    return src, tgt


def test_source_oracle_zero_shot_by_hand(mi300x):
    from kbench_baselines.transfer import get_transfer_method
    src, tgt = _hand_pair(mi300x)
    task = Transfer(src, tgt, k=0)
    method = get_transfer_method("source-oracle").fit(task)
    preds = method.predict(task.target_inputs(), ["p1", "p2", "p3"]).set_index("problem_id")["ranking"]
    # p1, p2: the source's measured order; p3 (not on the source): source single-best, A first
    assert preds.to_dict() == {"p1": "A;B", "p2": "B;A", "p3": "A;B"}
    assert method.coverage == pytest.approx(2 / 3)
    result = kbench.Evaluator(tgt, split="random", part="test", reference=None)(preds.reset_index())
    # choices: p1 A (fastest), p2 B (2 / 1), p3 A (3 / 1): top-1 = 1/3, geomean slowdown = (1 * 2 * 3)^(1/3)
    assert result.overall["top1"] == pytest.approx(1 / 3)
    assert result.overall["geomean_slowdown"] == pytest.approx(6 ** (1 / 3))


def test_rankings_are_put_in_the_target_vocabulary(mi300x):
    from kbench_baselines.transfer import target_rankings
    src, tgt = _hand_pair(mi300x)
    problems = tgt.problems.head(2)
    # Z: a source kernel the target lacks (dropped); B never ranked by the model (appended)
    assert list(target_rankings(["Z;A", "B;Z;A"], tgt, problems)) == ["A;B", "B;A"]


# ----------------------------------------------------------------------------- record round trip
def test_transfer_record_round_trip_keeps_source_target_and_k(mi300x):
    ref = DatasetRef(name="mi100", version="1", checksum="abc")
    rec = kbench.Evaluator(mi300x, split="random", reference=None)(
        pd.DataFrame({"problem_id": mi300x.split("random")["test"], "ranking": "GemmFwdRest"}),
        method="source-xgboost")
    rec.transfer = TransferRef(source=ref, k=100, shots_seed=2)
    back = EvaluationResult.model_validate_json(rec.model_dump_json())
    assert back.transfer.source.name == "mi100" and back.dataset.name == "mi300x"
    assert (back.transfer.k, back.transfer.shots_seed) == (100, 2)
    assert back == rec
    assert K_BUDGETS == (0, 100, 1000)


def test_cli_refuses_a_budget_outside_the_track(capsys):
    from kbench.cli import main
    code = main(["transfer", "run", "--source", "mi100", "--target", "mi300x", "--k", "50", "--seeds", "0"])
    assert code == 2
    assert "--k: budgets must be among (0, 100, 1000), got [50]" in capsys.readouterr().err


def test_transfer_table_rows_are_methods_and_columns_are_k(mi300x):
    from kbench.leaderboard.transfer_track import transfer_table
    base = kbench.Evaluator(mi300x, split="random", reference=None)(
        pd.DataFrame({"problem_id": mi300x.split("random")["test"], "ranking": "GemmFwdRest"}), method="m")
    ref = DatasetRef(name="mi100", version="1", checksum="abc")

    def rec(method, k, top1, slowdown, role):
        r = base.model_copy(deep=True)
        r.method, r.transfer, r.extra = method, TransferRef(source=ref, k=k), {"role": role}
        r.metrics["overall"].update(top1=top1, geomean_slowdown=slowdown)
        return r
    header, rows = transfer_table([rec("tuned", 1000, 0.5, 1.25, "entry"), rec("tuned", 100, 0.25, 2.0, "entry"),
                                   rec("ceil", None, 0.875, 1.0, "ceiling"), rec("zero", 0, 0.125, 3.0, "reference")])
    assert header == ["method", "role", "k = 0", "k = 100", "k = 1000", "full target train"]
    assert rows == [["zero", "reference", "12.50% / 3.0000×", "", "", ""],
                    ["tuned", "entry", "", "25.00% / 2.0000×", "50.00% / 1.2500×", ""],
                    ["ceil", "ceiling", "", "", "", "87.50% / 1.0000×"]]


def test_finetuning_moves_a_many_class_model_towards_its_shots():
    """20 rounds on 12 shots, all of one class, raise that class for them. Under the source's
    min_child_weight (1.0) the softmax hessians of 400 classes sum below it, xgboost gives every
    leaf weight 0 and nothing changes: what happened on h100 -> h200 before the fix."""
    import numpy as np
    import xgboost as xgb

    from kbench_baselines.transfer import FINETUNE_ROUNDS, finetune_params
    rng = np.random.default_rng(0)
    n_class = 400
    x, y = rng.normal(size=(2000, 4)).astype(np.float32), rng.integers(0, n_class, 2000)
    source_params = {"tree_method": "hist", "max_depth": 3, "min_child_weight": 1.0, "nthread": 1, "seed": 0}
    source = xgb.train(dict(source_params, objective="multi:softprob", num_class=n_class),
                       xgb.DMatrix(x, label=y), 3)
    shots = rng.normal(size=(12, 4)).astype(np.float32)
    before = source.predict(xgb.DMatrix(shots))[:, 7]
    params = finetune_params(source_params, n_class)
    assert params["min_child_weight"] == 0.0 and params["num_class"] == n_class and params["seed"] == 0
    tuned = xgb.train(params, xgb.DMatrix(shots, label=np.full(12, 7)), FINETUNE_ROUNDS, xgb_model=source.copy())
    assert (tuned.predict(xgb.DMatrix(shots))[:, 7] > 2 * before).all()
    stuck = xgb.train(dict(params, min_child_weight=1.0), xgb.DMatrix(shots, label=np.full(12, 7)),
                      FINETUNE_ROUNDS, xgb_model=source.copy())
    assert np.array_equal(stuck.predict(xgb.DMatrix(shots))[:, 7], before)


def test_h200_pairs_with_its_3d_set():
    """kbench.transfer pairs the 2D h200 set with h200-3d: 2D and 3D geometries never coincide, so the
    source keeps its whole random train and valid parts, and the target's k shots are k of its train part."""
    import kbench
    tr = kbench.transfer("h200", "h200-3d", k=100, seed=0)
    shots = tr.target_shots()
    target_train = set(tr.target_split()["train"])
    drawn = set(shots.runtimes["problem_id"].unique())
    assert len(drawn) == 100 and drawn <= target_train
    source = kbench.load("h200")
    parts = source.split("random")
    assert set(tr.source_train().problems["problem_id"]) == set(parts["train"]) | set(parts["valid"])

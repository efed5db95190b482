"""hybrid-rf, ml-rf and analytical (baselines/hybrid_rf.py): small fits, seconds each."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kbench
from kbench.core.errors import KbenchInputError
from kbench.sources.cnnopt_features import FEATURE_COLUMNS, PROBLEM_INPUTS, TILE_INPUTS
from kbench_baselines.base import BASELINES, Baseline, discover, get_baseline, load_safetensors
from kbench_baselines.hybrid_rf import TreeEnsemble, floor_float32, interleave_key, rank_long, tile_order

RES6 = "128-30-30-3x3-128-28-28-1-0x0-1x1-1x1-0-NCHW-FP32-F"  # K=C=128, 28x28 out, 3x3, stride 1
A = "RS_TK2_TH7_TW7_BK32_BH4_BW1_CM8"
B = "RS_TK1_TH7_TW7_BK32_BH4_BW1_CM8"
SMALL = {"n_trees": 6, "search_trees": 3}


@pytest.fixture(scope="module")
def v100():
    return kbench.load("v100-tiles")


@pytest.fixture(scope="module")
def small_ids(v100):
    """40 train and 12 valid random-size problems (fixed draw) and the 20 benchmark layers."""
    sp = v100.split("networks")
    rng = np.random.default_rng(0)
    return (rng.choice(np.sort(sp["train"]), 40, replace=False), rng.choice(np.sort(sp["valid"]), 12, replace=False),
            sp["test"])


@pytest.fixture(scope="module")
def fitted(v100, small_ids):
    tr, va, _ = small_ids
    return {name: get_baseline(name, **SMALL).fit(v100, tr, va, seed=1) for name in ("hybrid-rf", "ml-rf")}


def test_registered_and_supports(v100):
    discover()
    assert {"hybrid-rf", "ml-rf", "analytical"} <= set(BASELINES)
    mi100_meta = type("M", (), {"name": "mi100", "info": {"task": "kernel-selection"}})()
    assert get_baseline("hybrid-rf").supports(v100) and get_baseline("hybrid-rf").supports(mi100_meta)
    for name in ("ml-rf", "analytical"):
        assert get_baseline(name).supports(v100) and not get_baseline(name).supports(mi100_meta)


# ----------------------------------------------------------------------------- analytical
def test_analytical_ranks_hand_worked_pair(v100):
    """Two RS configurations on ResNet-18 res6 (V100), their data movement worked by hand.

    A = 2x7x7 outputs/thread, block 1x4x1 warps, C split 8: 64 blocks of 4 warps, 16 channels each.
      global: input 64*16*30 rows*2 sectors*32 B + weights 64*4*16*9 taps*2 k*128 B + output 64*64*28*32 B
            = 1,966,080 + 9,437,184 + 3,670,016 = 15,073,280 B  -> / 900 GB/s = 16.75 us
      shared: 64*4*16*81*128 + 64*4*98*128 = 45,678,592 B   -> / (80*128 B*1530 MHz) = 2.92 us
    B = the same with 1 output channel per thread: 128 blocks.
      global: 128*16*30*2*32 + 128*4*16*9*1*128 + 128*(32*28)*32 = 17,039,360 B -> 18.93 us
      shared: 128*4*16*81*128 + 128*4*49*128 = 88,145,920 B -> 5.63 us
    The analytical score (max of the two times) puts A first, though B's name sorts first.
    """
    sub = v100.subset([RES6])
    sub.tables["runtimes"] = sub.runtimes[sub.runtimes["kernel"].astype(str).isin([A, B])].reset_index(drop=True)
    model = get_baseline("analytical").fit(sub, [], [])
    rows, score = model.scores(sub, sub.problems)
    got = dict(zip(rows["kernel"], score))
    assert got[A] == pytest.approx(max(15_073_280 / 900e9, 45_678_592 / (80 * 128 * 1530e6)), rel=1e-12)
    assert got[B] == pytest.approx(max(17_039_360 / 900e9, 88_145_920 / (80 * 128 * 1530e6)), rel=1e-12)
    assert model.predict(sub, [RES6])["ranking"].tolist() == [f"{A};{B}"]


def test_analytical_save_load(v100, tmp_path):
    m = get_baseline("analytical").fit(v100, [], [])
    ids = v100.split("networks")["test"][:3]
    m.save(tmp_path / "a")
    assert Baseline.load(tmp_path / "a").predict(v100, ids).equals(m.predict(v100, ids))


# ----------------------------------------------------------------------------- forests
def test_feature_groups_per_ablation(fitted):
    hyb, ml = fitted["hybrid-rf"].state["columns"], fitted["ml-rf"].state["columns"]
    assert hyb == PROBLEM_INPUTS + TILE_INPUTS + FEATURE_COLUMNS
    assert ml == PROBLEM_INPUTS + TILE_INPUTS
    assert not set(FEATURE_COLUMNS) & set(ml)
    assert fitted["hybrid-rf"].state["n_features"] == len(hyb)
    assert fitted["ml-rf"].forest.n_features == len(ml)


def test_selection_on_valid_is_recorded(fitted):
    m = fitted["hybrid-rf"]
    sel = m.fit_info["selection"]
    assert len(sel) == 4 and all(np.isfinite(s["criterion"]) for s in sel)
    best = min(sel, key=lambda s: s["criterion"])
    assert m.fit_info["chosen"]["target"] == best["target"]
    assert m.fit_info["chosen"]["min_samples_leaf"] == best["min_samples_leaf"]


def test_rankings_cover_every_listed_configuration(v100, fitted, small_ids):
    test = small_ids[2]
    preds = fitted["hybrid-rf"].predict(v100, test)
    assert preds["problem_id"].tolist() == list(test)
    listed = v100.runtimes[v100.runtimes["problem_id"].isin(test)].groupby("problem_id")["kernel"].agg(
        lambda s: sorted(map(str, s)))
    for pid, ranking in zip(preds["problem_id"], preds["ranking"]):
        assert sorted(ranking.split(";")) == listed[pid]
    rec = kbench.Evaluator(v100, "networks", "test", reference=None)(preds)
    assert rec.counts.failures == 0 and rec.counts.scored == len(test)


def test_predictions_never_read_test_times(v100, fitted, small_ids):
    test = small_ids[2][:4]
    shuffled = v100.subset(test)
    rt = shuffled.runtimes.copy()
    rt["time_ms"] = np.random.default_rng(0).permutation(rt["time_ms"].to_numpy())[::-1].copy()
    rt = rt.iloc[::-1].reset_index(drop=True)  # storage order reversed too
    shuffled.tables["runtimes"] = rt
    for name in ("hybrid-rf", "ml-rf"):
        assert fitted[name].predict(shuffled, test).equals(fitted[name].predict(v100, test))
    an = get_baseline("analytical").fit(v100, [], [])
    assert an.predict(shuffled, test).equals(an.predict(v100, test))


def test_save_load_round_trip_identical(v100, fitted, small_ids, tmp_path):
    test = small_ids[2]
    for name, m in fitted.items():
        m.save(tmp_path / name)
        assert (tmp_path / name / "arrays.safetensors").exists()
        assert not list((tmp_path / name).glob("*.pkl")) and not list((tmp_path / name).glob("*.pickle"))
        loaded = Baseline.load(tmp_path / name)
        assert type(loaded) is type(m)
        assert loaded.state["chosen"] == m.state["chosen"]
        _, _, p1 = m.predict_rows(v100, test)
        _, _, p2 = loaded.predict_rows(v100, test)
        np.testing.assert_array_equal(p1, p2)
        assert loaded.predict(v100, test).equals(m.predict(v100, test))


def test_seed_reproduces(v100, fitted, small_ids):
    tr, va, test = small_ids
    again = get_baseline("hybrid-rf", **SMALL).fit(v100, tr, va, seed=1)
    a, b = again.forest.to_arrays(), fitted["hybrid-rf"].forest.to_arrays()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert again.predict(v100, test).equals(fitted["hybrid-rf"].predict(v100, test))
    other = get_baseline("hybrid-rf", **SMALL).fit(v100, tr, va, seed=2)
    assert not np.array_equal(other.forest.threshold[:50], fitted["hybrid-rf"].forest.threshold[:50]) or \
        other.forest.n_nodes != fitted["hybrid-rf"].forest.n_nodes


def test_unknown_parameter_and_unfitted():
    with pytest.raises(KbenchInputError):
        get_baseline("hybrid-rf", n_tree=3)
    with pytest.raises(KbenchInputError):
        get_baseline("ml-rf").predict(None, [])


# ----------------------------------------------------------------------------- the numpy forest
def test_tree_ensemble_matches_sklearn(tmp_path):
    from sklearn.ensemble import RandomForestRegressor
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 5)) * np.array([1, 1e3, 1e-3, 1e9, 1])
    X[:, 4] = rng.integers(0, 4, 400)  # ties and repeated values
    y = np.sin(X[:, 0]) + (X[:, 4] == 2) + rng.normal(0, 0.1, 400)
    rf = RandomForestRegressor(n_estimators=7, max_features=0.5, random_state=0, n_jobs=2).fit(X, y)
    ens = TreeEnsemble.from_sklearn(rf)
    Xt = np.vstack([X, rng.normal(size=(300, 5)) * np.array([1, 1e3, 1e-3, 1e9, 1])])
    leaves = ens.apply(Xt) - ens.offsets[:-1]  # back to per-tree node ids
    np.testing.assert_array_equal(leaves, rf.apply(Xt))
    np.testing.assert_allclose(ens.predict(Xt), rf.predict(Xt), rtol=1e-12, atol=1e-12)
    from kbench_baselines.base import save_safetensors
    save_safetensors(tmp_path / "f.safetensors", ens.to_arrays())
    back = TreeEnsemble.from_arrays(load_safetensors(tmp_path / "f.safetensors")[0], n_features=5)
    np.testing.assert_array_equal(back.predict(Xt), ens.predict(Xt))


def test_tree_ensemble_threads_give_the_same_leaves(monkeypatch):
    # inputs of THREADED_ROWS rows or more spread the trees over threads: the same leaves, bit for bit,
    # also across the PREDICT_ROWS chunks
    from sklearn.ensemble import RandomForestRegressor

    from kbench_baselines import hybrid_rf
    rng = np.random.default_rng(1)
    X = rng.normal(size=(600, 4))
    rf = RandomForestRegressor(n_estimators=9, random_state=0, n_jobs=1).fit(X, X[:, 0] * X[:, 1])
    ens = TreeEnsemble.from_sklearn(rf)
    Xt = rng.normal(size=(hybrid_rf.THREADED_ROWS + 77, 4))
    monkeypatch.setenv("KBENCH_THREADS", "1")
    one = ens.apply(Xt)
    monkeypatch.setenv("KBENCH_THREADS", "4")
    monkeypatch.setattr(hybrid_rf, "PREDICT_ROWS", 1000)
    np.testing.assert_array_equal(ens.apply(Xt), one)
    np.testing.assert_array_equal(one - ens.offsets[:-1], rf.apply(Xt))


@settings(max_examples=200, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False),
       st.floats(allow_nan=False, allow_infinity=False, min_value=-3e38, max_value=3e38))
def test_float32_threshold_is_exact(x, t):
    x32 = np.float32(x)
    assert bool(np.float64(x32) <= t) == bool(x32 <= floor_float32(np.array([t]))[0])


def test_rank_long_orders_and_breaks_ties_by_row_order():
    pos = np.array([0, 0, 0, 2, 2])
    names = np.array(["a", "b", "c", "d", "e"], dtype=object)
    score = np.array([2.0, 1.0, 2.0, 0.5, 0.5])
    assert rank_long(pos, names, score, 3).tolist() == ["b;a;c", "", "d;e"]


# ----------------------------------------------------------------------------- schema interleaving
def test_interleave_hand_worked():
    """Problem 0: RS scores a=3, b=1, c=2 (RS order b, c, a); S scores d=5, e=4 (S order e, d).
    RS holds the best score (1 < 4), so RS leads each turn: b, e, c, d, then a (S has run out).
    Problem 1: S h=0.5, f=1 and RS g=9: S leads, h, g, f. Problem 2 lists one schema: plain order."""
    pos = np.array([0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2])
    schema = np.array(["RS", "RS", "RS", "S", "S", "S", "RS", "S", "RS2", "RS2", "RS2"], dtype=object)
    score = np.array([3.0, 1.0, 2.0, 5.0, 4.0, 1.0, 9.0, 0.5, 2.0, 1.0, 3.0])
    names = np.array(list("abcdefghijk"), dtype=object)
    key = interleave_key(pos, schema, score)
    # rank in schema * 2 (schemas in the problem) + turn (0 = the leading schema)
    assert key.tolist() == [4, 0, 2, 3, 1, 2, 1, 0, 2, 0, 4]
    assert rank_long(pos, names, key, 3).tolist() == ["b;e;c;d;a", "h;g;f", "j;i;k"]
    assert rank_long(pos, names, score, 3).tolist() == ["b;c;a;e;d", "h;f;g", "j;i;k"]  # plain, for contrast


def test_interleave_ties_follow_row_order():
    """Equal best scores: the schema whose best row comes first in the rows leads (as in the plain ranking)."""
    pos = np.zeros(4, dtype=int)
    schema = np.array(["S", "RS", "RS", "S"], dtype=object)
    score = np.array([1.0, 1.0, 2.0, 1.0])
    names = np.array(["S_a", "RS_b", "RS_c", "S_d"], dtype=object)
    assert rank_long(pos, names, interleave_key(pos, schema, score), 1).tolist() == ["S_a;RS_b;S_d;RS_c"]
    assert interleave_key(pos[:0], schema[:0], score[:0]).tolist() == []


@st.composite
def _long_rows(draw):
    n_prob = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(0, 12), min_size=n_prob, max_size=n_prob))
    pos = np.repeat(np.arange(n_prob), sizes)
    n = len(pos)
    schema = np.array(draw(st.lists(st.sampled_from(["RS", "S", "RS2"]), min_size=n, max_size=n)), dtype=object)
    score = np.array(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), dtype=float)  # many ties
    return pos, schema, score, n_prob


@settings(max_examples=200, deadline=None)
@given(_long_rows())
def test_interleave_properties(rows):
    pos, schema, score, n_prob = rows
    names = np.array([f"{s}_{i:03d}" for i, s in enumerate(schema)], dtype=object)
    inter = [r.split(";") if r else [] for r in rank_long(pos, names, interleave_key(pos, schema, score), n_prob)]
    plain = [r.split(";") if r else [] for r in rank_long(pos, names, score, n_prob)]
    for a, b in zip(inter, plain):
        assert sorted(a) == sorted(b)                      # a permutation of the candidates
        if b:
            assert a[0] == b[0]                            # the predicted best stays first
        sch = lambda k: k.split("_")[0]  # noqa: E731
        for s in set(map(sch, b)):                         # each schema keeps its own order
            assert [k for k in a if sch(k) == s] == [k for k in b if sch(k) == s]
        total = {s: sum(sch(k) == s for k in b) for s in set(map(sch, b))}
        for n in range(1, len(a) + 1):                     # balanced while no schema has run out
            got = {s: sum(sch(k) == s for k in a[:n]) for s in total}
            live = [got[s] for s in total if got[s] < total[s]]
            if live:
                assert max(got.values()) - min(live) <= 1
        if len(total) == 1:
            assert a == b                                  # one schema: the plain ranking


def test_cross_schema_option(v100, fitted, small_ids):
    """Both orders hold the same candidates; interleave deals the layers' two schemas out in turn."""
    with pytest.raises(KbenchInputError):
        get_baseline("hybrid-rf", cross_schema="mixed")
    with pytest.raises(KbenchInputError):
        get_baseline("analytical", cross_schema="mixed")
    test = small_ids[2]
    m = fitted["hybrid-rf"]
    assert m.cfg["cross_schema"] == "interleave"
    problems, rows, pred = m.predict_rows(v100, test)
    inter = m.predict(v100, test)["ranking"].tolist()
    plain = rank_long(rows["pos"].to_numpy(), rows["kernel"].to_numpy(), tile_order(rows, pred, "plain"),
                      len(problems)).tolist()
    assert inter == rank_long(rows["pos"].to_numpy(), rows["kernel"].to_numpy(),
                              tile_order(rows, pred, "interleave"), len(problems)).tolist()
    two = 0
    for a, b in zip(inter, plain):
        a, b = a.split(";"), b.split(";")
        assert sorted(a) == sorted(b) and a[0] == b[0]
        head = [k.split("_")[0] for k in a[:30]]
        if len(set(k.split("_")[0] for k in a)) == 2:
            two += 1
            assert abs(head.count("RS") - head.count("S")) <= 2  # 15/15 unless a schema lists under 15
        else:
            assert a == b
    assert two == 12
    an_plain = get_baseline("analytical", cross_schema="plain").fit(v100, [], []).predict(v100, test)
    an = get_baseline("analytical").fit(v100, [], []).predict(v100, test)
    assert an["ranking"].str.split(";").map(sorted).equals(an_plain["ranking"].str.split(";").map(sorted))


# ----------------------------------------------------------------------------- kernel selection
@pytest.fixture(scope="module")
def mi100_small():
    ds = kbench.load("mi100")
    sp = ds.split("random")
    rng = np.random.default_rng(0)
    ids = {p: rng.choice(np.sort(sp[p]), n, replace=False) for p, n in (("train", 600), ("valid", 150),
                                                                         ("test", 150))}
    return ds.subset(np.concatenate(list(ids.values()))), ids


def test_kernel_selection_mode(mi100_small, tmp_path):
    ds, ids = mi100_small
    m = get_baseline("hybrid-rf", **SMALL, max_train_problems=300).fit(ds, ids["train"], ids["valid"], seed=0)
    assert m.state["mode"] == "kernel" and m.state["n_train_problems"] == 300
    from kbench_baselines.features import problem_features
    generic = list(problem_features(ds.problems.head(1)).columns)
    assert m.state["columns"][:len(generic)] == generic
    assert m.state["columns"][len(generic):] == [f"kernel={k}" for k in m.state["space"]["names"]]
    assert {s["target"] for s in m.fit_info["selection"]} == {"log_time_per_flop", "log_ratio"}
    preds = m.predict(ds, ids["test"])
    assert (preds["ranking"].str.len() > 0).all()
    rec = kbench.Evaluator(ds, "random", "test", reference=None)
    # the subset keeps only these test problems of the split
    assert rec(preds).counts.scored == len(ids["test"])
    m.save(tmp_path / "k")
    assert Baseline.load(tmp_path / "k").predict(ds, ids["test"]).equals(preds)


def test_engine_set_uses_engine_and_knob_columns(tmp_path):
    """On the NVIDIA engine set the kernel is encoded as engine one-hot + knob values, not a one-hot."""
    from kbench_baselines.features import kernel_features, problem_features

    ds = kbench.load("h100")
    sp = ds.split("random")
    rng = np.random.default_rng(0)
    ids = {p: rng.choice(np.sort(sp[p]), n, replace=False) for p, n in (("train", 200), ("valid", 40),
                                                                         ("test", 40))}
    m = get_baseline("hybrid-rf", **SMALL).fit(ds, ids["train"], ids["valid"], seed=0)
    names = m.state["space"]["names"]
    generic = list(problem_features(ds.problems.head(1)).columns)
    assert m.state["kernel_encoding"] == "engine_knobs"
    assert m.state["columns"] == generic + list(kernel_features(names, "engine_knobs").columns)
    assert all(c.startswith(("engine=eng", "knob_k")) for c in m.state["columns"][len(generic):])
    preds = m.predict(ds, ids["test"])
    assert (preds["ranking"].str.len() > 0).all()
    m.save(tmp_path / "h")
    assert Baseline.load(tmp_path / "h").predict(ds, ids["test"]).equals(preds)
    with pytest.raises(KbenchInputError, match="kernel_encoding"):
        get_baseline("hybrid-rf", kernel_encoding="hashing")


def test_problem_without_listed_configurations_gets_its_schemas(v100, fitted):
    """A new stride-1 layer (no runtimes) is ranked over every RS and S configuration of the vocabulary."""
    sub = v100.subset([RES6])
    sub.tables["runtimes"] = sub.runtimes.iloc[:0]
    ranking = fitted["ml-rf"].predict(sub, [RES6])["ranking"].iloc[0].split(";")
    schemas = v100.kernels.set_index("kernel")["schema"]
    assert len(ranking) == int(schemas.isin(["RS", "S"]).sum())
    assert set(schemas.loc[ranking]) == {"RS", "S"}

"""Tests of the seq2seq tuning model, its search, and MIOpen's shipped ConvAsm1x1U model.

Fast: the networks here are trained for one or two epochs on a few dozen
synthetic problems (targets from MIOpen's static heuristic, which are valid
tuples), and the search properties use table scorers with random logits.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbench.core.errors import KbenchInputError
from kbench.sources.tuning_grammar import ASM1X1U_PARAMS, CONV_ASM_1X1U
from kbench_baselines.seq2seq import (
    CandidateSpace,
    GrammarSpace,
    NetScorer,
    Seq2Seq,
    TableScorer,
    beam_search,
    descriptor,
    greedy_decode,
    score_sequences,
    solver_targets,
)

RAW = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "miopen"
SPACE = GrammarSpace("ConvAsm1x1U")
SIZES = [len(v) for v in SPACE.values]


def _problems(rows) -> pd.DataFrame:
    """Canonical 1x1 problem rows from (direction, dtype, n, c, k, h, w) tuples (stride 1, pad 0)."""
    df = pd.DataFrame(rows, columns=["direction", "dtype", "n", "c", "k", "h", "w"])
    out = pd.DataFrame({
        "problem_id": [f"p{i}" for i in range(len(df))], "direction": df["direction"], "dtype": df["dtype"],
        "n": df["n"], "c": df["c"], "k": df["k"], "x_h": df["h"], "x_w": df["w"], "y_h": df["h"], "y_w": df["w"],
        "fil_h": 1, "fil_w": 1, "stride_h": 1, "stride_w": 1, "pad_h": 0, "pad_w": 0,
    })
    return out


problem_rows = st.tuples(st.sampled_from(["F", "B"]), st.sampled_from(["FP32", "FP16"]),
                         st.sampled_from([1, 2, 8, 16, 64, 100, 128, 256]),
                         st.sampled_from([4, 8, 12, 16, 24, 64, 96, 256, 1024]),
                         st.sampled_from([4, 8, 16, 20, 32, 64, 128, 512]),
                         st.sampled_from([1, 2, 7, 14, 28, 56]), st.sampled_from([1, 2, 7, 14, 28, 56]))


def _int_logits(draw_ints, n):
    """Per-position (n, V_t) integer-valued scores (exact float sums: no rounding ties)."""
    return [np.asarray(draw_ints[t], dtype=np.float64).reshape(n, SIZES[t]) for t in range(len(SIZES))]


@st.composite
def search_cases(draw, max_rows=4):
    rows = draw(st.lists(problem_rows, min_size=1, max_size=max_rows))
    n = len(rows)
    ints = [draw(st.lists(st.integers(-4, 4), min_size=n * v, max_size=n * v)) for v in SIZES]
    return _problems(rows), _int_logits(ints, n)


# ------------------------------------------------------------------------------------ search
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(search_cases(), st.sampled_from([1, 2, 5, 10]))
def test_constrained_beam_never_returns_an_invalid_tuple(case, width):
    problems, logits = case
    ctx = SPACE.context(problems)
    rows = np.arange(len(problems))
    res = beam_search(TableScorer(logits), SPACE, ctx, rows, width=width, constrained=True)
    if res.found.any():
        ok = SPACE.is_valid(ctx, rows[res.found], SPACE.decode(res.best[res.found]))
        assert ok.all()
    # every returned beam is valid too
    n, w, _ = res.beams.shape
    alive = (res.beams >= 0).all(axis=2)
    flat = res.beams.reshape(n * w, -1)[alive.ravel()]
    assert SPACE.is_valid(ctx, np.repeat(rows, w)[alive.ravel()], SPACE.decode(flat)).all()
    # nothing found only where the problem has no valid tuple at all
    for i in np.flatnonzero(~res.found):
        assert len(SPACE.enumerate_valid(ctx, i)) == 0
    # the reported score is the tuple's score
    if res.found.any():
        s = score_sequences(TableScorer(logits), rows[res.found], res.best[res.found])
        np.testing.assert_allclose(s, res.score[res.found])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(search_cases(), st.booleans())
def test_greedy_equals_beam_width_1(case, constrained):
    problems, logits = case
    ctx = SPACE.context(problems)
    rows = np.arange(len(problems))
    g = greedy_decode(TableScorer(logits), SPACE, ctx, rows, constrained=constrained)
    b = beam_search(TableScorer(logits), SPACE, ctx, rows, width=1, constrained=constrained)
    np.testing.assert_array_equal(g.best, b.best)
    np.testing.assert_array_equal(g.found, b.found)


def test_unconstrained_search_is_plain_argmax_and_can_be_invalid():
    problems = _problems([("F", "FP32", 1, 4, 4, 1, 1)])  # tiny problem: most tuples invalid
    logits = [np.eye(1, v, v - 1) * 10.0 for v in SIZES]  # the largest value of every parameter
    ctx = SPACE.context(problems)
    res = beam_search(TableScorer(logits), SPACE, ctx, [0], width=10, constrained=False)
    assert (res.best[0] == np.array(SIZES) - 1).all()
    assert not SPACE.is_valid(ctx, [0], SPACE.decode(res.best))[0]
    con = beam_search(TableScorer(logits), SPACE, ctx, [0], width=10, constrained=True)
    assert con.found[0] and SPACE.is_valid(ctx, [0], SPACE.decode(con.best))[0]


def test_beam_finds_better_tuples_than_greedy_on_a_trap():
    # position 0: value 0 slightly preferred, but after it every continuation is poor
    space = CandidateSpace(["a", "b"], [["0", "1"], ["0", "1"]])
    cands = pd.DataFrame({"problem_id": ["p"] * 4, "a": ["0", "0", "1", "1"], "b": ["0", "1", "0", "1"]})
    ctx = space.context(pd.DataFrame({"problem_id": ["p"]}), cands)

    class Trap:
        def start(self, rows):
            return np.zeros(len(rows), dtype=np.int64)

        def step(self, state, prev, t):
            if t == 0:
                return np.tile([np.log(0.55), np.log(0.45)], (len(state), 1)), state
            first = np.asarray(prev)
            lp = np.where(first[:, None] == 0, np.log([0.5, 0.5]), np.log([0.99, 0.01]))
            return lp, state

        def take(self, state, idx):
            return state[idx]

    g = greedy_decode(Trap(), space, ctx, [0])
    b = beam_search(Trap(), space, ctx, [0], width=2)
    assert g.best[0].tolist() == [0, 0] and b.best[0].tolist() == [1, 0]
    assert b.score[0] > g.score[0]


def test_candidate_space_valid_next_matches_brute_force():
    rng = np.random.default_rng(0)
    labels = [["x", "y", "z"], ["1", "2"], ["4", "8", "16"]]
    space = CandidateSpace(["s", "t", "u"], labels)
    cand = pd.DataFrame([(f"p{r}", *[lv[i] for lv, i in zip(labels, rng.integers(0, [3, 2, 3]))])
                         for r in range(3) for _ in range(6)], columns=["problem_id", "s", "t", "u"])
    probs = pd.DataFrame({"problem_id": ["p0", "p1", "p2"]})
    ctx = space.context(probs, cand)
    codes = space.encode_labels(cand)
    row = cand["problem_id"].str[1:].astype(int).to_numpy()
    for L in range(3):
        prefixes = np.array(np.meshgrid(*[np.arange(3), np.arange(2), np.arange(3)][:L], indexing="ij")
                            ).reshape(L, -1).T if L else np.zeros((1, 0), np.int64)
        for r in range(3):
            got = space.valid_next(ctx, np.full(len(prefixes), r), prefixes)
            for i, pre in enumerate(prefixes):
                for v in range(len(labels[L])):
                    want = ((row == r) & (codes[:, :L] == pre).all(axis=1) & (codes[:, L] == v)).any()
                    assert got[i, v] == want


# ------------------------------------------------------------------------------------ network
def _toy_dataset(n=48, seed=0):
    from kbench_baselines.miopen_asm1x1u import static_heuristic

    rng = np.random.default_rng(seed)
    rows = [(rng.choice(["F", "B"]), rng.choice(["FP32", "FP16"]), int(rng.choice([16, 32, 64, 128])),
             int(rng.choice([64, 128, 256])), int(rng.choice([64, 128, 256])), int(rng.choice([7, 14, 28])),
             int(rng.choice([7, 14, 28]))) for _ in range(n)]
    problems = _problems(rows)
    vals = static_heuristic(problems)
    targets = pd.DataFrame(vals, columns=list(ASM1X1U_PARAMS))
    targets.insert(0, "solver", "ConvAsm1x1U")
    targets.insert(0, "problem_id", problems["problem_id"])
    return SimpleNamespace(name="toy", problems=problems, targets=targets)


SMALL = dict(conv_channels=8, enc_hidden=8, dec_hidden=16, attn_dim=8, token_dim=4, field_dim=4, out_emb=4,
             max_epochs=2, batch_size=16, beam_width=3)


@pytest.fixture(scope="module")
def toy():
    ds = _toy_dataset()
    ids = ds.problems["problem_id"].to_numpy()
    model = Seq2Seq(**SMALL).fit(ds, ids[:32], ids[32:40], seed=0)
    return ds, ids, model


def test_attention_weights_sum_to_one(toy):
    import torch

    ds, ids, model = toy
    tok, num = model._inputs(ds.problems)
    scorer = NetScorer(model.net, tok, num)
    state = scorer.start(np.arange(len(tok)))
    for t in range(3):
        logp, state = scorer.step(state, None if t == 0 else np.zeros(len(tok), np.int64), t)
        a = scorer.last_attention.numpy()
        assert a.shape == (len(tok), len(model.encoder.fields))
        assert (a >= 0).all()
        np.testing.assert_allclose(a.sum(axis=1), 1.0, atol=1e-6)
        np.testing.assert_allclose(np.exp(logp).sum(axis=1), 1.0, atol=1e-5)
    net = model.net
    w = net.attention(torch.randn(5, 7, 8), torch.randn(5, 16)).detach().numpy()
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-6)


def test_network_greedy_equals_beam_width_1(toy):
    ds, ids, model = toy
    g = model.predict(ds, ids[40:], decode="greedy")
    b = model.predict(ds, ids[40:], decode="beam", width=1)
    pd.testing.assert_frame_equal(g, b)


def test_network_constrained_predictions_are_valid(toy):
    ds, ids, model = toy
    pred = model.predict(ds, ids)
    vals = {p: pred[p].to_numpy(np.int64) for p in ASM1X1U_PARAMS}
    assert CONV_ASM_1X1U.is_valid(vals, ds.problems).all()


def test_save_load_round_trip(toy, tmp_path):
    ds, ids, model = toy
    model.save(tmp_path / "m")
    assert not list((tmp_path / "m").glob("*.pkl"))
    back = Seq2Seq.load(tmp_path / "m")
    for k, v in model.net.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), back.net.state_dict()[k].numpy())
    pd.testing.assert_frame_equal(model.predict(ds, ids), back.predict(ds, ids))
    assert back.params == model.params and back.fit_info["best_epoch"] == model.fit_info["best_epoch"]


def test_fixed_seed_reproduces(toy):
    ds, ids, model = toy
    again = Seq2Seq(**SMALL).fit(ds, ids[:32], ids[32:40], seed=0)
    for k, v in model.net.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), again.net.state_dict()[k].numpy())
    other = Seq2Seq(**SMALL).fit(ds, ids[:32], ids[32:40], seed=1)
    assert any((v != other.net.state_dict()[k]).any() for k, v in model.net.state_dict().items())


def test_an_interrupted_fit_resumes_to_the_uninterrupted_model(tmp_path):
    """Stopped during its third epoch of four and run again on its training-state file, a fit ends with
    the same weights, history and chosen epoch as a fit that never stopped (dropout, shuffling and
    Adam's moments included); a state of another seed is refused, not silently used."""
    ds = _toy_dataset()
    ids = ds.problems["problem_id"].to_numpy()
    params = {**SMALL, "max_epochs": 4, "patience": 10, "dropout": 0.3}
    straight = Seq2Seq(**params).fit(ds, ids[:32], ids[32:40], seed=0)

    class PowerCut(Exception):
        pass

    def cut_in_epoch_2(rec):  # called before the epoch's state is written: epochs 0 and 1 are saved
        if rec["epoch"] == 2:
            raise PowerCut

    state = tmp_path / "seed-0" / "fit-state.safetensors"
    with pytest.raises(PowerCut):
        Seq2Seq(**params).fit(ds, ids[:32], ids[32:40], seed=0, log=cut_in_epoch_2, checkpoint=state)
    assert state.exists() and not list(state.parent.glob("*.part"))
    resumed = Seq2Seq(**params).fit(ds, ids[:32], ids[32:40], seed=0, checkpoint=state)
    assert resumed.fit_info["resumed_at_epochs"] == [2] and straight.fit_info["resumed_at_epochs"] == []
    for k, v in straight.net.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), resumed.net.state_dict()[k].numpy())
    drop = ("elapsed_s",)
    assert ([{k: v for k, v in r.items() if k not in drop} for r in straight.fit_info["history"]]
            == [{k: v for k, v in r.items() if k not in drop} for r in resumed.fit_info["history"]])
    assert resumed.fit_info["best_epoch"] == straight.fit_info["best_epoch"]
    pd.testing.assert_frame_equal(straight.predict(ds, ids), resumed.predict(ds, ids))
    # the state now holds the whole fit: running again trains no epoch and gives the same model
    again = Seq2Seq(**params).fit(ds, ids[:32], ids[32:40], seed=0, checkpoint=state)
    assert again.fit_info["resumed_at_epochs"] == [2, 4] and len(again.fit_info["history"]) == 4
    pd.testing.assert_frame_equal(straight.predict(ds, ids), again.predict(ds, ids))
    with pytest.raises(KbenchInputError, match="another configuration, seed or training set"):
        Seq2Seq(**params).fit(ds, ids[:32], ids[32:40], seed=1, checkpoint=state)


def test_no_conv_ablation_builds_without_conv_layers():
    ds = _toy_dataset(16)
    ids = ds.problems["problem_id"].to_numpy()
    m = Seq2Seq(**{**SMALL, "use_conv": False, "max_epochs": 1}).fit(ds, ids, seed=0)
    assert len(m.net.conv) == 0
    assert len(m.predict(ds, ids)) == len(ids)


def test_bad_input_is_a_kbench_input_error(toy):
    ds, ids, model = toy
    with pytest.raises(KbenchInputError):
        Seq2Seq(hidden=3)
    with pytest.raises(KbenchInputError):
        Seq2Seq(decode="sample")
    with pytest.raises(KbenchInputError):
        model.predict(ds, ["no-such-problem"])
    with pytest.raises(KbenchInputError):
        beam_search(TableScorer([np.zeros((1, v)) for v in SIZES]), SPACE, SPACE.context(ds.problems[:1]), [0],
                    width=0)
    with pytest.raises(KbenchInputError):
        descriptor(ds.problems.drop(columns=["n"]))
    with pytest.raises(KbenchInputError):
        solver_targets(SimpleNamespace(name="x", targets=None), "ConvAsm1x1U")
    with pytest.raises(KbenchInputError):
        Seq2Seq.load(Path("/nonexistent/model"))


# ------------------------------------------------------------------------------------ MIOpen's model
def _miopen_net():
    from kbench_baselines.miopen_asm1x1u import MiopenTuningNet

    if not all((RAW / f).exists() for f in ("gfx908_ConvAsm1x1U_encoder.ktn.model",
                                            "gfx908_ConvAsm1x1U_decoder.ktn.model",
                                            "gfx908_ConvAsm1x1U_metadata.ktn.model")):
        pytest.skip(f"MIOpen ConvAsm1x1U model files not in {RAW}")
    return MiopenTuningNet(RAW)


def test_miopen_model_matches_its_test_vectors():
    net = _miopen_net()
    errs = net.check_tests()
    assert errs["encoder"] and errs["decoder"]
    assert max(errs["encoder"] + errs["decoder"]) <= 1e-4  # frugally-deep's verify_epsilon
    assert net.n_tokens == 38 and (net.token_value[[0, 37]] == -1).all()


def test_miopen_features_and_decoding():
    from kbench_baselines.miopen_asm1x1u import MiopenAsm1x1U, static_heuristic, transform_features

    net = _miopen_net()
    p = _problems([("F", "FP32", 64, 256, 128, 14, 14), ("B", "FP16", 32, 64, 512, 28, 28)])
    p.loc[1, ["y_h", "y_w"]] = [27, 27]  # backward: MIOpen's "in" height is dy's
    f = transform_features(p)
    off = f.copy()
    for i in range(8):
        off[:, i, i] = 0
    assert not off.any()
    assert f[0].diagonal().tolist() == [2, 1, 0, 256, 128, 14, 14, 64]
    assert f[1].diagonal().tolist() == [1, 0, 1, 64, 512, 27, 27, 32]
    vals, ok = net.decode(p)
    for i in np.flatnonzero(ok):  # the model's tuple is valid whenever it succeeds
        assert CONV_ASM_1X1U.is_valid({q: vals[[i], j] for j, q in enumerate(ASM1X1U_PARAMS)}, p.iloc[[i]])[0]
    st_vals = static_heuristic(p)
    assert CONV_ASM_1X1U.is_valid({q: st_vals[:, j] for j, q in enumerate(ASM1X1U_PARAMS)}, p).all()
    m = MiopenAsm1x1U(model_dir=str(RAW))
    out, source = m.predict_problems(p)
    assert out.shape == (2, 8) and set(source) <= {0, 1, 2}


# ------------------------------------------------------------------------------------ sequence kernels
def _toy_tiles(seed=0):
    rng = np.random.default_rng(seed)
    kernels = pd.DataFrame([(f"{s}_{k}_{h}", s, k, h) for s in ("S", "RS") for k in (1, 2, 4) for h in (1, 3)],
                           columns=["kernel", "schema", "tile_k", "tile_h"])
    problems = _problems([("F", "FP32", int(rng.choice([1, 8, 32])), int(rng.choice([16, 64])),
                           int(rng.choice([16, 64])), int(rng.choice([7, 14])), int(rng.choice([7, 14])))
                          for _ in range(24)])
    rt = []
    for pid in problems["problem_id"]:
        for kn in rng.choice(kernels["kernel"], size=int(rng.integers(2, 8)), replace=False):
            rt.append((pid, kn, float(rng.uniform(1, 10))))
    runtimes = pd.DataFrame(rt, columns=["problem_id", "kernel", "time_ms"])
    return SimpleNamespace(name="toy-tiles", info={"task": "tile-selection"}, problems=problems,
                           runtimes=runtimes, kernels=kernels)


def test_seq2seq_tiles_ranks_only_measured_candidates(tmp_path):
    from kbench_baselines.seq2seq import Seq2SeqTiles

    ds = _toy_tiles()
    ids = ds.problems["problem_id"].to_numpy()
    m = Seq2SeqTiles(positions=["schema", "tile_k", "tile_h"], **{**SMALL, "beam_width": 4})
    assert m.supports(ds)
    m.fit(ds, ids[:16], ids[16:20], seed=0)
    assert "valid_geomean_slowdown" in m.fit_info["history"][0]
    pred = m.predict(ds, ids)
    measured = ds.runtimes.groupby("problem_id")["kernel"].agg(set)
    for pid, ranking in zip(pred["problem_id"], pred["ranking"]):
        names = ranking.split(";")
        assert names and set(names) <= measured[pid]
        assert len(names) == min(4, len(measured[pid]))
    m.save(tmp_path / "t")
    back = Seq2SeqTiles.load(tmp_path / "t")
    pd.testing.assert_frame_equal(pred, back.predict(ds, ids))


def test_engine_sequences_hand_worked():
    from kbench_baselines.seq2seq import engine_sequences

    t = engine_sequences(["eng0", "eng10_k2=23_k13=0", "eng7_k13=-1", "not-an-engine"])
    assert list(t.columns) == ["kernel", "engine", "k2", "k13"]
    assert t.values.tolist() == [["eng0", "eng0", "-", "-"], ["eng10_k2=23_k13=0", "eng10", "23", "0"],
                                 ["eng7_k13=-1", "eng7", "-", "-1"]]
    fixed = engine_sequences(["eng10_k2=23_k13=0"], knobs=[13, 5])  # a fitted model's positions
    assert fixed.values.tolist() == [["eng10_k2=23_k13=0", "eng10", "0", "-"]]


def test_seq2seq_engines_ranks_only_measured_configurations(tmp_path):
    from kbench_baselines.seq2seq import Seq2SeqEngines

    ds = _toy_tiles(1)
    names = {k: f"eng{i % 3}_k2={i}_k5={i % 2}" for i, k in enumerate(ds.kernels["kernel"])}
    ds.kernels = pd.DataFrame({"kernel": list(names.values())})
    ds.runtimes = ds.runtimes.assign(kernel=ds.runtimes["kernel"].map(names))
    ds.info = {"task": "kernel-selection", "library": "cuDNN 9.19.0"}
    ids = ds.problems["problem_id"].to_numpy()
    m = Seq2SeqEngines(**{**SMALL, "beam_width": 4})
    assert m.supports(ds)
    m.fit(ds, ids[:16], ids[16:20], seed=0)
    assert m.positions == ("engine", "k2", "k5")
    pred = m.predict(ds, ids)
    measured = ds.runtimes.groupby("problem_id")["kernel"].agg(set)
    for pid, ranking in zip(pred["problem_id"], pred["ranking"]):
        assert set(ranking.split(";")) <= measured[pid]
    m.save(tmp_path / "e")
    pd.testing.assert_frame_equal(pred, Seq2SeqEngines.load(tmp_path / "e").predict(ds, ids))
    # with the runner's training-state path, a second fit on the finished state trains nothing and
    # keeps the epoch the valid selector chose
    first, second = Seq2SeqEngines(**{**SMALL, "beam_width": 4}), Seq2SeqEngines(**{**SMALL, "beam_width": 4})
    first.fit_checkpoint = second.fit_checkpoint = tmp_path / "seed-0" / "fit-state.safetensors"
    first.fit(ds, ids[:16], ids[16:20], seed=0)
    second.fit(ds, ids[:16], ids[16:20], seed=0)
    assert second.fit_info["resumed_at_epochs"] == [SMALL["max_epochs"]]
    assert second.fit_info["best_epoch"] == first.fit_info["best_epoch"] == m.fit_info["best_epoch"]
    pd.testing.assert_frame_equal(pred, second.predict(ds, ids))


# ------------------------------------------------------------------------------------ comparison baselines
@pytest.mark.parametrize("name", ["xgboost", "nearest-neighbour"])
def test_tuning_baselines_fit_predict_save_load(name, tmp_path):
    from kbench_baselines.tuning_baselines import TuningNearestNeighbour, TuningXGBoost

    ds = _toy_dataset(40, seed=3)
    # vary the targets so that every parameter has several classes
    rng = np.random.default_rng(0)
    for p, legal in zip(ASM1X1U_PARAMS, SPACE.values):
        ds.targets[p] = rng.choice(legal[:3], size=len(ds.targets))
    ids = ds.problems["problem_id"].to_numpy()
    cls = TuningXGBoost if name == "xgboost" else TuningNearestNeighbour
    kw = {"n_estimators": 5} if name == "xgboost" else {}
    m = cls(**kw).fit(ds, ids[:30], ids[30:], seed=0)
    pred = m.predict(ds, ids)
    assert list(pred.columns) == ["problem_id", *ASM1X1U_PARAMS] and len(pred) == len(ids)
    m.save(tmp_path / "m")
    back = cls.load(tmp_path / "m")
    pd.testing.assert_frame_equal(pred, back.predict(ds, ids))
    con = m.predict(ds, ids, constrained=True)
    ok = CONV_ASM_1X1U.is_valid({p: con[p].to_numpy(np.int64) for p in ASM1X1U_PARAMS}, ds.problems)
    if name == "xgboost":
        assert ok.all()  # the constrained beam always finds a valid tuple for these problems
    with pytest.raises(KbenchInputError):
        cls(no_such_option=1)

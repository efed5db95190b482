"""ConvAsm1x1U grammar: legal values, hand-worked constraint checks, prefix consistency,
and every recorded optimum in the shipped perf-dbs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tuning_toy import problem

from kbench.sources.tuning_grammar import ASM1X1U_PARAMS, get_grammar
from kbench.sources.tuning_grammar import CONV_ASM_1X1U as G

P = ASM1X1U_PARAMS


def valid_lengths(tup, prob):
    """Validity at every prefix length 0..8 of one tuple."""
    vals = {p: np.array([v]) for p, v in zip(P, tup)}
    return [bool(G.is_valid(vals, prob, L)[0]) for L in range(9)]


# StaticHeuristic's first choice for FP32 (e = 1): read_size 4, k_mult 16,
# chunks_per_wave = read_size * e = 4, chunk_size 16, n_mult 2, c_mult e = 1, 1, 1.
DEFAULT = (4, 16, 4, 16, 2, 1, 1, 1)


def test_legal_values_follow_definitions():
    lv = G.legal_values
    assert lv["read_size"] == tuple(range(1, 5))
    assert lv["k_mult"] == tuple(v for v in range(1, 33) if v == 1 or v % 4 == 0)
    assert lv["chunks_per_wave"] == tuple(range(1, 17))
    assert lv["chunk_size"] == tuple(2**i for i in range(7))
    assert lv["n_mult"] == tuple(range(1, 9))
    assert lv["c_mult"] == tuple(2**i for i in range(6))
    assert lv["waves_c_in_group"] == tuple(range(1, 9))
    assert lv["waves_k_in_group"] == (1, 2, 4, 8)
    assert G.params == P and get_grammar("ConvAsm1x1U") is G


def test_default_tuple_is_valid_hand_worked():
    # img_hw = 196, e = 1: total_chunks = ceil(196/16) = 13 >= 4; n_per_gpr = 64/16 = 4,
    # total_n_blocks = ceil(16/4) = 4 >= 2; in_gprs = 4*2*1 = 8, acc_gprs = 4*2*16 = 128,
    # vgprs = 4 + 16 + 128 + 0 + 1 = 149 < 256; sgprs = 25 + 2*16*1 = 57 < 102;
    # 16*1 <= 64; 1*1 <= 16; (256 // 149) * 4 = 4 >= 1.
    assert valid_lengths(DEFAULT, problem()) == [True] * 9


@pytest.mark.parametrize("tup, prob, first_invalid", [
    # illegal value: read_size 5
    ((5, 16, 4, 16, 2, 1, 1, 1), problem(), 1),
    # FP16 (e = 2): k_mult 1 is not a multiple of e
    ((1, 1, 2, 16, 1, 2, 1, 1), problem(dtype="FP16"), 2),
    # backward data: out_channels (= C = 20) % k_mult 8 != 0
    ((1, 8, 1, 16, 1, 1, 1, 1), problem(direction="B", c=20, k=64), 2),
    # read_size * e = 4 > chunks_per_wave 3
    ((4, 16, 3, 16, 2, 1, 1, 1), problem(), 3),
    # FP16: chunks_per_wave 3 is odd
    ((1, 4, 3, 16, 1, 2, 1, 1), problem(dtype="FP16"), 3),
    # total_chunks = ceil(196/64) = 4 < chunks_per_wave 5
    ((1, 16, 5, 64, 1, 1, 1, 1), problem(), 4),
    # batch 1, chunk 16: n_per_gpr 4, total_n_blocks = 1 < n_mult 2
    ((1, 16, 4, 16, 2, 1, 1, 1), problem(n=1), 5),
    # vgprs = 4 + 2*32 + 8*4*8 + 0 + 1 = 325 >= 256
    ((1, 8, 8, 16, 4, 1, 1, 1), problem(), 6),
    # sgprs = 25 + 2*32*2 = 153 >= 102
    ((1, 32, 1, 16, 1, 2, 1, 1), problem(), 6),
    # FP16: c_mult 1 not a multiple of e = 2
    ((1, 4, 2, 16, 1, 1, 1, 1), problem(dtype="FP16"), 6),
    # waves_c_in_group 5 > in_channels 4
    ((1, 4, 1, 16, 1, 1, 5, 1), problem(c=4), 7),
    # c_per_wave = ceil(64/3) = 22, not a multiple of c_mult 4
    ((1, 4, 1, 16, 1, 4, 3, 1), problem(), 7),
    # k_mult 16 * waves_k 8 = 128 > out_channels 64
    ((4, 16, 4, 16, 2, 1, 1, 8), problem(), 8),
    # waves_c 4 * waves_k 8 = 32 > 16 (k_mult 4 * 8 = 32 <= 64)
    ((1, 4, 1, 16, 1, 1, 4, 8), problem(), 8),
    # vgprs 149 -> (256 // 149) * 4 = 4 < waves 2 * 4 = 8 (16 * 4 = 64 <= 64)
    ((4, 16, 4, 16, 2, 1, 2, 4), problem(), 8),
])
def test_constraint_hand_worked(tup, prob, first_invalid):
    lengths = valid_lengths(tup, prob)
    assert lengths[:first_invalid] == [True] * first_invalid
    assert lengths[first_invalid:] == [False] * (9 - first_invalid)


def test_last_wave_may_be_negative_like_miopen():
    # C = 12, waves_c 8: c_per_wave = 2, c_per_last_wave = 12 - 2*7 = -2. MIOpen only
    # checks divisibility by c_mult: c_mult 2 passes, c_mult 4 fails (2 % 4 != 0).
    prob = problem(c=12, k=64)
    assert valid_lengths((1, 4, 1, 16, 1, 2, 8, 1), prob)[7]
    assert not valid_lengths((1, 4, 1, 16, 1, 4, 8, 1), prob)[7]


def test_backward_data_uses_dx_image_size():
    # For B, img_hw is the "out" (= dx) image. dx 4x4 -> 16 pixels, dy 2x2 (stride 2):
    # chunk_size 1 gives total_chunks 16 (x) rather than 4 (y), so chunks_per_wave 8 fits.
    prob = problem(direction="B", x=4, y=2)
    assert valid_lengths((1, 4, 8, 1, 1, 1, 1, 1), prob)[4]
    prob_f = problem(direction="F", x=4, y=2)  # forward: the y image, 4 chunks
    assert not valid_lengths((1, 4, 8, 1, 1, 1, 1, 1), prob_f)[4]


@st.composite
def tuple_and_problem(draw):
    tup = tuple(draw(st.sampled_from(G.legal_values[p] + (0, 3, 64))) for p in P)
    prob = problem(direction=draw(st.sampled_from(["F", "B"])),
                   dtype=draw(st.sampled_from(["FP32", "FP16"])),
                   n=draw(st.integers(1, 64)), c=draw(st.integers(1, 512)),
                   k=draw(st.integers(1, 512)), x=draw(st.integers(1, 64)),
                   y=draw(st.integers(1, 64)))
    return tup, prob


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(tuple_and_problem())
def test_prefix_validity_is_monotone(tp):
    """Valid at length L implies valid at every shorter length (so a full valid
    tuple has every prefix valid)."""
    lengths = valid_lengths(*tp)
    for L in range(1, 9):
        if lengths[L]:
            assert all(lengths[:L])


def _valid_sample(prob, n=60000, seed=0):
    """Many random legal tuples for one problem, and which of them are fully valid."""
    rng = np.random.default_rng(seed)
    vals = {p: rng.choice(np.array(G.legal_values[p]), n) for p in P}
    return vals, G.is_valid(vals, prob.iloc[np.zeros(n, dtype=int)].reset_index(drop=True))


@pytest.mark.parametrize("prob", [problem(), problem(dtype="FP16", n=4, c=256, k=128, x=7, y=7),
                                  problem(direction="B", c=96, k=32, x=28, y=14)])
def test_full_valid_tuples_have_every_prefix_valid(prob):
    vals, full = _valid_sample(prob)
    assert full.sum() > 0  # the sample reaches valid tuples
    rep = prob.iloc[np.zeros(len(full), dtype=int)].reset_index(drop=True)
    for L in range(9):
        assert G.is_valid(vals, rep, L)[full].all()


def test_valid_next_values_agrees_with_prefix_predicate():
    prob = problem(dtype="FP16", n=8, c=128, k=64)
    inputs = G.problem_inputs(prob)
    rng = np.random.default_rng(1)
    for L in range(8):
        prefix = np.column_stack([rng.choice(np.array(G.legal_values[p]), 50) for p in P[:L]]) \
            if L else np.zeros((50, 0), dtype=np.int64)
        mask = G.valid_next_values(prefix, inputs)
        cand = G.legal_values[P[L]]
        assert mask.shape == (50, len(cand))
        for j, v in enumerate(cand):
            vals = {p: prefix[:, i] for i, p in enumerate(P[:L])}
            vals[P[L]] = np.full(50, v)
            exp = G.prefix_valid(vals, {c: inputs[c].to_numpy() for c in inputs}, L + 1)
            assert (mask[:, j] == exp).all()


def test_missing_values_are_invalid():
    vals = {p: np.array([v]) for p, v in zip(P, DEFAULT)}
    vals["n_mult"] = np.array([np.nan])
    assert not G.is_valid(vals, problem())[0]
    assert G.is_valid(vals, problem(), 4)[0]  # the prefix before n_mult is fine


def test_applicable_hand_worked():
    ok = problem()
    assert G.applicable(ok).iloc[0]
    bad = [problem().assign(fil_h=3, fil_w=3), problem().assign(pad_h=1, pad_w=1),
           problem(dtype="BF16"), problem().assign(direction="W"), problem().assign(groups=2),
           problem().assign(stride_h=2, stride_w=1), problem(dtype="FP16", c=63),
           problem(dtype="FP16", direction="B", c=6, k=64)]  # FP16 backward: C % 4 != 0
    for b in bad:
        assert not G.applicable(b).iloc[0], b.iloc[0].to_dict()


# --------------------------------------------------------------------------- real data
@pytest.mark.parametrize("name", ["gfx906_60", "gfx942130"])
def test_every_recorded_optimum_is_valid(real_tables, name):
    t, p = real_tables[name]["targets"], real_tables[name]["problems"]
    a = t[t["solver"] == "ConvAsm1x1U"].merge(p, on="problem_id", how="left")
    if a.empty:
        pytest.skip(f"{name}: the perf-db records no ConvAsm1x1U entries")
    assert a[list(P)].notna().all().all()
    vals = {q: a[q].to_numpy(np.int64) for q in P}
    assert G.applicable(a).all()
    for L in range(9):
        bad = ~G.is_valid(vals, a, L)
        assert not bad.any(), a.loc[bad, ["problem_id", "params"]].head().to_dict("records")

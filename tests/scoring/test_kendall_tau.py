"""Kendall tau-b per problem (``kbench.scoring.selection_metrics._kendall_tau_b``): cases worked on paper,
and, with hypothesis, the same figures as the pairwise count it replaced (bit for bit), as the definition
counted pair by pair and as scipy's, ties in time and unranked cells included."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbench.scoring.selection_metrics import _kendall_tau_b

UNRANKED = 1e12  # how the pairwise count below marks a cell the ranking does not rank


def pairwise_tau_b(x: np.ndarray, t: np.ndarray, size: np.ndarray, start: np.ndarray, block: int = 1 << 21):
    """The pairwise count kbench used before (padded (problem, cell, cell) blocks, problems grouped by
    size), kept here verbatim as the reference: ``x`` is the ranking position, UNRANKED where none."""
    tau = np.full(len(size), np.nan)
    ps = np.flatnonzero(size >= 2)
    if not len(ps):
        return tau
    size_class = np.ceil(np.log2(size[ps])).astype(np.int64)
    for c in np.unique(size_class):
        group = ps[size_class == c]
        width = int(size[group].max())
        per_block = max(1, block // (width * width))
        cols = np.arange(width)
        upper = np.triu(np.ones((width, width), dtype=bool), 1)
        for b in range(0, len(group), per_block):
            blk = group[b : b + per_block]
            valid = cols[None, :] < size[blk][:, None]
            at = np.where(valid, start[blk][:, None] + cols[None, :], 0)
            xs, ts = x[at], t[at]
            pair = valid[:, :, None] & valid[:, None, :] & upper[None]
            dx = np.sign(xs[:, :, None] - xs[:, None, :]).astype(np.int8)
            dt = np.sign(ts[:, :, None] - ts[:, None, :]).astype(np.int8)
            s = np.where(pair, dx * dt, 0).sum(axis=(1, 2), dtype=np.int64)
            tied_x = (pair & (dx == 0)).sum(axis=(1, 2), dtype=np.int64)
            tied_t = (pair & (dt == 0)).sum(axis=(1, 2), dtype=np.int64)
            n0 = size[blk] * (size[blk] - 1) // 2
            den = np.sqrt((n0 - tied_x).astype(np.float64) * (n0 - tied_t))
            with np.errstate(invalid="ignore", divide="ignore"):
                tau[blk] = np.where(den > 0, s / den, np.nan)
    return tau


def by_definition(ranks: list[int], times: list[float]) -> float:
    """tau-b of one problem, pair by pair: (concordant - discordant) / sqrt((n0 - ties in x)(n0 - ties in t))."""
    x = [UNRANKED if r < 0 else r for r in ranks]
    s = tx = tt = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dt = np.sign(x[i] - x[j]), np.sign(times[i] - times[j])
        s += int(dx * dt)
        tx += dx == 0
        tt += dt == 0
    n0 = len(x) * (len(x) - 1) // 2
    den = math.sqrt((n0 - tx) * (n0 - tt))
    return s / den if den > 0 else math.nan


def flat(problems: list[tuple[list[int], list[float]]]):
    """(rank, t, size) of problems given as (ranks, times) each; ranks -1: unranked."""
    size = np.array([len(r) for r, _ in problems], dtype=np.int64)
    rank = np.array([v for r, _ in problems for v in r], dtype=np.int64)
    t = np.array([v for _, ts in problems for v in ts], dtype=np.float64)
    return rank, t, size


def test_cases_worked_on_paper():
    problems = [
        ([0, 1, 2, 3], [1.0, 2.0, 3.0, 4.0]),  # the ranking is the time order: 6 concordant pairs -> 1
        ([3, 2, 1, 0], [1.0, 2.0, 3.0, 4.0]),  # reversed: 6 discordant -> -1
        # a, b tied in time and both unranked (tied last); c ranked first but slowest: a-c and b-c discordant,
        # a-b tied in both. S = -2, n0 = 3, one tie in rank, one in time: -2 / sqrt(2 * 2) = -1
        ([-1, -1, 0], [1.0, 1.0, 2.0]),
        ([0], [1.0]),  # one cell: undefined
        ([-1, -1, -1], [1.0, 2.0, 3.0]),  # nothing ranked: every pair tied in rank, undefined
        # times 1, 2, 2, 5 at ranks 2, 0, unranked, 1. Pairs (sign of d rank * d time): a-b -1, a-c +1, a-d -1,
        # b-c 0 (equal times), b-d +1, c-d -1 -> S = -1; n0 = 6, no tie in rank, one in time: -1 / sqrt(30)
        ([2, 0, -1, 1], [1.0, 2.0, 2.0, 5.0]),
        # the same cells listed in another order (times not ascending): the same figure
        ([1, -1, 2, 0], [5.0, 2.0, 1.0, 2.0]),
        ([], []),  # no cell
    ]
    tau = _kendall_tau_b(*flat(problems))
    want = [1.0, -1.0, -1.0, math.nan, math.nan, -1 / math.sqrt(30), -1 / math.sqrt(30), math.nan]
    np.testing.assert_allclose(tau, want, rtol=1e-15, equal_nan=True)
    assert all(math.isnan(w) or by_definition(*p) == pytest.approx(w) for p, w in zip(problems, want) if p[0])


def test_a_repeated_position_is_refused():
    with pytest.raises(ValueError, match="repeats"):
        _kendall_tau_b(*flat([([0, 0, 1], [1.0, 2.0, 3.0])]))


@st.composite
def problem_sets(draw):
    """Up to 7 problems of 0 to 45 listed cells, times from 4 values (many ties), some cells ranked at
    distinct positions below 40 (gaps allowed), the rest unranked; times ascending or shuffled."""
    problems = []
    for _ in range(draw(st.integers(0, 7))):
        n = draw(st.integers(0, 45))
        times = draw(st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=n, max_size=n))
        ranked = draw(st.integers(0, min(n, 40)))
        positions = draw(st.permutations(list(range(40))))[:ranked]
        ranks = positions + [-1] * (n - ranked)
        order = draw(st.permutations(list(range(n))))
        if draw(st.booleans()):
            order = sorted(range(n), key=lambda i: times[i])
        problems.append(([ranks[i] for i in order], [times[i] for i in order]))
    return problems


@settings(max_examples=200, deadline=None)
@given(problems=problem_sets())
def test_the_pairwise_count_the_definition_and_scipy(problems):
    from scipy.stats import kendalltau

    rank, t, size = flat(problems)
    tau = _kendall_tau_b(rank, t, size)
    # the pairwise count took each problem's cells in time order, as ranking_quality lists them
    start = np.cumsum(size) - size
    p = np.repeat(np.arange(len(size)), size)
    order = np.lexsort((t, p))
    x = np.where(rank >= 0, rank, UNRANKED).astype(np.float64)[order]
    for block in (1 << 21, 1):
        np.testing.assert_array_equal(tau, pairwise_tau_b(x, t[order], size, start, block))
    for i, (ranks, times) in enumerate(problems):
        want = by_definition(ranks, times) if len(ranks) > 1 else math.nan
        assert (math.isnan(tau[i]) and math.isnan(want)) or tau[i] == pytest.approx(want, rel=1e-12)
        if len(ranks) > 1 and not math.isnan(want):
            xs = [UNRANKED if r < 0 else r for r in ranks]
            assert tau[i] == pytest.approx(kendalltau(xs, times, variant="b").statistic, rel=1e-9)

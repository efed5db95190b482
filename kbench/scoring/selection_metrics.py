"""What a practitioner asks of a kernel selector, per problem and vectorised: ranking quality, and how
the choices compare with each reference heuristic.

**Ranking quality.** Over the problem's *listed* kernels only (every kernel that ran where the list is
complete; the listed ones where it is censored, as MIOpen's find-db keeps the 4 fastest), in the order
the ranking puts them, among its first ``DEEPEST`` (30) applicable candidates (the part scoring reads;
a listed kernel ranked deeper, or not ranked, counts as unranked: tied last):

* **Kendall tau-b** between the ranking position and the measured time (1: the ranking orders the
  listed kernels exactly as their times do; ties in time and among unranked kernels are tau-b ties).
  Undefined (left out of the mean, ``kendall_tau_n`` counts the rest) for a problem with fewer than
  two listed kernels or nothing but ties.
* **NDCG@10**: gain t_best / t of each listed kernel, discounted by log2(position + 1) over the first
  10 listed kernels of the ranking, divided by the same sum in time order (1: the 10 fastest, fastest
  first).

**Against each reference heuristic** (its choice per problem; only problems where it has one):

* its own **best-of-K** curve (the first K of its own order timed, the fastest kept), where the
  reference is an order (a heuristic), not a measured time;
* **share of headroom closed**: sum(log(t_ref / t_choice)) / sum(log(t_ref / t_best)), the ratio of
  the log geometric means (1: the oracle; 0: the reference itself; negative: slower than it). Left
  out (None) where the reference is never slower than the best (no headroom);
* **regressions and tails** of r = t_choice / t_ref: the shares improved (r < 1/1.05), unchanged and
  regressed (r > 1.05), the 95th percentile and the worst r, and the geometric mean of r over the
  regressed problems;
* **speed-up** over it, geomean of t_ref / t_choice, with its **tie test**: the 95% t-interval of the
  mean of log(t_ref / t_choice) over the problems (``speedup_ci_low`` .. ``speedup_ci_high``);
  ``tied`` is 1 when it holds 0 (no difference shown), else 0;
* the **sums** of the choice's and the reference's times (ms), and for a reference that times
  candidates on its first call (an autotuner) that first call's cost (``first_call_ms``), from which a
  board computes after how many calls per shape a selector and the autotuner break even.

**Autotune**, two references (:data:`REFERENCE_TEXT` says what each is, in the words the boards use):

* :data:`AUTOTUNE` (``autotune_top10``), the *idealised* autotune: the fastest of mode A's first
  :data:`AUTOTUNE_K` (10, PyTorch's default ``benchmark_limit``) plans of the candidate set, each timed
  exactly as the table times it, made from the dataset's mode-A order where it records one; its first
  call is the sum of those 10 table times (a lower bound of an autotuner's).
* :data:`PYTORCH_AUTOTUNE` (``pytorch_autotune``), the *real* one: the plan PyTorch's
  ``torch.backends.cudnn.benchmark = True`` settled on, recorded on the GPU by ``kbench collect autotune``
  (a heuristic of the dataset's ``heuristics`` table, on the problems it was recorded for only), with its
  measured first call's cost (the ``autotune`` table; docs/autotune.md says how PyTorch picks).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kbench.scoring.metrics import ScoredRows, ScoringTable, best_of_stats

NDCG_AT = 10
#: a change by more than this fraction counts as an improvement or a regression
CHANGE = 0.05
#: the two-sided 95% normal quantile of the speed-up's tie test
Z95 = 1.959963984540054
#: the idealised autotune: the fastest of mode A's first AUTOTUNE_K plans, each timed exactly
AUTOTUNE, AUTOTUNE_FROM, AUTOTUNE_K = "autotune_top10", "cudnn_mode_a", 10
#: PyTorch's real autotune (benchmark = True), recorded on the GPU: a heuristic of the dataset
PYTORCH_AUTOTUNE = "pytorch_autotune"
#: what each autotune reference is: every board and headline that quotes one names it with this
REFERENCE_TEXT = {
    AUTOTUNE: "idealised autotune: the best of mode A's first 10 plans, each timed exactly",
    PYTORCH_AUTOTUNE: "real autotune: the plan PyTorch's benchmark = True settled on, recorded on the dataset's machine",
}


@dataclass
class ReferenceRun:
    """One reference heuristic on a part: its choice's time per problem (NaN where it has none), and the
    best of its own first K where it is an order (None for a measured time such as a cuDNN algorithm's)."""

    name: str
    t: np.ndarray
    best_at: dict[int, np.ndarray] | None = None
    bound_at: dict[int, np.ndarray] | None = None
    #: per problem, the time a reference spends on its first call choosing (autotune_top10: its K table
    #: times; pytorch_autotune: its measured first call's cost)
    first_call: np.ndarray | None = None


def ranking_quality(table: ScoringTable, rows: ScoredRows) -> tuple[np.ndarray, np.ndarray]:
    """(Kendall tau-b, NDCG@10) per problem of the table (NaN where undefined)."""
    n, m = table.times.shape
    lp, lk, lt = table.listed
    size = np.bincount(lp, minlength=n)
    start = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64)
    j = np.arange(len(lp)) - start[lp]  # position in time order
    # each listed candidate of the rankings: its position among the problem's listed candidates
    rp, rk = rows.p[rows.listed], rows.k[rows.listed]
    rank = np.zeros(len(rp), dtype=np.int64)
    if len(rp):
        rstart = np.flatnonzero(np.r_[True, rp[1:] != rp[:-1]])
        rank = np.arange(len(rp)) - np.repeat(rstart, np.diff(np.r_[rstart, len(rp)]))
    sorted_cells, by_cell = table.listed_cells
    idx = by_cell[np.searchsorted(sorted_cells, rp * m + rk)]
    x = np.full(len(lp), -1, dtype=np.int64)  # -1: not ranked (tied last)
    x[idx] = rank
    # NDCG@10
    t_best = table.t_best
    gain = t_best[lp] / lt
    disc = 1.0 / np.log2(np.arange(NDCG_AT) + 2.0)
    head = j < NDCG_AT
    ideal = np.bincount(lp[head], weights=gain[head] * disc[j[head]], minlength=n)
    top = rank < NDCG_AT
    dcg = np.bincount(rp[top], weights=gain[idx[top]] * disc[rank[top]], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        ndcg = np.where(ideal > 0, dcg / ideal, np.nan)
    return _kendall_tau_b(x, lt, size), ndcg


def _kendall_tau_b(rank: np.ndarray, t: np.ndarray, size: np.ndarray) -> np.ndarray:
    """tau-b per problem between ranking position and time over its listed cells.

    The cells of problem p are the ``size[p]`` rows after those of problems 0 .. p-1. ``rank[i]`` is
    the cell's position in the ranking (distinct within a problem) or -1 where the ranking does not
    rank it (every unranked cell ties with the others, after every ranked one).

    With R ranked and U unranked cells, S = sum over pairs of sign(d rank) * sign(d t) splits into
    the pairs of two ranked cells (at most DEEPEST per problem: compared pairwise in a dense
    problem x position table) and the pairs of a ranked cell i with an unranked one, which add
    (cells slower than i) - (cells faster than i) once summed over i (the ranked cells among those
    cancel: a ranked pair adds +1 to one side and -1 to the other). Ties: U(U-1)/2 in rank, and
    g(g-1)/2 per run of g equal times. The cost is linear in the cells, plus problems x DEEPEST^2 for
    the ranked pairs (not the square of each problem's listed cells).
    """
    n = len(size)
    size = np.asarray(size, dtype=np.int64)
    rank = np.asarray(rank, dtype=np.int64)
    t = np.asarray(t, dtype=np.float64)
    tau = np.full(n, np.nan)
    if not len(t):
        return tau
    p = np.repeat(np.arange(n), size)
    if ((t[1:] < t[:-1]) & (p[1:] == p[:-1])).any():  # the runs of equal times below need t ascending
        order = np.lexsort((t, p))
        t, rank = t[order], rank[order]
    start = np.cumsum(size) - size
    # runs of equal times within a problem: the cells faster (lo) and slower (hi) than each cell
    run_start = np.flatnonzero(np.r_[True, (t[1:] != t[:-1]) | (p[1:] != p[:-1])])
    run_len = np.diff(np.r_[run_start, len(t)])
    run_of = np.repeat(np.arange(len(run_start)), run_len)
    lo = run_start[run_of] - start[p]
    hi = (start + size)[p] - (run_start + run_len)[run_of]
    tied_t = np.bincount(p[run_start], weights=run_len * (run_len - 1) // 2, minlength=n)
    ranked = rank >= 0
    pr, rr = p[ranked], rank[ranked]
    n_ranked = np.bincount(pr, minlength=n)
    s = np.rint(np.bincount(pr, weights=(hi - lo)[ranked], minlength=n)).astype(np.int64)
    if len(rr):
        width = int(rr.max()) + 1
        # position x problem: each ranked cell's time as the number of its run within the problem (equal
        # times, equal numbers) at its ranking position. A position no cell holds is +BIG in `high` and
        # -BIG in `low`, so that no comparison below counts a pair it is in
        big = np.iinfo(np.int32).max
        high = np.full((width, n), big, dtype=np.int32)
        high[rr, pr] = (run_of - run_of[start[p]])[ranked]
        if int((high < big).sum()) != len(rr):
            raise ValueError("_kendall_tau_b: a ranking position repeats within a problem")
        low = np.where(high < big, high, -big)
        for d in range(1, width):  # every ranked pair (c, c + d): +1 where t[c + d] > t[c], -1 where it is less
            s += (low[d:] > high[:-d]).sum(axis=0, dtype=np.int64)
            s -= (high[d:] < low[:-d]).sum(axis=0, dtype=np.int64)
    unranked = size - n_ranked
    n0 = size * (size - 1) // 2
    den = np.sqrt((n0 - unranked * (unranked - 1) // 2).astype(np.float64) * (n0 - tied_t.astype(np.int64)))
    ok = (size >= 2) & (den > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau[ok] = s[ok] / den[ok]
    return tau


def reference_stats(ref: ReferenceRun, mask: np.ndarray, t_choice: np.ndarray, t_best: np.ndarray) -> dict:
    """The choice against one reference over the problems of ``mask`` where the reference has a choice."""
    has = mask & ~np.isnan(ref.t)
    n = int(has.sum())
    if n == 0:
        return {"n": 0}
    tr, tc, tb = ref.t[has], t_choice[has], t_best[has]
    out: dict = {"n": n}
    if ref.best_at is not None:
        out.update(best_of_stats(ref.best_at, ref.bound_at, has, t_best))
    gain, room = np.log(tr / tc), np.log(tr / tb)
    out["headroom_closed"] = float(gain.sum() / room.sum()) if room.sum() > 0 else None
    out["oracle_speedup"] = float(np.exp(room.mean()))
    r = tc / tr
    improved, regressed = r < 1.0 / (1.0 + CHANGE), r > 1.0 + CHANGE
    out["improved"] = float(improved.mean())
    out["unchanged"] = float((~improved & ~regressed).mean())
    out["regressed"] = float(regressed.mean())
    out["slowdown_p95"] = float(np.quantile(r, 0.95))
    out["slowdown_worst"] = float(r.max())
    out["regressed_geomean"] = float(np.exp(np.log(r[regressed]).mean())) if regressed.any() else None
    out.update(speedup_with_tie_test(gain))
    out["sum_choice_ms"], out["sum_ref_ms"] = float(tc.sum()), float(tr.sum())
    if ref.first_call is not None:
        out["first_call_ms"] = float(ref.first_call[has].sum())
    return out


def speedup_with_tie_test(gain: np.ndarray) -> dict:
    """Geomean speed-up exp(mean(gain)) of per-problem log ratios ``gain`` = log(t_ref / t_choice), its 95%
    t-interval and whether that interval holds 1 (``tied``: 1.0, else 0.0; a mean over seeds is the share
    of seeds tied)."""
    mean = float(gain.mean())
    half = Z95 * float(gain.std(ddof=1)) / np.sqrt(len(gain)) if len(gain) > 1 else float("inf")
    return {"speedup_geomean": float(np.exp(mean)), "speedup_ci_low": float(np.exp(mean - half)),
            "speedup_ci_high": float(np.exp(mean + half)), "tied": float(mean - half <= 0.0 <= mean + half)}


def autotune_run(times: np.ndarray, prob: np.ndarray, kern: np.ndarray) -> ReferenceRun:
    """:data:`AUTOTUNE` from mode A's rows (``prob``, ``kern``: problem and kernel indices in preference
    order, grouped by problem) on a part's dense ``times``: the fastest of each problem's first
    :data:`AUTOTUNE_K` listed plans, and their summed times as its first call. NaN where mode A has none."""
    t = times[prob, kern]
    listed = ~np.isnan(t)
    prob, t = prob[listed], t[listed]
    if len(prob):
        start = np.flatnonzero(np.r_[True, prob[1:] != prob[:-1]])
        pos = np.arange(len(prob)) - np.repeat(start, np.diff(np.r_[start, len(prob)]))
        head = pos < AUTOTUNE_K
        prob, t = prob[head], t[head]
    n = times.shape[0]
    best = np.full(n, np.inf)
    np.minimum.at(best, prob, t)
    cost = np.bincount(prob, weights=t, minlength=n)
    has = np.isfinite(best)
    return ReferenceRun(AUTOTUNE, np.where(has, best, np.nan), first_call=np.where(has, cost, np.nan))


def group_figures(tau: np.ndarray, ndcg: np.ndarray, references: list[ReferenceRun], t_choice: np.ndarray,
                  t_best: np.ndarray):
    """``more(mask)`` for :func:`kbench.scoring.metrics.summarize`: ranking quality and the reference comparisons."""

    def more(mask: np.ndarray) -> dict:
        ok = mask & np.isfinite(tau)
        out = {"kendall_tau": float(tau[ok].mean()) if ok.any() else None, "kendall_tau_n": int(ok.sum())}
        ok = mask & np.isfinite(ndcg)
        out[f"ndcg_at_{NDCG_AT}"] = float(ndcg[ok].mean()) if ok.any() else None
        if references:
            out["references"] = {r.name: reference_stats(r, mask, t_choice, t_best) for r in references}
        return out

    return more

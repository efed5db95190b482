"""Censoring-aware scoring of kernel choices, vectorised over problems.

Scoring rules (the README and ``kbench evaluate --explain`` state them the same way):

1. The **choice** for a problem is the first kernel of the submitted ranking
   that the library could run. Where the problem's measured list is complete,
   a kernel outside it is known to be inapplicable and is skipped, as the
   library itself would skip it; if nothing applicable remains the prediction
   is a **failure** (counted, and timed at the slowest listed kernel). Where the
   list is censored (find-db: the 4 fastest only), a kernel outside the list is
   "slower than the 4th or inapplicable": it is taken as the choice and its time
   is censored at the last listed time, a lower bound. A kernel never measured
   on a problem of the same direction and dimensionality (2D / 3D) anywhere in
   the dataset (a forward-only solver on a backward problem, a 2D-only solver on
   a 3D problem) is inapplicable there and always skipped.
2. **top-1**: the choice is a fastest kernel (ties: any kernel with the fastest
   time counts). **top-k**: a fastest kernel is among the first k applicable
   candidates. **within 5%**: t_choice <= 1.05 t_best.
3. **LoP** = (t_choice - t_best) / t_best: mean, median, p90, max; the
   **geometric-mean slowdown** exp(mean(log(t_choice / t_best))).
   **LoP@n**: LoP of the best of the first n applicable candidates, as when n
   candidates are benchmarked and the fastest is kept.
   **best-of-K** (K = 1, 3, 5, 10): the geometric-mean slowdown of that best of the
   first K, and its share of the oracle's performance, exp(mean(log(t_best / t_K))).
   On a censored list a candidate outside the list is timed at the last listed
   time, a lower bound; the best of K is exact as soon as one of the K is listed
   (an unlisted kernel is slower than every listed one), so only problems whose
   first K candidates are all unlisted stay bounds (``best_of_K_censored``).
4. **Speed-up over the heuristic**: geometric mean of t_heuristic / t_choice,
   and the total-time ratio sum(t_heuristic) / sum(t_choice). Against every
   reference heuristic (:mod:`kbench.scoring.selection_metrics`): the same best-of-K curve
   for the heuristic's own order, the share of headroom closed, regressions and
   tails.
5. **Ranking quality** (:mod:`kbench.scoring.selection_metrics`): Kendall tau-b and
   NDCG@10 of the ranking against the measured times, over the listed kernels.

Censored choices make the time a lower bound, so LoP and slowdown are lower
bounds (optimistic), within-5% and speed-up are upper bounds; the shares of
exact and censored choices are always reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

LOP_AT = (1, 5, 10, 30)
TOP_K = (1, 3, 5)
#: best-of-K: the first K candidates are timed and the fastest is kept (K = 10: PyTorch's autotune limit)
BEST_OF = (1, 3, 5, 10)
WITHIN = 0.05
#: candidates deeper than this in a ranking cannot change any metric
DEEPEST = max(max(LOP_AT), max(TOP_K), max(BEST_OF))
#: every n for which scoring keeps the best of the first n candidates
BEST_AT = tuple(sorted(set(LOP_AT) | set(BEST_OF)))


@dataclass
class ScoringTable:
    """Dense view of one dataset part: times[p, k] (NaN where not listed)."""

    problem_ids: np.ndarray
    kernels: np.ndarray
    times: np.ndarray          # float64 [n_problems, n_kernels]
    censored: np.ndarray       # bool [n_problems]
    runs_in_class: np.ndarray  # bool [n_problems, n_kernels]: measured somewhere on this direction and 2D/3D
    direction: np.ndarray
    dtype: np.ndarray

    @cached_property
    def t_best(self) -> np.ndarray:
        return np.nanmin(self.times, axis=1)

    @cached_property
    def t_last(self) -> np.ndarray:
        return np.nanmax(self.times, axis=1)

    @cached_property
    def listed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(problem, kernel, time) of every listed cell, grouped by problem, fastest first within it."""
        p, k = np.nonzero(~np.isnan(self.times))
        t = self.times[p, k]
        order = np.lexsort((k, t, p))
        return p[order], k[order], t[order]

    @cached_property
    def listed_cells(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted flat cells p * n_kernels + k of :attr:`listed`, their rows in it): where each listed
        (problem, kernel) cell lies in :attr:`listed`, found with one ``searchsorted``."""
        p, k, _ = self.listed
        cells = p * self.times.shape[1] + k
        rows = np.argsort(cells, kind="stable")
        return cells[rows], rows


def index_in(values, vocabulary) -> np.ndarray:
    """Position of each value in ``vocabulary`` (-1 if absent), matched in C++ by pyarrow.

    pandas' ``isin``/``get_indexer`` on arrow-backed strings go through Python objects,
    which costs about a second per 600k rows; this does not.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    def arrow(x):
        x = x.astype(str) if isinstance(x, pd.Series) and x.dtype == "category" else x
        arr = pa.array(x, type=pa.string()) if not isinstance(x, (pa.Array, pa.ChunkedArray)) else x
        return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr

    if isinstance(getattr(values, "dtype", None), pd.CategoricalDtype):
        # a categorical: match its few categories, then look the codes up (-1 codes are missing values)
        cat = pd.Categorical(values)
        by_category = np.append(index_in(pd.Series(cat.categories, dtype=object), vocabulary), -1)
        return by_category[cat.codes]
    idx = pc.index_in(arrow(values), value_set=arrow(vocabulary))
    return pc.fill_null(idx, -1).to_numpy(zero_copy_only=False).astype(np.int64)


def build_scoring_table(problems: pd.DataFrame, runtimes: pd.DataFrame, kernels: pd.DataFrame,
                        all_problems: pd.DataFrame | None = None) -> ScoringTable:
    """Dense table of ``problems`` (one dataset part).

    ``all_problems`` (the whole dataset's problems, default ``problems``) with
    ``runtimes`` decide which kernels can run on a problem class: a kernel
    measured on some problem of the same direction and dimensionality.
    """
    pids = problems["problem_id"].to_numpy(dtype=object)
    vocab = kernels["kernel"].to_numpy(dtype=object)
    all_problems = problems if all_problems is None else all_problems
    # each runtime row's problem and kernel, looked up once (the longest lookups of an Evaluator's build):
    # its row among all problems, then among the part's through the all-problems -> part map
    pi_every = index_in(runtimes["problem_id"], all_problems["problem_id"])
    ki_every = index_in(runtimes["kernel"], kernels["kernel"])
    part_row = np.append(index_in(all_problems["problem_id"], problems["problem_id"]), -1)
    pi_all = part_row[pi_every]
    keep = pi_all >= 0
    times = np.full((len(pids), len(vocab)), np.nan)
    times[pi_all[keep], ki_every[keep]] = runtimes["time_ms"].to_numpy(dtype=np.float64)[keep]
    # the kernels table's ``directions`` column is derived from the same runtimes, so the class
    # rule (direction and dimensionality) already implies it
    runs = _runs_in_class(problems, all_problems, pi_every, ki_every, len(kernels))
    return ScoringTable(pids, vocab, times, problems["censored"].to_numpy(dtype=bool), runs,
                        problems["direction"].to_numpy(dtype=object), problems["dtype"].to_numpy(dtype=object))


def problem_class(problems: pd.DataFrame) -> np.ndarray:
    """Direction and dimensionality of each problem as one label, e.g. ``F2`` or ``W3``."""
    dims = problems["spatial_dims"].astype(str) if "spatial_dims" in problems.columns else "2"
    return (problems["direction"].astype(str) + dims).to_numpy(dtype=object)


def _runs_in_class(problems, all_problems, pi, ki, n_kernels: int) -> np.ndarray:
    """bool [problems, kernels]: the kernel was measured on a problem of the same class anywhere
    (``pi``/``ki``: each runtime row's index among ``all_problems`` and the kernels, -1 if absent)."""
    classes, all_codes = np.unique(problem_class(all_problems), return_inverse=True)
    ok = (pi >= 0) & (ki >= 0)
    # one extra all-False row for classes the dataset never measured (index -1 below)
    seen = np.zeros((len(classes) + 1, n_kernels), dtype=bool)
    seen[all_codes[pi[ok]], ki[ok]] = True
    return seen[pd.Index(classes).get_indexer(problem_class(problems))]


@dataclass
class Choices:
    """Per-problem outcome of scoring one ranking set (arrays over the table's problems)."""

    predicted: np.ndarray   # bool: the problem has a ranking
    t_choice: np.ndarray
    exact: np.ndarray       # choice listed: time exact
    censored: np.ndarray    # choice outside a censored list: time is a lower bound
    failed: np.ndarray
    top: dict[int, np.ndarray]
    best_at: dict[int, np.ndarray]
    choice_kernel: np.ndarray  # kernel index or -1
    #: bool per n of BEST_AT: the best of the first n is a lower bound (none of them listed, list censored)
    best_bound_at: dict[int, np.ndarray] = field(default_factory=dict)
    #: the scored rows: the first DEEPEST applicable candidates, grouped by problem, in preference order
    rows: ScoredRows | None = None


@dataclass
class ScoredRows:
    """Long-form rows of the candidates scoring read: problem, kernel, position, listed, time (ms)."""

    p: np.ndarray
    k: np.ndarray
    pos: np.ndarray
    listed: np.ndarray
    t: np.ndarray  # listed time, or the last listed time where the candidate is outside a censored list


def lean_rows(table: ScoringTable, prob_idx: np.ndarray, kern_idx: np.ndarray, keep: int = DEEPEST) -> np.ndarray:
    """Rows of long-form rankings that scoring can read: each problem's first ``keep`` applicable
    candidates (``keep`` >= DEEPEST leaves every metric unchanged).

    Rows of one problem must be contiguous and in preference order. Repeated kernels (only the
    first mention counts) and inapplicable candidates are dropped; a problem with no applicable
    candidate keeps its first row, so it stays predicted (and scored as a failure, as before).
    Returns the kept row indices, ascending.
    """
    n, m = table.times.shape
    p = np.asarray(prob_idx, dtype=np.int64)
    k = np.asarray(kern_idx, dtype=np.int64)
    if not len(p):
        return np.zeros(0, dtype=np.int64)
    cell = p * m + k
    first_mention = np.zeros(len(p), dtype=bool)
    first_mention[np.unique(cell, return_index=True)[1]] = True
    applicable = first_mention & (~np.isnan(table.times.ravel()[cell])
                                  | (table.censored[p] & table.runs_in_class.ravel()[cell]))
    starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]])
    before = np.cumsum(applicable, dtype=np.int64) - applicable
    pos = before - np.repeat(before[starts], np.diff(np.r_[starts, len(p)]))
    kept = applicable & (pos < keep)
    any_applicable = np.add.reduceat(applicable.astype(np.int64), starts) > 0
    kept[starts[~any_applicable]] = True
    return np.flatnonzero(kept)


def score_rankings(table: ScoringTable, prob_idx: np.ndarray, kern_idx: np.ndarray) -> Choices:
    """Score rankings given in long form: row i says problem prob_idx[i] ranks kernel kern_idx[i]
    next. Rows of one problem must appear in preference order (problems may interleave)."""
    n, m = table.times.shape
    prob_idx = np.asarray(prob_idx, dtype=np.int64)
    kern_idx = np.asarray(kern_idx, dtype=np.int64)
    if len(prob_idx) > 1 and (prob_idx[1:] < prob_idx[:-1]).any():
        order = np.argsort(prob_idx, kind="stable")
        p, k = prob_idx[order], kern_idx[order]
    else:  # already grouped by problem (the usual case): skip the sort
        p, k = prob_idx, kern_idx
    cell = p * m + k  # flat (problem, kernel) index: 1-D gathers are several times faster than 2-D
    sorted_cell = np.sort(cell)  # a kernel named twice for a problem: adjacent once sorted
    if len(cell) > 1 and (sorted_cell[1:] == sorted_cell[:-1]).any():
        _, first = np.unique(cell, return_index=True)  # the first mention of a kernel counts
        keep = np.zeros(len(p), dtype=bool)
        keep[first] = True
        p, k, cell = p[keep], k[keep], cell[keep]

    predicted = np.bincount(p, minlength=n) > 0
    t = table.times.ravel()[cell]
    listed = ~np.isnan(t)
    applicable = listed | (table.censored[p] & table.runs_in_class.ravel()[cell])
    # position among the applicable candidates of each problem; only the first
    # DEEPEST positions can change any metric, so the rest is dropped before the
    # (costly) compressions below
    starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]]) if len(p) else np.zeros(0, dtype=np.int64)
    before = np.cumsum(applicable, dtype=np.int32)
    before -= applicable
    pos_all = before - np.repeat(before[starts], np.diff(np.r_[starts, len(p)]))
    rows = np.flatnonzero(applicable & (pos_all < DEEPEST))
    p, k, t, listed, pos = p[rows], k[rows], t[rows], listed[rows], pos_all[rows]
    t_last = table.t_last
    t = np.where(listed, t, t_last[p])

    first_rows = np.flatnonzero(pos == 0)
    has_choice = np.zeros(n, dtype=bool)
    has_choice[p[first_rows]] = True
    t_choice = t_last.copy()  # failures are timed at the slowest listed kernel
    t_choice[p[first_rows]] = t[first_rows]
    exact = np.zeros(n, dtype=bool)
    exact[p[first_rows]] = listed[first_rows]
    censored = has_choice & ~exact
    failed = predicted & ~has_choice
    choice_kernel = np.full(n, -1)
    choice_kernel[p[first_rows]] = k[first_rows]

    t_best = table.t_best
    fastest = listed & (t <= t_best[p])
    top = {kk: np.bincount(p[fastest & (pos < kk)], minlength=n) > 0 for kk in TOP_K}
    best_at, bound_at = {}, {}
    for nn in BEST_AT:
        # rows are grouped by problem and each group starts at pos 0: a segment minimum
        sel = np.flatnonzero(pos < nn)
        b = t_choice.copy()  # problems without a choice keep their failure time
        if len(sel):
            b[p[first_rows]] = np.minimum.reduceat(t[sel], np.flatnonzero(pos[sel] == 0))
        best_at[nn] = b
        # exact once one of the first nn is listed: an unlisted candidate is slower than every listed kernel
        bound_at[nn] = has_choice & ~(np.bincount(p[listed & (pos < nn)], minlength=n) > 0)
    return Choices(predicted, t_choice, exact, censored, failed, top, best_at, choice_kernel, bound_at,
                   ScoredRows(p, k, pos, listed, t))


def best_of_stats(best_at: dict[int, np.ndarray], bound_at: dict[int, np.ndarray] | None, mask: np.ndarray,
                  t_best: np.ndarray) -> dict:
    """best_of_K (geomean slowdown of the best of the first K), best_of_K_oracle (its share of the oracle's
    performance) and, with ``bound_at``, best_of_K_censored (share of lower bounds), over ``mask``."""
    out = {}
    tb = t_best[mask]
    for k in BEST_OF:
        log_slow = float(np.mean(np.log(best_at[k][mask] / tb))) if len(tb) else float("nan")
        out[f"best_of_{k}"] = float(np.exp(log_slow))
        out[f"best_of_{k}_oracle"] = float(np.exp(-log_slow))
        if bound_at is not None:
            out[f"best_of_{k}_censored"] = float(bound_at[k][mask].mean())
    return out


def _stats(mask: np.ndarray, c: Choices, t_best: np.ndarray, t_ref: np.ndarray | None, more=None) -> dict:
    n = int(mask.sum())
    if n == 0:
        return {"n": 0}
    tb, tc = t_best[mask], c.t_choice[mask]
    lop = (tc - tb) / tb
    out = {
        "n": n,
        **{f"top{k}": float(c.top[k][mask].mean()) for k in TOP_K},
        "within5": float((tc <= (1 + WITHIN) * tb).mean()),
        "lop_mean": float(lop.mean()),
        "lop_median": float(np.median(lop)),
        "lop_p90": float(np.quantile(lop, 0.9)),
        "lop_max": float(lop.max()),
        "geomean_slowdown": float(np.exp(np.mean(np.log(tc / tb)))),
        **{f"lop_at_{nn}": float(((c.best_at[nn][mask] - tb) / tb).mean()) for nn in LOP_AT},
        **best_of_stats(c.best_at, c.best_bound_at, mask, t_best),
        "share_exact": float(c.exact[mask].mean()),
        "share_censored": float(c.censored[mask].mean()),
        "share_failed": float(c.failed[mask].mean()),
    }
    if t_ref is not None:
        tr = t_ref[mask]
        ok = ~np.isnan(tr)
        out["speedup_geomean"] = float(np.exp(np.mean(np.log(tr[ok] / tc[ok])))) if ok.any() else None
        out["speedup_total"] = float(tr[ok].sum() / tc[ok].sum()) if ok.any() else None
        out["speedup_n"] = int(ok.sum())
    else:
        out["speedup_geomean"] = out["speedup_total"] = None
    if more is not None:
        out.update(more(mask))
    return out


def summarize(table: ScoringTable, c: Choices, scored: np.ndarray, t_ref: np.ndarray | None = None,
              more=None) -> dict:
    """Every metric overall, per direction and per data type, over the ``scored`` problems.

    ``more(mask)`` (optional) adds figures of its own to each group (the ranking quality and the
    comparisons with each reference heuristic, :mod:`kbench.scoring.selection_metrics`).
    """
    t_best = table.t_best
    metrics = {"overall": _stats(scored, c, t_best, t_ref, more), "by_direction": {}, "by_dtype": {}}
    for key, values in (("by_direction", table.direction), ("by_dtype", table.dtype)):
        for v in sorted(set(values[scored])):
            metrics[key][str(v)] = _stats(scored & (values == v), c, t_best, t_ref, more)
    return metrics

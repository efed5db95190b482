"""Test-retest statistics of a dataset's ``repeats`` table (the same problems measured in two runs).

``repeats`` has one row per (problem_id, kernel, run_id) with ``time_ms``; run
``0`` is the measurement the dataset's ``runtimes`` come from, runs ``1, 2 ...``
are re-measurements in other runs (another lease, another process). Every
statistic compares two runs on the (problem, kernel) pairs both measured:

* :func:`plan_repeatability`: |log(t_b / t_a)| per plan, median, p90, p99;
* :func:`same_winner_share`: share of problems whose fastest plan is the same
  in both runs (ties broken by kernel name);
* :func:`noise_ceiling`: the slowdown of run a's fastest plan under run b's
  times (t_b[winner_a] / min t_b): the best a selector trained to reproduce
  run a's labels can score when judged by run b, and so the noise floor of any
  comparison of selectors on one measurement (geomean, p90, max);
* :func:`heuristic_gaps`: a heuristic's pick over the fastest plan in each run.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError

REPEATS_COLUMNS = ["problem_id", "kernel", "run_id", "time_ms"]


def run_pairs(repeats: pd.DataFrame, run_a: int = 0, run_b: int = 1) -> pd.DataFrame:
    """``problem_id, kernel, t_a, t_b`` for every (problem, kernel) timed in both runs (positive times)."""
    missing = [c for c in REPEATS_COLUMNS if c not in repeats]
    if missing:
        raise KbenchInputError(f"repeats table: missing column(s) {', '.join(missing)}; "
                               f"it needs {', '.join(REPEATS_COLUMNS)}.")
    cols = ["problem_id", "kernel", "time_ms"]
    a = repeats.loc[repeats["run_id"] == run_a, cols].rename(columns={"time_ms": "t_a"})
    b = repeats.loc[repeats["run_id"] == run_b, cols].rename(columns={"time_ms": "t_b"})
    if not len(a) or not len(b):
        raise KbenchInputError(f"repeats table: run {run_a if not len(a) else run_b} has no rows "
                               f"(runs present: {sorted(repeats['run_id'].unique().tolist())}).")
    pairs = a.merge(b, on=["problem_id", "kernel"], how="inner")
    pairs = pairs[(pairs["t_a"] > 0) & (pairs["t_b"] > 0)]
    for c in ("problem_id", "kernel"):
        pairs[c] = pairs[c].astype(str)
    return pairs.reset_index(drop=True)


def _quantiles(values: pd.Series, qs=(0.5, 0.9, 0.99)) -> dict:
    v = values.to_numpy(dtype=float)
    out = {"n": int(len(v))}
    names = {0.5: "median", 0.9: "p90", 0.99: "p99"}
    for q in qs:
        out[names.get(q, f"q{q}")] = float(np.quantile(v, q)) if len(v) else float("nan")
    return out


def plan_repeatability(pairs: pd.DataFrame) -> dict:
    """|log(t_b / t_a)| over every plan timed in both runs: n, median, p90, p99."""
    return _quantiles(np.abs(np.log(pairs["t_b"] / pairs["t_a"])))


def plan_repeatability_by(pairs: pd.DataFrame, labels: pd.DataFrame, column: str = "timing") -> pd.DataFrame:
    """:func:`plan_repeatability` per value of ``labels[column]`` (``labels`` has ``problem_id, kernel`` and
    the column, e.g. the first run's ``runtimes.timing``): one row per value with n, median, p90, p99."""
    lab = labels[["problem_id", "kernel", column]].astype({"problem_id": str, "kernel": str})
    m = pairs.merge(lab, on=["problem_id", "kernel"], how="inner")
    rows = [{column: str(k), **plan_repeatability(g)} for k, g in m.groupby(column, sort=True, observed=True)]
    return pd.DataFrame(rows, columns=[column, "n", "median", "p90", "p99"])


def winners(pairs: pd.DataFrame, column: str) -> pd.Series:
    """Per problem, the fastest kernel by ``column`` (ties: the smallest kernel name)."""
    w = pairs.sort_values(["problem_id", column, "kernel"], kind="stable").drop_duplicates("problem_id")
    return w.set_index("problem_id")["kernel"]


def same_winner_share(pairs: pd.DataFrame) -> dict:
    """Problems whose fastest plan is the same in both runs: n, same, share."""
    wa, wb = winners(pairs, "t_a"), winners(pairs, "t_b")
    same = int((wa == wb.reindex(wa.index)).sum())
    return {"n": int(len(wa)), "same": same, "share": same / len(wa) if len(wa) else float("nan")}


def noise_slowdowns(pairs: pd.DataFrame) -> pd.Series:
    """Per problem: run b's time of run a's fastest plan over run b's fastest time (>= 1)."""
    wa = winners(pairs, "t_a")
    t_b = pairs.set_index(["problem_id", "kernel"])["t_b"]
    picked = t_b.reindex(list(zip(wa.index, wa.to_numpy()))).to_numpy()
    best_b = pairs.groupby("problem_id")["t_b"].min().reindex(wa.index).to_numpy()
    return pd.Series(picked / best_b, index=wa.index, name="slowdown")


def noise_ceiling(pairs: pd.DataFrame) -> dict:
    """Slowdown of run a's winners under run b: n, geomean, p90, max."""
    s = noise_slowdowns(pairs)
    if not len(s):
        return {"n": 0, "geomean": float("nan"), "p90": float("nan"), "max": float("nan")}
    return {"n": int(len(s)), "geomean": float(np.exp(np.log(s).mean())), "p90": float(s.quantile(0.9)),
            "max": float(s.max())}


def heuristic_gaps(pairs: pd.DataFrame, heuristics: pd.DataFrame, heuristic: str = "cudnn_mode_a") -> dict:
    """``heuristic``'s first pick over the fastest plan, in run a and in run b (geomean, n).

    Only problems where the pick was timed in both runs count, so both numbers
    cover the same problems.
    """
    h = heuristics[(heuristics["heuristic"] == heuristic) & (heuristics["rank"] == 0)]
    pick = h.assign(problem_id=h["problem_id"].astype(str), kernel=h["kernel"].astype(str))[["problem_id", "kernel"]]
    timed = pick.merge(pairs, on=["problem_id", "kernel"], how="inner")
    best = pairs.groupby("problem_id")[["t_a", "t_b"]].min()
    best = best.reindex(timed["problem_id"]).to_numpy()
    gap_a, gap_b = timed["t_a"].to_numpy() / best[:, 0], timed["t_b"].to_numpy() / best[:, 1]

    def gm(v):
        return float(np.exp(np.log(v).mean())) if len(v) else float("nan")
    return {"heuristic": heuristic, "n": int(len(timed)), "run_a": gm(gap_a), "run_b": gm(gap_b)}


def summary(repeats: pd.DataFrame, heuristics: pd.DataFrame | None = None, run_a: int = 0,
            run_b: int = 1) -> dict:
    """Every statistic of the module for runs ``run_a`` and ``run_b``."""
    pairs = run_pairs(repeats, run_a, run_b)
    out = {"run_a": run_a, "run_b": run_b, "problems": int(pairs["problem_id"].nunique()),
           "plans": plan_repeatability(pairs), "same_winner": same_winner_share(pairs),
           "noise_ceiling": noise_ceiling(pairs)}
    if heuristics is not None and len(heuristics):
        out["heuristic_gap"] = heuristic_gaps(pairs, heuristics)
    return out

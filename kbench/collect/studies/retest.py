"""``kbench collect compare RAW_A RAW_B``: where two measurements of the same problems disagree, and how
each time was taken.

For finding the cause of run-to-run outliers: every (problem, plan)
packaged in both raw folders, with its time in each run and the provenance of
that time: how it was timed (``verified`` / ``precise`` / ``coarse`` /
``single``), from how many CUDA-graph replays its coarse median came (1 = the
FAR_BEHIND rule), its position in the problem's timing order (0 = timed first,
right after the host-side build phase), and whether it was the fastest plan in
each run. The summary uses :mod:`kbench.sources.repeatability` (run a = RAW_A).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kbench.collect.measure.cudnn import plan_priority
from kbench.collect.packaging.package import candidate_runtimes, load_raw
from kbench.sources import repeatability

PROVENANCE = ["time_ms", "timing", "replays", "position"]


def provenance(raw, variant: str = "default") -> pd.DataFrame:
    """``key, plan`` and the packaged time of every candidate plan of a raw folder, with its provenance."""
    problems, plans, _ = load_raw(raw)
    rt = candidate_runtimes(problems, plans, variant)
    # position in the timing order: the collector runs plans by plan_priority (mode A, B, fallback)
    prio = plans.loc[plans["build_ok"].astype(bool), ["key", "plan", "rank_a", "rank_b", "rank_fallback"]].copy()
    prio["_p"] = [plan_priority(r) for r in prio[["rank_a", "rank_b", "rank_fallback"]].to_dict("records")]
    prio = prio.sort_values(["key", "_p"], kind="stable")
    prio["position"] = prio.groupby("key").cumcount()
    rt = rt.merge(prio[["key", "plan", "position"]], on=["key", "plan"], how="left")
    rt["replays"] = rt["coarse_n"] / rt["inner_k"].fillna(1).clip(lower=1)
    return rt[["key", "plan"] + PROVENANCE].reset_index(drop=True)


def compare(raw_a, raw_b, variant: str = "default") -> pd.DataFrame:
    """Per (problem, plan) in both: ``t_a, t_b, log_ratio`` and each run's provenance and winner flag."""
    a, b = provenance(raw_a, variant), provenance(raw_b, variant)
    m = a.merge(b, on=["key", "plan"], suffixes=("_a", "_b"))
    m = m.rename(columns={"time_ms_a": "t_a", "time_ms_b": "t_b"})
    m["log_ratio"] = np.log(m["t_b"] / m["t_a"])
    for run in ("a", "b"):
        best = m.groupby("key")[f"t_{run}"].transform("min")
        m[f"winner_{run}"] = m[f"t_{run}"] <= best
    return m


def report(m: pd.DataFrame, top: int = 15) -> str:
    """Text summary: the study's statistics, then the largest disagreements of either run's winners."""
    rep = pd.concat([m[["key", "plan", "t_a"]].set_axis(["problem_id", "kernel", "time_ms"], axis=1).assign(run_id=0),
                     m[["key", "plan", "t_b"]].set_axis(["problem_id", "kernel", "time_ms"], axis=1).assign(run_id=1)])
    s = repeatability.summary(rep)
    pl, sw, nc = s["plans"], s["same_winner"], s["noise_ceiling"]
    lines = [f"{s['problems']} problems, {pl['n']} plans in both runs",
             f"per-plan |log ratio|: median {pl['median']:.4f}, p90 {pl['p90']:.4f}, p99 {pl['p99']:.4f}",
             f"same fastest plan: {sw['same']} of {sw['n']} ({100 * sw['share']:.1f}%)",
             f"noise ceiling (run a's winner under run b): geomean {nc['geomean']:.4f}, p90 {nc['p90']:.4f}, "
             f"max {nc['max']:.4f}"]
    win = m[m["winner_a"] | m["winner_b"]].assign(abs_log=lambda d: d["log_ratio"].abs())
    worst = win.sort_values("abs_log", ascending=False).head(top)
    cols = ["key", "plan", "t_a", "t_b", "timing_a", "replays_a", "position_a", "timing_b", "replays_b",
            "position_b", "winner_a", "winner_b"]
    lines += ["", f"largest disagreements of a run's fastest plan (top {top}):",
              worst[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}")]
    big = win[win["abs_log"] > np.log(2)]
    if len(big):
        lines += ["", f"{len(big)} winner readings differ by more than 2x; their provenance in the slower run:"]
        slow_b = big["log_ratio"] > 0
        prov = pd.DataFrame({"timing": np.where(slow_b, big["timing_b"], big["timing_a"]),
                             "replays": np.where(slow_b, big["replays_b"], big["replays_a"]),
                             "position": np.where(slow_b, big["position_b"], big["position_a"])})
        lines.append(prov.value_counts().rename("plans").reset_index().to_string(index=False))
    return "\n".join(lines)

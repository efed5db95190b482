"""Scoring of a GPU re-timing run: raw measurements -> :class:`kbench.records.VerificationRecord`. Pure.

A plan's measured time on a problem is the median over rounds of its per-round
times (each the median of that round's replays, ms per execution). Speed-ups
compare the ``choice`` and ``oracle`` roles with the ``mode_a`` role
(:mod:`kbench.gpu_check.plan`); roles naming the same plan share its time,
so a choice equal to mode A's plan has a speed-up of exactly 1. The table
figures use the dataset's times of the same plans on the same problems (only
the problems measured on the GPU), so the two columns compare like with like.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kbench.records import SpeedupFigures, VerificationFigures


def measured_times(raw: pd.DataFrame) -> pd.DataFrame:
    """(problem_id, plan) -> ``ms``: the median over rounds of each round's time."""
    return raw.groupby(["problem_id", "plan"], as_index=False)["ms"].median()


def role_times(plan: dict, times: pd.DataFrame) -> pd.DataFrame:
    """One row per problem with every role's plan measured: direction, dtype, choice plan,
    and measured (``m_<role>``) and table (``t_<role>``) times."""
    t = times.set_index(["problem_id", "plan"])["ms"]
    rows = []
    for item in plan["problems"]:
        pid, roles = item["problem_id"], item["roles"]
        row = {"problem_id": pid, "direction": item["problem"]["direction"], "dtype": item["problem"]["dtype"],
               "same_as_mode_a": roles["choice"] == roles["mode_a"]}
        for role, name in roles.items():
            row[f"m_{role}"] = t.get((pid, name), np.nan)
            row[f"t_{role}"] = item["table_ms"][name]
        rows.append(row)
    df = pd.DataFrame(rows)
    if not len(df):
        return df
    return df[df[[f"m_{r}" for r in ("choice", "mode_a", "oracle")]].notna().all(axis=1)].reset_index(drop=True)


def figures(df: pd.DataFrame, prefix: str) -> SpeedupFigures:
    """Speed-up figures of one group from its ``<prefix>_<role>`` time columns."""
    a, c, o = (df[f"{prefix}_{r}"].to_numpy(dtype=np.float64) for r in ("mode_a", "choice", "oracle"))
    gm = lambda v: float(np.exp(np.mean(np.log(v))))  # noqa: E731
    return SpeedupFigures(problems=int(len(df)), speedup_geomean=gm(a / c), speedup_total=float(a.sum() / c.sum()),
                          oracle_speedup_geomean=gm(a / o), slowdown_vs_oracle_geomean=gm(c / o),
                          choice_is_mode_a=float(df["same_as_mode_a"].mean()))


def grouped(df: pd.DataFrame, prefix: str) -> VerificationFigures:
    return VerificationFigures(
        overall=figures(df, prefix),
        by_direction={str(k): figures(g, prefix) for k, g in df.groupby("direction")},
        by_dtype={str(k): figures(g, prefix) for k, g in df.groupby("dtype")})


def score(plan: dict, raw: pd.DataFrame) -> tuple[VerificationFigures, VerificationFigures, int]:
    """(measured figures, table figures, problems measured) from a plan and its raw timings
    (columns problem_id, plan, round, ms)."""
    df = role_times(plan, measured_times(raw))
    if not len(df):
        from kbench.errors import KbenchInputError
        raise KbenchInputError("no problem has a GPU time for all of its plans yet; run the timing first")
    return grouped(df, "m"), grouped(df, "t"), int(len(df))

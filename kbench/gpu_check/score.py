"""Scoring of a GPU re-timing run: raw measurements -> :class:`kbench.scoring.records.VerificationRecord`. Pure.

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

from kbench.core.errors import KbenchInputError
from kbench.gpu_check.plan import LIVE_AUTOTUNE, LIVE_REFERENCES, PYTORCH_AUTOTUNE_UNIT
from kbench.leaderboard.stats import paired_bootstrap_ci
from kbench.scoring.records import LiveFigures, LiveReference, SpeedupFigures, TimingAgreement, VerificationFigures
from kbench.scoring.selection_metrics import CHANGE


def measured_times(raw: pd.DataFrame) -> pd.DataFrame:
    """(problem_id, plan) -> ``ms``: the median over rounds of each round's time."""
    return raw.groupby(["problem_id", "plan"], as_index=False)["ms"].median()


def role_times(plan: dict, times: pd.DataFrame) -> pd.DataFrame:
    """One row per problem with every role's plan measured: direction, dtype, choice plan,
    and measured (``m_<role>``) and table (``t_<role>``) times."""
    t = dict(zip(zip(times["problem_id"], times["plan"]), times["ms"].to_numpy(dtype=np.float64)))
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


def _gm(v: np.ndarray) -> float:
    return float(np.exp(np.mean(np.log(v))))


def figures(df: pd.DataFrame, prefix: str) -> SpeedupFigures:
    """Speed-up figures of one group from its ``<prefix>_<role>`` time columns."""
    a, c, o = (df[f"{prefix}_{r}"].to_numpy(dtype=np.float64) for r in ("mode_a", "choice", "oracle"))
    return SpeedupFigures(problems=int(len(df)), speedup_geomean=_gm(a / c), speedup_total=float(a.sum() / c.sum()),
                          oracle_speedup_geomean=_gm(a / o), slowdown_vs_oracle_geomean=_gm(c / o),
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
        raise KbenchInputError("no problem has a GPU time for all of its plans yet; run the timing first")
    return grouped(df, "m"), grouped(df, "t"), int(len(df))


#: the smallest table time whose agreement is read: shorter kernels are launch-bound (the issue's 0.05 ms)
AGREEMENT_MIN_MS = 0.05
#: a run time further than this factor from its table time, either way, is counted as off (``over_1_5x``)
AGREEMENT_OFF = 1.5
#: the live references that are cuDNN picks (compared with the table's mode-A plan)
LIVE_CUDNN = ("live_mode_a", "live_mode_b")
BOOTSTRAP_RESAMPLES = 10_000


def live_times(plan: dict, times: pd.DataFrame, picks: pd.DataFrame) -> pd.DataFrame:
    """One row per problem whose every unit was timed: direction, dtype, the measured time of the
    choice, the oracle, the table's mode-A plan (``m_table_mode_a``) and each live reference, and
    whether each live cuDNN pick is the table's mode-A plan (``same_<reference>``)."""
    pick = picks.set_index("problem_id")
    rows = []
    for item in plan["problems"]:
        pid = item["problem_id"]
        if pid not in pick.index:
            continue
        roles = item["roles"]
        row = {"problem_id": pid, "direction": item["problem"]["direction"], "dtype": item["problem"]["dtype"],
               "u_choice": roles["choice"], "u_oracle": roles["oracle"], "u_table_mode_a": roles["mode_a"]}
        for ref in LIVE_REFERENCES:
            row[f"u_{ref}"] = pick.at[pid, ref]
        for ref in LIVE_CUDNN:
            row[f"same_{ref}"] = pick.at[pid, ref] == roles["mode_a"]
        rows.append(row)
    df = pd.DataFrame(rows)
    if not len(df):
        return df
    t = times.set_index(["problem_id", "plan"])["ms"]
    units = [c for c in df.columns if c.startswith("u_")]
    for c in units:
        key = pd.MultiIndex.from_arrays([df["problem_id"], df[c]])
        df[f"m_{c[2:]}"] = t.reindex(key).to_numpy(dtype=np.float64)
    measured = [f"m_{c[2:]}" for c in units]
    return df[df[measured].notna().all(axis=1)].reset_index(drop=True)


def reference_figures(df: pd.DataFrame, ref: str, resamples: int = BOOTSTRAP_RESAMPLES):
    """The choice's figures against reference ``ref`` (a ``m_<ref>`` column of :func:`live_times`)."""
    r, c, o = (df[f"m_{k}"].to_numpy(dtype=np.float64) for k in (ref, "choice", "oracle"))
    _, low, high = paired_bootstrap_ci(np.log(r), np.log(c), resamples=resamples)
    speedup, headroom = _gm(r / c), _gm(r / o)
    same = f"same_{ref}"
    return LiveReference(
        problems=int(len(df)), speedup_geomean=speedup, speedup_ci95=(float(np.exp(low)), float(np.exp(high))),
        oracle_speedup_geomean=headroom,
        headroom_closed=float(np.log(speedup) / np.log(headroom)) if headroom > 1 else None,
        choice_faster_share=float(np.mean(r / c > 1 + CHANGE)), choice_slower_share=float(np.mean(c / r > 1 + CHANGE)),
        same_plan_as_table_mode_a=float(df[same].mean()) if same in df.columns else None)


def agreement_pairs(plan: dict, measured: pd.DataFrame, min_ms: float = AGREEMENT_MIN_MS) -> pd.DataFrame:
    """``measured`` (problem_id, plan, ms) joined to the table's times of the plan's role plans
    (``table_ms``), over the pairs whose table time is at least ``min_ms``, with ``abs_log_ratio``."""
    table = pd.DataFrame([(item["problem_id"], name, ms) for item in plan["problems"]
                          for name, ms in item["table_ms"].items()], columns=["problem_id", "plan", "table_ms"])
    pairs = table.merge(measured, on=["problem_id", "plan"], how="inner")
    pairs = pairs[pairs["table_ms"] >= min_ms]
    dev = np.abs(np.log(pairs["ms"].to_numpy(dtype=np.float64) / pairs["table_ms"].to_numpy(dtype=np.float64)))
    return pairs.assign(abs_log_ratio=dev)


def agreement(plan: dict, measured: pd.DataFrame, timing: str, min_ms: float = AGREEMENT_MIN_MS):
    """:class:`kbench.scoring.records.TimingAgreement` of ``measured`` (problem_id, plan, ms) with the table's
    times of the plan's role plans (:func:`agreement_pairs`); ``over_1_5x`` counts the pairs more than
    :data:`AGREEMENT_OFF` apart either way."""
    dev = agreement_pairs(plan, measured, min_ms)["abs_log_ratio"].to_numpy(dtype=np.float64)
    return TimingAgreement(timing=timing, min_ms=min_ms, plans=int(len(dev)),
                           median_abs_log_ratio=float(np.median(dev)) if len(dev) else None,
                           over_1_5x=int(np.sum(dev > np.log(AGREEMENT_OFF))))


def autotune_times(plan: dict, raw: pd.DataFrame) -> pd.DataFrame:
    """One row per problem the autotune pass timed whole: direction, the measured time of the choice, the
    oracle and PyTorch's op with ``benchmark = True`` (``m_pytorch_autotune``), all from that pass."""
    t = measured_times(raw).set_index(["problem_id", "plan"])["ms"]
    rows = []
    for item in plan["problems"]:
        pid, roles = item["problem_id"], item["roles"]
        row = {"problem_id": pid, "direction": item["problem"]["direction"],
               "m_choice": t.get((pid, roles["choice"]), np.nan), "m_oracle": t.get((pid, roles["oracle"]), np.nan),
               f"m_{LIVE_AUTOTUNE}": t.get((pid, PYTORCH_AUTOTUNE_UNIT), np.nan)}
        rows.append(row)
    df = pd.DataFrame(rows, columns=["problem_id", "direction", "m_choice", "m_oracle", f"m_{LIVE_AUTOTUNE}"])
    return df[df[["m_choice", "m_oracle", f"m_{LIVE_AUTOTUNE}"]].notna().all(axis=1)].reset_index(drop=True)


#: the round a timed selector chooses in (:func:`timed_choice`); the others measure
SELECTION_ROUND = 0


def timed_choice(plan: dict, raw: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """(plan, time rows) of the timed selector of a plan with ``candidates`` (``--timed-top K``): per
    problem, the candidate with the shortest time in round :data:`SELECTION_ROUND` of ``raw`` (one pass's
    rows; ties go to the ranking's order) becomes the ``choice`` role, and only the other rounds' rows
    are kept, so that no unit is measured on the round that chose. A problem whose candidates were not
    all timed in that round keeps the entry's first choice (it is left out later, not timed whole).

    >>> plan = {"problems": [{"problem_id": "p", "roles": {"choice": "a", "mode_a": "m", "oracle": "b"},
    ...                       "candidates": ["a", "b"]}]}
    >>> raw = pd.DataFrame({"problem_id": ["p"] * 4, "plan": ["a", "b", "a", "b"], "round": [0, 0, 1, 1],
    ...                     "ms": [2.0, 1.0, 1.5, 1.6]})
    >>> chosen, rest = timed_choice(plan, raw)
    >>> chosen["problems"][0]["roles"]["choice"], rest["round"].tolist()
    ('b', [1, 1])
    """
    rounds = pd.to_numeric(raw["round"], errors="coerce")
    first = raw[rounds == SELECTION_ROUND].groupby(["problem_id", "plan"])["ms"].median()
    lookup = dict(zip(first.index, first.to_numpy(dtype=np.float64)))
    items = []
    for item in plan["problems"]:
        candidates = item.get("candidates") or [item["roles"]["choice"]]
        t = np.array([lookup.get((item["problem_id"], c), np.nan) for c in candidates])
        choice = candidates[int(np.argmin(t))] if np.isfinite(t).all() else item["roles"]["choice"]
        items.append({**item, "roles": {**item["roles"], "choice": choice}})
    return {**plan, "problems": items}, raw[rounds != SELECTION_ROUND].reset_index(drop=True)


def call_choice(plan: dict, calls: pd.DataFrame) -> dict:
    """The plan with each problem's ``choice`` role set to the fastest candidate of the timed selector's first
    call in the autotune pass (``calls``' call_times: :func:`kbench.gpu_check.command.read_autotune_calls`;
    ties go to the ranking's order). The call times each candidate once, apart from the rounds, so every
    round measures. A problem without a call, or whose call lacks a candidate, keeps the entry's first choice.

    >>> plan = {"problems": [{"problem_id": "p", "roles": {"choice": "a", "mode_a": "m", "oracle": "b"},
    ...                       "candidates": ["a", "b"]}]}
    >>> calls = pd.DataFrame({"problem_id": ["p"], "call_times": [{"a": 2.0, "b": 1.0}]})
    >>> call_choice(plan, calls)["problems"][0]["roles"]["choice"]
    'b'
    """
    times = dict(zip(calls["problem_id"], calls["call_times"]))
    items = []
    for item in plan["problems"]:
        candidates = item.get("candidates") or [item["roles"]["choice"]]
        got = times.get(item["problem_id"]) or {}
        t = np.array([got.get(c, np.nan) for c in candidates], dtype=np.float64)
        choice = candidates[int(np.argmin(t))] if np.isfinite(t).all() else item["roles"]["choice"]
        items.append({**item, "roles": {**item["roles"], "choice": choice}})
    return {**plan, "problems": items}


def autotune_reference(plan: dict, raw: pd.DataFrame, calls: pd.DataFrame, resamples: int = BOOTSTRAP_RESAMPLES):
    """(``pytorch_autotune``'s :class:`~kbench.scoring.records.LiveReference`, its per-problem frame) from the
    autotune pass's time rows ``raw`` and its host-clock calls ``calls`` (problem_id, first_call_ms,
    second_call_ms); None where the pass timed no problem whole."""
    df = autotune_times(plan, raw)
    if not len(df):
        return None, df
    ref = reference_figures(df, LIVE_AUTOTUNE, resamples)
    cost = calls.set_index("problem_id").reindex(df["problem_id"])
    cost = (cost["first_call_ms"] - cost["second_call_ms"]).clip(lower=0.0).to_numpy(dtype=np.float64)
    if np.isfinite(cost).all():
        ref.first_call_cost_ms, ref.first_call_cost_median_ms = float(cost.sum()), float(np.median(cost))
    return ref, df


def live_figures(plan: dict, raw: pd.DataFrame, picks: pd.DataFrame, eager: pd.DataFrame,
                 resamples: int = BOOTSTRAP_RESAMPLES, autotune: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                 autotune_plan: dict | None = None):
    """:class:`kbench.scoring.records.LiveFigures` of a run with live references: the choice against the table's
    mode-A plan and every live reference (all timed in the run), and the agreement of the run's graph
    and eager times with the table. ``autotune``: the autotune pass's (time rows, host-clock calls), which
    add ``pytorch_autotune``; it is the strongest reference only where its pass timed every problem the
    others were timed on. ``autotune_plan``: the plan whose roles the autotune pass's rows are read with
    (a timed selector chooses in each pass apart: :func:`timed_choice`), ``plan`` by default."""
    times = measured_times(raw)
    df = live_times(plan, times, picks)
    if not len(df):
        raise KbenchInputError("no problem has a GPU time for every live reference yet; run the timing first")
    refs = ["table_mode_a", *LIVE_REFERENCES]
    references = {ref: reference_figures(df, ref, resamples) for ref in refs}
    by_direction = {str(d): {ref: _gm(g[f"m_{ref}"].to_numpy() / g["m_choice"].to_numpy()) for ref in refs}
                    for d, g in df.groupby("direction")}
    candidates = list(refs)
    if autotune is not None:
        ref, auto = autotune_reference(autotune_plan or plan, *autotune, resamples=resamples)
        if ref is not None:
            references[LIVE_AUTOTUNE] = ref
            for d, g in auto.groupby("direction"):
                by_direction.setdefault(str(d), {})[LIVE_AUTOTUNE] = _gm(
                    g[f"m_{LIVE_AUTOTUNE}"].to_numpy() / g["m_choice"].to_numpy())
            if set(df["problem_id"]) <= set(auto["problem_id"]):
                candidates.append(LIVE_AUTOTUNE)
    strongest = min(candidates, key=lambda ref: (references[ref].speedup_geomean, candidates.index(ref)))
    return LiveFigures(variant=plan["live"]["variant"], resamples=resamples, problems=int(len(df)),
                       references=references, strongest_reference=strongest, by_direction=by_direction,
                       agreement=[agreement(plan, times, "graph"), agreement(plan, eager, "eager")])

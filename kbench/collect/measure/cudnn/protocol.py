"""The timing protocol: its numbers, the rules drawn from them, a plan's timing state, and failures.

Everything here is pure (no GPU): the numbers that :mod:`.timing` runs by, the rules that
turn them into replay counts and spin lengths, the checks that find a bad measurement in
recorded data (:func:`launch_bound_mask`, :func:`inconsistent_with_warm`), the order plans
are run in (:func:`plan_priority`), a plan's state while it is timed (:class:`PlanState`), and
how a failure is told: its text in the record (``_err``), or :class:`FatalCudaError` when the
CUDA context is gone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

COARSE_TARGET_MS = 0.5
MAX_INNER = 100
COARSE_REPLAYS = 3
#: a plan whose first run is this many times slower than the fastest correct plan so far
#: gets one timed replay instead of COARSE_REPLAYS: its rank far behind the best is not
#: in doubt, and a single k-execution replay of a slow plan is still within about 1%
FAR_BEHIND = 4.0
PRECISE_BAND = 0.3
#: the GPU spins this long (plus SPIN_PER_LAUNCH_US per queued launch) before timed work, so
#: that the host has queued every timed launch before the first start event is reached: the
#: events then time the GPU's work, never the host's launch latency (see launch_bound_mask)
SPIN_BASE_US = 50.0
SPIN_PER_LAUNCH_US = 40.0
#: a spin kernel's cycles per microsecond (a lower bound of the SM clock; a longer spin is harmless)
SPIN_CYCLES_PER_US = 1500
#: a replay-timed plan slower per execution than this many times its warm single execution was
#: timed with something else than its kernels (the host, a stall): it is captured and timed again
WARM_CONSISTENCY = 1.5
PRECISE_MAX_PLANS = 8
PRECISE_ROUNDS = 4
PRECISE_REPLAYS = 5
PRECISE_ROUND_MS = 50.0  # a plan's replays per precise round are capped to about this much GPU time
SLOW_PLAN_MS = 20.0  # a plan this slow on its first run is timed by single executions
PROBLEM_TIME_CAP_S = 25.0  # plans not run by then are recorded as such, the problem as truncated
WORKSPACE_CAP = 4 << 30


class FatalCudaError(RuntimeError):
    """The CUDA context is unusable: end the process, the next run resumes."""


def timing_stats(per_exec_ms: list[float]) -> dict:
    """median, min, quartiles and count of per-execution times."""
    a = np.asarray([v for v in per_exec_ms if v is not None and np.isfinite(v)], dtype=float)
    if not len(a):
        return {"median": None, "min": None, "q1": None, "q3": None, "n": 0}
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {"median": float(med), "min": float(a.min()), "q1": float(q1), "q3": float(q3), "n": int(len(a))}


def inner_count(single_ms: float, target_ms: float = COARSE_TARGET_MS, cap: int = MAX_INNER) -> int:
    """Executions per captured graph so that one replay takes about ``target_ms``."""
    if not single_ms or not np.isfinite(single_ms) or single_ms <= 0:
        return 1
    return int(min(cap, max(1, math.ceil(target_ms / single_ms))))


def replays_per_round(replay_ms: float | None) -> int:
    """Replays of one precise round: PRECISE_REPLAYS, fewer for slow plans (>= 1)."""
    if not replay_ms or not np.isfinite(replay_ms) or replay_ms <= 0:
        return PRECISE_REPLAYS
    return int(max(1, min(PRECISE_REPLAYS, PRECISE_ROUND_MS // replay_ms)))


def spin_cycles(n_launches: int) -> int:
    """Cycles for the spin kernel that covers the host's queuing of ``n_launches`` timed launches."""
    return int((SPIN_BASE_US + SPIN_PER_LAUNCH_US * max(1, n_launches)) * SPIN_CYCLES_PER_US)


def launch_bound_mask(plans: pd.DataFrame) -> pd.Series:
    """Plans whose coarse time came from graph replays too short to hide the host.

    A captured replay of ``inner_k`` executions must last at least half the coarse target
    (:data:`COARSE_TARGET_MS`) unless ``inner_k`` is already :data:`MAX_INNER`; a shorter replay
    means ``inner_k`` was chosen from a first execution that was slow for another reason
    (lazy loading of the plan's kernels, a graph's first upload), and the replay's events then
    time the host's launch latency as well as the kernel. Likewise a plan timed by single
    executions (meant for plans over :data:`SLOW_PLAN_MS`) whose time is under that. This is
    the check that finds the 5-19x outliers of the old protocol in recorded data.
    """
    method = plans["timing_method"].astype(str)
    k = pd.to_numeric(plans["inner_k"], errors="coerce")
    coarse = pd.to_numeric(plans["coarse_ms"], errors="coerce")
    short_replay = method.eq("graph") & (k < MAX_INNER) & (coarse * k < COARSE_TARGET_MS / 2)
    # "single" is for plans over SLOW_PLAN_MS: one under it was sent there by a slow first execution,
    # and a single launch of a short kernel is timed with the host's launch latency
    fast_single = method.eq("single") & (coarse < SLOW_PLAN_MS)
    return short_replay | fast_single


def inconsistent_with_warm(coarse_ms: float, warm_exec_ms: float) -> bool:
    """True when replays of k executions took longer per execution than ``WARM_CONSISTENCY`` times
    one spin-protected execution: back-to-back executions are never slower than one alone, so the
    replays timed something else (the run-to-run outlier study, data card: a k=1 replay that timed
    0.49 ms of host latency for a 26 us kernel)."""
    if coarse_ms is None or warm_exec_ms is None or not (warm_exec_ms > 0):
        return False
    return bool(coarse_ms > WARM_CONSISTENCY * warm_exec_ms)


def plan_priority(rec: dict) -> tuple:
    """Order in which plans are run: cuDNN's mode-A order, then mode B's, then the fallback list."""
    for i, tag in enumerate(("rank_a", "rank_b", "rank_fallback")):
        if rec.get(tag, -1) is not None and rec.get(tag, -1) >= 0:
            return (i, rec[tag])
    return (3, 0)


@dataclass
class PlanState:
    index: int
    rec: dict
    graph: object = None  # captured CUDA graph
    k: int = 1
    times: list = field(default_factory=list)


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip()}"[:800]

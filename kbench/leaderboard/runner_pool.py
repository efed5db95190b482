"""``kbench run --jobs N``: how many workers, what each fits, and its library threads.

:func:`kbench.leaderboard.runner.run_methods_in_pool` runs the (baseline, seed) pairs in N forked
worker processes; each fits and scores one pair with the function ``--jobs 1`` uses and writes its
seed folder as soon as it is done, so that a run stopped part-way resumes as one in a single process
does. Each worker's library threads are capped at its share of the cores (:func:`limit_worker_threads`),
so that N workers do not oversubscribe the machine.
"""

from __future__ import annotations

import multiprocessing
import os
import sys

from kbench.core.errors import KbenchInputError
from kbench.scoring.environment import TREE_THREADS_VARIABLE


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS gives one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def checked_jobs(jobs) -> int:
    """``jobs`` as a whole number of worker processes >= 1 (None: one per core), else an input error."""
    if jobs is None:
        return machine_cores()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise KbenchInputError(f"--jobs {jobs!r}: give a whole number of worker processes >= 1 (1: everything "
                               f"in this process; default: one per core, {machine_cores()} here).")
    return jobs


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def limit_worker_threads(threads: int) -> None:
    """Cap the library threads of a worker so that N workers x ``threads`` stay within the cores.

    Tree learners read ``KBENCH_THREADS`` (XGBoost ``nthread``, forests' ``n_jobs``; their results are
    the same for any thread count), BLAS and OpenMP pools are capped with threadpoolctl, and PyTorch's
    intra-op pool with ``set_num_threads`` (a method that sets its own count, as the reformer does with
    1, keeps it). A ``KBENCH_THREADS`` the user set is kept.
    """
    os.environ.setdefault(TREE_THREADS_VARIABLE, str(threads))
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = str(threads)  # for libraries that start their pools later in this worker
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(threads)
    except ImportError:  # installed with scikit-learn; without it only the variables above apply
        pass
    torch = sys.modules.get("torch")  # only where a baseline module imported it already
    if torch is not None:
        torch.set_num_threads(threads)


def pool_tasks(classes: dict[str, type], records: dict[str, dict], seeds: list[int],
               fit_seconds: dict[str, float] | None = None) -> list[tuple[str, int, bool]]:
    """The (method, seed, time latency) fits a run still needs, in the order they are started.

    A deterministic method is fitted once (its first unfinished seed, none when a seed is finished:
    the others are copies); batch-1 latency is timed on each method's first fit of the run, as with
    ``--jobs 1``. Methods with the longest known fit per seed (``fit_seconds``: what the board's
    entries record) start first, those with none known before them, so that the short fits fill
    the workers at the end instead of one long fit running alone (longest-first scheduling).
    """
    fit_seconds = fit_seconds or {}
    order = sorted(classes, key=lambda name: -fit_seconds.get(name, float("inf")))  # stable: ties keep their order
    tasks = []
    for name in order:
        pending = [s for s in seeds if s not in records[name]]
        if not getattr(classes[name], "stochastic", True):
            pending = pending[:1] if not records[name] else []
        tasks += [(name, seed, i == 0) for i, seed in enumerate(pending)]
    return tasks

"""The ``noise-ceiling`` reference row: the first measurement's winners scored against a repeat measurement.

A dataset with a ``repeats`` table (:mod:`kbench.repeatability`) holds a sample
of problems measured twice: run 0 (the measurement ``runtimes`` comes from)
and run 1 (another run). Ranking each sampled test problem's kernels by run 0's
times and scoring that ranking against run 1's times gives what a perfect
reproduction of the labels scores once the labels are measured again: the
ceiling that measurement noise puts on every entry. The oracle (scored against
the labels it read) sits at 1 by definition; the distance between the two rows
is the noise, and differences between entries smaller than it are within noise.

Nothing is shown for a dataset without a ``repeats`` table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kbench.data.dataset import Dataset
from kbench.leaderboard.policy import PRIMARY_METRIC
from kbench.leaderboard.schema import SubmissionMeta
from kbench.leaderboard.store import Entry
from kbench.scoring.evaluate import Evaluator
from kbench.sources.repeatability import run_pairs

NOISE_METHOD = "noise-ceiling"
NOISE_DESCRIPTION = ("ceiling under measurement noise: the first measurement's kernel order scored against a "
                     "repeat measurement of the sampled test problems (the dataset's repeats table)")


def noise_ceiling_result(ds, split: str = "random", part: str = "test", run_a: int = 0, run_b: int = 1):
    """(EvaluationResult, predictions) of the noise ceiling on ``ds``'s sampled ``part`` problems, or None.

    The predictions rank each problem's kernels by run ``run_a``'s times; they are
    scored on a copy of ``ds`` restricted to the sampled problems of ``part``
    whose ``runtimes`` are run ``run_b``'s times (kernels timed in both runs).
    """
    rep = ds.repeats
    if rep is None or not len(rep) or not ({run_a, run_b} <= set(rep["run_id"].unique().tolist())):
        return None
    ids = set(ds.split(split)[part].astype(str))
    pairs = run_pairs(rep, run_a, run_b)
    pairs = pairs[pairs["problem_id"].isin(ids)]
    if not len(pairs):
        return None
    sampled = set(pairs["problem_id"])
    rt = ds.runtimes
    base = rt[rt["problem_id"].astype(str).isin(sampled)].copy()
    base["problem_id"], base["kernel"] = base["problem_id"].astype(str), base["kernel"].astype(str)
    base = base.drop(columns="time_ms").merge(pairs[["problem_id", "kernel", "t_b"]], on=["problem_id", "kernel"],
                                              how="inner").rename(columns={"t_b": "time_ms"})
    tables = {k: (v[v["problem_id"].astype(str).isin(sampled)].reset_index(drop=True) if "problem_id" in v else v)
              for k, v in ds.tables.items() if k != "repeats"}
    tables["runtimes"] = base.reset_index(drop=True)
    repeat_ds = Dataset(ds.name, tables, ds.manifest, ds.path)
    order = pairs.sort_values(["problem_id", "t_a", "kernel"], kind="stable")
    preds = order.groupby("problem_id", sort=True)["kernel"].agg(";".join).rename("ranking").reset_index()
    result = Evaluator(repeat_ds, split=split, part=part)(preds, method=NOISE_METHOD)
    # computed from the data alone: no date of its own, so a rebuilt site stays byte-identical
    return result.model_copy(update={"date": "—", "environment": None}), preds


#: significant digits of the figures computed at build time (the noise ceiling's)
FIGURE_DIGITS = 12


def significant(tree, digits: int = FIGURE_DIGITS):
    """``tree`` (nested dicts and lists of figures) with every finite float rounded to ``digits``
    significant digits."""
    if isinstance(tree, dict):
        return {k: significant(v, digits) for k, v in tree.items()}
    if isinstance(tree, list):
        return [significant(v, digits) for v in tree]
    if isinstance(tree, float) and np.isfinite(tree):
        return float(f"{tree:.{digits}g}")
    return tree


def noise_entry(ds, split: str = "random"):
    """The reference :class:`~kbench.leaderboard.store.Entry` of the noise ceiling, or None."""
    out = noise_ceiling_result(ds, split)
    if out is None:
        return None
    result, _ = out
    # computed at build time, not read from a record: its float sums differ in their last bits between
    # numpy builds, so its figures are written rounded, and the generated files do not depend on the machine
    result.metrics = significant(result.metrics)
    meta = SubmissionMeta(method=NOISE_METHOD, description=NOISE_DESCRIPTION, role="ceiling", paper=None,
                          code="kbench/leaderboard/noise.py", contact="kbench maintainers",
                          command="kbench leaderboard build", n_parameters=None, model_size_bytes=None,
                          training_hardware="none: computed from the dataset's repeats table",
                          training_time_s=None, inference_latency_ms=None, external_data=False,
                          kbench_version=result.kbench_version, dataset=result.dataset, split=split)
    return Entry(folder=Path(NOISE_METHOD), record=result, meta=meta, preds_path=None)


def noise_sentence(entry, ranked: list) -> str:
    """One sentence: how far the noise ceiling is from 1 and which entry differences are within it.

    ``ranked``: the board's ranked entries, best first, as (name, primary metric) pairs.
    """
    value = entry.record.overall.get(PRIMARY_METRIC)
    n = entry.record.counts.scored
    if value is None or not np.isfinite(value):
        return ""
    noise = float(value) - 1.0
    close = [f"{a} and {b}" for (a, va), (b, vb) in zip(ranked, ranked[1:])
             if va is not None and vb is not None and abs(float(vb) - float(va)) < noise]
    near_oracle = [a for a, va in ranked if va is not None and float(va) - 1.0 < noise]
    within = ("; ".join(close) if close else "no two neighbouring entries") + " differ by less than that"
    within += (", and " + ", ".join(near_oracle) + " " + ("is" if len(near_oracle) == 1 else "are")
               + " within it of the oracle") if near_oracle else ""
    return (f"noise-ceiling: the first measurement's winners, re-measured in another run, are {value:.4f}x the "
            f"new fastest on {n} sampled test problems, so differences in {PRIMARY_METRIC.replace('_', ' ')} "
            f"smaller than {noise:.4f} are within measurement noise: {within}.")

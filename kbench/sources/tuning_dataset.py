"""Tuning-parameter datasets (``mi50-tuning``, ``mi300x-tuning``) from MIOpen perf-dbs.

Tables (docs/data_model.md, plus ``targets``):

* ``problems``: canonical problem columns, ids = MIOpen problem keys (the same
  ids as the kernel-selection sets), plus ``key_source`` and ``n_solvers``
  (see :mod:`kbench.sources.perfdb`).
* ``targets``: one row per (problem, tuned solver): ``problem_id``,
  ``solver``, ``params`` (raw perf-db string) and typed nullable Int64
  columns for the parameters of the solvers in
  :data:`kbench.sources.tuning_grammar.SOLVER_PARAMS`.
* ``splits``: ``problem_id``, ``random`` (grouped by ``geometry_id``, stable
  hash; :func:`kbench.sources.splits.assign_random_split`), when MITuna's network
  lists are available ``networks`` (:func:`kbench.sources.splits.assign_networks_split`), and
  ``shapes`` (grouped by the geometry with the batch size ignored;
  :func:`kbench.sources.splits.assign_shapes_split`).

Only the optimum is known (no runtimes): the task is to predict a solver's
optimal tuple for a problem, scored by :mod:`kbench.scoring.tuning_metrics`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kbench.sources.mituna import read_network_layers
from kbench.sources.perfdb import perfdb_tables
from kbench.sources.splits import assign_networks_split, assign_random_split, assign_shapes_split

#: Raw files (under the shared data folder) of the tuning datasets.
TUNING_SOURCES = {
    "mi50-tuning": "miopen/gfx906_60.db.bz2",
    "mi300x-tuning": "miopen/gfx942130.db.bz2",
}


def _default_mituna(db_path) -> Path | None:
    cand = Path(db_path).resolve().parent.parent / "mituna"
    return cand if cand.is_dir() and any(cand.glob("*.txt")) else None


def convert_perfdb(db_path, fdb_path="auto", mituna_dir="auto") -> tuple[dict[str, pd.DataFrame], dict]:
    """Tables (``problems``, ``targets``, ``splits``) and a cleaning report.

    ``fdb_path``: the same device's find-db, used to pick the x size of
    strided backward problems ("auto": the sibling ``<stem>.HIP.fdb.txt.bz2``).
    ``mituna_dir``: MITuna network lists for the ``networks`` split ("auto":
    ``<db folder>/../mituna`` when present; None: no networks split).
    """

    res = perfdb_tables(db_path, fdb_path)
    problems, targets, report = res["problems"], res["targets"], res["summary"]
    splits = pd.DataFrame({"problem_id": problems["problem_id"],
                           "random": assign_random_split(problems)})
    if mituna_dir == "auto":
        mituna_dir = _default_mituna(db_path)
    if mituna_dir is not None:
        splits["networks"] = assign_networks_split(problems, read_network_layers(mituna_dir))
    splits["shapes"] = assign_shapes_split(problems)
    report["splits"] = [c for c in splits.columns if c != "problem_id"]
    return {"problems": problems, "targets": targets, "splits": splits}, report


def build_tuning_dataset(db_path, fdb_path="auto", mituna_dir="auto") -> dict[str, pd.DataFrame]:
    """The tables of a tuning dataset: ``problems``, ``targets``, ``splits``."""
    return convert_perfdb(db_path, fdb_path, mituna_dir)[0]

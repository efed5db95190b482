"""Label verifications (``kbench collect verify-labels``) read back and applied to raw plan records.

The GPU run (:mod:`kbench.gpu_check.shipped_labels`) writes one JSON line per
problem-direction with the per-plan checks of the verification pass
(:mod:`kbench.collect.label_retiming.front_runners`). Here they are read (:func:`read_labels`) and
joined onto the raw plan records (:func:`apply_labels`) with the fields the
collector's own pass writes, so that packaging
(:func:`kbench.collect.packaging.package.candidate_runtimes`) treats both alike.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd

from kbench.core.errors import KbenchInputError

#: per-plan fields a label verification adds to the raw plan records (the collector's own pass writes the same)
PLAN_FIELDS = ("first_ms", "verify_ms", "verify2_ms", "verified", "verified_ms")


def _lines(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        for line in fh:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:  # a line cut by a kill: that problem was not finished
                continue


def read_labels(paths) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(plan checks, problem summary) of label-verification ``raw.jsonl[.gz]`` files.

    Plan checks: one row per (key, plan) re-timed, with :data:`PLAN_FIELDS`.
    Problem summary: one row per problem (``key, status, passes, converged,
    seconds, source``). A problem verified more than once (a later file, or
    later in a file) keeps its last finished verification, checks included;
    a failed last verification leaves it without checks.
    """
    plan_rows, prob_rows = [], []
    for path in [paths] if isinstance(paths, (str, Path)) else paths:
        path = Path(path)
        for row in _lines(path):
            if row.get("kind") != "problem":
                continue
            seq = len(prob_rows)
            prob_rows.append({"key": row["problem_id"], "status": row["status"], "passes": row.get("passes"),
                              "converged": row.get("converged"), "seconds": row.get("seconds"),
                              "source": path.name, "_seq": seq})
            for plan, rec in (row.get("checks") or {}).items():
                plan_rows.append({"key": row["problem_id"], "plan": plan, "_seq": seq,
                                  **{f: rec.get(f) for f in PLAN_FIELDS}})
    problems = pd.DataFrame(prob_rows, columns=["key", "status", "passes", "converged", "seconds", "source", "_seq"])
    problems = problems.drop_duplicates("key", keep="last")
    checks = pd.DataFrame(plan_rows, columns=["key", "plan", "_seq", *PLAN_FIELDS])
    checks = checks[checks["_seq"].isin(problems.loc[problems["status"].eq("ok"), "_seq"])]
    return (checks.drop(columns="_seq").reset_index(drop=True),
            problems.drop(columns="_seq").reset_index(drop=True))


def apply_labels(plans: pd.DataFrame, checks: pd.DataFrame) -> pd.DataFrame:
    """The raw plan records with the label checks' fields (by key and plan); plans not re-timed keep NaN.

    Refuses records that already carry the collector's own verification (one label source per plan).
    """
    if not len(checks):
        return plans
    ours = plans.merge(checks[["key", "plan"]], on=["key", "plan"], how="inner")
    if "verified_ms" in ours and ours["verified_ms"].notna().any():
        raise KbenchInputError("label checks given for plans the collector already verified; "
                               "one verification per plan.")
    out = plans.merge(checks, on=["key", "plan"], how="left", suffixes=("", "_labels"))
    for f in PLAN_FIELDS:
        if f + "_labels" in out:  # the raw records have the column too (collector-verified plans)
            out[f] = out[f].where(out[f].notna(), out.pop(f + "_labels"))
    return out


def label_files(raw: str | Path) -> list[Path]:
    """A raw folder's label-verification files (``labels/*.jsonl.gz``, in name order)."""
    return sorted((Path(raw) / "labels").glob("*.jsonl.gz"))

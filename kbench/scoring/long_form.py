"""The one rule that turns long-form predictions (``problem_id, kernel, score``) into rankings.

Rows of one problem are ranked by ``score``, highest first; **equal scores are ranked by kernel name
(A to Z)**, never by the order of the rows, so a file scores the same shuffled, reversed or
re-sorted ("rows are joined by id, never by position"). ``kbench evaluate`` (:mod:`kbench.scoring.evaluate`)
and ``kbench verify-on-gpu`` (:mod:`kbench.gpu_check.plan`) both rank by :func:`long_form_order`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: the tie rule as the docs and error messages state it
TIE_RULE = ("rows of one problem are ranked by score, highest first; equal scores by kernel name (A to Z), "
            "never by row order")


def long_form_order(problem, score, kernel) -> np.ndarray:
    """The row order that ranks long-form rows: by ``problem`` (as given: ids or indices), then
    ``score`` descending, then ``kernel`` name ascending (whitespace around names ignored)."""
    names = pd.Series(np.asarray(kernel, dtype=object)).astype(str).str.strip().to_numpy(dtype=str)
    scores = np.asarray(score, dtype=np.float64)
    return np.lexsort((names, -scores, np.asarray(problem)))


def long_form_rankings(frame: pd.DataFrame) -> pd.DataFrame:
    """``problem_id, ranking`` (';'-joined, by :func:`long_form_order`) of a long-form frame, one row
    per problem, problems in the order they first appear."""
    ids = frame["problem_id"].astype(str).str.strip()
    first_seen = pd.Index(pd.unique(ids))
    order = long_form_order(first_seen.get_indexer(ids), pd.to_numeric(frame["score"], errors="coerce"),
                            frame["kernel"])
    kernels = frame["kernel"].astype(str).str.strip().iloc[order]
    rankings = kernels.groupby(ids.iloc[order].to_numpy(), sort=False).agg(";".join)
    return rankings.rename("ranking").rename_axis("problem_id").reset_index()

"""A ``random`` board's figures on the twin-free part of its test part, re-scored from the stored predictions.

``random`` is grouped by the geometry *with* its batch size, so most of its test problems have a batch
twin in ``train``: the same convolution at another batch size (mi100: 90.4% of them;
:func:`kbench.sources.splits.batch_twins`). A model can read such a twin's label off its training
data. The twin-free part is the test problems with no such twin; every entry is scored on it from
its stored seed-0 predictions (the per-problem scores the tie test reads), with the Evaluator's rules
(``kbench.leaderboard.stats.problem_scores``), beside the whole test part's from the same file;
nothing is retrained. Where ``random``
is already grouped without the batch (the 3D sets) there are no twins and nothing is added.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from kbench.leaderboard.board import fmt_mean_std, fmt_pct, md_text
from kbench.sources.splits import NETWORK_GEOMETRY, batch_twins

#: the split whose boards get the twin-free figures (``networks`` holds whole geometries out: no twins)
TWIN_SPLIT = "random"


@dataclass
class TwinFreeRow:
    name: str
    geomean: float
    top1: float
    full_geomean: float
    full_top1: float


@dataclass
class TwinFree:
    """The twin-free part of a board's test part and every entry's figures on it."""

    problems: int
    test: int
    rows: list[TwinFreeRow] = field(default_factory=list)

    @property
    def text(self) -> str:
        return (f"On the twin-free part of test: the {self.problems:,} of {self.test:,} test problems "
                f"({self.problems / self.test:.1%}) with no problem of the same shape at another batch size "
                "in train (split `random` groups by the geometry with its batch). Geometric-mean slowdown and "
                "top-1 of each entry's seed-0 predictions, re-scored from the stored file, on that part and on "
                "the whole test part.")


def twin_free_mask(ds, evaluator) -> np.ndarray:
    """Per problem of the evaluator's table: True where it has no batch twin in the split's train part."""
    problems = ds.problems
    parts = ds.tables["splits"].set_index("problem_id")[evaluator.split].reindex(problems["problem_id"].to_numpy())
    twins = pd.Series(batch_twins(problems, pd.Series(parts.to_numpy(), index=problems.index)).to_numpy(),
                      index=problems["problem_id"].to_numpy())
    return ~twins.reindex(evaluator.table.problem_ids).fillna(False).to_numpy(dtype=bool)


def _geomean_top1(log_slowdown: np.ndarray) -> tuple[float, float]:
    """Geometric-mean slowdown and top-1 share of per-problem log(t_choice / t_best) (predicted ones only)."""
    log_slowdown = log_slowdown[~np.isnan(log_slowdown)]
    return math.exp(float(np.mean(log_slowdown))), float(np.mean(log_slowdown <= 0.0))


def twin_free_figures(board, ds, evaluator, scores: dict) -> TwinFree | None:
    """Every scored entry's twin-free figures on a ``random`` board, from ``scores`` (method ->
    :class:`~kbench.leaderboard.stats.ProblemScores` of its seed-0 predictions); None on other splits, or
    where no test problem has a twin."""
    if board.split != TWIN_SPLIT or board.tuning or not set(NETWORK_GEOMETRY) <= set(ds.problems.columns):
        return None  # another split, or a dataset without convolution geometries (no batch to leave out)
    keep = twin_free_mask(ds, evaluator)
    if keep.all() or not keep.any():
        return None
    out = TwinFree(problems=int(keep.sum()), test=int(len(keep)))
    for row in board.all_rows():
        score = scores.get(row.entry.method)
        if score is None:
            continue
        (g, t), (full_g, full_t) = _geomean_top1(score.log_slowdown[keep]), _geomean_top1(score.log_slowdown)
        out.rows.append(TwinFreeRow(row.entry.name, g, t, full_g, full_t))
    return out if out.rows else None


def twin_free_html(twin: TwinFree | None, slug: str) -> str:
    if twin is None:
        return ""
    heads = ["method", "twin-free geomean slowdown", "whole test", "twin-free top-1", "whole test"]
    body = "".join(
        f"<tr><td class=\"text\">{html.escape(r.name)}</td><td>{fmt_mean_std(r.geomean, None)}</td>"
        f"<td>{fmt_mean_std(r.full_geomean, None)}</td><td>{fmt_pct(r.top1)}</td><td>{fmt_pct(r.full_top1)}</td></tr>"
        for r in twin.rows)
    return (f'<p class="note">{html.escape(twin.text)}</p><div class="table-wrap"><table class="lb twin" '
            f'id="twin-{html.escape(slug)}"><thead><tr>'
            + "".join(f'<th scope="col">{h}</th>' for h in heads) + f"</tr></thead><tbody>{body}</tbody></table></div>")


def twin_free_markdown(twin: TwinFree | None) -> str:
    if twin is None:
        return ""
    lines = [twin.text, "",
             "| method | twin-free geomean slowdown | whole test | twin-free top-1 | whole test |",
             "|---|---|---|---|---|"]
    lines += [f"| {md_text(r.name)} | {fmt_mean_std(r.geomean, None)} | {fmt_mean_std(r.full_geomean, None)} "
              f"| {fmt_pct(r.top1)} | {fmt_pct(r.full_top1)} |" for r in twin.rows]
    return "\n".join(lines)

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
    #: the same method's seed-0 figures on the dataset's ``shapes`` board, where it has an entry there
    shapes_geomean: float | None = None
    shapes_top1: float | None = None


@dataclass
class TwinFree:
    """The twin-free part of a board's test part and every entry's figures on it."""

    problems: int
    test: int
    rows: list[TwinFreeRow] = field(default_factory=list)

    @property
    def with_shapes(self) -> bool:
        return any(r.shapes_geomean is not None for r in self.rows)

    @property
    def text(self) -> str:
        shapes = (" The `shapes` columns give the same method's seed-0 figures on the `shapes` board: a split "
                  "grouped by the geometry with the batch size ignored (no twins), trained and tested on other "
                  "parts; – where the method has no `shapes` entry.") if self.with_shapes else ""
        return (f"On the twin-free part of test: the {self.problems:,} of {self.test:,} test problems "
                f"({self.problems / self.test:.1%}) with no problem of the same shape at another batch size "
                "in train (split `random` groups by the geometry with its batch). Geometric-mean slowdown and "
                "top-1 of each entry's seed-0 predictions, re-scored from the stored file, on that part and on "
                "the whole test part." + shapes)


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


def shapes_figures(entries) -> dict[str, tuple[float, float]]:
    """method -> (geometric-mean slowdown, top-1) of its first seed, of the entries of a ``shapes`` board (the
    figures its record states, which validate re-scores from the stored predictions)."""
    out = {}
    for entry in entries or []:
        seeds = entry.record.seeds
        first = seeds.per_seed[0] if seeds and seeds.per_seed else entry.record.metrics.get("overall", {})
        if first.get("geomean_slowdown") is not None and first.get("top1") is not None:
            out[entry.method] = (float(first["geomean_slowdown"]), float(first["top1"]))
    return out


def twin_free_figures(board, ds, evaluator, scores: dict, shapes_entries=None) -> TwinFree | None:
    """Every scored entry's twin-free figures on a ``random`` board, from ``scores`` (method ->
    :class:`~kbench.leaderboard.stats.ProblemScores` of its seed-0 predictions), beside its seed-0 figures on
    the dataset's ``shapes`` board (``shapes_entries``, where there is one); None on other splits, or where
    no test problem has a twin."""
    if board.split != TWIN_SPLIT or board.tuning or not set(NETWORK_GEOMETRY) <= set(ds.problems.columns):
        return None  # another split, or a dataset without convolution geometries (no batch to leave out)
    keep = twin_free_mask(ds, evaluator)
    if keep.all() or not keep.any():
        return None
    out = TwinFree(problems=int(keep.sum()), test=int(len(keep)))
    shapes = shapes_figures(shapes_entries)
    for row in board.all_rows():
        score = scores.get(row.entry.method)
        if score is None:
            continue
        (g, t), (full_g, full_t) = _geomean_top1(score.log_slowdown[keep]), _geomean_top1(score.log_slowdown)
        out.rows.append(TwinFreeRow(row.entry.name, g, t, full_g, full_t, *shapes.get(row.entry.method, (None, None))))
    return out if out.rows else None


HEADS = ["method", "twin-free geomean slowdown", "whole test", "twin-free top-1", "whole test"]
SHAPES_HEADS = ["`shapes` geomean slowdown", "`shapes` top-1"]


def _cells(row: TwinFreeRow, with_shapes: bool) -> list[str]:
    """A row's figure cells, in the order of :data:`HEADS` (and :data:`SHAPES_HEADS`)."""
    cells = [fmt_mean_std(row.geomean, None), fmt_mean_std(row.full_geomean, None), fmt_pct(row.top1),
             fmt_pct(row.full_top1)]
    if with_shapes:
        cells += ["–", "–"] if row.shapes_geomean is None else [fmt_mean_std(row.shapes_geomean, None),
                                                              fmt_pct(row.shapes_top1)]
    return cells


def twin_free_html(twin: TwinFree | None, slug: str) -> str:
    if twin is None:
        return ""
    heads = HEADS + (SHAPES_HEADS if twin.with_shapes else [])
    body = "".join("<tr><td class=\"text\">" + html.escape(r.name) + "</td>"
                   + "".join(f"<td>{cell}</td>" for cell in _cells(r, twin.with_shapes)) + "</tr>" for r in twin.rows)
    return (f'<p class="note">{html.escape(twin.text)}</p><div class="table-wrap"><table class="lb twin" '
            f'id="twin-{html.escape(slug)}"><thead><tr>'
            + "".join(f'<th scope="col">{html.escape(h.replace("`", ""))}</th>' for h in heads) + f"</tr></thead><tbody>{body}</tbody></table></div>")


def twin_free_markdown(twin: TwinFree | None) -> str:
    if twin is None:
        return ""
    heads = HEADS + (SHAPES_HEADS if twin.with_shapes else [])
    lines = [twin.text, "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    lines += ["| " + " | ".join([md_text(r.name), *_cells(r, twin.with_shapes)]) + " |" for r in twin.rows]
    return "\n".join(lines)

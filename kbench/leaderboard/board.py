"""A leaderboard table in memory: its rows (:class:`Row`), the table (:class:`Board`) and the cell formats.

:mod:`kbench.leaderboard.site` builds boards from the entries and renders them as HTML and Markdown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kbench.core.escaping import markdown_text
from kbench.data.registry import DATASETS, variants_of
from kbench.leaderboard.policy import PRIMARY_METRIC
from kbench.leaderboard.store import Entry


# ----------------------------------------------------------------------------- formatting
def _num(v) -> float | None:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)


def fmt_pct(v, digits=2) -> str:
    v = _num(v)
    return "—" if v is None else f"{100 * v:.{digits}f}%"


def fmt_x(v, digits=3) -> str:
    v = _num(v)
    return "—" if v is None else f"{v:.{digits}f}×"


def fmt_mean_std(mean, std, digits=4) -> str:
    mean, std = _num(mean), _num(std)
    if mean is None:
        return "—"
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if std is not None else "")


def fmt_pct_mean_std(mean, std, digits=2) -> str:
    """A share and its spread in percent: ``77.74% ± 0.21``."""
    mean, std = _num(mean), _num(std)
    if mean is None:
        return "—"
    return f"{100 * mean:.{digits}f}%" + (f" ± {100 * std:.{digits}f}" if std is not None else "")


def fmt_count(v) -> str:
    v = _num(v)
    if v is None:
        return "—"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:.1f}{unit}"
    return f"{v:.0f}"


def fmt_ms(v) -> str:
    v = _num(v)
    if v is None:
        return "—"
    return f"{v:.3g} ms"


#: free text for a markdown table cell (kbench.core.escaping.markdown_text: on one line, HTML escaped, the
#: characters that start markdown links or emphasis and ``|`` backslashed)
md_text = markdown_text


def _value(v) -> str:
    v = _num(v)
    return "" if v is None else repr(round(v, 12))


# ----------------------------------------------------------------------------- rows
@dataclass
class Row:
    entry: Entry
    rank: int | None
    tie: bool = False
    tie_with: str = ""

    @property
    def record(self):
        return self.entry.record

    @property
    def overall(self) -> dict:
        return self.record.overall

    @property
    def role(self) -> str:
        return self.entry.role

    def primary(self):
        return self.overall.get(PRIMARY_METRIC)

    def primary_std(self):
        return (self.record.seeds.std.get(PRIMARY_METRIC) if self.record.seeds else None)

    def deterministic(self, metric: str = PRIMARY_METRIC) -> bool:
        """Its seeds give one result (the record's ``extra.stochastic`` is false, or every seed scored
        ``metric`` the same): a spread of 0 over N seeds would read as N independent results."""
        seeds = self.record.seeds
        if not seeds or len(seeds.seeds) < 2:
            return False
        if (self.record.extra or {}).get("stochastic") is False:
            return True
        values = {p.get(metric) for p in seeds.per_seed}
        return len(values) == 1 and None not in values

    def shown_std(self, metric: str = PRIMARY_METRIC):
        """The spread a table shows beside ``metric``: none for a deterministic entry (it is marked instead)."""
        if self.deterministic(metric) or not self.record.seeds:
            return None
        return self.record.seeds.std.get(metric)

    def reported_valid(self):
        """The submitter's own validation-part figure and its std over seeds, from ``extra.valid``: not
        re-scored (valid-part predictions are not stored), so it is exported as ``reported_valid_*`` only."""
        v = self.record.extra.get("valid") if isinstance(self.record.extra, dict) else None
        if isinstance(v, dict) and "mean" in v:
            return v["mean"].get(PRIMARY_METRIC), (v.get("std") or {}).get(PRIMARY_METRIC)
        if isinstance(v, dict):  # a single-seed valid summary
            return v.get(PRIMARY_METRIC), None
        return None, None

    def censored_share(self) -> float:
        return float(self.overall.get("share_censored") or 0.0)


@dataclass
class Board:
    """One table: a dataset and split."""

    dataset: str
    split: str
    rows: list[Row]
    refs: list[Row]
    n_problems: int | None
    reference: str | None
    lops: dict[str, np.ndarray] = field(default_factory=dict)
    tuning: bool = False  # a tuning-parameter table (TuningResult records), not kernel selection
    notes: list[str] = field(default_factory=list)
    plots: list[tuple[str, str, str]] = field(default_factory=list)  # (file, title, alt)
    twin_free: object | None = None  # a `random` board's figures without batch twins (leaderboard.twin_free)

    @property
    def slug(self) -> str:
        return f"{self.dataset}-{self.split}"

    @property
    def title(self) -> str:
        """The board's heading: dataset and split, and where the dataset has candidate-set variants
        (docs/variants.md) the variant and the reference its speed-ups are against, so that no
        headline figure is read without them."""
        spec = DATASETS.get(self.dataset)
        base = self.dataset.removesuffix(f"-{spec.variant}") if spec is not None else self.dataset
        title = f"{self.dataset} · split {self.split}"
        if spec is not None and len(variants_of(base)) > 1:
            title += f" · candidate set {spec.variant}"
            if self.reference:
                title += f" · reference {self.reference}"
        return title

    def all_rows(self) -> list[Row]:
        return self.rows + self.refs

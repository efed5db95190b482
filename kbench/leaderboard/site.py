"""``kbench leaderboard build``: leaderboard/README.md and the static site, from the records alone.

The output depends only on the records, metadata and predictions under the
leaderboard folder, the datasets they were scored on and the data cards: no
timestamps, no random state (the bootstrap is seeded), sorted everywhere. The
same inputs give byte-identical files (``build --check`` verifies it).

Site layout (works from the file system and any static host; no CDN)::

    site/index.html             every dataset and split: tables and plots
    site/<dataset>.html         one page per dataset: facts, tables, plots, its data card
    site/assets/style.css, site/assets/sort.js, site/assets/filter.js
    site/boards/<dataset>-<split>.{csv,json}   each table's rows with the stored figures (table_extras)
    site/plots/<dataset>-<split>-{lop-cdf,speedup-direction,accuracy-latency,best-of-k,learning-curve}.svg
    site/data_cards/<dataset>.md
"""

from __future__ import annotations

import html
import shutil
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from kbench.core.errors import KbenchError, KbenchInputError
from kbench.core.escaping import markdown_cell, markdown_prose
from kbench.leaderboard import markdown, plots, practitioner_table
from kbench.leaderboard.assets import FILTER_JS, SORT_JS, STYLE_CSS
from kbench.leaderboard.board import (
    Board,
    Row,
    _num,
    _value,
    fmt_count,
    fmt_mean_std,
    fmt_ms,
    fmt_pct,
    fmt_pct_mean_std,
    fmt_x,
    md_text,
)
from kbench.leaderboard.cards import cards_found
from kbench.leaderboard.noise import NOISE_METHOD, noise_entry, noise_sentence
from kbench.leaderboard.policy import PRIMARY_LABEL, PRIMARY_LOWER_IS_BETTER, PRIMARY_METRIC, PRIMARY_TEXT, RULES_MD
from kbench.leaderboard.reproduction import machine_note
from kbench.leaderboard.stats import TIE_TEST_TEXT, problem_scores, tied
from kbench.leaderboard.store import Entry, atomic_write_bytes, load_dataset, read_entries
from kbench.leaderboard.table_extras import (
    LEARNING_CURVE,
    REPORTED,
    board_files,
    code_href,
    code_html,
    code_url_prefix,
    curve_note,
    curve_plot,
    details_href,
    details_html,
    external_badge,
    gpu_note,
    gpu_speedup,
    gpu_title,
    measured_json,
    readme_code_link,
    selector_note,
    tools_html,
)
from kbench.leaderboard.transfer_track import transfer_html, transfer_markdown
from kbench.leaderboard.twin_free import twin_free_figures, twin_free_html, twin_free_markdown
from kbench.scoring.evaluate import Evaluator
from kbench.scoring.records import TuningResult

SITE_MARKER = ".kbench-site"
ROLE_ORDER = {"ceiling": 0, "floor": 1}
BOUND_TEXT = ("† some test choices fall outside a censored list (find-db keeps only the fastest few kernels): "
              "their time is a lower bound, so LoP and slowdown are lower bounds and within-5% and speed-up "
              "upper bounds for that entry; the share is in the tooltip.")
DETERMINISTIC_TEXT = ("det.: deterministic, its seeds give one result (the seed changes nothing), so no spread "
                      "is shown.")
TRAINING_SET_TEXT = "trained on …: an entry trained on part of the train part says how much (its meta.json)."
ONE_SEED_TEXT = ("‡ one-seed entry: only its first seed's predictions are stored, so that seed's figures are "
                 "re-scored by `kbench leaderboard validate` but the mean and ± over its other seeds are not; "
                 "re-run it (`kbench run --update-leaderboard`) to store every seed.")
RESCORED_TEXT = ("Every score in the tables is recomputable from stored test predictions: `kbench leaderboard "
                 "validate` re-scores each entry's preds.parquet (a ‡ entry's first seed only). Submitters' "
                 "validation-part figures are not shown, since no valid-part predictions are stored to re-score "
                 "them; the table's JSON and CSV downloads keep them as the submitter reported them, named "
                 f"`{REPORTED}valid_{PRIMARY_METRIC}` and `{REPORTED}valid_{PRIMARY_METRIC}_std`. Params, CPU latency "
                 "and training time are the submitter's metadata, the noise-ceiling row comes from the dataset's "
                 "repeated measurements, and a figure from elsewhere is named in the note under its table.")


def make_board(dataset: str, split: str, entries: list[Entry], shapes_entries: list[Entry] | None = None) -> Board:
    """A board's rows, ties, LoPs and notes; a ``random`` one's twin-free table shows ``shapes_entries`` too."""
    def key(e):
        primary = e.record.metrics["overall"].get(PRIMARY_METRIC)
        return primary is None, (1 if PRIMARY_LOWER_IS_BETTER else -1) * (primary or 0), e.method
    ranked = sorted((e for e in entries if e.role == "entry"), key=key)
    refs = sorted((e for e in entries if e.role != "entry"), key=lambda e: (ROLE_ORDER.get(e.role, 9),) + key(e))
    rows = [Row(e, i + 1) for i, e in enumerate(ranked)]
    ref_rows = [Row(e, None) for e in refs]
    references = Counter(e.record.reference for e in entries if e.record.reference)
    board = Board(dataset, split, rows, ref_rows, entries[0].record.counts.problems_in_part if entries else None,
                  references.most_common(1)[0][0] if references else None)
    # per-problem scores from the predictions files: the tie test and the LoP distribution
    scores = {}
    try:
        ds = load_dataset(dataset)
        ev = Evaluator(ds, split=split, part="test", reference=None)
    except Exception as exc:  # the dataset is not installed here: tables only
        board.notes.append(f"dataset {dataset} could not be loaded ({type(exc).__name__}); no tie test and "
                           "no LoP distribution.")
        ev = None
    if ev is not None:
        for row in board.all_rows():
            frame = row.entry.preds()
            if frame is not None:
                scores[row.entry.method] = problem_scores(ev, frame)
    board.lops = {m: s.lop for m, s in scores.items()}
    if ev is not None:
        board.twin_free = twin_free_figures(board, ds, ev, scores, shapes_entries)
    for above, row in zip(rows, rows[1:]):
        a, b = scores.get(above.entry.method), scores.get(row.entry.method)
        if a is not None and b is not None and tied(a.log_slowdown, b.log_slowdown):
            row.tie, row.tie_with = True, above.entry.name
    note = gpu_note(board)
    if note:
        board.notes.append(note)
    missing = [r.entry.name for r in board.all_rows() if r.entry.method not in scores]
    if missing and ev is not None:
        board.notes.append("no predictions file (left out of the tie test and the LoP plot): "
                           + ", ".join(missing) + ".")
    if ev is not None:
        _add_noise_ceiling(board, ds)
    return board


def _add_noise_ceiling(board: Board, ds) -> None:
    """The noise-ceiling reference row after the ceilings, and its sentence (datasets with ``repeats`` only)."""
    entry = noise_entry(ds, board.split)
    if entry is None:
        return
    ceilings = [i for i, r in enumerate(board.refs) if r.role == "ceiling"]
    board.refs.insert(ceilings[-1] + 1 if ceilings else 0, Row(entry, None))
    board.notes.append(noise_sentence(entry, [(r.entry.name, r.primary()) for r in board.rows]))


# ----------------------------------------------------------------------------- plots
def draw_plots(board: Board, plot_dir: Path) -> dict[str, bytes]:
    """SVG bytes per file name; also fills ``board.plots`` with (file, title, alt text)."""
    out: dict[str, bytes] = {}
    # the noise-ceiling row is scored on another problem set (the re-measured sample): table only
    rows = [r for r in board.all_rows() if r.entry.method != NOISE_METHOD]
    colors = plots.method_styles([(r.entry.name, r.role) for r in rows])
    where = f"{board.dataset} / {board.split} (test)"
    # 1. LoP distribution
    series = [(r.entry.name, r.role, board.lops[r.entry.method]) for r in rows if r.entry.method in board.lops]
    if series:
        name = f"{board.slug}-lop-cdf.svg"
        title = f"LoP distribution, {where}"
        out[name] = plots.lop_cdf(series, colors, title)
        shares = "; ".join(f"{n}: {fmt_pct(np.mean(v[np.isfinite(v)] <= 0.05), 1)} within 5%, "
                           f"{fmt_pct(np.mean(v[np.isfinite(v)] <= 0.0), 1)} at LoP 0" for n, _, v in series)
        alt = (f"Cumulative distribution of the per-problem loss of performance (LoP) on {where}, one line per "
               f"method; higher and further left is better. {shares}.")
        board.plots.append((name, title, alt))
    # 2. speed-up over the heuristic per direction
    sp = [(r.entry.name, r.role, {d: (r.record.metrics.get("by_direction", {}).get(d) or {}).get("speedup_geomean")
                                   for d in plots.DIRECTIONS}) for r in rows]
    sp = [s for s in sp if any(v is not None for v in s[2].values())]
    if sp and board.reference:
        name = f"{board.slug}-speedup-direction.svg"
        title = f"Speed-up over {board.reference} per direction, {where}"
        out[name] = plots.speedup_by_direction(sp, board.reference, title)
        text = "; ".join(f"{n}: " + ", ".join(f"{d} {fmt_x(v, 2)}" for d, v in vals.items() if v is not None)
                         for n, _, vals in sp)
        alt = (f"Bar chart of the geometric-mean speed-up over the {board.reference} heuristic for forward (F), "
               f"backward-data (B) and backward-weights (W) problems on {where}; 1× is the heuristic. {text}.")
        board.plots.append((name, title, alt))
    elif not board.reference:
        board.notes.append("no reference heuristic in these records: no speed-up plot.")
    # 3. accuracy against CPU latency
    pts = [(r.entry.name, r.role, _num(r.entry.meta.inference_latency_ms), _num(r.overall.get("top1")))
           for r in rows]
    pts = [p for p in pts if p[2] is not None and p[2] > 0 and p[3] is not None]
    if pts:
        name = f"{board.slug}-accuracy-latency.svg"
        title = f"Top-1 accuracy vs. CPU latency, {where}"
        out[name] = plots.accuracy_vs_latency(pts, colors, title)
        text = "; ".join(f"{n}: {fmt_pct(t, 1)} at {fmt_ms(ms)}" for n, _, ms, t in pts)
        alt = (f"Scatter plot of test top-1 accuracy against CPU inference latency per decision (batch 1, "
               f"log scale) on {where}; up and to the left is better. {text}.")
        board.plots.append((name, title, alt))
    # 4. best of the first K: the best entry against each reference heuristic's own order
    best_of = practitioner_table.plot(board)
    if best_of:
        name, title, alt, out[name] = best_of
        board.plots.append((name, title, alt))
    return out


# ----------------------------------------------------------------------------- table cells
# columns both kinds of table share
METHOD_COLUMN = ("method", "method", "text", "text", "method (links to its code)")
PARAMS_COLUMN = ("params", "params", "num", "num", "learned parameters")
TAIL_COLUMNS = [("date", "date", "text", "text", "date of the result"), ("links", "links", "text", None, "paper and code")]
COLUMNS = [
    # id, header, css class, sortable type, tooltip
    ("rank", "rank", "num", "num", "rank by the test score (≈: statistically tied with the entry above)"),
    METHOD_COLUMN,
    ("test", "test", "num primary", "num", f"test {PRIMARY_LABEL}, mean ± std over seeds"),
    ("top1", "top-1", "num", "num", "share of test problems where the fastest kernel is chosen"),
    ("within5", "within 5%", "num", "num", "share of test problems with t_choice ≤ 1.05 t_best"),
    ("lop", "mean LoP", "num", "num", "mean loss of performance (t_choice − t_best) / t_best"),
    ("lop5", "LoP@5", "num", "num", "mean LoP of the best of the first 5 candidates"),
    ("speedup", "speed-up", "num", "num", "geometric-mean speed-up over the reference heuristic"),
    PARAMS_COLUMN,
    ("latency", "CPU latency", "num", "num", "inference latency per decision on CPU, batch 1"),
    *TAIL_COLUMNS,
]


def md_url(url: str) -> str:
    """A URL for a markdown link target: every character that could end the link or open HTML
    (space, quotes, parentheses, angle brackets) percent-encoded."""
    from urllib.parse import quote
    return quote(url, safe="/:?&=#%+,;@~.-_!$*")


def _link(target: str | None, depth: str | None) -> str | None:
    """A code URL as it is, a repository path under ``depth`` (a relative prefix or the configured URL)."""
    return code_href(target, depth)


def cells(row: Row, repo_prefix: str | None) -> dict[str, tuple[str, str, str]]:
    """Per column: (display text as HTML, sort value, title); ``repo_prefix``: where repository paths link."""
    rec, meta, o = row.record, row.entry.meta, row.overall
    out = {}
    if row.rank is None:
        out["rank"] = (html.escape(row.role), "", "reference row")
    else:
        tie = (f' <span class="tie" title="statistically tied with {html.escape(row.tie_with)}">≈</span>'
               if row.tie else "")
        out["rank"] = (f"{row.rank}{tie}", str(row.rank), "")
    out.update(_entry_cells(row, repo_prefix))
    bound = (f' <span class="bound" title="{fmt_pct(row.censored_share(), 1)} of the choices are censored">†</span>'
             if row.censored_share() > 0 else "")
    if row.entry.one_seed:
        bound += (f' <span class="bound" title="one-seed entry: only seed(s) {row.entry.stored_seeds()} of '
                  f'{rec.seeds.seeds} have stored predictions">‡</span>')
    det = " det." if row.deterministic() else ""
    out["test"] = (html.escape(fmt_mean_std(row.primary(), row.shown_std()) + det) + bound, _value(row.primary()),
                   f"deterministic: its {len(rec.seeds.seeds)} seeds give one result" if det else "")
    out["top1"] = (fmt_pct(o.get("top1")), _value(o.get("top1")), "")
    out["within5"] = (fmt_pct(o.get("within5")), _value(o.get("within5")), "")
    out["lop"] = (fmt_pct(o.get("lop_mean")), _value(o.get("lop_mean")), "")
    out["lop5"] = (fmt_pct(o.get("lop_at_5")), _value(o.get("lop_at_5")), "")
    gpu = gpu_speedup(row)
    out["speedup"] = (fmt_x(o.get("speedup_geomean")) + (f' <span class="gpu">(GPU {fmt_x(gpu)})</span>' if gpu
                                                         else ""),
                      _value(o.get("speedup_geomean")),
                      (f"over {rec.reference}" if rec.reference else "") + (f"; {gpu_title(row)}" if gpu else ""))
    out["params"] = (fmt_count(meta.n_parameters), _value(meta.n_parameters),
                     f"{meta.model_size_bytes:,} bytes saved" if meta.model_size_bytes is not None else "")
    out["latency"] = (fmt_ms(meta.inference_latency_ms), _value(meta.inference_latency_ms),
                      meta.inference_hardware or "")
    return out


def _entry_cells(row: Row, repo_prefix: str | None) -> dict[str, tuple[str, str, str]]:
    """The method (linked to its details on the dataset's page), date and links cells, in every kind of table."""
    meta, code = row.entry.meta, _link(row.entry.meta.code, repo_prefix)
    name = html.escape(row.entry.name)
    details = html.escape(details_href(row))
    links = [f'<a href="{html.escape(meta.paper)}">paper</a>'] if meta.paper else []
    links += ([f'<a href="{html.escape(code)}">code</a>'] if code else [code_html(meta.code, None)]) if meta.code else []
    trained = (f' <span class="trained">trained on {html.escape(meta.training_set)}</span>'
               if meta.training_set else "")
    return {"method": (f'<a href="{details}">{name}</a>' + external_badge(row) + trained, row.entry.name.lower(),
                       meta.description or ""),
            "date": (html.escape(row.record.date), row.record.date, ""),
            "links": (" · ".join(links) or "—", "", "")}


def _speedup_header(board: Board) -> str:
    return f"speed-up over {board.reference}" if board.reference else "speed-up"


def table_html(board: Board, repo_prefix: str) -> str:
    tuning = board.tuning
    columns, cell_fn = (TUNING_COLUMNS, tuning_cells) if tuning else (COLUMNS, cells)
    heads = []
    for cid, label, cls, sort, tip in columns:
        if not tuning:
            label = _speedup_header(board) if cid == "speedup" else label
            label = f"test {PRIMARY_LABEL}" if cid == "test" else label
        inner = f"<button type=\"button\">{html.escape(label)}</button>" if sort else html.escape(label)
        sort_attr = f' data-sort="{sort}"' if sort else ""
        heads.append(f'<th scope="col" class="{cls.split()[0]}" data-col="{cid}"{sort_attr} '
                     f'title="{html.escape(tip)}">{inner}</th>')

    def tr(row: Row) -> str:
        c = cell_fn(row, repo_prefix)
        tds = []
        for cid, _label, cls, _sort, _tip in columns:
            text, value, title = c[cid]
            attrs = f' class="{cls}" data-col="{cid}"'
            attrs += f' data-value="{html.escape(value)}"' if value != "" or _sort == "num" else ""
            attrs += f' title="{html.escape(title)}"' if title else ""
            tds.append(f"<td{attrs}>{text}</td>")
        return f'<tr data-method="{html.escape(row.entry.method)}">' + "".join(tds) + "</tr>"

    body = "\n".join(tr(r) for r in board.rows)
    refs = "\n".join(tr(r) for r in board.refs)
    return (f'<div class="table-wrap"><table class="lb" id="lb-{board.slug}" '
            f'aria-label="{html.escape(board.dataset)} split {html.escape(board.split)} leaderboard">\n'
            f"<thead><tr>{''.join(heads)}</tr></thead>\n<tbody class=\"entries\">\n{body}\n</tbody>\n"
            f"<tbody class=\"ref\">\n{refs}\n</tbody>\n</table></div>")


def plots_html(board: Board, prefix: str = "") -> str:
    if not board.plots:
        return ""
    figs = "\n".join(f'<figure><img src="{prefix}plots/{f}" alt="{html.escape(alt)}" loading="eager">'
                     f"<figcaption>{html.escape(title)}</figcaption></figure>" for f, title, alt in board.plots)
    return f'<div class="plots">\n{figs}\n</div>'


def board_html(board: Board, repo_prefix: str | None, heading: str = "h3", details: bool = False) -> str:
    n = f"{board.n_problems:,} test problems" if board.n_problems else ""
    parts = [f'<{heading} id="{board.slug}">{html.escape(board.title)}</{heading}>',
             f'<p class="note">{len(board.rows)} ranked entr{"y" if len(board.rows) == 1 else "ies"}, '
             f"{len(board.refs)} reference row(s); {n}.</p>",
             tools_html(board), table_html(board, repo_prefix)]
    parts += [f'<p class="note">{html.escape(x)}</p>' for x in board.notes]
    parts.append(twin_free_html(board.twin_free, board.slug))
    parts.append(practitioner_table.section_html(board))
    parts.append(plots_html(board))
    parts.append(details_html(board, repo_prefix) if details else "")
    return "\n".join(p for p in parts if p)


# ----------------------------------------------------------------------------- tuning boards
#: tuning-parameter datasets rank entries by this metric of the TuningResult (higher is better)
TUNING_PRIMARY = "average_accuracy"
TUNING_TEXT = ("share of the solver's tuning parameters predicted exactly, averaged over the test problems "
               "(the seq2seq paper's average accuracy; higher is better)")
TUNING_COLUMNS = [
    # id, header, css class, sortable type, tooltip
    ("rank", "rank", "num", "num", "rank by the test average accuracy"),
    METHOD_COLUMN,
    ("test", "test average accuracy", "num primary", "num", "test average accuracy, mean ± std over seeds"),
    ("perfect", "perfect prediction", "num", "num", "share of test problems whose whole tuple is right"),
    ("valid_share", "valid tuples", "num", "num", "share of predicted tuples that pass the solver's constraints"),
    PARAMS_COLUMN,
    ("fit", "training s", "num", "num", "training time per seed"),
    *TAIL_COLUMNS,
]


def make_tuning_board(dataset: str, split: str, entries: list[Entry]) -> Board:
    def key(e):
        primary = e.record.overall.get(TUNING_PRIMARY)
        return primary is None, -(primary or 0), e.method
    ranked = sorted((e for e in entries if e.role == "entry"), key=key)
    refs = sorted((e for e in entries if e.role != "entry"), key=lambda e: (ROLE_ORDER.get(e.role, 9),) + key(e))
    n = entries[0].record.metrics.get("n") if entries else None
    solvers = sorted({e.record.solver for e in entries})
    board = Board(dataset, split, [Row(e, i + 1) for i, e in enumerate(ranked)], [Row(e, None) for e in refs],
                  int(n) if n else None, None, tuning=True)
    board.notes.append(f"solver {', '.join(solvers)}: ranked by the test average accuracy, {TUNING_TEXT}. "
                       "± is the unbiased standard deviation over seeds.")
    return board


#: methods shown in the per-parameter plot of a tuning table (the best ranked)
TUNING_PLOT_METHODS = 6


def draw_tuning_plots(board: Board) -> dict[str, bytes]:
    """The per-parameter accuracy of the best-ranked entries; fills ``board.plots``."""
    rows = [(r.entry.name, r.record.metrics.get("parameter_accuracy") or {})
            for r in board.rows[:TUNING_PLOT_METHODS]]
    rows = [(n, acc) for n, acc in rows if acc]
    if not rows:
        return {}
    name = f"{board.slug}-parameter-accuracy.svg"
    title = f"test accuracy per tuning parameter, {board.dataset} / {board.split} (test)"
    text = "; ".join(f"{n}: " + ", ".join(f"{p} {fmt_pct(v, 1)}" for p, v in acc.items()) for n, acc in rows)
    alt = (f"Grouped bar chart of the share of test problems whose tuning parameter is predicted right, "
           f"per parameter, for the {len(rows)} best-ranked methods. {text}.")
    board.plots.append((name, title, alt))
    return {name: plots.tuning_accuracy(rows, title)}


def tuning_cells(row: Row, repo_prefix: str) -> dict[str, tuple[str, str, str]]:
    rec, meta, o = row.record, row.entry.meta, row.overall
    out = {"rank": ((html.escape(row.role), "", "reference row") if row.rank is None
                    else (str(row.rank), str(row.rank), ""))}
    out.update(_entry_cells(row, repo_prefix))
    det = " det." if row.deterministic(TUNING_PRIMARY) else ""
    out["test"] = (html.escape(fmt_pct_mean_std(o.get(TUNING_PRIMARY), row.shown_std(TUNING_PRIMARY)) + det)
                   + (" ‡" if row.entry.one_seed else ""), _value(o.get(TUNING_PRIMARY)),
                   f"deterministic: its {len(rec.seeds.seeds)} seeds give one result" if det else "")
    out["perfect"] = (html.escape(fmt_pct_mean_std(o.get("perfect_prediction"), row.shown_std("perfect_prediction"))),
                      _value(o.get("perfect_prediction")), "")
    out["valid_share"] = (fmt_pct(o.get("valid_share")), _value(o.get("valid_share")), "")
    out["params"] = (fmt_count(meta.n_parameters), _value(meta.n_parameters), "")
    fit = meta.training_time_s
    out["fit"] = ("—" if fit is None else f"{fit:,.0f}", _value(fit), meta.training_hardware or "")
    return out


# ----------------------------------------------------------------------------- pages
def page(title: str, body: str, nav: list[tuple[str, str]]) -> str:
    links = "".join(f'<a href="{html.escape(h)}">{html.escape(t)}</a>' for t, h in nav)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="assets/style.css">
<script src="assets/sort.js" defer></script>
<script src="assets/filter.js" defer></script>
</head>
<body>
<header class="top"><h1>{html.escape(title)}</h1><nav>{links}</nav></header>
<main>
{body}
</main>
</body>
</html>
"""


def legend_html() -> str:
    return (f'<p>Entries are ranked by the <strong>test {html.escape(PRIMARY_LABEL)}</strong>: '
            f"{html.escape(PRIMARY_TEXT)}. ± is the unbiased standard deviation over seeds (at least 5). "
            "Other metric columns are means over seeds. Reference rows (the oracle ceiling and the random and "
            "single-best floors) are not ranked. Click a column header to sort, type in the box above a table "
            "to filter it; each table downloads as CSV or JSON, and a method's name leads to its details "
            "(reproduction, environment).</p>"
            f'<p class="note"><span class="tie">≈</span> statistically tied with the entry ranked above: '
            f"{html.escape(TIE_TEST_TEXT)}.</p>"
            f'<p class="note">{html.escape(BOUND_TEXT)}</p>'
            f'<p class="note">{html.escape(ONE_SEED_TEXT)}</p>'
            f'<p class="note">{html.escape(DETERMINISTIC_TEXT)} {html.escape(TRAINING_SET_TEXT)}</p>'
            f'<p class="note">{html.escape(RESCORED_TEXT)}</p>')


def dataset_facts(name: str) -> str:
    try:
        ds = load_dataset(name)
    except Exception:
        return ""
    info = ds.info
    facts = [("device", info.get("device")), ("library", info.get("library")), ("task", info.get("task")),
             ("problems", f"{len(ds.problems):,}"),
             ("kernels", f"{len(ds.kernels):,}" if ds.kernels is not None else None),
             ("tuning targets", f"{len(ds.tables['targets']):,}" if "targets" in ds.tables else None),
             ("version", f"{ds.version} (checksum {ds.checksum[:12]})"), ("license", info.get("license"))]
    return '<dl class="facts">' + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>"
                                           for k, v in facts if v) + "</dl>"


# ----------------------------------------------------------------------------- markdown
def markdown_table(board: Board, repo_prefix: str, repo_root: Path | None = None) -> str:
    tuning = board.tuning
    columns, cell_fn = (TUNING_COLUMNS, tuning_cells) if tuning else (COLUMNS, cells)
    heads = [label for _cid, label, *_ in columns]
    if not tuning:
        heads = [f"test {PRIMARY_LABEL}" if cid == "test" else _speedup_header(board) if cid == "speedup" else h
                 for (cid, *_), h in zip(columns, heads)]
    lines = ["| " + " | ".join(heads) + " |", "|" + "|".join(["---"] * len(heads)) + "|"]
    for row in board.all_rows():
        c = cell_fn(row, repo_prefix)
        vals = []
        for cid, *_ in columns:
            text = c[cid][0]
            if cid == "rank":
                text = (f"{row.rank}" + (" ≈" if row.tie else "")) if row.rank else f"*{row.role}*"
            elif cid == "method":
                code = readme_code_link(row.entry.meta.code, repo_prefix, repo_root)
                name = md_text(row.entry.name)
                text = (f"[{name}]({md_url(code)})" if code else name) + \
                    (" (external data)" if row.entry.meta.external_data else "") + \
                    (f" (trained on {md_text(row.entry.meta.training_set)})" if row.entry.meta.training_set else "")
            elif cid == "speedup" and not tuning:
                gpu = gpu_speedup(row)
                text = fmt_x(row.overall.get("speedup_geomean")) + (f" (GPU {fmt_x(gpu)})" if gpu else "")
            elif cid == "test" and not tuning:
                text = fmt_mean_std(row.primary(), row.shown_std()) + (" det." if row.deterministic() else "") \
                    + (" †" if row.censored_share() > 0 else "") \
                    + (" ‡" if row.entry.one_seed else "")
            elif cid == "links":
                links = [f"[paper]({md_url(row.entry.meta.paper)})"] if row.entry.meta.paper else []
                code = readme_code_link(row.entry.meta.code, repo_prefix, repo_root)
                links += ([f"[code]({md_url(code)})"] if code else [f"code: `{md_text(row.entry.meta.code)}`"]) \
                    if row.entry.meta.code else []
                text = " · ".join(links) or "—"
            else:
                text = html.unescape(text)
            vals.append(markdown_cell(text))
        lines.append("| " + " | ".join(vals) + " |")
    return "\n".join(lines)


def readme(boards: list[Board], cards: dict[str, str], repo_root: Path | None = None) -> str:
    out = ["# kbench leaderboard", "",
           "<!-- generated by `kbench leaderboard build` from the records in this folder: do not edit by hand -->",
           "",
           f"Entries are ranked by the **test {PRIMARY_LABEL}**: {PRIMARY_TEXT}. ± is the unbiased standard "
           "deviation over seeds (at least 5); the other metric columns are means over seeds. Reference rows "
           "(*ceiling*: the oracle; *floor*: random and single-best) are not ranked.", "",
           f"≈: statistically tied with the entry ranked above ({TIE_TEST_TEXT}).", "",
           BOUND_TEXT, "", ONE_SEED_TEXT, "", DETERMINISTIC_TEXT + " " + TRAINING_SET_TEXT, "", RESCORED_TEXT, "",
           "Under each table, the best entry beside each reference heuristic's own order: " + practitioner_table.TEXT, "",
           "The same tables, sortable, with the plots: [site/index.html](site/index.html) "
           "(open it from the file system or any static host).", ""]
    for board in boards:
        out.append(f"## {board.title}")
        out.append("")
        if board.dataset in cards:
            out += [f"Data card: [{cards[board.dataset]}](../{cards[board.dataset]}).", ""]
        out += [markdown_table(board, "../", repo_root), ""]
        if board.twin_free is not None:
            out += [twin_free_markdown(board.twin_free), ""]
        practice = practitioner_table.markdown(board)
        if practice:
            out += [practice, ""]
        out += [f"_{markdown_prose(x)}_" for x in board.notes] + ([""] if board.notes else [])
        for f, title, _alt in board.plots:
            out.append(f"![{title}](site/plots/{f})")
        out.append("")
    out += ["## Rules", "", RULES_MD]
    return "\n".join(out).rstrip() + "\n"


# ----------------------------------------------------------------------------- build
def render(root: Path, cards_dir: Path | None = None, progress: bool = False) -> dict[str, bytes]:
    """Every generated file, relative to ``root``, as bytes (nothing is written)."""
    root = Path(root)
    import importlib.util
    if importlib.util.find_spec("matplotlib") is None:
        raise KbenchError("building the leaderboard site draws its plots with matplotlib, which is not "
                               "installed: pip install 'kbench[site]' (or pip install matplotlib).")
    groups = read_entries(root)
    boards = []
    items = list(groups.items())
    if progress:
        from tqdm import tqdm
        items = tqdm(items, desc="leaderboard tables", unit="table", disable=None, file=sys.stderr)
    files: dict[str, bytes] = {}
    code_prefix = code_url_prefix(root)  # where repository paths link from the site (None: shown as text)
    for (dataset, split), entries in items:
        if all(isinstance(e.record, TuningResult) for e in entries):
            board = make_tuning_board(dataset, split, entries)
            svgs = draw_tuning_plots(board)  # no kernel times: accuracy per parameter only
        else:
            board = make_board(dataset, split, entries, groups.get((dataset, "shapes")))
            curve = measured_json(board, root.resolve().parent, LEARNING_CURVE)
            notes = (selector_note(board, root.resolve().parent), curve_note(board, curve),
                     machine_note(board, root.resolve().parent))
            board.notes += [note for note in notes if note]
            svgs = draw_plots(board, root / "site" / "plots")
            svgs.update(curve_plot(board, curve))
        files.update({f"site/plots/{name}": svg for name, svg in svgs.items()})
        files.update(board_files(board))
        boards.append(board)
    datasets = sorted({b.dataset for b in boards})
    card_paths = cards_found(root, datasets, cards_dir)
    card_rel = {d: f"data_cards/{d}.md" for d in card_paths}
    readme_text, transfer_md = readme(boards, card_rel, root.resolve().parent), transfer_markdown(root)
    if transfer_md:  # before the rules section
        head, sep, rules = readme_text.partition("## Rules\n")
        readme_text = head + transfer_md + "\n" + sep + rules
    files["README.md"] = readme_text.encode("utf-8")
    nav = [("overview", "index.html")] + [(d, f"{d}.html") for d in datasets]
    # index
    body = [legend_html()]
    if not boards:
        body.append("<p>No entries yet: run <code>kbench run --update-leaderboard</code> or "
                    "<code>kbench submit</code>.</p>")
    for d in datasets:
        body.append(f'<h2 id="{html.escape(d)}"><a href="{html.escape(d)}.html">{html.escape(d)}</a></h2>')
        body += [board_html(b, code_prefix) for b in boards if b.dataset == d]
    body.append(transfer_html(root))
    body.append('<h2 id="rules">Rules</h2>' + markdown.to_html(RULES_MD))
    files["site/index.html"] = page("kbench leaderboard", "\n".join(body), nav).encode("utf-8")
    # one page per dataset
    for d in datasets:
        body = [dataset_facts(d)]
        if d in card_paths:
            body.append(f'<p>Data card: <a href="data_cards/{html.escape(d)}.md">data_cards/{html.escape(d)}.md</a> '
                        f'(rendered <a href="#card">below</a>).</p>')
        else:
            body.append('<p class="note">No data card found for this dataset: the build looks for '
                        f'<code>data_cards/{html.escape(d)}.md</code> beside the leaderboard folder (or in the '
                        'folder <code>kbench leaderboard build --cards DIR</code> names).</p>')
        mine = [b for b in boards if b.dataset == d]
        if not all(b.tuning for b in mine):  # the tuning tables carry their own note
            body.append(legend_html())
        body += [board_html(b, code_prefix, heading="h2", details=True) for b in mine]
        if d in card_paths:
            text = card_paths[d].read_text(encoding="utf-8")
            files[f"site/data_cards/{d}.md"] = text.encode("utf-8")
            body.append('<section class="card" id="card"><h2>Data card</h2>' + markdown.to_html(text, 1)
                        + "</section>")
        files[f"site/{d}.html"] = page(f"kbench leaderboard: {d}", "\n".join(body), nav).encode("utf-8")
    files["site/assets/style.css"] = STYLE_CSS.encode("utf-8")
    files["site/assets/sort.js"] = SORT_JS.encode("utf-8")
    files["site/assets/filter.js"] = FILTER_JS.encode("utf-8")
    files[f"site/{SITE_MARKER}"] = b"generated by `kbench leaderboard build`; the folder is replaced on each build\n"
    return files


def build(root: str | Path = "leaderboard", cards_dir: Path | None = None, progress: bool = False) -> list[Path]:
    """Write README.md and site/ under ``root`` (site/ is replaced as a whole).

    Atomic and serialised: site/ is written to a hidden folder beside it and renamed into place,
    README.md is written to a temporary file and renamed, and two builds of one tree take turns
    (a lock on the folder), so a reader or a second build sees one build's output, never a mix.
    """
    import os
    import tempfile
    root = Path(root)
    site = root / "site"
    written = []
    with _tree_lock(root):
        # rendered under the lock: a build that waited reads every entry written before it got the
        # lock, so two submits at once never leave the site without the first one's entry
        files = render(root, cards_dir, progress)
        if site.exists() and not (site / SITE_MARKER).exists() and any(site.iterdir()):
            raise KbenchInputError(f"{site} exists and was not made by `kbench leaderboard build` "
                                   f"({SITE_MARKER} missing); move it away first.")
        staging = Path(tempfile.mkdtemp(prefix=".site-new-", dir=root))
        try:
            for rel, data in sorted(files.items()):
                if not rel.startswith("site/"):
                    continue
                path = staging / rel[len("site/"):]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                written.append(root / rel)
            staging.chmod(0o755)
            old = None
            if site.exists():
                old = Path(tempfile.mkdtemp(prefix=".site-old-", dir=root))
                os.replace(site, old / "site")
            os.replace(staging, site)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        for rel, data in sorted(files.items()):
            if not rel.startswith("site/"):
                atomic_write_bytes(root / rel, data)
                written.append(root / rel)
    return sorted(written)


class _tree_lock:
    """An exclusive lock on a folder (flock on the folder itself: no lock file is left behind)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def __enter__(self):
        import fcntl
        import os
        self.folder.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.folder, os.O_RDONLY)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        import fcntl
        import os
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def check(root: str | Path = "leaderboard", cards_dir: Path | None = None) -> list[str]:
    """Generated files that differ from what a build would write now (empty: up to date)."""
    root = Path(root)
    files = render(root, cards_dir)
    stale = [rel for rel, data in sorted(files.items())
             if not (root / rel).exists() or (root / rel).read_bytes() != data]
    site = root / "site"
    if site.exists():
        extra = sorted(str(p.relative_to(root)) for p in site.rglob("*") if p.is_file()
                       and str(p.relative_to(root)) not in files)
        stale += [f"{e} (not generated)" for e in extra]
    return stale

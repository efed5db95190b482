"""What the site adds around each table: a filter box, CSV and JSON downloads, entry details, code links.

* **Downloads**: ``site/boards/<dataset>-<split>.csv`` and ``.json`` hold every row of a table with
  the figures as the records store them (full precision, not the rounded cells), the submission
  metadata, ``external_data`` and the environment the record was made in. The submitter's
  validation-part figure (``extra.valid``) is there as ``reported_valid_<field>``: it cannot be
  re-scored (valid-part predictions are not stored), so the tables do not show it.
* **Entry details**: one collapsed ``<details>`` per entry on the dataset's page (the method names in
  the tables link there): what it is, how to reproduce it, where it ran, external data, and the
  software environment of its record, or "not recorded" for records made before kbench recorded it.
* **Deployable selector**: where ``bench/bench_compact_selector.py`` measured the compact selector of a
  board's dataset and split (``bench/results/compact_selector_<dataset>.json``), a note under the table
  gives its size, latency and the share of the best entry's speed-up it keeps (:func:`selector_note`).
* **Learning curve**: where ``experiments/learning_curve.py`` measured one for a board's dataset and split
  (``experiments/results/learning_curve_<dataset>.json``), a note gives top-1 and geomean slowdown
  against the share of the train part (:func:`curve_note`) and a plot draws them (:func:`curve_plot`).
* **GPU re-timing**: an entry with ``verification.json`` shows its measured speed-up beside the table's,
  and a note under the table gives the GPU, the problems timed and, for a run with live references,
  the speed-up over each with its interval (:func:`gpu_note`).
* **Code links**: a code URL in ``meta.json`` is linked as it is. A path inside the kbench repository
  is linked only where ``leaderboard/site.json`` names where the repository's files are browsed
  (``{"code_url_prefix": "https://github.com/ORG/kbench/blob/main/"}``), so the links work when
  ``site/`` is hosted on its own; without it the path is shown as text.
"""

from __future__ import annotations

import csv
import html
import io
import json
from pathlib import Path

from kbench.core.errors import KbenchInputError, read_json_object
from kbench.core.escaping import csv_cell, safe_href
from kbench.leaderboard import plots
from kbench.leaderboard.board import Board, Row, fmt_x
from kbench.leaderboard.policy import PRIMARY_LOWER_IS_BETTER, PRIMARY_METRIC

SITE_CONFIG = "site.json"
NOT_RECORDED = "not recorded (the record was made before kbench recorded the software environment)"
EXTERNAL_TITLE = "trained with data outside the kbench dataset's train part (external_data)"
#: the prefix of the figures a submitter reports that no stored predictions re-score
REPORTED = "reported_"
REPORTED_NOTE = (f"{REPORTED}valid_* fields: the submitter's own figures on the validation part (extra.valid of the "
                 "record), not re-scored: valid-part predictions are not stored. The metrics, references and std "
                 "are what `kbench leaderboard validate` re-scores from the stored test predictions.")


# ----------------------------------------------------------------------------- configuration
def code_url_prefix(root: Path) -> str | None:
    """``code_url_prefix`` of ``root/site.json`` (None without the file); a bad file is one clear error."""
    path = Path(root) / SITE_CONFIG
    if not path.exists():
        return None
    doc = read_json_object(path)
    unknown = sorted(set(doc) - {"code_url_prefix"})
    prefix = doc.get("code_url_prefix")
    if unknown or not isinstance(prefix, str) or not prefix.startswith(("https://", "http://")) \
            or any(c in prefix for c in ' "<>'):
        raise KbenchInputError(
            f"{path}: expected {{\"code_url_prefix\": \"https://...\"}}, the URL under which the repository's files "
            f"are browsed (e.g. https://github.com/ORG/kbench/blob/main/)"
            + (f"; unknown keys {unknown}" if unknown else "") + ". Fix or remove the file.")
    return prefix if prefix.endswith("/") else prefix + "/"


def code_href(code: str | None, prefix: str | None) -> str | None:
    """Where a ``meta.code`` links: a URL as it is, a repository path under ``prefix``, else nowhere."""
    if not code:
        return None
    if code.startswith(("http://", "https://")):
        return safe_href(code)
    return safe_href(prefix + code) if prefix else None


def entry_anchor(row: Row) -> str:
    """The id of a row's details block (on its dataset's page)."""
    return f"entry-{row.record.dataset.name}-{row.record.split}-{row.entry.method}"


def details_href(row: Row) -> str:
    """The link from a table cell (on any page of the site) to a row's details block."""
    return f"{row.record.dataset.name}.html#{entry_anchor(row)}"


def _clean(v):
    """A figure for JSON: NaN as None."""
    return None if isinstance(v, float) and v != v else v


# ----------------------------------------------------------------------------- table rows as data
def _std(row: Row) -> dict:
    return dict(row.record.seeds.std) if row.record.seeds else {}


def _reported_valid(row: Row) -> tuple:
    try:
        return row.reported_valid()
    except (AttributeError, TypeError):
        return None, None


def export_rows(board: Board) -> list[dict]:
    """Every row of a table (ranked, then reference rows) with the stored figures and metadata."""
    out = []
    for row in board.all_rows():
        rec, meta = row.record, row.entry.meta
        env = rec.environment
        vm, vs = _reported_valid(row) if not board.tuning else (None, None)
        ver = row.entry.verification
        out.append({
            "rank": row.rank, "role": row.role, "method": row.entry.method, "name": row.entry.name,
            "tied_with_above": row.tie_with or None,
            "metrics": {k: _clean(v) for k, v in rec.overall.items() if isinstance(v, (int, float)) or v is None},
            # the comparison with each reference heuristic, as stored (JSON only: nested)
            "references": {name: {k: _clean(v) for k, v in figs.items()}
                           for name, figs in (rec.overall.get("references") or {}).items()} or None,
            "std": {k: _clean(v) for k, v in _std(row).items()},
            # the submitter's validation figure: not re-scored, so named as reported (never in the tables)
            **({f"{REPORTED}valid_{PRIMARY_METRIC}": _clean(vm), f"{REPORTED}valid_{PRIMARY_METRIC}_std": _clean(vs)}
               if not board.tuning else {}),
            "gpu_speedup_geomean": ver.measured.overall.speedup_geomean if ver is not None else None,
            "seeds": rec.seeds.seeds if rec.seeds else None, "reference": getattr(rec, "reference", None),
            "external_data": meta.external_data, "n_parameters": meta.n_parameters,
            "model_size_bytes": meta.model_size_bytes, "training_time_s": meta.training_time_s,
            "inference_latency_ms": meta.inference_latency_ms, "paper": meta.paper, "code": meta.code,
            "date": rec.date, "kbench_version": rec.kbench_version, "dataset_version": rec.dataset.version,
            "dataset_checksum": rec.dataset.checksum,
            "environment": env.model_dump(mode="json") if env is not None else None,
        })
    return out


def board_json(board: Board) -> bytes:
    doc = {"dataset": board.dataset, "split": board.split, "part": "test",
           "ranked_by": "average_accuracy" if board.tuning else PRIMARY_METRIC,
           "lower_is_better": False if board.tuning else PRIMARY_LOWER_IS_BETTER,
           "test_problems": board.n_problems, "generated_by": "kbench leaderboard build",
           **({} if board.tuning else {"reported_fields": REPORTED_NOTE}),
           "entries": export_rows(board)}
    return (json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def _csv_value(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list):
        return csv_cell(" ".join(map(str, v)))
    # text from a record (a name, a description) is never run by a spreadsheet as a formula
    return csv_cell(v) if isinstance(v, str) else str(v)


def board_csv(board: Board) -> bytes:
    """The rows flat: metrics and their std over seeds as columns, packages as ``name==version`` pairs."""
    rows = export_rows(board)
    metric_keys = sorted({k for r in rows for k in r["metrics"]})
    std_keys = sorted({k for r in rows for k in r["std"]})
    head = ["rank", "role", "method", "name", "tied_with_above"]
    tail = [k for k in rows[0] if k not in head + ["metrics", "references", "std", "environment"]] if rows else []
    env_cols = ["python", "packages", "git_commit", "git_dirty", "os", "cpu"]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(head + metric_keys + [f"{k}_std" for k in std_keys] + tail + env_cols)
    for r in rows:
        env = r["environment"] or {}
        git = env.get("git") or {}
        env_vals = [env.get("python"), ";".join(f"{k}=={v}" for k, v in (env.get("packages") or {}).items()) or None,
                    git.get("commit"), git.get("dirty"), env.get("os"), env.get("cpu")]
        writer.writerow([_csv_value(r[k]) for k in head] + [_csv_value(r["metrics"].get(k)) for k in metric_keys]
                        + [_csv_value(r["std"].get(k)) for k in std_keys] + [_csv_value(r[k]) for k in tail]
                        + [_csv_value(v) for v in env_vals])
    return buf.getvalue().encode("utf-8")


def board_files(board: Board) -> dict[str, bytes]:
    return {f"site/boards/{board.slug}.csv": board_csv(board), f"site/boards/{board.slug}.json": board_json(board)}


# ----------------------------------------------------------------------------- HTML
def tools_html(board: Board) -> str:
    """The filter box and the download links above a table."""
    e = html.escape
    label = f"Filter the {board.dataset} split {board.split} table"
    return (f'<div class="board-tools"><input type="search" class="lb-filter" data-table="lb-{e(board.slug)}" '
            f'placeholder="filter: method, description, role…" aria-label="{e(label)}" autocomplete="off">'
            f'<span class="lb-count" aria-live="polite"></span>'
            f'<span class="downloads">download: <a href="boards/{e(board.slug)}.csv" download>CSV</a> · '
            f'<a href="boards/{e(board.slug)}.json" download>JSON</a></span></div>')


def external_badge(row: Row) -> str:
    return (f' <span class="ext" title="{html.escape(EXTERNAL_TITLE)}">ext. data</span>'
            if row.entry.meta.external_data else "")


def readme_code_link(code: str | None, repo_prefix: str, repo_root: Path | None) -> str | None:
    """Where the README links ``meta.code``: a URL as it is; a repository path only when the file is there
    (``repo_root``, the folder ``repo_prefix`` leads to), so a leaderboard copied elsewhere, or a path of the
    submitter's own, shows as text instead of a broken link."""
    if not code or code.startswith(("http://", "https://")):
        return code_href(code, repo_prefix)
    return code_href(code, repo_prefix) if repo_root is None or (repo_root / code).is_file() else None


def code_html(code: str | None, prefix: str | None) -> str:
    """A code link, or the repository path as text where no link would work."""
    if not code:
        return "—"
    href = code_href(code, prefix)
    text = html.escape(code)
    return f'<a href="{html.escape(href)}">{text}</a>' if href else f"<code>{text}</code>"


def environment_html(env) -> str:
    if env is None:
        return f'<span class="note">{html.escape(NOT_RECORDED)}</span>'
    e = html.escape
    packages = ", ".join(f"{e(k)} {e(v)}" for k, v in env.packages.items())
    return ('<dl class="env">'
            f"<dt>Python</dt><dd>{e(env.python)}</dd><dt>packages</dt><dd>{packages}</dd>"
            f"<dt>kbench code</dt><dd>{e(env.git.describe())}</dd>"
            f"<dt>OS</dt><dd>{e(env.os)}</dd><dt>CPU</dt><dd>{e(env.cpu)}</dd></dl>")


def details_html(board: Board, prefix: str | None) -> str:
    """One collapsed block per entry of a table: the record's provenance and environment."""
    e = html.escape
    blocks = []
    for row in board.all_rows():
        rec, meta = row.record, row.entry.meta
        seeds = rec.seeds.seeds if rec.seeds else []
        facts = [("role", row.role), ("description", meta.description or "—"),
                 ("reproduce", f"<code>{e(meta.command)}</code>"), ("code", code_html(meta.code, prefix)),
                 ("paper", f'<a href="{e(meta.paper)}">{e(meta.paper)}</a>' if meta.paper else "—"),
                 ("contact", meta.contact),
                 ("external data", "yes: " + EXTERNAL_TITLE if meta.external_data else "no"),
                 ("trained on", meta.training_hardware), ("latency measured on", meta.inference_hardware or "—"),
                 ("seeds", ", ".join(map(str, seeds)) or "—"),
                 ("scored", f"kbench {rec.kbench_version}, dataset {rec.dataset.name} {rec.dataset.version} "
                            f"(checksum {rec.dataset.checksum[:12]}), {rec.date}"),
                 ("environment", environment_html(rec.environment))]
        raw = {"reproduce", "code", "paper", "environment"}
        items = "".join(f"<dt>{e(k)}</dt><dd>{v if k in raw else e(str(v))}</dd>" for k, v in facts)
        blocks.append(f'<details class="entry" id="{e(entry_anchor(row))}"><summary>{e(row.entry.name)}'
                      f"{external_badge(row)}</summary><dl class=\"facts\">{items}</dl></details>")
    return (f'<section class="entries"><h4>Entry details, {e(board.dataset)} · split {e(board.split)}</h4>\n'
            + "\n".join(blocks) + "\n</section>")


#: where bench/bench_compact_selector.py writes its measurement of a dataset's compact selector
SELECTOR_BENCH = "bench/results/compact_selector_{dataset}.json"


def measured_json(board: Board, repo_root: Path, template: str) -> dict | None:
    """The JSON a script wrote for the board's dataset (``template`` with ``{dataset}``), or None where
    there is none or it was measured on another split."""
    path = repo_root / template.format(dataset=board.dataset)
    if not path.exists():
        return None
    doc = read_json_object(path)
    return doc if doc.get("split") == board.split else None


def selector_note(board: Board, repo_root: Path) -> str | None:
    """The note on a board's deployable selector (``kbench.selector``), read from its benchmark's JSON,
    or None where none was measured for this dataset and split."""
    b = measured_json(board, repo_root, SELECTOR_BENCH)
    if b is None:
        return None
    best, m = b["best_entry"], b["machine"]
    inputs = f"; its inputs: {b['inputs']}" if b.get("inputs") else ""
    return (f"Deployable selector (`kbench.selector.load(\"{board.dataset}\")`, {b['model']}, seed {b['seed']}"
            f"{inputs}): "
            f"{b['size_bytes'] / 1e6:.2f} MB, {b['latency_ms_p50']:.2f} ms p50 / {b['latency_ms_p99']:.2f} ms p99 "
            f"per problem ({b.get('note', 'batch 1')}; {m.get('cpu_count')}-core {m.get('processor')} machine), "
            f"top-1 {100 * b['top1']:.2f}% and geomean slowdown {b['geomean_slowdown']:.4f} on the {b['part']} part; "
            f"speed-up over {board.reference or 'the reference'} {b['speedup_geomean']:.3f}x against "
            f"{best['method']}'s "
            f"{best['speedup_geomean']:.3f}x ({best['model_size_bytes'] / 1e6:.1f} MB, "
            f"{best['inference_latency_ms']:.1f} ms): it keeps {100 * b['kept_gain']:.1f}% of that gain. Measured by "
            f"`python bench/bench_compact_selector.py`, {SELECTOR_BENCH.format(dataset=board.dataset)}.")


#: where experiments/learning_curve.py writes a dataset's learning curve
LEARNING_CURVE = "experiments/results/learning_curve_{dataset}.json"


def curve_note(board: Board, c: dict | None) -> str | None:
    """The note on how the board's best model scores against the size of the train part, from
    ``experiments/learning_curve.py``'s JSON ``c`` (:func:`measured_json`; None: no curve, no note)."""
    if c is None:
        return None
    points = [f"{100 * p['fraction']:g}% ({p['train_problems']:,} problems): top-1 {100 * p['top1_mean']:.2f}% "
              f"± {100 * p['top1_std']:.2f}, geomean slowdown {p['geomean_slowdown_mean']:.4f} "
              f"± {p['geomean_slowdown_std']:.4f}" for p in sorted(c["summary"], key=lambda p: p["fraction"])]
    seeds = max(p["seeds"] for p in c["summary"])
    return (f"Learning curve of {c['model']} (a seeded random share of the train part, scored on the whole "
            f"{c['part']} part; mean ± std over {seeds} seeds): " + "; ".join(points)
            + f". `{c['command']}`, {LEARNING_CURVE.format(dataset=board.dataset)}.")


def curve_plot(board: Board, c: dict | None) -> dict[str, bytes]:
    """The SVG of the learning curve ``c`` (file name -> bytes; also appended to ``board.plots``), or nothing."""
    if c is None:
        return {}
    name = f"{board.slug}-learning-curve.svg"
    title = f"Learning curve of {c['model']}, {board.dataset} / {board.split} ({c['part']})"
    points = sorted(c["summary"], key=lambda p: p["fraction"])
    alt = (f"Geomean slowdown of {c['model']} on the {c['part']} part against the number of train problems it was "
           "trained on (log scale), mean and std over seeds: "
           + "; ".join(f"{p['train_problems']:,} problems {p['geomean_slowdown_mean']:.4f}" for p in points) + ".")
    board.plots.append((name, title, alt))
    return {name: plots.learning_curve(points, c["model"], title)}


def gpu_speedup(row: Row) -> float | None:
    """The measured (GPU re-timing) geomean speed-up over the reference, when the entry has one."""
    v = row.entry.verification
    return None if v is None else v.measured.overall.speedup_geomean


#: how a board names the references that a GPU re-timing decided on the GPU itself
LIVE_REFERENCE_LABELS = {"live_mode_a": "cuDNN mode A", "live_mode_b": "cuDNN mode B",
                         "pytorch_op": "PyTorch's own convolution"}
#: the strongest reference may also be the table's mode-A plan, timed in the same run (first on a tie)
STRONGEST_LABELS = {**LIVE_REFERENCE_LABELS, "table_mode_a": "cuDNN mode A's first plan in the table"}


def gpu_title(row: Row) -> str:
    v = row.entry.verification
    return f"GPU re-timing ({v.date}, {v.device.get('gpu', 'GPU')}, kbench verify-on-gpu): " + gpu_figures(v)


def gpu_figures(v) -> str:
    """A re-timing record's measured figures beside the table's, on the same problems."""
    m, t = v.measured.overall, v.table.overall
    sample = (f" (a seeded random {m.problems:,} of the {v.problems_planned:,} test problems)"
              if m.problems < v.problems_planned else "")
    return (f"{fmt_x(m.speedup_geomean)} measured against {fmt_x(t.speedup_geomean)} from the table on the same "
            f"{m.problems:,} problems{sample}; oracle margin {fmt_x(m.oracle_speedup_geomean)} measured, "
            f"{fmt_x(t.oracle_speedup_geomean)} table" + live_title(v))


def live_title(v) -> str:
    """The re-timing's speed-ups over the references decided live on the GPU, with their intervals."""
    if v.live is None:
        return ""
    refs = [f"{label} {fmt_x(r.speedup_geomean)} [{r.speedup_ci95[0]:.3f}, {r.speedup_ci95[1]:.3f}]"
            for key, label in LIVE_REFERENCE_LABELS.items() if (r := v.live.references.get(key))]
    strongest = STRONGEST_LABELS.get(v.live.strongest_reference, v.live.strongest_reference)
    return (f". Over references asked on the GPU with the {v.live.variant} variant's filter (95% bootstrap "
            f"intervals): " + "; ".join(refs) + f"; the strongest is {strongest}")


def gpu_note(board: Board) -> str | None:
    """A board note naming every entry with a GPU re-timing, measured next to table figures."""
    parts = [f"{r.entry.name} on an {r.entry.verification.device.get('gpu', 'unnamed GPU')}: "
             + gpu_figures(r.entry.verification) for r in board.all_rows() if gpu_speedup(r)]
    if not parts:
        return None
    return ("(GPU ×): speed-up over the reference measured by re-timing the chosen plans, mode A's first plan and "
            "the oracle's plan on the GPU, interleaved (kbench verify-on-gpu). " + "; ".join(parts) + ".")

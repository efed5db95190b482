"""``kbench transfer run``: the transfer track's runner, its records and its tables.

Layout (``docs/transfer.md``)::

    <out>/transfer/<source>-to-<target>/<method>/k<k>/seed-<s>.json        per-seed record (resume)
    <out>/transfer/<source>-to-<target>/<method>/k<k>/seed-<s>.csv.gz      its test predictions
    leaderboard/transfer/<source>-to-<target>/<method>/k<k>.json           all seeds (aggregate_seeds)
    leaderboard/transfer/<source>-to-<target>/<method>/k<k>.preds.csv.gz   the first seed's predictions

``k<k>`` is ``kfull`` for the in-domain ceiling (the full target train part).
The table per pair (rows: methods, columns: k) is part of
``kbench leaderboard build`` (:func:`transfer_markdown`, :func:`transfer_html`).
"""

from __future__ import annotations

import html
import time
from pathlib import Path

from kbench.core.errors import KbenchInputError
from kbench.core.escaping import markdown_cell, markdown_text
from kbench.core.identifiers import path_under
from kbench.data.transfer_task import K_BUDGETS, Transfer
from kbench.leaderboard.policy import MIN_SEEDS
from kbench.leaderboard.store import (
    atomic_write_bytes,
    atomic_write_text,
    load_dataset,
    predictions_csv_gz,
    record_json,
)
from kbench.scoring.evaluate import Evaluator, sha256_bytes
from kbench.scoring.records import DatasetRef, EvaluationResult, TransferRef, aggregate_seeds

TRANSFER_FOLDER = "transfer"
DEFAULT_SEEDS = (0, 1, 2, 3, 4)


def k_label(k: int | None) -> str:
    return "kfull" if k is None else f"k{k}"


def methods_registry() -> dict[str, type]:
    # imported on use: the baselines are an optional install, and importing them runs every baseline module
    try:
        from kbench_baselines.transfer import TRANSFER_METHODS
    except ImportError as exc:
        raise KbenchInputError(f"the baselines package cannot be imported ({exc}); install kbench with "
                               "its baselines (pip install -e '.[baselines]').") from exc
    return TRANSFER_METHODS


def _ref(ds) -> DatasetRef:
    return DatasetRef(name=ds.name, version=ds.version, checksum=ds.checksum)


def _checked_arguments(reg: dict[str, type], methods: list[str] | None, ks, seeds,
                       leaderboard_root: str | Path | None) -> tuple[list[str], list[int], list[int]]:
    """The methods, budgets and seeds to run (seeds de-duplicated, in order); an input error for a bad one."""
    methods = list(methods or reg)
    for m in methods:
        if m not in reg:
            raise KbenchInputError(f"unknown transfer method {m!r}. Available: {', '.join(sorted(reg))}.")
    ks = [int(k) for k in ks]
    bad = [k for k in ks if k not in K_BUDGETS]
    if bad:
        raise KbenchInputError(f"--k: budgets must be among {K_BUDGETS}, got {bad}.")
    seeds = list(dict.fromkeys(int(s) for s in seeds))
    if leaderboard_root is not None and len(seeds) < MIN_SEEDS:
        raise KbenchInputError(f"--update-leaderboard needs at least {MIN_SEEDS} seeds; got {seeds}.")
    return methods, ks, seeds


def _resumed_run(rec_path: Path, gz_path: Path, src, tgt) -> tuple[EvaluationResult, bytes] | None:
    """The record and predictions an earlier call left for one seed, if scored on these very datasets."""
    if rec_path.exists() and gz_path.exists():
        rec = EvaluationResult.model_validate_json(rec_path.read_text(encoding="utf-8"))
        if rec.dataset.checksum == tgt.checksum and rec.transfer and \
                rec.transfer.source.checksum == src.checksum:
            return rec, gz_path.read_bytes()
    return None


def _fitted_run(method_cls: type, method_name: str, src, tgt, k: int | None, seed: int, evaluator, test_ids,
                gz_name: str) -> tuple[EvaluationResult, bytes]:
    """Fit one method on one (k, seed) draw and score its predictions of the target's test part."""
    task = Transfer(src, tgt, 0 if k is None else k, seed)
    method = method_cls()
    t0 = time.perf_counter()
    method.fit(task, seed=seed)
    fit_s = time.perf_counter() - t0
    preds = method.predict(task.target_inputs(), test_ids)
    gz = predictions_csv_gz(preds)
    rec = evaluator(preds, method=method_name, predictions_path=gz_name, predictions_sha256=sha256_bytes(gz))
    rec.extra = {"seed": seed, "fit_time_s": fit_s}
    for attr in ("coverage", "used"):
        if hasattr(method, attr):
            rec.extra[f"{attr}"] = getattr(method, attr)
    return rec, gz


def _aggregated_record(method_cls: type, method_name: str, k: int | None,
                       runs: list[tuple[int, EvaluationResult, bytes]], src, tgt, ks: list[int],
                       seeds: list[int]) -> EvaluationResult:
    """One (method, k)'s runs, sorted by seed, as its leaderboard record, with the command that re-runs it."""
    agg = aggregate_seeds([r[1] for r in runs], [r[0] for r in runs])
    agg.transfer = TransferRef(source=_ref(src), k=k, shots_seed=None)
    agg.extra = {"seeds": [r[0] for r in runs], "role": method_cls.role, "description": method_cls.description,
                 "code": method_cls.code, "fit_time_s_per_seed": [r[1].extra.get("fit_time_s") for r in runs],
                 "command": (f"kbench transfer run --source {src.name} --target {tgt.name} --methods {method_name} "
                             f"--k {' '.join(map(str, ks))} --seeds {' '.join(map(str, seeds))}")}
    for attr in ("coverage", "used"):  # source-oracle: share of test ids the source measured; fine-tuning:
        if attr in runs[0][1].extra:   # shots used per direction
            agg.extra[f"{attr}_per_seed"] = [r[1].extra.get(attr) for r in runs]
    agg.predictions.path = f"{k_label(k)}.preds.csv.gz"
    return agg


def run_transfer(source: str, target: str, methods: list[str] | None = None, ks=(0, 100, 1000),
                 seeds=DEFAULT_SEEDS, out: str | Path = "results", leaderboard_root: str | Path | None = None,
                 log=print) -> list[EvaluationResult]:
    """Fit and score every (method, k, seed); write per-seed records, then the aggregated ones."""
    reg = methods_registry()
    methods, ks, seeds = _checked_arguments(reg, methods, ks, seeds, leaderboard_root)
    src, tgt = load_dataset(source), load_dataset(target)
    pair = f"{src.name}-to-{tgt.name}"
    evaluator = Evaluator(tgt, split="random", part="test", reference="default")
    test_ids = tgt.split("random")["test"]
    base = path_under(Path(out) / TRANSFER_FOLDER, ("pair", pair))  # dataset names from manifests: identifiers
    # the budgets each method runs at: its own, within --k; the ceiling (None) always
    plan = {m: [k for k in reg[m].budgets if k is None or k in ks] for m in methods}
    per_seed: dict[tuple[str, int | None], list[tuple[int, EvaluationResult, bytes]]] = {}
    for seed in seeds:  # seed outside: xgboost-finetuned reuses the seed's source-xgboost fit
        for m in methods:
            for k in plan[m]:
                folder = base / m / k_label(k)
                rec_path, gz_path = folder / f"seed-{seed}.json", folder / f"seed-{seed}.csv.gz"
                resumed = _resumed_run(rec_path, gz_path, src, tgt)
                if resumed is not None:
                    per_seed.setdefault((m, k), []).append((seed, *resumed))
                    continue
                earlier = per_seed.get((m, k))
                if not reg[m].stochastic and earlier:  # deterministic: every seed gives the same predictions
                    _, rec0, gz = earlier[0]
                    rec = rec0.model_copy(deep=True)
                    rec.extra = {**rec.extra, "seed": seed, "copied_from_seed": rec0.extra.get("seed")}
                else:
                    rec, gz = _fitted_run(reg[m], m, src, tgt, k, seed, evaluator, test_ids, gz_path.name)
                rec.transfer = TransferRef(source=_ref(src), k=k, shots_seed=seed if k else None)
                atomic_write_bytes(gz_path, gz)
                atomic_write_text(rec_path, record_json(rec))
                per_seed.setdefault((m, k), []).append((seed, rec, gz))
                o = rec.metrics["overall"]
                log(f"  {pair} {m} {k_label(k)} seed {seed}: top-1 {o['top1']:.4f}, "
                    f"geomean slowdown {o['geomean_slowdown']:.4f}")
    out_records = []
    for (m, k), runs in per_seed.items():
        runs.sort(key=lambda r: r[0])
        agg = _aggregated_record(reg[m], m, k, runs, src, tgt, ks, seeds)
        out_records.append(agg)
        if leaderboard_root is not None:
            folder = path_under(Path(leaderboard_root) / TRANSFER_FOLDER, ("pair", pair), ("method", m))
            atomic_write_bytes(folder / f"{k_label(k)}.preds.csv.gz", runs[0][2])
            atomic_write_text(folder / f"{k_label(k)}.json", record_json(agg))
    return out_records


# ----------------------------------------------------------------------------- tables
def read_transfer_records(root: str | Path) -> dict[str, list[EvaluationResult]]:
    """pair -> its aggregated records (schema-checked), from ``<root>/transfer/<pair>/<method>/k*.json``."""
    out: dict[str, list[EvaluationResult]] = {}
    for path in sorted((Path(root) / TRANSFER_FOLDER).glob("*/*/k*.json")):
        try:
            rec = EvaluationResult.model_validate_json(path.read_text(encoding="utf-8"))
        except Exception as exc:
            raise KbenchInputError(f"{path}: not a valid transfer record ({exc}).") from exc
        if rec.transfer is None:
            raise KbenchInputError(f"{path}: record has no 'transfer' field (source, k); re-run "
                                   "`kbench transfer run`.")
        out.setdefault(path.parent.parent.name, []).append(rec)
    return out


ROLE_ORDER = {"reference": 0, "entry": 1, "ceiling": 2}


def stale_reason(record: EvaluationResult) -> str | None:
    """Why a transfer record cannot be re-scored here (its datasets are not the installed ones), or None."""
    for role, ref in (("target", record.dataset), ("source", record.transfer.source)):
        try:
            ds = load_dataset(ref.name)
        except KbenchInputError:
            return f"its {role} dataset {ref.name!r} is not installed"
        if ds.checksum != ref.checksum:
            return (f"scored on {ref.name} {ref.version}, {ds.version} is installed: its figures cannot be "
                    "re-scored here (run kbench transfer run again)")
    return None


def stale_note(records: list[EvaluationResult]) -> str | None:
    """The note under a pair's table when its records were scored on data that is not installed."""
    reasons = sorted({r for r in map(stale_reason, records) if r})
    return ("Stale: " + "; ".join(reasons) + ". kbench leaderboard validate cannot re-score these figures.") \
        if reasons else None


def transfer_table(records: list[EvaluationResult]) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one row per method, one column per k; cell = top-1 ± std / geomean slowdown ± std."""
    ks = sorted({r.transfer.k for r in records}, key=lambda k: (k is None, k or 0))
    by_method: dict[str, dict] = {}
    roles = {}
    for r in records:
        by_method.setdefault(r.method, {})[r.transfer.k] = r
        roles[r.method] = r.extra.get("role", "entry")
    header = ["method", "role"] + [("full target train" if k is None else f"k = {k}") for k in ks]
    rows = []
    for m in sorted(by_method, key=lambda m: (ROLE_ORDER.get(roles[m], 1), m)):
        cells = [m, roles[m]]
        for k in ks:
            r = by_method[m].get(k)
            if r is None:
                cells.append("")
                continue
            o, sd = r.metrics["overall"], (r.seeds.std if r.seeds else {})
            top1_sd, slow_sd = sd.get("top1"), sd.get("geomean_slowdown")
            cells.append(f"{100 * o['top1']:.2f}%" + (f" ± {100 * top1_sd:.2f}" if top1_sd else "")
                         + f" / {o['geomean_slowdown']:.4f}" + (f" ± {slow_sd:.4f}" if slow_sd else "") + "×")
        rows.append(cells)
    return header, rows


TABLE_NOTE = ("Cells: test top-1 / geometric-mean slowdown (means ± unbiased std over seeds; no ± where every "
              "seed gave the same score), scored on the target's "
              "`random` test part. k: measured target problems the method used (docs/transfer.md).")


def transfer_markdown(root: str | Path) -> str:
    """The README section: one table per pair (empty string when there are no transfer records)."""
    pairs = read_transfer_records(root)
    if not pairs:
        return ""
    out = ["## Transfer track", "", TABLE_NOTE, ""]
    for pair, recs in pairs.items():
        header, rows = transfer_table(recs)
        out += [f"### {pair.replace('-to-', ' → ')}", "", "| " + " | ".join(header) + " |",
                "|" + "---|" * len(header)]
        out += ["| " + " | ".join(markdown_cell(markdown_text(c)) for c in r) + " |" for r in rows]
        note = stale_note(recs)
        out += ["", f"_{markdown_text(note)}_"] if note else []
        out.append("")
    return "\n".join(out)


def transfer_html(root: str | Path) -> str:
    pairs = read_transfer_records(root)
    if not pairs:
        return ""
    out = ['<h2 id="transfer">Transfer track</h2>', f"<p>{html.escape(TABLE_NOTE)}</p>"]
    for pair, recs in pairs.items():
        header, rows = transfer_table(recs)
        out.append(f"<h3>{html.escape(pair.replace('-to-', ' → '))}</h3><table class=\"board\"><thead><tr>"
                   + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr></thead><tbody>")
        out += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows]
        out.append("</tbody></table>")
        note = stale_note(recs)
        if note:
            out.append(f'<p class="note">{html.escape(note)}</p>')
    return "\n".join(out)

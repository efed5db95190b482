"""``kbench submit``: check a result record and add it to the leaderboard."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from kbench.errors import KbenchInputError
from kbench.leaderboard.schema import dataset_problems, parse_meta, parse_record, record_problems
from kbench.leaderboard.store import (DEFAULT_ROOT, entry_dir, gzip_bytes, load_dataset, predictions_csv_gz,
                                      write_entry)

REL_TOL = 1e-9
ABS_TOL = 1e-12


@dataclass
class SubmitReport:
    folder: Path
    rescored: bool
    matched_seed: int | None = None
    notes: list[str] = field(default_factory=list)


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=ABS_TOL)


def metric_mismatches(claimed: dict, rescored: dict) -> list[str]:
    """Keys whose values differ between two overall-metric dicts (numbers compared with a tolerance)."""
    out = []
    for key, value in claimed.items():
        if not isinstance(value, (int, float)) and value is not None:
            continue
        if key not in rescored:
            out.append(f"{key}: claimed {value}, not computed")
        elif not _same(value, rescored[key]):
            out.append(f"{key}: claimed {value}, re-scored {rescored[key]}")
    return out


def find_predictions(result_path: Path, record, preds: str | Path | None) -> Path | None:
    """The predictions file: --preds, else the record's own path (relative to the record), else a sibling."""
    if preds is not None:
        p = Path(preds)
        if not p.exists():
            raise KbenchInputError(f"{p}: predictions file not found.")
        return p
    base = Path(result_path).parent
    candidates = []
    if record.predictions.path:
        p = Path(record.predictions.path)
        inside = (base / p).resolve()
        if p.is_absolute() or not inside.is_relative_to(base.resolve()):
            # a record names files beside it; reading elsewhere would let a record pick any file
            raise KbenchInputError(
                f"{result_path}: predictions.path {record.predictions.path!r} points outside the record's "
                f"folder ({base}); put the predictions file in that folder (or a sub-folder) and give its "
                "relative path, or pass the file with --preds.")
        candidates += [base / p, base / p.name]
    candidates += [base / "preds.csv.gz", base / "preds.csv"]
    return next((c for c in candidates if c.is_file()), None)


def rescore(record, preds_path: Path) -> tuple[int | None, object]:
    """Re-score ``preds_path`` with the Evaluator; returns (matching seed or None, new record).

    Raises KbenchInputError when the file is not the one the record was scored from or the
    metrics differ.
    """
    from kbench.evaluate import Evaluator, read_predictions
    frame, digest = read_predictions(preds_path)
    if record.predictions.sha256 and record.predictions.sha256 != digest:
        raise KbenchInputError(
            f"{preds_path}: sha256 {digest[:16]}… is not the record's predictions.sha256 "
            f"{record.predictions.sha256[:16]}…: this is not the file the record was scored from.")
    ds = load_dataset(record.dataset.name)
    from kbench.records import TuningResult
    if isinstance(record, TuningResult):
        from kbench.evaluate import evaluate_tuning
        new = evaluate_tuning(ds, frame, solver=record.solver, split=record.split, part=record.part,
                              method=record.method)
        new.predictions.path, new.predictions.sha256 = str(preds_path), digest
        return _matching_seed(record, new.overall, preds_path), new
    ev = Evaluator(ds, split=record.split, part=record.part, reference="default")
    if ev.reference_name != record.reference:
        if record.reference is None:
            ev = Evaluator(ds, split=record.split, part=record.part, reference=None)
        else:
            raise KbenchInputError(
                f"the record measures speed-up against {record.reference!r} but the standard reference "
                f"heuristic of {ds.name} here is {ev.reference_name!r}; re-score the predictions with "
                f"`kbench evaluate --json` and submit that record.")
    new = ev(frame, method=record.method, predictions_path=str(preds_path), predictions_sha256=digest)
    return _matching_seed(record, new.metrics["overall"], preds_path), new


def _matching_seed(record, got: dict, preds_path: Path) -> int | None:
    """The seed whose claimed metrics the re-scored ``got`` reproduces (None: a single-run record)."""
    if record.seeds is not None:
        tries = list(zip(record.seeds.seeds, record.seeds.per_seed))
    else:
        tries = [(None, record.overall)]
    reports = []
    for seed, claimed in tries:
        bad = metric_mismatches(claimed, got)
        if not bad:
            return seed
        reports.append((seed, bad))
    seed, bad = min(reports, key=lambda r: len(r[1]))
    which = f"seed {seed}" if seed is not None else "the record"
    raise KbenchInputError(
        f"{preds_path}: re-scoring does not reproduce the record's metrics (closest: {which}, "
        f"{len(bad)} metric(s) differ):\n  - " + "\n  - ".join(bad[:8]))


def submit(result_path: str | Path, meta_path: str | Path, root: str | Path = DEFAULT_ROOT,
           preds: str | Path | None = None, replace: bool = False, require_preds: bool = False,
           check_seeds: bool = True) -> SubmitReport:
    """Check a record and its metadata and add them (and the predictions) under ``root``."""
    result_path, meta_path, root = Path(result_path), Path(meta_path), Path(root)
    record = parse_record(result_path)
    meta = parse_meta(meta_path)
    issues = record_problems(record, meta, min_seeds=5 if check_seeds else 1)
    if record.kbench_version != _installed_version():
        issues.append(f"the record was made with kbench {record.kbench_version}, this is kbench "
                      f"{_installed_version()}: re-run it (or re-score it) with this version")
    issues += dataset_problems(record)
    if issues:
        raise KbenchInputError(f"{result_path} cannot be submitted:\n  - " + "\n  - ".join(issues))
    folder = entry_dir(root, record.dataset.name, record.split, record.method)
    if (folder / "result.json").exists() and not replace:
        raise KbenchInputError(f"{folder} already holds an entry for {record.method!r}; pass --replace "
                               "to overwrite it.")
    preds_path = find_predictions(result_path, record, preds)
    report = SubmitReport(folder=folder, rescored=preds_path is not None)
    preds_gz = None
    if preds_path is None:
        if require_preds:
            raise KbenchInputError(f"no predictions file found for {result_path} (looked for "
                                   f"{record.predictions.path or 'preds.csv.gz'} beside it); pass --preds.")
        report.notes.append("no predictions file: the record was not re-scored, and the entry is left out "
                            "of the tie test and the LoP plot")
    else:
        report.matched_seed, _ = rescore(record, preds_path)
        preds_gz = stored_predictions(record, preds_path)
    write_entry(root, record, meta, preds_gz)
    return report


def stored_predictions(record, preds_path: Path) -> bytes:
    """The bytes the leaderboard keeps for a predictions file: rankings cut to their first 30
    applicable candidates (they score exactly as the full file), gzip; other formats as given."""
    from kbench.records import TuningResult
    raw = preds_path.read_bytes()
    if isinstance(record, TuningResult):
        return raw if preds_path.suffix == ".gz" else gzip_bytes(raw)
    from kbench.evaluate import Evaluator, read_predictions
    frame, _ = read_predictions(preds_path)
    if "ranking" not in frame.columns:
        return raw if preds_path.suffix == ".gz" else gzip_bytes(raw)
    ev = Evaluator(load_dataset(record.dataset.name), split=record.split, part=record.part, reference=None)
    return predictions_csv_gz(ev.lean_predictions(frame))


def _installed_version() -> str:
    from kbench.version import __version__
    return __version__

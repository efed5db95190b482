"""``kbench submit``: check a result record, re-score every seed from its predictions, add it to the leaderboard.

The predictions of every seed the record lists must be given: a ``preds.parquet`` as the
leaderboard stores it (a ``seed`` column), or one CSV per seed as ``kbench run`` writes them
(``seed-<k>/preds.csv.gz`` beside the record; the record's own ``predictions.path`` stands for
its first seed). Every seed is re-scored and every stored figure compared
(:mod:`kbench.leaderboard.rescorer`); the entry is written atomically under a lock, so two
submits never interleave.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench.core.version import __version__
from kbench.leaderboard.rescorer import Rescorer
from kbench.leaderboard.schema import dataset_problems, parse_meta, parse_record, record_problems
from kbench.leaderboard.store import (
    DEFAULT_ROOT,
    VERIFICATION_FILE,
    entry_dir,
    entry_lock,
    lean_predictions,
    load_dataset,
    read_seed_predictions,
    seed_predictions_parquet,
    write_entry,
)
from kbench.scoring.evaluate import Evaluator
from kbench.scoring.prediction_files import read_predictions
from kbench.scoring.records import TuningResult

#: where ``kbench run`` writes a seed's predictions, relative to the all-seeds record
SEED_PREDS = "seed-{seed}/preds.csv.gz"
PARQUET_MAGIC = b"PAR1"


@dataclass
class SubmitReport:
    folder: Path
    seeds_rescored: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _is_parquet(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == PARQUET_MAGIC
    except OSError:
        return False


def _inside(result_path: Path, given: str) -> Path:
    """A path the record names, which must lie in the record's folder (a record never picks any file)."""
    base = Path(result_path).parent
    p = Path(given)
    if p.is_absolute() or not (base / p).resolve().is_relative_to(base.resolve()):
        raise KbenchInputError(
            f"{result_path}: predictions.path {given!r} points outside the record's folder ({base}); put the "
            "predictions file in that folder (or a sub-folder) and give its relative path, or pass it with --preds.")
    return base / p


def find_seed_predictions(result_path: Path, record, preds: str | Path | None) -> dict[int, tuple[Path, pd.DataFrame]]:
    """Each seed's (file, predictions frame) for ``record``; refuses when any seed's predictions are missing.

    ``--preds`` may be a ``preds.parquet`` (every seed) or, for a one-seed record, a CSV. Without
    it: the record's ``predictions.path`` (parquet, or the CSV of its first seed), then
    ``seed-<k>/preds.csv.gz`` beside the record for the other seeds.
    """
    result_path = Path(result_path)
    seeds = list(record.seeds.seeds) if record.seeds else [None]
    found: dict = {}
    if preds is not None:
        given = Path(preds)
        if not given.exists():
            raise KbenchInputError(f"{given}: predictions file not found.")
        if _is_parquet(given):
            return {s: (given, f) for s, f in read_seed_predictions(given).items()}
        if len(seeds) > 1:
            raise KbenchInputError(
                f"--preds {given}: a CSV holds one seed's predictions, the record lists seeds {seeds}; give "
                "the preds.parquet of every seed, or leave --preds out to read seed-<k>/preds.csv.gz beside "
                "the record.")
        found[seeds[0]] = given
    else:
        named = _inside(result_path, record.predictions.path) if record.predictions.path else None
        if named is not None and named.is_file() and _is_parquet(named):
            return {s: (named, f) for s, f in read_seed_predictions(named).items()}
        base = result_path.parent
        for i, seed in enumerate(seeds):
            candidates = ([named] if i == 0 and named is not None else [])
            candidates += [base / SEED_PREDS.format(seed=seed)] if seed is not None else []
            candidates += [base / "preds.csv.gz", base / "preds.csv"] if len(seeds) == 1 else []
            hit = next((c for c in candidates if c.is_file()), None)
            if hit is not None:
                found[seed] = hit
    missing = [s for s in seeds if s not in found]
    if missing:
        where = ", ".join(SEED_PREDS.format(seed=s) for s in missing if s is not None) or "preds.csv.gz"
        raise KbenchInputError(
            f"{result_path}: no predictions for seed(s) {missing} (looked for {where} beside the record); every "
            "seed's predictions are re-scored, so give them all (kbench run writes them), or pass --preds "
            "preds.parquet.")
    out = {}
    for i, (seed, path) in enumerate(found.items()):
        frame, digest = read_predictions(path)
        if i == 0 and record.predictions.sha256 and path == (
                _inside(result_path, record.predictions.path) if record.predictions.path else None) \
                and record.predictions.sha256 != digest:
            raise KbenchInputError(
                f"{path}: sha256 {digest[:16]}… is not the record's predictions.sha256 "
                f"{record.predictions.sha256[:16]}…: this is not the file the record was scored from.")
        out[0 if seed is None else seed] = (path, frame)
    return out


def stored_predictions(record, frames: dict[int, pd.DataFrame]) -> bytes:
    """The bytes the leaderboard keeps: every seed's predictions, rankings cut to their first 30
    applicable candidates (they score exactly as the full ones), in one parquet table."""
    if isinstance(record, TuningResult):
        return seed_predictions_parquet(frames)
    ev = Evaluator(load_dataset(record.dataset.name), split=record.split, part=record.part, reference=None)
    return seed_predictions_parquet({s: lean_predictions(ev, f) for s, f in frames.items()})


def submit(result_path: str | Path, meta_path: str | Path, root: str | Path = DEFAULT_ROOT,
           preds: str | Path | None = None, replace: bool = False, check_seeds: bool = True) -> SubmitReport:
    """Check a record and its metadata, re-score every seed, and add the entry under ``root``."""
    result_path, meta_path, root = Path(result_path), Path(meta_path), Path(root)
    record = parse_record(result_path)
    meta = parse_meta(meta_path)
    issues = record_problems(record, meta, min_seeds=5 if check_seeds else 1)
    if record.kbench_version != __version__:
        issues.append(f"the record was made with kbench {record.kbench_version}, this is kbench "
                      f"{__version__}: re-run it (or re-score it) with this version")
    issues += dataset_problems(record)
    if issues:
        raise KbenchInputError(f"{result_path} cannot be submitted:\n  - " + "\n  - ".join(issues))
    # the names become the entry's folder: an absolute or '..' dataset name is no identifier, refused here
    try:
        folder = entry_dir(root, record.dataset.name, record.split, record.method)
    except KbenchInputError as exc:
        raise KbenchInputError(f"{result_path} cannot be submitted: {exc}") from None
    if (folder / "result.json").exists() and not replace:
        raise KbenchInputError(f"{folder} already holds an entry for {record.method!r}; pass --replace "
                               "to overwrite it.")
    found = find_seed_predictions(result_path, record, preds)
    frames = {seed: frame for seed, (_, frame) in found.items()}
    done = Rescorer().verify(record, frames, str(result_path))
    if not done.complete:
        raise KbenchInputError(f"{result_path}: no predictions for seed(s) {done.seeds_unstored}; every seed's "
                               "predictions are re-scored, so give them all.")
    stored = stored_predictions(record, frames)
    report = SubmitReport(folder=folder, seeds_rescored=done.seeds_rescored)
    with entry_lock(root):
        # checked again under the lock: a submit that ran meanwhile may have added this method
        if (folder / "result.json").exists() and not replace:
            raise KbenchInputError(f"{folder} already holds an entry for {record.method!r} (added while this "
                                   "submit ran); pass --replace to overwrite it.")
        write_entry(root, record, meta, stored)
        # the replaced entry's GPU re-timing measured the choices of its predictions, not of these
        if replace and (folder / VERIFICATION_FILE).exists():
            (folder / VERIFICATION_FILE).unlink()
            report.notes.append(f"removed the replaced entry's {VERIFICATION_FILE} (it re-timed the old "
                                "predictions); run kbench verify-on-gpu on the new ones")
    return report

"""Leaderboard layout: where entries live, reading them, writing them atomically."""

from __future__ import annotations

import gzip
import io
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from kbench.errors import KbenchInputError
from kbench.leaderboard.datasets import (  # noqa: F401  (re-exported: the store's public names)
    _CACHE, _EXTRA_DATASETS, load_dataset, register_dataset, unregister_dataset)
from kbench.records import EvaluationResult

DEFAULT_ROOT = Path("leaderboard")


def entry_dir(root: Path, dataset: str, split: str, method: str) -> Path:
    return Path(root) / dataset / split / method


# ----------------------------------------------------------------------------- writing
def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write a file so that a reader (or a killed run) never sees it half written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def gzip_bytes(data: bytes) -> bytes:
    """Deterministic gzip: no file name, mtime 0 (the same data gives the same bytes)."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(data)
    return buf.getvalue()


def predictions_csv_gz(preds: pd.DataFrame) -> bytes:
    """A predictions frame as deterministic gzip-compressed CSV (problem_id, ranking)."""
    cols = [c for c in ("problem_id", "ranking", "kernel", "score") if c in preds.columns]
    text = preds[cols].to_csv(index=False, lineterminator="\n")
    return gzip_bytes(text.encode("utf-8"))


def record_json(record: EvaluationResult) -> str:
    return record.model_dump_json(indent=2) + "\n"


def write_entry(root: Path, record: EvaluationResult, meta, preds_gz: bytes | None) -> Path:
    """Write (or replace) one leaderboard entry: result.json, meta.json, preds.csv.gz."""
    from kbench.evaluate import sha256_bytes
    folder = entry_dir(root, record.dataset.name, record.split, record.method)
    record = record.model_copy(deep=True)
    if preds_gz is not None:
        record.predictions.path = "preds.csv.gz"
        record.predictions.sha256 = sha256_bytes(preds_gz)
        atomic_write_bytes(folder / "preds.csv.gz", preds_gz)
    else:
        (folder / "preds.csv.gz").unlink(missing_ok=True)
    atomic_write_text(folder / "meta.json", meta.model_dump_json(indent=2) + "\n")
    atomic_write_text(folder / "result.json", record_json(record))
    return folder


# ----------------------------------------------------------------------------- reading
#: an entry's GPU re-timing record (copy ``kbench verify-on-gpu``'s verification.json here)
VERIFICATION_FILE = "verification.json"


@dataclass
class Entry:
    """One leaderboard entry as read from its folder."""

    folder: Path
    record: EvaluationResult
    meta: object  # SubmissionMeta
    preds_path: Path | None
    #: GPU re-timing of this entry's chosen plans (``verification.json``), when one was run
    verification: object = None  # kbench.records.VerificationRecord | None

    @property
    def method(self) -> str:
        return self.record.method

    @property
    def name(self) -> str:
        return self.meta.display_name or self.record.method

    @property
    def role(self) -> str:
        return self.meta.role

    def preds(self) -> pd.DataFrame | None:
        if self.preds_path is None:
            return None
        from kbench.evaluate import read_predictions
        return read_predictions(self.preds_path)[0]


def read_entries(root: Path) -> dict[tuple[str, str], list[Entry]]:
    """Every entry under a leaderboard folder, grouped by (dataset, split), sorted by name.

    Each record is schema-checked as it is read; a bad file raises one KbenchInputError.
    """
    from kbench.leaderboard.schema import GENERATED, parse_meta, parse_record, parse_verification
    root = Path(root)
    if not root.is_dir():
        raise KbenchInputError(f"{root}: leaderboard folder not found.")
    out: dict[tuple[str, str], list[Entry]] = {}
    for folder in sorted(p for p in root.glob("*/*/*") if p.is_dir()):
        rel = folder.relative_to(root)
        if rel.parts[0] in GENERATED or rel.parts[0].startswith("."):
            continue
        if not (folder / "result.json").exists():
            continue
        record = parse_record(folder / "result.json")
        meta = parse_meta(folder / "meta.json")
        preds = folder / "preds.csv.gz"
        verification = parse_verification(folder / VERIFICATION_FILE) if (folder / VERIFICATION_FILE).exists() \
            else None
        out.setdefault((rel.parts[0], rel.parts[1]), []).append(
            Entry(folder, record, meta, preds if preds.exists() else None, verification))
    return {k: out[k] for k in sorted(out)}

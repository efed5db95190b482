"""Leaderboard layout: where entries live, reading them, writing them atomically.

An entry is a folder ``<dataset>/<split>/<method>/`` holding ``result.json`` (the record),
``meta.json`` (the submission metadata), ``preds.parquet`` (the test predictions of every
stored seed, each ranking cut to its first 30 applicable candidates) and, when the entry was
re-timed on a GPU, ``verification.json``.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kbench.core.errors import KbenchInputError
from kbench.core.identifiers import check_identifier, path_under
from kbench.core.output_files import atomic_write_bytes, atomic_write_text  # noqa: F401  (re-exported)
from kbench.leaderboard.datasets import _CACHE, _EXTRA_DATASETS, load_dataset, register_dataset, unregister_dataset  # noqa: F401  (re-exported: the store's public names)
from kbench.leaderboard.schema import GENERATED, PREDS_FILE, parse_meta, parse_record, parse_verification
from kbench.scoring.evaluate import Evaluator
from kbench.scoring.metrics import DEEPEST, lean_rows
from kbench.scoring.prediction_files import read_predictions, sha256_bytes
from kbench.scoring.records import EvaluationResult

DEFAULT_ROOT = Path("leaderboard")


def entry_dir(root: Path, dataset: str, split: str, method: str) -> Path:
    """``root/<dataset>/<split>/<method>``: each name an identifier, the path under ``root``."""
    return path_under(root, ("dataset", dataset), ("split", split), ("method", method))


# ----------------------------------------------------------------------------- writing
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


def lean_predictions(evaluator: Evaluator, preds, keep: int = DEEPEST) -> pd.DataFrame:
    """``preds`` with each ranking cut to its first ``keep`` applicable candidates on ``evaluator``'s part.

    No metric reads a ranking past its 30th applicable candidate (``DEEPEST``), so the cut
    predictions score exactly as the full ones: the leaderboard stores these. Problems keep
    their order; predictions without a ``ranking`` column are returned as they are.
    """
    frame = read_predictions(preds)[0] if isinstance(preds, (str, Path)) else preds
    if "ranking" not in frame.columns or {"kernel", "score"} <= set(frame.columns):
        return frame
    frame = frame[["problem_id", "ranking"]].reset_index(drop=True)
    # split in Arrow too: every ranking at once, not a Python call per problem
    rankings = pc.split_pattern(pa.array(frame["ranking"].astype(str).to_numpy(dtype=object), type=pa.string()), ";")
    lengths = pc.list_value_length(rankings).to_numpy(zero_copy_only=False).astype(np.int64)
    names = pd.Index(pc.utf8_trim_whitespace(pc.list_flatten(rankings)).to_numpy(zero_copy_only=False), dtype=object)
    row = np.repeat(np.arange(len(frame)), lengths)
    prob = pd.Index(evaluator.table.problem_ids).get_indexer(frame["problem_id"].astype(str).str.strip())[row]
    kern = pd.Index(evaluator.table.kernels).get_indexer(names)
    known = (prob >= 0) & (kern >= 0)
    kept = np.flatnonzero(known)[lean_rows(evaluator.table, prob[known], kern[known], keep)]
    # problems of other parts or unknown names are not this part's to cut: keep those rows whole
    whole = np.isin(row, row[~known])
    kept = np.union1d(kept, np.flatnonzero(whole))
    # kept is sorted, so each problem's kept names are one run of it: join every run at once in Arrow
    # (no Python call per problem); a problem with no name kept keeps its ranking as given
    counts = np.bincount(row[kept], minlength=len(frame))
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]), type=pa.int64())
    runs = pa.LargeListArray.from_arrays(offsets, pa.array(np.asarray(names, dtype=object)[kept], type=pa.string()))
    joined = pc.binary_join(runs, ";").to_numpy(zero_copy_only=False)
    out = frame.copy()
    out["ranking"] = np.where(counts > 0, joined, frame["ranking"].to_numpy(dtype=object))
    return out


#: the column of :data:`PREDS_FILE` naming each row's seed
SEED_COLUMN = "seed"


#: parquet metadata key: JSON {seed: earlier seed} of the seeds whose predictions are an earlier seed's
SEED_COPIES_KEY = "kbench_seed_copies"


def frame_digest(frame: pd.DataFrame) -> str:
    """A digest of a predictions frame's columns and cells (equal frames, equal digests)."""
    h = hashlib.sha256("\x1f".join(map(str, frame.columns)).encode())
    h.update(pd.util.hash_pandas_object(frame.astype(str), index=False).to_numpy().tobytes())
    return h.hexdigest()


#: the column whose cells are ';'-separated kernel names: stored as a list of dictionary-coded names
RANKING_COLUMN = "ranking"


def seed_predictions_parquet(frames: dict[int, pd.DataFrame]) -> bytes:
    """Every seed's predictions as one deterministic parquet table (seed, then the file's columns).

    A ranking is stored as a list of kernel names, dictionary-coded (a kernel is a small integer,
    its name stored once); the other columns as dictionary-coded text; zstd on top. A seed whose
    predictions equal an earlier seed's is stored as a reference to it (the metadata key
    :data:`SEED_COPIES_KEY`). :func:`read_seed_predictions` gives back the identical text per seed.
    """
    if not frames:
        raise ValueError("seed_predictions_parquet needs at least one seed")
    columns = list(next(iter(frames.values())).columns)
    parts, first_of, copies = [], {}, {}
    for seed in sorted(frames):
        frame = frames[seed]
        digest = frame_digest(frame)
        if digest in first_of:  # a deterministic method: this seed's predictions are an earlier seed's
            copies[str(seed)] = first_of[digest]
            continue
        first_of[digest] = seed
        if list(frame.columns) != columns:
            raise KbenchInputError(f"the predictions of seed {seed} have columns {list(frame.columns)}, seed "
                                   f"{min(frames)}'s have {columns}: give every seed in the same format.")
        parts.append(frame.astype(str).assign(**{SEED_COLUMN: np.int32(seed)})[[SEED_COLUMN, *columns]])
    table = pa.Table.from_pandas(pd.concat(parts, ignore_index=True), preserve_index=False)
    if RANKING_COLUMN in columns:
        index = table.column_names.index(RANKING_COLUMN)
        table = table.set_column(index, RANKING_COLUMN, pc.split_pattern(table.column(RANKING_COLUMN), ";"))
    table = table.replace_schema_metadata({SEED_COPIES_KEY: json.dumps(copies, sort_keys=True)})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", compression_level=9, use_dictionary=True,
                   write_statistics=False)
    return buf.getvalue()


def first_seed(seed_preds: dict[int, pd.DataFrame]) -> tuple[pd.DataFrame, str]:
    """An entry's first seed's predictions and the sha256 of their gzip CSV (as ``kbench run`` writes it):
    what a GPU re-timing of the entry times and records, and what ``kbench leaderboard validate``
    compares the entry's ``verification.json`` with."""
    frame = seed_preds[min(seed_preds)]
    return frame, sha256_bytes(predictions_csv_gz(frame))


def read_seed_predictions(path: Path) -> dict[int, pd.DataFrame]:
    """The predictions of every seed stored in ``path`` (:data:`PREDS_FILE`), each with its text columns."""
    path = Path(path)
    try:
        table = pq.read_table(path)
        if RANKING_COLUMN in table.column_names and pa.types.is_list(table.schema.field(RANKING_COLUMN).type):
            index = table.column_names.index(RANKING_COLUMN)
            rankings = table.column(RANKING_COLUMN).cast(pa.list_(pa.string()))
            table = table.set_column(index, RANKING_COLUMN, pc.binary_join(rankings, ";"))
        copies = json.loads((table.schema.metadata or {}).get(SEED_COPIES_KEY.encode(), b"{}"))
        frame = table.to_pandas()
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise KbenchInputError(f"{path}: not a readable parquet table of seed predictions ({exc}); write it "
                               "again with `kbench submit` or `kbench run --update-leaderboard`.") from None
    if SEED_COLUMN not in frame.columns or frame[SEED_COLUMN].dtype.kind not in "iu":
        raise KbenchInputError(f"{path}: has no integer {SEED_COLUMN!r} column (columns: {list(frame.columns)}).")
    text = [c for c in frame.columns if c != SEED_COLUMN]
    frame[text] = frame[text].astype(str)
    out = {int(seed): part[text].reset_index(drop=True) for seed, part in frame.groupby(SEED_COLUMN, sort=True)}
    if not isinstance(copies, dict) or not all(str(v).lstrip("-").isdigit() and int(v) in out
                                               for v in copies.values()):
        raise KbenchInputError(f"{path}: its {SEED_COPIES_KEY} metadata {copies!r} names seeds it does not store.")
    out.update({int(seed): out[int(source)] for seed, source in copies.items()})
    return dict(sorted(out.items()))


@contextmanager
def entry_lock(root: Path):
    """Held while one writer checks and writes entries under ``root``: two submits never interleave."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".submit.lock", "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def write_entry(root: Path, record: EvaluationResult, meta, preds_parquet: bytes) -> Path:
    """Write (or replace) one leaderboard entry: preds.parquet, meta.json, result.json (last), each atomically."""
    folder = entry_dir(root, record.dataset.name, record.split, record.method)
    record = record.model_copy(deep=True)
    record.predictions.path = PREDS_FILE
    record.predictions.sha256 = sha256_bytes(preds_parquet)
    atomic_write_bytes(folder / PREDS_FILE, preds_parquet)
    (folder / "preds.csv.gz").unlink(missing_ok=True)  # a single-seed predictions file: PREDS_FILE replaces it
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
    _stored_seeds: list[int] | None = field(default=None, repr=False)

    @property
    def method(self) -> str:
        return self.record.method

    @property
    def name(self) -> str:
        return self.meta.display_name or self.record.method

    @property
    def role(self) -> str:
        return self.meta.role

    def stored_seeds(self) -> list[int]:
        """The seeds whose predictions the entry stores (read from the seed column only, once)."""
        if self.preds_path is None:
            return []
        if self._stored_seeds is not None:
            return self._stored_seeds
        try:
            table = pq.read_table(self.preds_path, columns=[SEED_COLUMN])
            seeds = table.column(SEED_COLUMN).to_numpy()
            copies = json.loads((table.schema.metadata or {}).get(SEED_COPIES_KEY.encode(), b"{}"))
            seeds = [*np.asarray(seeds).tolist(), *map(int, copies)]
        except (OSError, KeyError, ValueError, TypeError, pa.ArrowException) as exc:
            raise KbenchInputError(f"{self.preds_path}: not a readable parquet table of seed predictions "
                                   f"({exc}).") from None
        self._stored_seeds = sorted(set(seeds))
        return self._stored_seeds

    @property
    def one_seed(self) -> bool:
        """True when the record lists seeds whose predictions are not stored (their figures are not re-scored)."""
        seeds = self.record.seeds.seeds if self.record.seeds else None
        return seeds is not None and not set(seeds) <= set(self.stored_seeds())

    def seed_preds(self) -> dict[int, pd.DataFrame]:
        """Every stored seed's predictions ({} when the entry stores none)."""
        return read_seed_predictions(self.preds_path) if self.preds_path is not None else {}

    def preds(self) -> pd.DataFrame | None:
        """The first stored seed's predictions (the tie test and the LoP plot read these)."""
        seeds = self.seed_preds()
        return seeds[min(seeds)] if seeds else None


def read_entries(root: Path) -> dict[tuple[str, str], list[Entry]]:
    """Every entry under a leaderboard folder, grouped by (dataset, split), sorted by name.

    Each record is schema-checked as it is read; a bad file raises one KbenchInputError.
    """
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
        # the folder names become page and download names (site/<dataset>.html): identifiers only
        for what, name in zip(("dataset", "split", "method"), rel.parts):
            check_identifier(name, f"the {what} folder", str(root))
        record = parse_record(folder / "result.json")
        meta = parse_meta(folder / "meta.json")
        preds = folder / PREDS_FILE
        verification = parse_verification(folder / VERIFICATION_FILE) if (folder / VERIFICATION_FILE).exists() \
            else None
        out.setdefault((rel.parts[0], rel.parts[1]), []).append(
            Entry(folder, record, meta, preds if preds.exists() else None, verification))
    return {k: out[k] for k in sorted(out)}

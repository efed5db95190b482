"""Loss-free, resumable storage of raw collector output.

A raw folder holds::

    journal.txt                 one line per problem-direction started ("start <key> <run> <time>")
    env.jsonl                   environment snapshots (GPU, clocks, versions) at run start and end
    parts/<run>-<seq>.plans.jsonl.gz     a batch of per-(problem, plan) records
    parts/<run>-<seq>.problems.jsonl.gz  the same batch's per-problem records
    problems-<n>.parquet, plans-<n>.parquet   parts compacted by :func:`compact`

Every batch file is written to a temporary name, flushed to disk and renamed
into place, the plans file before the problems file: a problem counts as done
only when its record is in a problems file, and then its plans are on disk
too. A run killed at any moment therefore loses at most the batch in memory,
never a written one, and never leaves a half-written file. A re-run skips every
done problem. A batch whose file is torn anyway (a copy cut short, a full
disk, a crash of the machine before the data reached the disk) is not
counted: the reader skips the whole batch (:func:`read_parts`), a resuming
collector moves it to ``parts/torn/`` and says so (:func:`quarantine_torn`),
and its problem-directions are measured again. One collector writes a folder
at a time (:mod:`kbench.collect.raw_store.lock`). A problem that was started twice
without finishing (the process died on it twice, e.g. a GPU fault) is recorded
once as ``status="crashed"`` and skipped from then on.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kbench.collect.raw_store.lock import FolderLock
from kbench.core.errors import KbenchInputError

PARTS = "parts"
JOURNAL = "journal.txt"
ENV = "env.jsonl"
CRASH_LIMIT = 2  # starts without a finish after which a problem is given up as crashed

#: how every raw parquet table kbench writes is encoded (compaction here, ``merge``, travelling
#: copies; all through :func:`write_raw_table`): zstd at level 19, plus dictionary encoding on the
#: text (string) columns only (:func:`text_columns`), where repeated plan names, keys, run ids and
#: notes compress; the measured numbers are left plain. Lossless: a table reads back equal, schema
#: and metadata included. Files written before keep their encoding (zstd at the default level,
#: dictionary on every column): re-encoding committed files adds a new blob per file to every
#: clone's history for a smaller checkout (docs/collect_scale_out.md, "Raw table encoding").
PARQUET_ENCODING = {"compression": "zstd", "compression_level": 19}


def text_columns(schema: pa.Schema) -> list[str]:
    """The string columns of ``schema``: the ones a raw table dictionary-encodes."""
    return [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]


def write_raw_table(table: pa.Table, where) -> None:
    """Write ``table`` to ``where`` (a path or a binary file) as a raw table: :data:`PARQUET_ENCODING`,
    dictionaries on :func:`text_columns`."""
    pq.write_table(table, where, use_dictionary=text_columns(table.schema), **PARQUET_ENCODING)


def parquet_bytes(df: pd.DataFrame) -> bytes:
    """``df`` (its index dropped) as the bytes of a raw table (:func:`write_raw_table`)."""
    buf = io.BytesIO()
    write_raw_table(pa.Table.from_pandas(df, preserve_index=False), buf)
    return buf.getvalue()


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def fsync_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary name, flushed to disk, then renamed."""
    _fsync_write(Path(path), data)


def _fsync_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _jsonl_gz(records: list[dict]) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
        for rec in records:
            gz.write((json.dumps(rec, default=_json_default, allow_nan=True) + "\n").encode())
    return buf.getvalue()


def _json_default(o):
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    return str(o)


def _append_line(path: Path, line: str) -> None:
    with open(path, "a") as fh:
        fh.write(line.rstrip("\n") + "\n")
        fh.flush()
        os.fsync(fh.fileno())


class RawWriter:
    """Appends collector records to a raw folder in atomic batches."""

    def __init__(self, out_dir: str | Path, run_id: str | None = None, batch_size: int = 10,
                 max_batch_seconds: float = 60.0):
        self.out = Path(out_dir)
        (self.out / PARTS).mkdir(parents=True, exist_ok=True)
        self.run_id = run_id or new_run_id()
        self.batch_size = batch_size
        self.max_batch_seconds = max_batch_seconds
        self._problems: list[dict] = []
        self._plans: list[dict] = []
        self._seq = 0
        self._last_flush = time.monotonic()
        self.n_written = 0

    # -- journal and environment -----------------------------------------------
    def start(self, key: str) -> None:
        """Mark ``key`` as started (on disk) before measuring it."""
        _append_line(self.out / JOURNAL, f"start\t{key}\t{self.run_id}\t{time.time():.3f}")

    def write_env(self, phase: str, env: dict) -> None:
        rec = {"run_id": self.run_id, "phase": phase, "time": time.time(), **env}
        _append_line(self.out / ENV, json.dumps(rec, default=_json_default))

    # -- records ------------------------------------------------------------------
    def add(self, problem: dict, plans: list[dict]) -> None:
        problem = {**problem, "run_id": self.run_id}
        self._problems.append(problem)
        self._plans.extend({**p, "key": problem["key"], "run_id": self.run_id} for p in plans)
        if (len(self._problems) >= self.batch_size
                or time.monotonic() - self._last_flush > self.max_batch_seconds):
            self.flush()

    def flush(self) -> None:
        if not self._problems:
            return
        stem = f"{self.run_id}-{self._seq:05d}"
        parts = self.out / PARTS
        _fsync_write(parts / f"{stem}.plans.jsonl.gz", _jsonl_gz(self._plans))
        _fsync_write(parts / f"{stem}.problems.jsonl.gz", _jsonl_gz(self._problems))
        self.n_written += len(self._problems)
        self._seq += 1
        self._problems, self._plans = [], []
        self._last_flush = time.monotonic()

    def close(self) -> None:
        self.flush()

    # -- resume ---------------------------------------------------------------------
    def resume_state(self) -> tuple[set[str], dict[str, int]]:
        """(keys already done, {started-but-unfinished key: times started})."""
        return resume_state(self.out)


def _read_batch_file(path: Path) -> tuple[list[dict] | None, str]:
    """(records, "") of a batch file, or (None, why) when it is torn or unreadable."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
    if not raw:  # the writer never writes an empty file: even an empty batch has a gzip header
        return None, "empty file (0 bytes)"
    try:
        text = gzip.decompress(raw).decode("utf-8")
        return [json.loads(line) for line in text.splitlines() if line.strip()], ""
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        return None, f"cut short or corrupt at {len(raw)} bytes ({type(exc).__name__}: {exc})"
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"not valid JSON lines ({type(exc).__name__})"


@dataclass
class Parts:
    """The batch files of a raw folder: complete batches, and the torn ones skipped."""
    problems: list[list[dict]] = field(default_factory=list)  # per complete batch, in name order
    plans: list[list[dict]] = field(default_factory=list)
    torn: dict[str, str] = field(default_factory=dict)  # batch stem -> why it is not counted


def _stem(path: Path) -> str:
    return path.name.split(".", 1)[0]


def read_parts(out_dir: str | Path) -> Parts:
    """Read every batch, keeping only complete ones.

    A batch (``<run>-<seq>``) counts when its problems file and its plans file
    both read to the end. The plans file is renamed into place first, so a
    plans file without a problems file is a batch the collector was killed
    between the two renames: not done, not torn, ignored like an unwritten one.
    """
    parts_dir = Path(out_dir) / PARTS
    out = Parts()
    if not parts_dir.exists():
        return out
    problem_files = {_stem(p): p for p in sorted(parts_dir.glob("*.problems.jsonl.gz"))}
    for stem, prob_path in problem_files.items():
        plan_path = parts_dir / f"{stem}.plans.jsonl.gz"
        probs, why = _read_batch_file(prob_path)
        if probs is not None and not probs:
            probs, why = None, "no records (a batch holds at least one problem-direction)"
        if probs is None:
            out.torn[stem] = f"{prob_path.name}: {why}"
            continue
        if not plan_path.exists():
            out.torn[stem] = f"{plan_path.name}: missing while its problems file is there"
            continue
        plans, why = _read_batch_file(plan_path)
        if plans is None:
            out.torn[stem] = f"{plan_path.name}: {why}"
            continue
        out.problems.append(probs)
        out.plans.append(plans)
    return out


def quarantine_torn(out_dir: str | Path) -> list[str]:
    """Move torn batches to ``parts/torn/`` (kept, never read again); one message per batch.

    Called by the collector that holds the folder's lock, before it resumes.
    """
    parts_dir = Path(out_dir) / PARTS
    torn = read_parts(out_dir).torn
    messages = []
    for stem, why in torn.items():
        dest = parts_dir / "torn"
        dest.mkdir(exist_ok=True)
        for f in parts_dir.glob(f"{stem}.*.jsonl.gz"):
            os.replace(f, dest / f.name)
        messages.append(f"dropped torn batch {parts_dir / stem} ({why}); moved to {dest}/; its "
                        "problem-directions are measured again")
    return messages


def read_journal(out_dir: str | Path) -> pd.DataFrame:
    path = Path(out_dir) / JOURNAL
    if not path.exists():
        return pd.DataFrame(columns=["event", "key", "run_id", "time"])
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) == 4:  # a torn last line (killed mid-write) is ignored
            rows.append(parts)
    return pd.DataFrame(rows, columns=["event", "key", "run_id", "time"])


def resume_state(out_dir: str | Path) -> tuple[set[str], dict[str, int]]:
    problems = load_records(out_dir, "problems", columns=["key"])
    done = set(problems["key"]) if len(problems) else set()
    journal = read_journal(out_dir)
    starts = journal[journal["event"] == "start"]["key"].value_counts()
    unfinished = {k: int(v) for k, v in starts.items() if k not in done}
    return done, unfinished


def load_records(out_dir: str | Path, kind: str, columns: list[str] | None = None) -> pd.DataFrame:
    """Every ``kind`` ('problems' or 'plans') record in a raw folder: compacted and parts."""
    out = Path(out_dir)
    if not out.exists():
        raise KbenchInputError(f"{out}: raw collector folder not found.")
    frames = []
    for path in sorted(out.glob(f"{kind}-*.parquet")):
        try:
            # a column that only a newer collector writes is absent from older files: like the
            # parts below, such a file gives the columns it has and the concat fills the rest
            table = pq.ParquetFile(path)
            frames.append(table.read(columns=None if columns is None else
                                     [c for c in columns if c in table.schema_arrow.names]).to_pandas())
        except Exception as exc:  # noqa: BLE001 - any failure here is a damaged file
            raise KbenchInputError(f"{path}: cannot read this compacted batch file ({type(exc).__name__}: "
                                   f"{str(exc)[:200]}); restore it from your copy of the raw folder.") from None
    for recs in getattr(read_parts(out), kind):  # complete batches only
        if recs:
            df = pd.DataFrame.from_records(recs)
            frames.append(df[[c for c in columns if c in df]] if columns else df)
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=columns or ["key"])
    return pd.concat(frames, ignore_index=True)


def graph_mode(env: pd.DataFrame) -> pd.Series:
    """Per run start record of ``env``: how it built its graphs, 'static' (the default) or
    'kernel-cache' (``--kernel-cache``: dynamic-shape graphs sharing cuDNN's kernel cache)."""
    starts = env[env["phase"] == "start"] if "phase" in env else env
    cached = starts["kernel_cache"].eq(True) if "kernel_cache" in starts else pd.Series(False, index=starts.index)
    return cached.map({True: "kernel-cache", False: "static"}).astype(object)


def graph_modes(env: pd.DataFrame) -> set[str]:
    """The distinct :func:`graph_mode` values of the runs in ``env``."""
    return set(graph_mode(env))


def load_env(out_dir: str | Path) -> pd.DataFrame:
    """The environment records of a raw folder (one JSON object per line; a torn line is skipped)."""
    path = Path(out_dir) / ENV
    if not path.exists():
        return pd.DataFrame()
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KbenchInputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start:,}): not an environment "
                               "record of 'kbench collect cudnn'; restore it from your copy of the folder.") from None
    except OSError as exc:
        raise KbenchInputError(f"{path}: cannot read the environment records ({exc.strerror}).") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # torn last line
            continue
        if not isinstance(row, dict):
            raise KbenchInputError(f"{path}: line {number} is JSON but not an object ({line[:60]!r}); each line "
                                   "is one environment record {...}; restore the file from your copy.")
        rows.append(row)
    return pd.DataFrame(rows)


def compact(out_dir: str | Path) -> dict:
    """Merge the complete batch files into one parquet file per kind; returns row counts.

    The parquet files are written (atomically) before any part is removed, so
    an interrupted compaction leaves duplicates at worst, which
    :func:`load_records` callers drop with :func:`dedupe`. Torn batches are
    left where they are (see :func:`quarantine_torn`). Refused while a
    collector writes the folder.
    """
    out = Path(out_dir)
    parts_dir = out / PARTS
    if not out.is_dir():
        raise KbenchInputError(f"{out}: raw collector folder not found.")
    with FolderLock(out, "compaction"):  # first: a collector that just started has no parts/ yet
        if not parts_dir.exists():
            return {"problems": 0, "plans": 0}
        parts = read_parts(out)
        n = len(list(out.glob("problems-*.parquet")))
        counts = {}
        for kind in ("plans", "problems"):
            recs = [r for batch in getattr(parts, kind) for r in batch]
            counts[kind] = len(recs)
            if recs:
                _fsync_write(out / f"{kind}-{n:04d}.parquet", parquet_bytes(pd.DataFrame.from_records(recs)))
        compacted = {_stem(f) for f in parts_dir.glob("*.problems.jsonl.gz")} - set(parts.torn)
        # problems files first: a compaction cut short then leaves plans without problems (ignored
        # like a batch never finished), never problems without plans (a torn batch)
        for f in sorted(parts_dir.glob("*.jsonl.gz"), key=lambda f: ".plans." in f.name):
            if _stem(f) in compacted:
                f.unlink()
    return counts


def dedupe(problems: pd.DataFrame, plans: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Keep one measurement per problem key: the last finished one that is not a crash."""
    if not len(problems):
        return problems, plans
    p = problems.copy()
    p["_crash"] = p.get("status", pd.Series("ok", index=p.index)).eq("crashed")
    p["_pos"] = range(len(p))
    p = p.sort_values(["_crash", "_pos"], ascending=[False, True]).drop_duplicates("key", keep="last")
    p = p.sort_values("_pos").drop(columns=["_crash", "_pos"]).reset_index(drop=True)
    if len(plans) and "run_id" in plans and "run_id" in p:
        keep = p[["key", "run_id"]]
        plans = plans.merge(keep, on=["key", "run_id"], how="inner")
        plans = plans.drop_duplicates(["key", "plan"], keep="last").reset_index(drop=True)
    return p, plans

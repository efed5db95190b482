"""A travelling copy of a raw collector folder: what a collecting call resumes from, and nothing more.

The device tool sends at most 64 MiB of tree and carried files, and a dataset's raw folder outgrows
that: ``raw/h200``'s plan tables hold every timing of every plan. A collecting call reads three
things from the raw folder it grows (``BASE`` in ``run_on_device.sh``):

* the problem-directions already done (the problems' ``key``), so the corpus order continues;
* the ones started and never finished (``journal.txt``), which a plain ``collect`` run counts;
* the numerical notes recorded so far, which seed the notes cache (the problems' key, direction,
  dtype and layout; the plans' key, plan name and ``numeric_notes``; see ``cudnn.seed_notes_cache``).

:func:`travel_copy` writes exactly that: one problems and one plans table cut to those columns,
``journal.txt`` and ``env.jsonl`` copied whole. The new shard folders a call brings back are merged
into the full raw folder (``kbench collect merge SHARDS --into raw/h200``), never into the copy,
and ``merge --into`` refuses a travelling copy (its ``TRAVEL_COPY.json`` marks it).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kbench.collect.raw_store.writer import ENV, JOURNAL, fsync_write, load_records, parquet_bytes
from kbench.core.errors import KbenchInputError

MARKER = "TRAVEL_COPY.json"
RESUME_COLUMNS = {"problems": ["key", "direction", "dtype", "layout"],
                  "plans": ["key", "plan", "numeric_notes"]}


def is_travel_copy(folder: str | Path) -> bool:
    return (Path(folder) / MARKER).exists()


def travel_copy(source: str | Path, dest: str | Path) -> dict:
    """Write the resume-only copy of the raw folder ``source`` to the new folder ``dest``; a summary."""
    source, dest = Path(source), Path(dest)
    if not source.is_dir() or not (any(source.glob("problems-*.parquet")) or (source / JOURNAL).exists()):
        raise KbenchInputError(f"{source}: not a raw collector folder (no problems-*.parquet or {JOURNAL}).")
    if is_travel_copy(source):
        raise KbenchInputError(f"{source}: is itself a travelling copy; copy the full raw folder instead.")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise KbenchInputError(f"{dest}: exists and is not empty; give a new folder (or remove it first).")
    if dest.resolve() == source.resolve() or source.resolve() in dest.resolve().parents:
        raise KbenchInputError(f"{dest}: lies inside {source}; write the copy elsewhere.")
    tables = {kind: load_records(source, kind, columns) for kind, columns in RESUME_COLUMNS.items()}
    dest.mkdir(parents=True, exist_ok=True)
    for kind, table in tables.items():
        # encoded as the collector's own compacted files are; string columns stay strings
        fsync_write(dest / f"{kind}-0000.parquet", parquet_bytes(table))
    for name in (JOURNAL, ENV):
        if (source / name).exists():
            shutil.copyfile(source / name, dest / name)
    summary = {"source": str(source), "problem_directions": int(tables["problems"]["key"].nunique()),
               "plan_records": int(len(tables["plans"])),
               "columns": RESUME_COLUMNS,
               "bytes": sum(p.stat().st_size for p in dest.iterdir() if p.is_file()),
               "note": "resume-only copy for a collecting call: merge what the call brings back into "
                       "the source folder, never into this one"}
    fsync_write(dest / MARKER, (json.dumps(summary, indent=1) + "\n").encode())
    return summary

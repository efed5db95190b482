"""The run: :func:`collect` measures the pending problem-directions of a raw folder, one after another.

It holds the folder's lock, resumes from what the folder holds (a problem whose process ended
during it too often is recorded as crashed and skipped), takes a shard's part where one is
given, and stops cleanly on a signal, at the time budget or on a fatal CUDA error, with every
record saved (:mod:`kbench.collect.writer`).
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from kbench.collect.measure.cudnn.collector import CudnnCollector, Options
from kbench.collect.measure.cudnn.problems import DIRECTIONS, load_problems, record_columns
from kbench.collect.measure.cudnn.protocol import FatalCudaError, _err
from kbench.collect.measure.environment import nvidia_smi
from kbench.core.errors import KbenchInputError


def collect(problems: str | Path, out_dir: str | Path, directions=DIRECTIONS, dtypes=None, layouts=None,
            time_budget_s: float | None = None, limit: int | None = None, batch_size: int = 10,
            options: Options | None = None, progress: bool = True, shard=None, launch_info: dict | None = None,
            make_collector=None) -> dict:
    """Measure every pending problem-direction of ``problems`` into the raw folder ``out_dir``.

    With ``shard`` (a :class:`kbench.collect.shard.Shard`) only that shard's
    part, into ``out_dir/shard-K-of-N/`` (see :mod:`kbench.collect.shard`).
    ``make_collector(options)`` replaces :class:`CudnnCollector` (tests fake the GPU with it).
    """
    from kbench.collect.raw_store.lock import FolderLock
    from kbench.collect.raw_store.travel_copy import MARKER, is_travel_copy
    if shard is None and is_travel_copy(out_dir):
        # new batches in its root would sit beside the copied tables that merge must not take again
        raise KbenchInputError(f"{out_dir}: a travelling copy ({MARKER}); collect into it with --shard K/N "
                               "(each shard writes its own folder, merged into the full raw folder), or "
                               "collect into the full raw folder.")
    # the time budget counts from here: loading the corpus and the earlier records (tens of seconds for
    # several ranks reading a 10,000-problem folder) and starting CUDA are part of it, so a launcher's
    # own time limit set a margin above the budget is not overrun by the start-up
    deadline = None if time_budget_s is None else time.monotonic() + time_budget_s
    lock = FolderLock(Path(out_dir) / shard.folder_name if shard is not None else out_dir).acquire()
    try:
        return _collect_locked(problems, out_dir, directions, dtypes, layouts, deadline, limit, batch_size,
                               options, progress, shard, launch_info or {}, make_collector or CudnnCollector,
                               lock.notes)
    finally:
        lock.release()


def _check_same_limit(folder: Path, earlier: dict | None, limit: int | None, done: set) -> None:
    """Refuse to re-plan a shard folder under another ``limit`` while its assignment has work left.

    Why: the split is re-planned on every start (a sibling's progress never moves it), and ``limit``
    takes the first pending problem-directions of the corpus, counting the folder's own measured ones
    as pending. Under another limit the folder would be given keys it has measured already, and the
    unmeasured rest of its assignment would be dropped from this launch without a word."""
    if earlier is None or earlier.get("limit") == limit:
        return
    left = len(set(earlier.get("assigned", [])) - set(done))
    if left:
        raise KbenchInputError(
            f"{folder}: this shard folder was assigned {earlier.get('n_assigned')} problem-directions with "
            f"--limit {earlier.get('limit')}, and {left} of them are not measured yet; resume it with the same "
            f"--limit {earlier.get('limit')} (LIMIT={earlier.get('limit')} in tools/device/run_on_device.sh), "
            f"or merge it and start from a fresh root.")


def _collect_locked(problems, out_dir, directions, dtypes, layouts, deadline, limit, batch_size, options,
                    progress, shard, launch_info, make_collector, notes) -> dict:
    from kbench.collect.raw_store import shard as shard_store
    from kbench.collect.raw_store.writer import CRASH_LIMIT, RawWriter, quarantine_torn
    todo = load_problems(problems, directions, dtypes, layouts)
    root = Path(out_dir)
    if shard is not None:
        out_dir = root / shard.folder_name
    notes = notes + quarantine_torn(out_dir)
    for note in notes:
        print(f"kbench collect: {note}", file=sys.stderr)
    writer = RawWriter(out_dir, batch_size=batch_size, max_batch_seconds=20.0)
    done, unfinished = writer.resume_state()
    if shard is not None:
        _check_same_limit(out_dir, shard_store.read_manifest(out_dir), limit, done)
        assigned = shard_store.plan_shard(todo, root, shard, limit)
        shard_store.write_manifest(out_dir, shard, assigned, {"problems": str(problems), "directions": list(directions),
                                                    "limit": limit})
        todo, limit = assigned, None  # the limit was applied before the split
    if shard is not None or shard_store.shard_folders(root):
        done |= shard_store.base_done(root, None)  # done in any folder of the root (shards included): never redone
    crashed = [k for k, n in unfinished.items() if n >= CRASH_LIMIT]
    if crashed:  # recorded once, then skipped like done ones
        rows = todo[todo["key"].isin(crashed)]
        for _, row in rows.iterrows():
            rec = {k: _py(row[k]) for k in record_columns(row)}
            rec.update(status="crashed", error=f"the process ended during this problem {unfinished[row['key']]} times")
            writer.add(rec, [])
        writer.flush()
        done |= set(crashed)
    pending = todo[~todo["key"].isin(done)]
    if limit is not None:
        pending = pending.head(limit)
    summary = {"total": int(len(todo)), "already_done": int(len(todo) - len(todo[~todo["key"].isin(done)])),
               "pending": int(len(pending)), "measured": 0, "run_id": writer.run_id}
    if shard is not None:
        summary.update(shard=str(shard), out=str(out_dir))
    if notes:
        summary["notes"] = notes
    if not len(pending):
        return summary
    seen = [root] if shard is None else [root, out_dir]  # earlier records: they seed the notes cache
    fatal = _measure_pending(pending, writer, summary, deadline, options, progress, shard, launch_info,
                             make_collector, seen)
    if fatal:
        summary["fatal"] = fatal
    return summary


def _measure_pending(pending, writer, summary, deadline, options, progress, shard, launch_info,
                     make_collector, seen=()) -> str | None:
    """Measure the pending problems in order until done, stopped by a signal, out of time or a fatal
    CUDA error; every record saved, the environment written at start and end, ``summary``'s counts
    and rate updated. ``seen``: raw folders whose records seed the collector's notes cache. Returns the
    fatal error's text (None when there was none)."""
    stop = {"flag": False}

    def _stop(signum, frame):  # finish the current problem, save, exit
        stop["flag"] = True
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    col = make_collector(options)
    summary["notes_cache_keys"] = seed_notes_cache(getattr(col, "notes_cache", None), seen)
    col.warm_up()
    writer.write_env("start", {**col.env(), **launch_info, **({"shard": str(shard)} if shard is not None else {}),
                               **({"kernel_cache": True} if getattr(options, "kernel_cache", False) else {})})
    t_start = time.monotonic()
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(pending), unit="pd", mininterval=5, dynamic_ncols=False, file=sys.stderr,
                   desc="collect cudnn", disable=None)  # a terminal only: no \r bars in log files
    fatal = None
    try:
        for _, row in pending.iterrows():
            if stop["flag"]:
                break
            if deadline is not None and time.monotonic() > deadline:
                break
            p = {k: _py(v) for k, v in row.items()}
            writer.start(p["key"])
            try:
                rec, plans = col.measure(p)
            except FatalCudaError as exc:
                fatal = str(exc)
                break
            writer.add(rec, plans)
            summary["measured"] += 1
            if bar is not None:
                bar.update(1)
    finally:
        writer.flush()
        if bar is not None:
            bar.close()
        elapsed = time.monotonic() - t_start
        summary["elapsed_s"] = elapsed
        summary["per_minute"] = 60.0 * summary["measured"] / elapsed if elapsed > 0 else 0.0
        try:
            end_env = col.env() if fatal is None else nvidia_smi()
        except Exception as exc:  # noqa: BLE001
            end_env = {"env_error": _err(exc)}
        writer.write_env("end", {**end_env, "measured": summary["measured"],
                                 "elapsed_s": elapsed, "fatal": fatal})
    return fatal


def seed_notes_cache(cache, folders) -> int | None:
    """Teach ``cache`` (a NotesCache, or None) the notes recorded in the raw ``folders``; the keys it knows."""
    if cache is None:
        return None
    from kbench.collect.raw_store.writer import load_records
    for folder in folders:
        if not Path(folder).is_dir():
            continue
        problems = load_records(folder, "problems", ["key", "direction", "dtype", "layout"])
        plans = load_records(folder, "plans", ["key", "plan", "numeric_notes"])
        if len(problems) and len(plans) and "numeric_notes" in plans:
            cache.seed(problems, plans)
    return len(cache.known)


def _py(v):
    return v.item() if hasattr(v, "item") else v

"""``kbench collect merge``: join the raw folders of a sharded collection into one raw folder.

Every input is a raw folder (a shard folder ``shard-K-of-N``, or any collector
output), or an output root that holds shard folders (then its own records, if
any, and each of its shard folders are inputs). Before anything is written the
merge checks, and refuses with one message that lists every finding (exit 2):

* **environment**: every input measured in the same environment
  (:data:`VERSION_FIELDS`, from each folder's ``env.jsonl``): GPU model, driver,
  cuDNN, cuDNN frontend, PyTorch, TF32 (PyTorch's flag and ``NVIDIA_TF32_OVERRIDE``),
  maximum clocks, power limit, tensor-stride convention and graph building (static,
  or ``--kernel-cache``'s dynamic-shape graphs); the message names the folder, the
  field and both values;
* **plans**: every measured problem-direction that found plans has its plan
  records (a missing or unreadable ``plans-*.parquet`` is refused, never merged as
  done without its plans);
* **duplicates**: no problem-direction was measured in two inputs;
* **writers**: no input is still being written by a collector (its lock);
* **gaps** (refused unless ``--allow-gaps``): every shard ``0..N-1`` of a
  shard count is given, and every problem-direction a shard was assigned
  (its ``shard.json``) is measured in some input.

The output is a new raw folder (``problems-NNNN.parquet`` and ``plans-NNNN.parquet``, one pair per
:data:`CHUNK` problem-directions,
``env.jsonl`` with the input folder of each record, ``journal.txt``,
``merge.json``), written under a temporary name and renamed into place, so it
is complete or absent. The inputs are never modified. ``kbench collect package``
reads it like any raw folder.

``--into RAW`` appends instead, to grow a dataset's raw folder run by run: the
same checks with ``RAW`` counted as one more input (so the new shards must
match its GPU and versions and repeat none of its problem-directions), then
new files numbered after its own (its files are never rewritten) and its
``env.jsonl``/``journal.txt`` extended, under its lock.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.collect.measure.strides import UNRECORDED_CONVENTION
from kbench.collect.raw_store.lock import FolderLock, holder
from kbench.collect.raw_store.shard import SHARD_FOLDER, Shard, read_manifest, shard_folders
from kbench.collect.raw_store.travel_copy import MARKER as TRAVEL_MARKER
from kbench.collect.raw_store.travel_copy import is_travel_copy
from kbench.collect.raw_store.writer import (
    ENV,
    JOURNAL,
    PARTS,
    fsync_write,
    graph_mode,
    load_env,
    load_records,
    parquet_bytes,
    read_parts,
)
from kbench.core.errors import KbenchInputError
from kbench.core.output_files import check_output_folder, write_failure

VERSION_FIELDS = {"gpu": "GPU model", "smi_driver_version": "driver", "cudnn_backend": "cuDNN",
                  "cudnn_frontend": "cuDNN frontend",
                  "graphs": "graph building (static, or --kernel-cache)"}  # derived: writer.graph_mode
#: the rest of the measurement environment: the same in every input too. A run that does not
#: record one has the value given here: an unset variable is "unset", the tensor strides of
#: collectors before the ``tensor_strides`` key are "legacy", anything else "not recorded".
NOT_RECORDED = "not recorded"
SETTING_FIELDS = {"torch": ("PyTorch", NOT_RECORDED), "torch_cudnn": ("PyTorch's cuDNN", NOT_RECORDED),
                  "torch_allow_tf32_cudnn": ("PyTorch allow_tf32 for cuDNN", NOT_RECORDED),
                  "env_NVIDIA_TF32_OVERRIDE": ("NVIDIA_TF32_OVERRIDE", "unset"),
                  "env_CUDNN_FRONTEND_ENABLE_FROST_ENGINES": ("CUDNN_FRONTEND_ENABLE_FROST_ENGINES", "unset"),
                  "smi_clocks_max_sm": ("maximum SM clock", NOT_RECORDED),
                  "smi_clocks_max_mem": ("maximum memory clock", NOT_RECORDED),
                  "smi_power_limit": ("power limit", NOT_RECORDED),
                  "tensor_strides": ("tensor-stride convention", UNRECORDED_CONVENTION)}


def measurement_settings(starts: pd.DataFrame) -> pd.DataFrame:
    """Per run start record, the :data:`SETTING_FIELDS` as text, with each field's default where unrecorded."""
    out = pd.DataFrame(index=starts.index)
    for col, (_, default) in SETTING_FIELDS.items():
        values = starts[col] if col in starts else pd.Series(None, index=starts.index, dtype=object)
        text = values.map(lambda v: None if v is None or (isinstance(v, float) and v != v) else str(v))
        out[col] = text.fillna(default)
    return out
EXAMPLES = 3  # findings of one kind named in full; the rest counted
CHUNK = 1000  # problem-directions per output file pair


@dataclass
class Source:
    label: str
    path: Path
    shard: Shard | None
    problems: pd.DataFrame
    plans: pd.DataFrame
    env: pd.DataFrame
    manifest: dict | None
    torn: dict = field(default_factory=dict)


def _is_raw(path: Path) -> bool:
    return any((path / n).exists() for n in (JOURNAL, ENV, PARTS)) or any(path.glob("problems-*.parquet"))


def expand(inputs) -> list[tuple[str, Path, Shard | None]]:
    """(label, folder, shard) of every raw folder named by ``inputs``."""
    out, seen = [], set()
    for given in inputs:
        path = Path(given)
        if not path.is_dir():
            raise KbenchInputError(f"{path}: not a folder; give shard folders (shard-K-of-N) or the output "
                                   "root of 'kbench collect cudnn --shard'.")
        shards = shard_folders(path)
        found = []
        # a travelling copy (kbench.collect.raw_store.travel_copy) only repeats its source: its shard folders are the input
        travelling = is_travel_copy(path)
        if _is_raw(path) and not travelling:
            m = SHARD_FOLDER.match(path.name)
            found.append((str(path), path, Shard(int(m.group(1)), int(m.group(2))) if m else None))
        found += [(str(folder), folder, s) for s, folder in shards.items()]
        if not found and travelling:
            raise KbenchInputError(f"{path}: a travelling copy without shard folders; nothing new to merge.")
        if not found:
            raise KbenchInputError(f"{path}: no collector output here (no journal.txt, env.jsonl, parts/ or "
                                   "shard-K-of-N folders).")
        for label, folder, s in found:
            if folder.resolve() not in seen:
                seen.add(folder.resolve())
                out.append((label, folder, s))
    return out


def _load(label: str, path: Path, shard: Shard | None) -> Source:
    return Source(label, path, shard, load_records(path, "problems"), load_records(path, "plans"),
                  load_env(path), read_manifest(path), read_parts(path).torn)


def run_findings(sources: list[Source]) -> list[str]:
    """Records that cannot be tied to a run's environment: a problem-direction without a key, or one measured
    by a run (``run_id``) with no start line in its folder's env.jsonl. The environment is checked per
    run, so a run without its start line would merge under another run's GPU, TF32 and stride settings."""
    findings = []
    for src in sources:
        if not len(src.problems):
            continue
        if "key" not in src.problems or src.problems["key"].isna().any():
            missing = int(src.problems["key"].isna().sum()) if "key" in src.problems else len(src.problems)
            findings.append(f"{src.label}: {missing} problem record(s) without a key (the problem-direction "
                            "they measured); the folder is damaged: restore it from your copy.")
            continue
        if "run_id" not in src.problems:
            continue  # records of collectors before run ids: the folder's env.jsonl is checked as a whole
        started = set(src.env.loc[src.env["phase"] == "start", "run_id"].dropna().astype(str)) \
            if {"phase", "run_id"} <= set(src.env.columns) else set()
        runs = src.problems["run_id"].dropna().astype(str)
        orphan = runs[~runs.isin(started)]
        if len(orphan):
            first = orphan.iloc[0]
            findings.append(f"{src.label}: {len(orphan)} problem-direction(s) measured by run(s) "
                            f"{', '.join(sorted(set(orphan))[:EXAMPLES])} with no start line in env.jsonl (first "
                            f"run {first}): their GPU, TF32 and stride settings are unknown, so they cannot be "
                            "merged; restore env.jsonl from your copy, or re-measure them.")
    return findings


def version_findings(sources: list[Source]) -> list[str]:
    findings, ref = [], {}
    for src in sources:
        if not len(src.problems):
            continue  # nothing of it is merged
        starts = src.env[src.env["phase"] == "start"] if "phase" in src.env else src.env
        starts = starts.assign(graphs=graph_mode(starts))
        if not len(starts):
            findings.append(f"{src.label}: no environment record (env.jsonl), so its GPU, driver and cuDNN "
                            "cannot be checked; it was not written by 'kbench collect cudnn'.")
            continue
        settings = measurement_settings(starts)
        fields = {**VERSION_FIELDS, **{c: what for c, (what, _) in SETTING_FIELDS.items()}}
        for col, what in fields.items():
            column = settings[col] if col in settings else starts[col] if col in starts else None
            values = sorted(set(column.dropna().astype(str))) if column is not None else []
            if not values:
                findings.append(f"{src.label}: env.jsonl records no {what} ({col}).")
            elif len(values) > 1:
                findings.append(f"{src.label}: runs on different {what}s inside one folder ({', '.join(values)}).")
            elif col not in ref:
                ref[col] = (values[0], src.label)
            elif values[0] != ref[col][0]:
                findings.append(f"{src.label}: {what} {values[0]!r} differs from {ref[col][0]!r} in "
                                f"{ref[col][1]} ({col}).")
    return findings


def spatial_rank(problems: pd.DataFrame) -> pd.Series:
    """2 or 3 per problem record: a 3D record carries ``spatial_dims`` 3 (and the depth fields); a 2D one
    has no such column or another value."""
    dims = problems["spatial_dims"] if "spatial_dims" in problems else pd.Series(2, index=problems.index)
    return pd.Series(np.where(pd.to_numeric(dims, errors="coerce") == 3, 3, 2), index=problems.index)


def rank_findings(sources: list[Source]) -> list[str]:
    """2D and 3D problem records in one merge: their schemas differ (the 3D records add the depth fields),
    and a dataset holds one kind, so folders of both kinds are refused."""
    ranks = {src.label: sorted(set(spatial_rank(src.problems))) for src in sources if len(src.problems)}
    kinds = sorted({r for values in ranks.values() for r in values})
    if len(kinds) < 2:
        return []
    named = "; ".join(f"{label}: {' and '.join(f'{r}D' for r in values)}" for label, values in ranks.items())
    return [f"the folders mix 2D and 3D convolutions ({named}); their records differ and a dataset holds one "
            "kind: collect and merge the 3D problems into a raw folder of their own."]


def plan_findings(sources: list[Source]) -> list[str]:
    """Problem-directions merged without their plans: a plans file missing beside its problems file, or
    a problem-direction whose record counts plans (``n_plans`` > 0) with no plan record in its folder."""
    findings = []
    for src in sources:
        for problems_file in sorted(src.path.glob("problems-*.parquet")):
            plans_file = problems_file.with_name("plans-" + problems_file.name.removeprefix("problems-"))
            if not plans_file.exists():
                findings.append(f"{src.label}: {problems_file.name} has no {plans_file.name} beside it: its "
                                "problem-directions' plans are missing; restore the file from your copy.")
        if not len(src.problems) or "n_plans" not in src.problems:
            continue
        has_plans = pd.to_numeric(src.problems["n_plans"], errors="coerce").fillna(0) > 0
        keys = set(src.plans["key"]) if len(src.plans) and "key" in src.plans else set()
        lost = src.problems.loc[has_plans & ~src.problems["key"].isin(keys), "key"].drop_duplicates()
        if len(lost):
            findings.append(f"{src.label}: {len(lost)} problem-direction(s) found plans but have no plan records "
                            f"(first: {lost.iloc[0]}); their plans file is missing or cut short. Nothing of them "
                            "can be merged as done: restore the plans file, or re-measure them.")
    return findings


def duplicate_findings(sources: list[Source]) -> list[str]:
    keys = pd.concat([pd.DataFrame({"key": s.problems["key"].drop_duplicates(), "label": s.label})
                      for s in sources if len(s.problems)] or [pd.DataFrame(columns=["key", "label"])])
    multi = keys[keys.duplicated("key", keep=False)]
    if not len(multi):
        return []
    where = multi.groupby("key", sort=False)["label"].agg(list)
    named = "; ".join(f"{k} in {' and '.join(v)}" for k, v in list(where.items())[:EXAMPLES])
    return [f"{len(where)} problem-direction(s) measured in more than one folder, e.g. {named}. Shards of one "
            "run never overlap: one of these folders belongs to another collection (give each once)."]


def _recorded_shards(src: Source) -> set[Shard]:
    """Shards whose runs a (merged) folder holds, from the ``shard`` field of its run records."""
    values = src.env["shard"].dropna().astype(str) if "shard" in src.env else []
    return {Shard(int(k), int(n)) for k, n in (v.split("/") for v in set(values))}


def gap_findings(sources: list[Source], elsewhere: Source | None = None) -> list[str]:
    """Missing shards, unmeasured assigned work and torn batches; ``elsewhere``: the folder appended to."""
    done = set(elsewhere.problems["key"]) if elsewhere is not None and len(elsewhere.problems) else set()
    done |= set().union(*(set(s.problems["key"]) for s in sources if len(s.problems)))
    findings = []
    by_count: dict[int, set[int]] = {}
    given = [s.shard for s in sources if s.shard is not None]
    given += list(_recorded_shards(elsewhere)) if elsewhere is not None else []
    for shard in given:
        by_count.setdefault(shard.count, set()).add(shard.index)
    for count, have in sorted(by_count.items()):
        missing = sorted(set(range(count)) - have)
        if missing:
            findings.append(f"shard(s) {', '.join(f'{k}/{count}' for k in missing)} not given: their folders "
                            f"{', '.join(f'shard-{k}-of-{count}' for k in missing)} are missing.")
    for s in sources:
        for stem, why in s.torn.items():
            findings.append(f"{s.label}: torn batch {stem} ({why}) is not merged; resuming the shard redoes it.")
        if s.manifest is None:
            continue
        lost = [k for k in s.manifest.get("assigned", []) if k not in done]
        if lost:
            findings.append(f"{s.label}: {len(lost)} of {s.manifest.get('n_assigned', '?')} assigned "
                            f"problem-directions not measured (first: {lost[0]}); finish them with 'kbench "
                            f"collect cudnn --shard {s.manifest.get('shard')} --out {s.path.parent} ...'.")
    return findings


def _frame(sources: list[Source], kind: str) -> pd.DataFrame:
    frames = [getattr(s, kind) for s in sources if len(getattr(s, kind))]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _number(path: Path) -> int:
    return int(path.stem.split("-")[-1]) if path.stem.split("-")[-1].isdigit() else -1


def _append_lines(path: Path, lines: list[str]) -> None:
    with open(path, "a") as fh:
        fh.write("".join(line + "\n" for line in lines))
        fh.flush()
        os.fsync(fh.fileno())


def merge(inputs, out: str | Path | None = None, allow_gaps: bool = False, into: str | Path | None = None) -> dict:
    """Check the inputs and write them to the new folder ``out``, or append them to the raw folder ``into``.

    ``into`` grows a dataset's raw folder run by run: the new records go into
    new files numbered after its own (its files are never rewritten), after the
    same checks with ``into`` counted as one more input. It is locked meanwhile.
    """
    if (out is None) == (into is None):
        raise KbenchInputError("give either --out NEW_FOLDER or --into EXISTING_RAW_FOLDER.")
    found = expand(inputs)
    target = Path(out if out is not None else into)
    if out is not None:
        check_output_folder(target, [folder for _, folder, _ in found], "--out")
        existing = next((p for p in (target, *target.parents) if p.exists()), None)
        if existing is not None and existing != target and not existing.is_dir():
            raise KbenchInputError(f"--out {target}: {existing} is a file, not a folder; choose a path in a folder.")
    if out is not None and target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise KbenchInputError(f"{target}: exists and is not empty; merge writes a new folder (choose another "
                               "--out, or append with --into).")
    if into is not None and is_travel_copy(target):
        raise KbenchInputError(f"{target}: a travelling copy (resume columns only, {TRAVEL_MARKER}); merge into "
                               "the full raw folder it was copied from (its 'source').")
    if into is not None and (not target.is_dir() or not _is_raw(target) or shard_folders(target)):
        raise KbenchInputError(f"{target}: --into needs an existing raw collector folder without shard folders.")
    for _, folder, _ in found:
        if target.resolve() == folder.resolve() or folder.resolve() in target.resolve().parents:
            raise KbenchInputError(f"{target}: the output lies inside the input {folder}; write the merge elsewhere.")
    busy = [f"{label}: still being written ({who}); wait until that collector ends." for label, folder, _ in found
            if (who := holder(folder))]
    if busy:
        raise KbenchInputError("cannot merge:\n  " + "\n  ".join(busy))
    lock = FolderLock(target, "merge").acquire() if into is not None else None
    try:
        return _merge(found, inputs, target, into is not None, allow_gaps)
    finally:
        if lock is not None:
            lock.release()


def _merge(found, inputs, target: Path, append: bool, allow_gaps: bool) -> dict:
    sources = [_load(*f) for f in found]
    base = [_load(str(target), target, None)] if append else []
    refusals = run_findings(base + sources)
    refusals += version_findings(base + sources) + rank_findings(base + sources) + plan_findings(sources) + (
        duplicate_findings(base + sources) if not refusals else [])
    if refusals:
        raise KbenchInputError("cannot merge these folders:\n  " + "\n  ".join(refusals)
                               + "\nNothing was written.")
    gaps = gap_findings(sources, base[0] if base else None)
    if gaps and not allow_gaps:
        raise KbenchInputError("the shards are incomplete:\n  " + "\n  ".join(gaps)
                               + "\nFinish them, or pass --allow-gaps to merge what is there. Nothing was written.")
    problems, plans = _frame(sources, "problems"), _frame(sources, "plans")
    if not len(problems):
        raise KbenchInputError(f"{', '.join(str(i) for i in inputs)}: no measured problem-directions to merge.")
    env_lines, journal_lines = [], []
    for s in sources:
        env_lines += [json.dumps({**{k: v for k, v in r.items() if not (isinstance(v, float) and v != v)},
                                  "merged_from": s.label}, default=str) for r in s.env.to_dict("records")]
        if (s.path / JOURNAL).exists():
            journal_lines += [line for line in (s.path / JOURNAL).read_text().splitlines()
                              if len(line.split("\t")) == 4]
    versions = {}
    for s in base + sources:
        if len(s.problems) and "phase" in s.env:
            st = s.env[s.env["phase"] == "start"].iloc[0]
            versions = {c: str(st[c]) for c in VERSION_FIELDS if c in st}
            versions.update(measurement_settings(s.env[s.env["phase"] == "start"].iloc[:1]).iloc[0].to_dict())
            break
    report = {
        ("into" if append else "out"): str(target), "problem_directions": int(problems["key"].nunique()),
        "plan_records": int(len(plans)), "versions": versions, "gaps": gaps,
        "sources": [{"folder": s.label, "shard": str(s.shard) if s.shard else None,
                     "problem_directions": int(s.problems["key"].nunique()) if len(s.problems) else 0,
                     "assigned": (s.manifest or {}).get("n_assigned")} for s in sources],
    }
    if append:
        dest = target
        first = 1 + max([_number(f) for f in target.glob("*-[0-9][0-9][0-9][0-9].parquet")] + [-1])
    else:
        dest = target.with_name(f".{target.name}.merging-{os.getpid()}")
        try:
            return _write_new(dest, target, problems, plans, env_lines, journal_lines, report)
        except OSError as exc:  # a read-only folder, a full disk: no half-written copy is left behind
            raise write_failure(target, exc, "the merged folder") from None
        finally:
            shutil.rmtree(dest, ignore_errors=True)
    _write_chunks(dest, first, problems, plans)
    _append_lines(dest / ENV, env_lines)
    _append_lines(dest / JOURNAL, journal_lines)
    _append_lines(dest / "merges.jsonl", [json.dumps(report)])
    return report


def _write_new(dest: Path, target: Path, problems, plans, env_lines, journal_lines, report) -> dict:
    """The new folder ``target``: written as ``dest`` (a hidden sibling), then renamed into place."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    _write_chunks(dest, 0, problems, plans)
    fsync_write(dest / ENV, "".join(line + "\n" for line in env_lines).encode())
    fsync_write(dest / JOURNAL, "".join(line + "\n" for line in journal_lines).encode())
    fsync_write(dest / "merge.json", (json.dumps(report, indent=1) + "\n").encode())
    if target.exists():
        target.rmdir()  # empty (checked above)
    os.replace(dest, target)
    return report


def _write_chunks(dest: Path, first: int, problems, plans) -> None:
    """The problems and plans files numbered from ``first``."""
    # files of at most CHUNK problem-directions each (about 2 MB of plans): a grown dataset's raw
    # folder stays in files small enough to commit, and each is a complete set of problems and plans.
    # Plans first: problems files are what marks work as done.
    chunk_of = pd.Series(range(problems["key"].nunique()), index=problems["key"].unique()) // CHUNK
    for kind, df in (("plans", plans), ("problems", problems)):
        chunks = df["key"].map(chunk_of).fillna(0).astype(int) if len(df) else pd.Series(dtype=int)
        for n, part in df.groupby(chunks, sort=True):
            fsync_write(dest / f"{kind}-{first + n:04d}.parquet", parquet_bytes(part))

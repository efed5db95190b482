"""``kbench leaderboard restamp``: carry records over to a new version of their dataset whose scored data
is unchanged.

    kbench leaderboard restamp DATASET [DATASET ...] [--leaderboard leaderboard]

A dataset version that adds a split, or changes only its card, leaves every problem, label and reference
heuristic of the existing splits as they were, yet it has a new checksum: every record naming the
earlier version is then refused by ``kbench leaderboard validate`` (a record must name the installed
dataset). ``restamp`` writes the installed version and checksum of each DATASET into every record that
names an earlier one (a result record and its ``meta.json``; a GPU re-timing, its run plan
``plan.json.gz`` and the plan's sha256; a transfer record's target or source), then re-derives every
figure of those records from their stored raw inputs on the installed data, exactly as validate does
(:func:`kbench.leaderboard.integrity.check_dataset`). Where any figure differs the installed data is
not the scored data, and every file is put back as it was: re-run those entries (``kbench run``,
``kbench transfer run``) or re-score them on corrected labels (``kbench leaderboard rescore
--relabel``). What version a record was first scored on is in git's history and the CHANGELOG.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from kbench.core.errors import KbenchInputError
from kbench.core.output_files import atomic_write_bytes
from kbench.leaderboard.integrity import (
    RAW_FOLDER,
    _stored_input,
    check_dataset,
    timings_folder,
    transfer_layout,
    transfer_target,
)
from kbench.leaderboard.schema import dataset_problems
from kbench.leaderboard.store import VERIFICATION_FILE, load_dataset, read_entries
from kbench.scoring.prediction_files import sha256_bytes
from kbench.scoring.records import DatasetRef, EvaluationResult


def _installed(names: list[str]) -> dict[str, DatasetRef]:
    if not names:
        raise KbenchInputError("kbench leaderboard restamp: name the datasets whose new version the records "
                               "should name (e.g. `kbench leaderboard restamp mi100 h200`).")
    out = {}
    for name in names:
        ds = load_dataset(name)  # an unknown name is one clear error
        out[ds.name] = DatasetRef(name=ds.name, version=ds.version, checksum=ds.checksum)
    return out


def _old(ref: DatasetRef, installed: dict[str, DatasetRef]) -> bool:
    """Whether ``ref`` names an earlier version of one of the ``installed`` datasets."""
    return ref.name in installed and ref.checksum != installed[ref.name].checksum


def _swapped(tree, old: dict, new: dict):
    """``tree`` (parsed JSON) with every object equal to ``old`` replaced by ``new``."""
    if tree == old:
        return new
    if isinstance(tree, dict):
        return {k: _swapped(v, old, new) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_swapped(v, old, new) for v in tree]
    return tree


def _restamped_text(text: str, old: DatasetRef, new: DatasetRef, where: Path) -> str:
    """``text`` (a JSON file) with its dataset blocks naming ``old`` naming ``new``: only the version and
    checksum strings change, so that every other byte of the file stays as it was written (figures keep
    their digits); checked against the parsed file with those blocks swapped."""
    name, version, checksum = (re.escape(json.dumps(v)) for v in (old.name, old.version, old.checksum))
    pattern = re.compile(rf'(\{{\s*"name":\s*{name},\s*"version":\s*){version}(,\s*"checksum":\s*){checksum}(\s*\}})')
    out, n = pattern.subn(lambda m: m.group(1) + json.dumps(new.version) + m.group(2) + json.dumps(new.checksum)
                          + m.group(3), text)
    if n == 0 or json.loads(out) != _swapped(json.loads(text), old.model_dump(), new.model_dump()):
        raise KbenchInputError(f"{where}: its dataset block naming {old.name} {old.version} is not written as "
                               "kbench writes one (name, version, checksum in that order); restamp it by hand or "
                               "re-run the record.")
    return out


def _file_edit(path: Path, refs: list[DatasetRef], installed: dict[str, DatasetRef]) -> bytes:
    text = path.read_text(encoding="utf-8")
    for ref in {r.checksum: r for r in refs}.values():
        text = _restamped_text(text, ref, installed[ref.name], path)
    return text.encode("utf-8")


def _plan_edit(plan_path: Path, old: DatasetRef, new: DatasetRef) -> tuple[bytes, str]:
    """(the stored bytes of ``plan_path`` naming ``new``, the sha256 of its uncompressed text)."""
    from kbench.gpu_check.command import raw_bytes
    text = _restamped_text(raw_bytes(plan_path).decode("utf-8"), old, new, plan_path).encode("utf-8")
    stored = gzip.compress(text, mtime=0) if plan_path.name.endswith(".gz") else text
    return stored, sha256_bytes(text)


def _entry_edits(entry, installed: dict[str, DatasetRef], repo_root: Path, dataset: str, split: str) -> dict:
    """The new bytes of an entry's files that name an earlier version (none: an empty dict)."""
    edits = {}
    for path, ref in ((entry.folder / "result.json", entry.record.dataset),
                      (entry.folder / "meta.json", entry.meta.dataset)):
        if _old(ref, installed):
            edits[path] = _file_edit(path, [ref], installed)
    v = entry.verification
    if v is not None and _old(v.dataset, installed):
        new = installed[v.dataset.name]
        raw_dir = timings_folder(repo_root, dataset, split, entry.folder.name)
        plan_path = _stored_input(raw_dir, "plan.json")
        if plan_path is None:
            raise KbenchInputError(f"{entry.folder / VERIFICATION_FILE}: its run plan is missing from {raw_dir} "
                                   "(plan.json.gz): a GPU re-timing is carried over with its raw inputs only.")
        edits[plan_path], digest = _plan_edit(plan_path, v.dataset, new)
        record_path = entry.folder / VERIFICATION_FILE
        old_text = record_path.read_text(encoding="utf-8")
        text = _restamped_text(old_text, v.dataset, new, record_path)
        old_digest = (v.inputs or {}).get("plan.json")
        if old_digest:
            text = text.replace(json.dumps(old_digest), json.dumps(digest), 1)
        edits[record_path] = text.encode("utf-8")
        copy = raw_dir / VERIFICATION_FILE  # the raw folder's copy of the record, where it is the same file
        if copy.is_file() and copy.read_text(encoding="utf-8") == old_text:
            edits[copy] = edits[record_path]
    return edits


def _transfer_edits(path: Path, installed: dict[str, DatasetRef]) -> dict:
    record = EvaluationResult.model_validate_json(path.read_text(encoding="utf-8"))
    if record.transfer is None:
        return {}
    refs = [r for r in (record.dataset, record.transfer.source) if _old(r, installed)]
    return {path: _file_edit(path, refs, installed)} if refs else {}


def _problems(root: Path, touched_boards: list, touched_transfer: list[Path]) -> list[str]:
    """Every problem validate finds in the touched records once they are written."""
    out = []
    for (dataset, split), board in touched_boards:
        for entry in board:
            out += [f"{dataset}/{split}/{entry.folder.name}: {p}" for p in dataset_problems(entry.record)]
    by_target: dict[str, tuple[list, list]] = {}
    for key, board in touched_boards:
        by_target.setdefault(key[0], ([], []))[0].append((key, board))
    for path in touched_transfer:
        by_target.setdefault(transfer_target(path), ([], []))[1].append(path)
    for boards, transfer in by_target.values():
        found = check_dataset(root, boards, transfer)
        out += [p for problems in found["board"].values() for p in problems]
        out += [f"{rel}: {p}" for rel, problems in found["gpu"].items() for p in problems]
        out += [f"{Path(path).relative_to(root)}: {p}" for path, problems in found["transfer"].items()
                for p in problems]
    return out


def restamp(root: Path, names: list[str], progress: bool = True) -> dict:
    """Write the installed version of the datasets ``names`` into every record under ``root`` naming an earlier
    one, then re-derive their figures (see the module docstring). Returns ``{"entries", "gpu", "transfer",
    "files"}`` (counts); raises one KbenchInputError, with every file put back, where a figure differs."""
    root = Path(root)
    installed = _installed(names)
    repo_root = root.resolve().parent
    edits: dict[Path, bytes] = {}
    touched_boards, counts = [], {"entries": 0, "gpu": 0, "transfer": 0}
    for (dataset, split), board in read_entries(root).items():
        touched = []
        for entry in board:
            found = _entry_edits(entry, installed, repo_root, dataset, split)
            if found:
                touched.append(entry)
                counts["entries"] += 1
                counts["gpu"] += (entry.folder / VERIFICATION_FILE) in found
                edits.update(found)
        if touched:
            touched_boards.append(((dataset, split), touched))
    touched_transfer = []
    for path, problem in transfer_layout(root):
        found = _transfer_edits(path, installed) if problem is None else {}
        if found:
            touched_transfer.append(path)
            edits.update(found)
    counts["transfer"] = len(touched_transfer)
    if not edits:
        if progress:
            print(f"every record under {root} already names the installed "
                  + ", ".join(f"{r.name} {r.version}" for r in installed.values()))
        return {**counts, "files": 0}
    before = {path: path.read_bytes() for path in edits}
    for path, data in edits.items():
        atomic_write_bytes(path, data)
    # read back as validate reads them: the entries' records and re-timings as now written
    fresh = read_entries(root)
    touched_boards = [((d, s), [e for e in fresh[(d, s)] if e.folder in {t.folder for t in board}])
                      for (d, s), board in touched_boards]
    problems = _problems(root, touched_boards, touched_transfer)
    if problems:
        for path, data in before.items():
            atomic_write_bytes(path, data)
        shown = problems[:12]
        raise KbenchInputError(
            f"kbench leaderboard restamp: {len(problems)} figure(s) are not what the installed data gives, so it "
            "is not the data they were scored on; every file is as it was. Re-run those entries (kbench run, "
            "kbench transfer run) or re-score them on the new labels (kbench leaderboard rescore --relabel):\n  - "
            + "\n  - ".join(shown) + (f"\n  (and {len(problems) - len(shown)} more)" if len(problems) > 12 else ""))
    if progress:
        print(f"restamped {counts['entries']} entries ({counts['gpu']} with a GPU re-timing) and {counts['transfer']} "
              f"transfer record(s) to " + ", ".join(f"{r.name} {r.version}" for r in installed.values())
              + f": {len(edits)} files, every figure re-derived from its stored inputs on the installed data "
              f"({RAW_FOLDER}/ plans included); rebuild the site with `kbench leaderboard build`")
    return {**counts, "files": len(edits)}

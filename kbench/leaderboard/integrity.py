"""The integrity rule, for the record kinds beyond result records: GPU re-timings and the transfer track.

Every figure the README and the site show is recomputed by ``kbench leaderboard validate`` from
the raw inputs it was made from, and compared (docs/leaderboard.md, "Integrity"):

* a **GPU re-timing** (an entry's ``verification.json``) is scored again from its run plan and raw
  GPU timings, kept in ``raw/<dataset>/verify/[<split>/]<method>/`` (``plan.json.gz``,
  ``raw.jsonl.gz``, and ``raw_autotune.jsonl.gz`` where the plan had the autotune pass). The record
  carries their sha256 (``inputs``), which must be those files'; the
  plan must be the one the entry's first-seed predictions and the dataset give (the roles, table
  times and seeded order); the problems timed must be the seeded prefix of the plan's order (no
  cherry-picked subset); and every figure of the record must be what scoring them gives. A
  record whose raw inputs are missing is refused.
* a **transfer record** (``transfer/<source>-to-<target>/<method>/k<k>.json``) lies in the folders
  its content names, its stored first-seed predictions carry the record's sha256 and are scored
  again, and its seed summary is what its per-seed scores give (a method whose seeds all scored
  alike is re-scored whole).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kbench.core.errors import KbenchEnvironmentError, KbenchError, KbenchInputError
from kbench.core.identifiers import identifier_problem, path_under
from kbench.leaderboard.rescorer import Rescorer, board_error, entry_problems, tree_mismatches
from kbench.leaderboard.schema import parse_verification, seed_inconsistencies, validate_tree
from kbench.leaderboard.store import VERIFICATION_FILE, load_dataset, read_entries
from kbench.leaderboard.transfer_track import TRANSFER_FOLDER, k_label, stale_reason
from kbench.scoring.prediction_files import read_predictions, sha256_bytes
from kbench.scoring.records import EvaluationResult

#: where the raw inputs of the board's GPU re-timings are kept, relative to the leaderboard's parent
RAW_FOLDER = "raw"
#: what a re-scored record may differ in: the day it was scored and the kbench that scored it
SCORING_STAMP = ("date", "kbench_version")
MAX_SHOWN = 8


def timings_folder(repo_root: Path, dataset: str, split: str, method: str) -> Path:
    """``raw/<dataset>/verify/<method>/`` for the ``random`` split, ``.../verify/<split>/<method>/`` else."""
    split_part = [("split", split)] if split != "random" else []
    return path_under(Path(repo_root) / RAW_FOLDER, ("dataset", dataset), ("folder", "verify"), *split_part,
                      ("method", method))


def _stored_input(folder: Path, name: str) -> Path | None:
    """``folder/name`` or its gzipped copy, whichever is there."""
    for path in (folder / f"{name}.gz", folder / name):
        if path.is_file():
            return path
    return None


def measured_prefix_problem(plan: dict, raw_path: Path) -> str | None:
    """Why the problems a raw file timed are not the first ones of the plan's seeded order, or None."""
    from kbench.gpu_check.command import raw_rows
    order = [item["problem_id"] for item in plan["problems"]]
    seen = pd.unique(pd.Series([row.get("problem_id") for row in raw_rows(raw_path)
                                if row.get("kind") in ("time", "problem")], dtype=object))
    prefix = set(order[:len(seen)])
    skipped = [pid for pid in order[:len(seen)] if pid not in set(seen)]
    if set(seen) != prefix:
        return (f"the raw timings are not the first {len(seen):,} problems of the plan's seeded order: "
                f"{len(skipped):,} of those are missing (e.g. {skipped[0] if skipped else '?'!r}) and "
                f"{len(set(seen) - prefix):,} later ones timed; a subset must be the seeded prefix its plan states")
    return None


def verification_rescore_problems(folder: Path, dataset: str, split: str, method: str, repo_root: Path,
                                  first_seed_preds: tuple[pd.DataFrame, str] | None) -> list[str]:
    """What is wrong with an entry's ``verification.json`` once scored again from its raw inputs
    (``first_seed_preds``: the entry's first seed's predictions and their sha256, :func:`first_seed`)."""
    from kbench.gpu_check.command import input_sha256, make_plan, make_record
    from kbench.gpu_check.plan import require_cudnn_collected, require_plan_kind
    try:
        record = parse_verification(folder / VERIFICATION_FILE)
        require_cudnn_collected(load_dataset(dataset), "verify-on-gpu")  # a record of a dataset it cannot time
    except KbenchInputError as exc:
        return [str(exc).split("\n")[0]]
    raw_dir = timings_folder(repo_root, dataset, split, method)
    plan_path, raw_path = _stored_input(raw_dir, "plan.json"), _stored_input(raw_dir, "raw.jsonl")
    if plan_path is None or raw_path is None:
        return [f"verification.json: its raw inputs are missing ({raw_dir.relative_to(repo_root)}/plan.json.gz "
                "and raw.jsonl.gz): a record whose raw inputs are missing is refused, not trusted"]
    out = []
    try:
        digests = {"plan.json": input_sha256(plan_path), "raw.jsonl": input_sha256(raw_path)}
        autotune_path = _stored_input(raw_dir, "raw_autotune.jsonl")  # the autotune pass, where the plan had one
        if autotune_path is not None:
            digests["raw_autotune.jsonl"] = input_sha256(autotune_path)
        if record.inputs is None:
            return ["verification.json records no sha256 of its raw inputs (inputs): score it again with "
                    "kbench verify-on-gpu --score-only"]
        out += [f"verification.json inputs.{name} is {str(record.inputs.get(name))[:12]}…, the file kept in "
                f"{raw_dir.relative_to(repo_root)} has {digest[:12]}…" for name, digest in digests.items()
                if record.inputs.get(name) != digest]
        plan = json.loads(_read_text(plan_path))
        require_plan_kind(plan, "roles", plan_path)
        if first_seed_preds is not None:
            expected = make_plan(first_seed_preds[0], load_dataset(dataset), plan.get("split"), plan.get("part", "test"),
                                 plan.get("rounds", 5), plan.get("replays", 3), plan.get("seed", 0),
                                 plan.get("method"), bool(plan.get("live")),
                                 live_autotune=bool((plan.get("live") or {}).get("autotune")),
                                 timed_top=int(plan.get("timed_top", 1)))
            expected = json.loads(json.dumps(expected))
            # where the predictions were read from is the planner's own path: their sha256 is what counts
            expected["predictions"].pop("path", None)
            expected["predictions"]["sha256"] = first_seed_preds[1]
            if isinstance(plan.get("predictions"), dict):
                plan["predictions"].pop("path", None)
            if expected != plan:
                differ = sorted(k for k in set(expected) | set(plan) if expected.get(k) != plan.get(k))
                out.append(f"the run plan {plan_path.name} is not the one the entry's first-seed predictions and "
                           f"the dataset give (differs in {', '.join(differ)}): plan it again with kbench "
                           "verify-on-gpu --plan-only")
        prefix = measured_prefix_problem(plan, raw_path)
        if prefix:
            out.append(prefix)
        rescored = make_record(plan, raw_dir, record.method)
    except (KbenchError, OSError, ValueError, KeyError, TypeError) as exc:
        return out + [f"verification.json cannot be scored again from {raw_dir.relative_to(repo_root)} "
                      f"({type(exc).__name__}: {str(exc)[:300]})"]
    claimed = {k: v for k, v in record.model_dump(mode="json").items() if k not in SCORING_STAMP}
    again = {k: v for k, v in rescored.model_dump(mode="json").items() if k not in SCORING_STAMP}
    claimed["predictions"].pop("path", None)
    again["predictions"].pop("path", None)
    mismatches = tree_mismatches(claimed, again, "verification")
    if mismatches:
        out.append(f"verification.json is not what its raw timings give ({len(mismatches)} field(s) differ): "
                   + "; ".join(mismatches[:MAX_SHOWN]))
    return out


def _read_text(path: Path) -> str:
    from kbench.gpu_check.command import raw_bytes
    return raw_bytes(path).decode("utf-8")


# ----------------------------------------------------------------------------- the transfer track
def transfer_layout(root: Path) -> list[tuple[Path, str | None]]:
    """Every file of the transfer track under ``root``, in path order: (path, None) for a record to
    re-score, (path, problem) for a file out of place."""
    base = Path(root) / TRANSFER_FOLDER
    if not base.is_dir():
        return []
    out = []
    for path in sorted(p for p in base.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        if len(rel.parts) != 4 or not (path.name.endswith(".json") or path.name.endswith(".preds.csv.gz")):
            out.append((path, f"{rel}: unexpected file (layout: transfer/<source>-to-<target>/<method>/k<k>.json "
                              "and k<k>.preds.csv.gz)"))
        elif path.name.endswith(".json"):
            out.append((path, None))
        elif not path.with_name(path.name.removesuffix(".preds.csv.gz") + ".json").exists():
            out.append((path, f"{rel}: predictions without their record"))
    return out


def transfer_problems(root: Path, rescorer: Rescorer) -> tuple[int, list[str]]:
    """(records checked, problems) of every record of the transfer track under ``root``."""
    problems, checked = [], 0
    for path, problem in transfer_layout(root):
        if problem is not None:
            problems.append(problem)
            continue
        checked += 1
        problems += [f"{path.relative_to(root)}: {p}" for p in transfer_record_problems(path, rescorer)]
    return checked, problems


def transfer_record_problems(path: Path, rescorer: Rescorer) -> list[str]:
    """What is wrong with one transfer record: its place, its predictions' sha256, its figures."""
    pair, method = path.parent.parent.name, path.parent.name
    for what, name in (("pair", pair), ("method", method)):
        problem = identifier_problem(name)
        if problem:
            return [f"the {what} folder {name[:80]!r} {problem}"]
    try:
        record = EvaluationResult.model_validate_json(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:
        return [f"not a valid transfer record ({str(exc).splitlines()[0][:200]})"]
    if record.transfer is None:
        return ["the record has no 'transfer' field (source, k)"]
    out = []
    if pair != f"{record.transfer.source.name}-to-{record.dataset.name}":
        out.append(f"the record is {record.transfer.source.name} -> {record.dataset.name}, not the folder's {pair}")
    if record.method != method:
        out.append(f"record method {record.method!r} is not the folder's {method!r}")
    if path.stem != k_label(record.transfer.k):
        out.append(f"the record's budget is {k_label(record.transfer.k)}, not the file's {path.stem}")
    if record.seeds is None or len(record.seeds.per_seed) != len(record.seeds.seeds):
        out.append("the record has no seed summary with one score per seed")
        return out
    out += seed_inconsistencies(record)
    stale = stale_reason(record)
    if stale:
        return out + [f"{STALE_MARK}{stale}"]
    preds = path.with_name(f"{path.stem}.preds.csv.gz")
    if not preds.is_file():
        return out + [f"{preds.name} is missing: every figure is re-scored from the stored predictions"]
    digest = sha256_bytes(preds.read_bytes())
    if not record.predictions.sha256 or record.predictions.sha256 != digest:
        return out + [f"{preds.name} sha256 {digest[:12]}… is not the record's predictions.sha256 "
                      f"{str(record.predictions.sha256)[:12]}…"]
    try:
        frame, _ = read_predictions(preds)
        scored = rescorer.score(record, frame, preds.name)
    except KbenchInputError as exc:
        return out + [str(exc).split("\n")[0]]
    # only the record's own figures must be what re-scoring gives (a metric kbench added after the record
    # was made is not shown for it); seeds that all scored alike are one set of predictions (a
    # deterministic method): then its whole metrics tree and counts are re-scored too
    first = {k: v for k, v in scored.overall.items() if isinstance(v, (int, float)) or v is None}
    mismatches = tree_mismatches(record.seeds.per_seed[0], _like(first, record.seeds.per_seed[0]),
                                 f"seeds.per_seed[0] (seed {record.seeds.seeds[0]})")
    if all(p == record.seeds.per_seed[0] for p in record.seeds.per_seed):
        mismatches += tree_mismatches(record.metrics, _like(scored.metrics, record.metrics), "metrics")
        mismatches += tree_mismatches(record.counts.model_dump(), scored.counts.model_dump(), "counts")
    if mismatches:
        out.append(f"{preds.name}: re-scoring the stored predictions does not give the record's figures "
                   f"({len(mismatches)} field(s) differ): " + "; ".join(mismatches[:MAX_SHOWN]))
    return out


def _like(tree, claimed):
    """``tree`` cut to the keys ``claimed`` has (recursively): the figures a record shows."""
    if isinstance(tree, dict) and isinstance(claimed, dict):
        return {k: _like(tree[k], claimed[k]) for k in claimed if k in tree}
    return tree


#: how a problem of a transfer record scored on data that is not installed begins (listed, not refused)
STALE_MARK = "stale: "


def transfer_target(path: Path) -> str:
    """The target dataset of a transfer record, from its pair folder ``<source>-to-<target>``."""
    return path.parent.parent.name.rsplit("-to-", 1)[-1]


# ----------------------------------------------------------------------------- validate
def validate_all(root: Path, check_data: bool = True, jobs: int | None = None) -> dict:
    """``kbench leaderboard validate``: every file under ``root`` checked (:func:`validate_tree`), every
    result record re-scored from its stored predictions (:func:`entry_problems`), every GPU re-timing
    scored again from its raw inputs and every transfer record re-scored.

    The re-scoring runs dataset by dataset (a transfer record with its target's), each dataset's parts
    loaded and their evaluators built once, in ``jobs`` processes (default: the CPU count; 1: in this
    process). Returns the summary with ``rescored``, ``partial``, ``verified``, ``transfer`` and
    ``stale``; raises one KbenchInputError listing every problem (those of result records first, as
    :func:`validate_board` lists them).
    """
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise KbenchInputError(f"--jobs {jobs}: give a number of processes of 1 or more (1: in this process)")
    root = Path(root)
    summary = validate_tree(root, check_data=check_data)
    summary.update(rescored=0, partial=[], verified=0, transfer=0)
    if not check_data:
        return summary
    entries = read_entries(root)
    layout = transfer_layout(root)
    units: dict[str, tuple[list, list]] = {}
    for (dataset, split), board in entries.items():
        units.setdefault(dataset, ([], []))[0].append(((dataset, split), board))
    for path, problem in layout:
        if problem is None:  # scored with its target dataset's evaluators: the pair folder is <source>-to-<target>
            units.setdefault(transfer_target(path), ([], []))[1].append(path)
    found = _run_units(root, units, jobs)
    board_problems, problems, transfer_found = [], [], {}
    for (dataset, split), board in entries.items():
        for entry in board:
            rel = f"{dataset}/{split}/{entry.folder.name}"
            unit = found[dataset]
            board_problems += unit["board"][rel]
            if rel in unit["rescored"]:
                summary["rescored"] += 1
            if rel in unit["partial"]:
                summary["partial"].append(rel)
            if rel in unit["gpu"]:
                summary["verified"] += 1
                problems += [f"{rel}: {p}" for p in unit["gpu"][rel]]
    if board_problems:
        raise board_error(root, board_problems)
    for unit in found.values():
        transfer_found.update(unit["transfer"])
    transfer = []
    for path, problem in layout:
        if problem is not None:
            transfer.append(problem)
        else:
            summary["transfer"] += 1
            transfer += [f"{path.relative_to(root)}: {p}" for p in transfer_found[str(path)]]
    summary["stale"] = [p.replace(STALE_MARK, "") for p in transfer if STALE_MARK in p]
    summary["transfer"] -= len(summary["stale"])  # listed, not re-scored
    problems += [p for p in transfer if STALE_MARK not in p]
    if problems:
        raise KbenchInputError(f"leaderboard {root} is invalid ({len(problems)} problem(s) in its GPU re-timings "
                               "and transfer records):\n  - " + "\n  - ".join(problems))
    return summary


def check_dataset(root: Path, boards: list, transfer_paths: list[Path]) -> dict:
    """Everything :func:`validate_all` re-derives for one dataset: its entries (``boards``: ((dataset,
    split), entries) of :func:`read_entries`) re-scored, their GPU re-timings scored again, and the
    transfer records ``transfer_paths`` that target it re-scored, with one :class:`Rescorer` (each
    dataset part's evaluator built once). Returns, by entry (``dataset/split/method``): ``board`` (its
    result record's problems), ``rescored``, ``partial``, ``gpu`` (its re-timing's problems); by record
    path: ``transfer``."""
    repo_root, rescorer = Path(root).resolve().parent, Rescorer()
    out = {"board": {}, "rescored": set(), "partial": set(), "gpu": {}, "transfer": {}}
    for (dataset, split), board in boards:
        for entry in board:
            rel = f"{dataset}/{split}/{entry.folder.name}"
            out["board"][rel], done, first = entry_problems(entry, dataset, split, rescorer)
            if done is not None:
                out["rescored"].add(rel)
                if not done.complete:
                    out["partial"].add(rel)
            if done is not None and (entry.folder / VERIFICATION_FILE).exists():  # (else the board is refused)
                out["gpu"][rel] = verification_rescore_problems(entry.folder, dataset, split, entry.folder.name,
                                                                repo_root, first)
    for path in transfer_paths:
        out["transfer"][str(path)] = transfer_record_problems(path, rescorer)
    return out


#: what one record weighs beside the bytes of its stored predictions in :func:`_unit_cost` (its evaluators,
#: the figures computed per group: about as long as reading and scoring a megabyte of predictions)
RECORD_COST = 1_000_000


def _unit_cost(unit: tuple[list, list]) -> int:
    """A rough weight of a dataset's checks (bytes of stored predictions, and :data:`RECORD_COST` per record):
    the heavier ones are started first, so that the processes finish close together."""
    boards, transfer_paths = unit
    entries = [e for _, board in boards for e in board]
    stored = [e.preds_path for e in entries if e.preds_path is not None]
    stored += [p.with_name(f"{p.stem}.preds.csv.gz") for p in transfer_paths]
    return sum(p.stat().st_size for p in stored if p.is_file()) + RECORD_COST * (len(entries) + len(transfer_paths))


def _one_thread_each() -> None:
    """In a process of the pool: pyarrow reads and splits with one thread (the processes share the cores)."""
    import pyarrow as pa
    pa.set_cpu_count(1)


def _run_units(root: Path, units: dict[str, tuple[list, list]], jobs: int | None) -> dict[str, dict]:
    """:func:`check_dataset` of every dataset, in ``jobs`` forked processes (in this one where ``jobs`` is
    1, there is one dataset, or the platform cannot fork)."""
    import multiprocessing
    import os
    import sys
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    jobs = (os.cpu_count() or 1) if jobs is None else jobs
    fork = "fork" in multiprocessing.get_all_start_methods() and sys.platform != "darwin"
    if jobs == 1 or len(units) < 2 or not fork:
        return {name: check_dataset(root, *unit) for name, unit in units.items()}
    order = sorted(units, key=lambda name: _unit_cost(units[name]), reverse=True)
    try:
        with ProcessPoolExecutor(min(jobs, len(units)), mp_context=multiprocessing.get_context("fork"),
                                 initializer=_one_thread_each) as pool:
            futures = {name: pool.submit(check_dataset, root, *units[name]) for name in order}
            return {name: futures[name].result() for name in units}
    except BrokenProcessPool:
        raise KbenchEnvironmentError(f"a process of `kbench leaderboard validate --jobs {jobs}` died (out of "
                                     "memory?): run it again with fewer --jobs (1: one process)") from None


__all__ = ["check_dataset", "timings_folder", "transfer_layout", "transfer_problems", "validate_all",
           "verification_rescore_problems"]

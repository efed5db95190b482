"""Re-scoring records from their stored predictions: every seed and every stored metric.

``kbench submit`` and ``kbench leaderboard validate`` both call :meth:`Rescorer.verify`: each
stored seed's predictions are scored again with the standard Evaluator, and the record's
per-seed scores, its seed mean and standard deviation, its metrics tree (``overall``,
``by_direction``, ``by_dtype``; a tuning record's metrics) and its counts must be what those
predictions give. Any difference is refused with the field named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench.leaderboard.datasets import load_dataset
from kbench.leaderboard.schema import validate_tree, verification_problems
from kbench.leaderboard.store import PREDS_FILE, VERIFICATION_FILE, first_seed, read_entries
from kbench.scoring.evaluate import Evaluator, evaluate_tuning
from kbench.scoring.records import TuningResult, aggregate_seeds

REL_TOL = 1e-9
ABS_TOL = 1e-12
#: differences listed in full per record (the rest are counted)
MAX_SHOWN = 8


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=ABS_TOL)


def tree_mismatches(claimed, rescored, where: str) -> list[str]:
    """Every leaf where two metric trees (nested dicts of numbers) differ, named by its dotted path."""
    if isinstance(claimed, dict) and isinstance(rescored, dict):
        out = []
        for key in list(claimed) + [k for k in rescored if k not in claimed]:
            name = f"{where}.{key}"
            if key not in rescored:
                out.append(f"{name}: claimed {claimed[key]!r}, not computed by re-scoring")
            elif key not in claimed:
                out.append(f"{name}: missing from the record (re-scored {rescored[key]!r})")
            else:
                out += tree_mismatches(claimed[key], rescored[key], name)
        return out
    if isinstance(claimed, list) and isinstance(rescored, list) and len(claimed) == len(rescored):
        # lists (confidence intervals, per-timing rows) are compared item by item, with the same
        # tolerance as every other figure: a sum re-done on another machine's BLAS may differ in its last bit
        return [m for i, (c, r) in enumerate(zip(claimed, rescored)) for m in tree_mismatches(c, r, f"{where}[{i}]")]
    if isinstance(claimed, (dict, list)) or isinstance(rescored, (dict, list)) or not _same(claimed, rescored):
        return [f"{where}: claimed {claimed!r}, re-scored {rescored!r}"]
    return []


@dataclass
class Verified:
    """What re-scoring established for one record."""

    seeds_rescored: list[int] = field(default_factory=list)
    #: seeds the record lists whose predictions are not stored (their scores are not re-scored)
    seeds_unstored: list[int] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.seeds_unstored


class Rescorer:
    """Scores predictions as the record was scored; evaluators are built once per dataset part."""

    def __init__(self):
        self._evaluators: dict[tuple, Evaluator] = {}

    def _evaluator(self, record) -> Evaluator:
        key = (record.dataset.name, record.split, record.part, record.reference)
        if key not in self._evaluators:
            ds = load_dataset(record.dataset.name)
            ev = Evaluator(ds, split=record.split, part=record.part, reference="default")
            if ev.reference_name != record.reference:
                if record.reference is not None:
                    raise KbenchInputError(
                        f"the record measures speed-up against {record.reference!r} but the standard reference "
                        f"heuristic of {ds.name} here is {ev.reference_name!r}; re-score the predictions with "
                        "`kbench evaluate --json` and submit that record.")
                ev = Evaluator(ds, split=record.split, part=record.part, reference=None)
            self._evaluators[key] = ev
        return self._evaluators[key]

    def score(self, record, frame: pd.DataFrame, source: str):
        """The record ``frame`` gives when scored as ``record`` was (dataset, part, reference, solver)."""
        if isinstance(record, TuningResult):
            return evaluate_tuning(load_dataset(record.dataset.name), frame, solver=record.solver,
                                   split=record.split, part=record.part, method=record.method)
        return self._evaluator(record)(frame, method=record.method, predictions_path=source)

    def verify(self, record, seed_frames: dict[int, pd.DataFrame], source: str) -> Verified:
        """Re-score every stored seed; raise one KbenchInputError naming every field that differs."""
        if not seed_frames:
            raise KbenchInputError(f"{source}: no predictions stored; every figure must be re-scored from them.")
        seeds = list(record.seeds.seeds) if record.seeds else [min(seed_frames)]
        extra = sorted(set(seed_frames) - set(seeds))
        problems = [f"predictions of seed(s) {extra} are stored, but the record lists seeds {seeds}"] if extra else []
        scored, done = {}, []  # done: (frame, its score) of each distinct set of predictions
        for seed in seeds:
            if seed not in seed_frames:
                continue
            # a deterministic method's seeds share one set of predictions (read_seed_predictions hands back one
            # frame for them all): it is scored once
            frame = seed_frames[seed]
            same = next((s for f, s in done if f is frame or (f.shape == frame.shape and f.equals(frame))), None)
            if same is None:
                same = self.score(record, frame, f"{source} (seed {seed})")
                done.append((frame, same))
            scored[seed] = same
        result = Verified(seeds_rescored=sorted(scored), seeds_unstored=[s for s in seeds if s not in scored])
        if record.seeds is None:
            new = scored[seeds[0]]
            problems += tree_mismatches(record.metrics, new.metrics, "metrics")
            if not isinstance(record, TuningResult):
                problems += tree_mismatches(record.counts.model_dump(), new.counts.model_dump(), "counts")
        else:
            for i, seed in enumerate(seeds):
                if seed in scored and i < len(record.seeds.per_seed):
                    problems += tree_mismatches(record.seeds.per_seed[i], _numbers(scored[seed].overall),
                                                f"seeds.per_seed[{i}] (seed {seed})")
            if result.complete:
                agg = aggregate_seeds([scored[s] for s in seeds], seeds)
                problems += tree_mismatches(record.metrics, agg.metrics, "metrics")
                problems += tree_mismatches(record.seeds.mean, agg.seeds.mean, "seeds.mean")
                problems += tree_mismatches(record.seeds.std, agg.seeds.std, "seeds.std")
                if not isinstance(record, TuningResult):
                    problems += tree_mismatches(record.counts.model_dump(), agg.counts.model_dump(), "counts")
        if problems:
            more = f"\n  (and {len(problems) - MAX_SHOWN} more)" if len(problems) > MAX_SHOWN else ""
            raise KbenchInputError(f"{source}: re-scoring the stored predictions does not give the record's "
                                   f"figures ({len(problems)} field(s) differ):\n  - "
                                   + "\n  - ".join(problems[:MAX_SHOWN]) + more)
        return result


def _numbers(overall: dict) -> dict:
    """The per-seed figures ``aggregate_seeds`` keeps: the numbers (and Nones) of ``overall``."""
    return {k: v for k, v in overall.items() if isinstance(v, (int, float)) or v is None}


def entry_problems(entry, dataset: str, split: str, rescorer: Rescorer) -> tuple[list[str], Verified | None, tuple]:
    """(problems, what re-scoring established, the first seed's predictions and their sha256 where the entry
    has a ``verification.json``) of one entry: every stored seed re-scored (:meth:`Rescorer.verify`) and
    its ``verification.json`` checked against the record. The problems of a record that does not re-score
    are one message; the rest are named by entry."""
    rel = f"{dataset}/{split}/{entry.folder.name}"
    try:
        seed_preds = entry.seed_preds()
        done = rescorer.verify(entry.record, seed_preds, f"{rel}/{PREDS_FILE}")
    except KbenchInputError as exc:
        return [str(exc)], None, None
    problems, first = [], None
    if (entry.folder / VERIFICATION_FILE).exists():
        first = first_seed(seed_preds)
        problems = [f"{rel}: {p}" for p in verification_problems(
            entry.folder / VERIFICATION_FILE, entry.record, dataset, split, entry.folder.name,
            first_seed_sha256=first[1])]
    return problems, done, first


def board_error(root: Path, problems: list[str]) -> KbenchInputError:
    """The one error of a board whose result records do not re-score as recorded."""
    return KbenchInputError(f"leaderboard {root} is invalid ({len(problems)} entr(ies) not re-scored as "
                            "recorded):\n" + "\n".join(problems))


def validate_board(root: Path, check_data: bool = True) -> dict:
    """Validate every file under a leaderboard folder, then re-score every entry from its stored predictions.

    Returns ``{"entries", "files", "rescored", "partial"}``: ``partial`` lists the entries
    (``dataset/split/method``) whose record names seeds without stored predictions (their seed means
    are not re-scored). Raises one KbenchInputError listing every problem.
    """
    root = Path(root)
    summary = validate_tree(root, check_data=check_data)
    summary.update(rescored=0, partial=[])
    if not check_data:
        return summary
    problems, rescorer = [], Rescorer()
    for (dataset, split), entries in read_entries(root).items():
        for entry in entries:
            found, done, _ = entry_problems(entry, dataset, split, rescorer)
            problems += found
            if done is not None:
                summary["rescored"] += 1
                if not done.complete:
                    summary["partial"].append(f"{dataset}/{split}/{entry.folder.name}")
    if problems:
        raise board_error(root, problems)
    return summary


__all__ = ["Rescorer", "Verified", "board_error", "entry_problems", "tree_mismatches", "validate_board"]

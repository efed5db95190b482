"""Machine-dependent entries: why their figures move from one machine to another, and by how much.

A baseline whose fit is not the same on every machine for the same seed says why in its
``machine_dependent`` attribute; ``kbench run`` stores that text in the record
(``extra.machine_dependent``). ``experiments/reproduction.py`` compares two records of one entry made
under different builds or machines and writes the differences it observed to
:data:`REPRODUCTION`; the board's note and ``kbench run``'s comparison with the board state both.
"""

from __future__ import annotations

from pathlib import Path

from kbench.core.errors import read_json_object
from kbench.leaderboard.schema import parse_record
from kbench.leaderboard.store import entry_dir

#: where experiments/reproduction.py writes the observed differences of the machine-dependent entries of a board
REPRODUCTION = "experiments/results/reproduction_{dataset}_{split}.json"
#: the metrics a reproduction compares, with their labels
COMPARED = {"top1": "top-1", "lop_mean": "mean LoP", "geomean_slowdown": "geomean slowdown"}


def machine_dependent(record) -> str | None:
    """Why the record's method gives other figures on another machine (its ``extra.machine_dependent``)."""
    extra = record.extra if isinstance(record.extra, dict) else {}
    why = extra.get("machine_dependent")
    return why if isinstance(why, str) and why.strip() else None


def reproduction_doc(repo_root: Path, dataset: str, split: str) -> dict:
    """The observed differences of the board ``dataset``/``split`` (an empty dict where none were measured)."""
    path = Path(repo_root) / REPRODUCTION.format(dataset=dataset, split=split)
    if not path.exists():
        return {}
    doc = read_json_object(path)
    return doc if doc.get("dataset") == dataset and doc.get("split") == split else {}


def _run_text(run: dict) -> str:
    return f"torch {run.get('torch') or 'not recorded'} on {run.get('cpu') or 'an unrecorded CPU'}"


def tolerance_text(comparison: dict | None) -> str | None:
    """'between <run> and <run>: top-1 differs by 0.0008, ...' from one entry of a reproduction JSON."""
    if not comparison:
        return None
    diff = comparison["difference"]
    figures = ", ".join(f"{label} by {abs(diff[k]):.4f}" for k, label in COMPARED.items() if k in diff)
    text = (f"observed between {_run_text(comparison['before'])} and {_run_text(comparison['after'])}, "
            f"{comparison['seeds']} seeds each: {figures}")
    # the seed-to-seed spread of each run says whether the move is larger than a change of seed
    stds = [(comparison[side].get("std_over_seeds") or {}) for side in ("before", "after")]
    spread = [(label, stds[0].get(k), stds[1].get(k)) for k, label in COMPARED.items()
              if k in diff and isinstance(stds[0].get(k), float) and isinstance(stds[1].get(k), float)]
    if spread:
        text += " (std over seeds, each run: " + ", ".join(f"{label} {a:.4f} and {b:.4f}" for label, a, b in spread) + ")"
    return text


def machine_note(board, repo_root: Path) -> str | None:
    """The board's note on its machine-dependent entries: why, and the differences observed, or None."""
    doc = reproduction_doc(repo_root, board.dataset, board.split)
    parts = []
    for row in board.all_rows():
        why = machine_dependent(row.record)
        if why is None:
            continue
        observed = tolerance_text((doc.get("entries") or {}).get(row.entry.name))
        parts.append(f"{row.entry.name} is machine-dependent: {why}"
                     + (f"; {observed} ({REPRODUCTION.format(dataset=board.dataset, split=board.split)})."
                        if observed else "."))
    return " ".join(parts) or None


def board_comparison(records, root: Path, dataset: str, split: str) -> list[str]:
    """One line per run record that has an entry on the board under ``root``: its figures beside the
    board's and, for a machine-dependent method, why they may differ and what was observed.

    ``records``: (method, aggregated record) pairs of a ``kbench run``.
    """
    doc = reproduction_doc(Path(root).resolve().parent, dataset, split)
    lines = []
    for method, record in records:
        path = entry_dir(Path(root), dataset, split, method) / "result.json"
        if not path.exists():
            continue
        entry = parse_record(path)
        board, ours = entry.metrics["overall"], record.metrics["overall"]
        figures = [(label, ours.get(k), board.get(k)) for k, label in COMPARED.items()
                   if isinstance(ours.get(k), float) and isinstance(board.get(k), float)]
        same = all(f"{a:.4f}" == f"{b:.4f}" for _, a, b in figures)
        text = ", ".join(f"{label} {a:.4f} (board {b:.4f})" for label, a, b in figures)
        line = f"  {method}: {'equal to the board at 4 decimals' if same else text}"
        seeds = [r.seeds.seeds if r.seeds else [] for r in (record, entry)]
        if not same and seeds[0] != seeds[1]:  # a mean over other seeds differs for a seeded method anyway
            line += f"; the board's figures are over seeds {seeds[1]}, these over {seeds[0]}"
        why = machine_dependent(record)
        if why and not same:
            observed = tolerance_text((doc.get("entries") or {}).get(method))
            line += f"; machine-dependent: {why}" + (f"; {observed}" if observed else "")
        lines.append(line)
    return lines

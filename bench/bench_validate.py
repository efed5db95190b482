"""Time the full-board `kbench leaderboard validate` (schema checks plus re-scoring every entry) and
measure the stored predictions.

    python bench/bench_validate.py [--leaderboard leaderboard] [--before REV] [--out bench/results/validate.json]

Writes the wall and CPU time of one :func:`kbench.leaderboard.rescorer.validate_board` run, the
number of entries re-scored (and of one-seed entries), and the bytes of the stored predictions:
every ``preds.parquet`` now, and, with ``--before REV``, every ``preds.csv.gz`` of the leaderboard
at git revision REV (the single-seed store it replaced), read from git without a checkout.
A timing is only as good as the machine is quiet: re-measure on an idle one before quoting it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from pathlib import Path

from kbench.leaderboard.rescorer import validate_board
from kbench.leaderboard.store import PREDS_FILE

REPO = Path(__file__).resolve().parents[1]


def stored_bytes(root: Path) -> dict:
    files = sorted(root.glob(f"*/*/*/{PREDS_FILE}"))
    return {"files": len(files), "bytes": sum(f.stat().st_size for f in files)}


def bytes_at(rev: str, root: Path, name: str = "preds.csv.gz") -> dict:
    """Files named ``name`` under ``root`` at git revision ``rev``, and their total size (``git ls-tree -l``)."""
    rel = root.resolve().relative_to(REPO)
    out = subprocess.run(["git", "ls-tree", "-r", "-l", rev, "--", str(rel)], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    sizes = [int(line.split()[3]) for line in out.splitlines() if line.endswith("/" + name)]
    return {"revision": rev, "files": len(sizes), "bytes": sum(sizes)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--leaderboard", type=Path, default=REPO / "leaderboard")
    ap.add_argument("--before", default=None, metavar="REV", help="git revision of the earlier store")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "validate.json")
    args = ap.parse_args()
    wall, cpu = time.perf_counter(), time.process_time()
    summary = validate_board(args.leaderboard)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    result = {
        "command": "validate_board(leaderboard): kbench leaderboard validate without the CLI start-up",
        "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
        "entries": summary["entries"], "rescored": summary["rescored"], "one_seed_entries": len(summary["partial"]),
        "stored_predictions": stored_bytes(args.leaderboard),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_1min": round(os.getloadavg()[0], 2)},
    }
    if os.getloadavg()[0] > 0.75 * (os.cpu_count() or 1):  # other work shared the cores
        result["note"] = "measured on a machine shared with other work: re-measure on a quiet one before quoting"
    if args.before:
        result["stored_predictions_before"] = bytes_at(args.before, args.leaderboard)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

"""Time the full-board `kbench leaderboard validate` (schema checks, every result record re-scored, every
GPU re-timing and transfer record re-derived) and measure the stored predictions.

    python bench/bench_validate.py [--leaderboard leaderboard] [--jobs N] [--before REV] [--out bench/results/validate.json]

Writes the wall and CPU time of one :func:`kbench.leaderboard.integrity.validate_all` run (the CPU time
of the processes it spreads the datasets over included), the number of entries re-scored (and of
one-seed entries), GPU re-timings and transfer records re-derived, and the bytes of the stored predictions:
every ``preds.parquet`` now, and, with ``--before REV``, every ``preds.csv.gz`` of the leaderboard
at git revision REV (the single-seed store it replaced), read from git without a checkout.
A timing is only as good as the machine is quiet: re-measure on an idle one before quoting it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import time
from pathlib import Path

from kbench.leaderboard.integrity import validate_all
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


def _cpu_s() -> float:
    """User and system CPU seconds of this process and of its finished child processes (the pool's)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--leaderboard", type=Path, default=REPO / "leaderboard")
    ap.add_argument("--jobs", type=int, default=None, metavar="N",
                    help="processes to re-score in (default: the CPU count, as the command)")
    ap.add_argument("--before", default=None, metavar="REV", help="git revision of the earlier store")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "validate.json")
    args = ap.parse_args()
    # the load before the run: after it, the 1-minute average holds the run's own workers
    load_before = os.getloadavg()[0]
    wall, cpu = time.perf_counter(), _cpu_s()
    summary = validate_all(args.leaderboard, jobs=args.jobs)
    wall, cpu = time.perf_counter() - wall, _cpu_s() - cpu
    result = {
        "command": "validate_all(leaderboard): kbench leaderboard validate without the CLI start-up",
        "jobs": args.jobs or os.cpu_count(),
        "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
        "entries": summary["entries"], "rescored": summary["rescored"], "one_seed_entries": len(summary["partial"]),
        "gpu_retimings": summary["verified"], "transfer_records": summary["transfer"],
        "stale_transfer_records": len(summary.get("stale", [])),
        "stored_predictions": stored_bytes(args.leaderboard),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_1min_before": round(load_before, 2),
                    "load_average_1min_after": round(os.getloadavg()[0], 2)},
    }
    if load_before > 0.75 * (os.cpu_count() or 1):  # other work was using the cores when it started
        result["note"] = "measured on a machine shared with other work: re-measure on a quiet one before quoting"
    if args.before:
        result["stored_predictions_before"] = bytes_at(args.before, args.leaderboard)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

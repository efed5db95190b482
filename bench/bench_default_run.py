"""Wall time of the default `kbench run` from scratch (nothing resumed); writes JSON.

    python bench/bench_default_run.py [--out bench/results/default_run.json]

Runs ``kbench run --out <fresh temporary folder>`` (mi100, split random, every default
baseline, seeds 0-4, one worker process per core: the default ``--jobs``) in a subprocess and
records the wall time, the number of workers, each method's mean
training time per seed (from the run's records), the load average before and after, and
the machine. The README quotes the result (``python tools/report.py``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import machine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "default_run.json"))
    args = ap.parse_args()
    import os
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kbench.cli", "run", "--out", tmp, "--no-progress"], check=True,
                       stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t
        fit = {}  # mean training time per seed of each method, from the run's own records
        for rec in sorted(Path(tmp).glob("*/*/*/result.json")):
            per_seed = json.loads(rec.read_text()).get("extra", {}).get("fit_time_s_per_seed") or []
            fit[rec.parent.name] = sum(per_seed) / len(per_seed) if per_seed else None
    from kbench.leaderboard.runner_pool import machine_cores
    result = {"benchmark": "default_run", "command": "kbench run --out <empty folder>", "wall_s": wall,
              "jobs": machine_cores(),  # kbench run's default --jobs: one worker process per core
              "wall_min": wall / 60, "fit_s_per_seed": fit, "loadavg_before": list(load_before),
              "loadavg_after": list(os.getloadavg()), "machine": machine()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

"""Time `kbench.load` in fresh processes next to parsing the raw find-db; write JSON.

    python bench/bench_load.py [--dataset mi100] [--repeats 5] [--out bench/results/load.json]

Each load is timed in a new Python process (import excluded from the timing),
as a user's first `kbench.load("mi100")` in a notebook would be. The dataset reads its
tables on first use (``kbench.data.dataset.LazyTables``); the timing includes reading every
one of them, so it is the time to have the whole dataset in memory.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHILD = """
import time, kbench
t = time.perf_counter(); ds = kbench.load({name!r}); ds.tables.values(); print(time.perf_counter() - t)
"""


def machine() -> dict:
    import os
    # the load average says how busy the machine was: timings on a shared machine are upper bounds
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "loadavg_1min": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="mi100")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--raw", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "load.json"))
    args = ap.parse_args()

    loads = []
    for _ in range(args.repeats):
        out = subprocess.run([sys.executable, "-c", CHILD.format(name=args.dataset)],
                             capture_output=True, text=True, check=True)
        loads.append(float(out.stdout.strip().splitlines()[-1]))

    from kbench.data.registry import DATASETS
    from kbench.sources.miopen import convert_finddb
    spec = DATASETS[args.dataset]
    t = time.perf_counter()
    convert_finddb(Path(args.raw) / spec.raw_file)
    parse_s = time.perf_counter() - t

    result = {"benchmark": "load", "dataset": args.dataset, "load_seconds": loads,
              "load_median_s": statistics.median(loads), "parse_raw_finddb_s": parse_s,
              "machine": machine()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

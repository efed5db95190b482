"""Memory of a loaded dataset with plain strings against categoricals, and the peak of scoring; write JSON.

    python bench/bench_load_memory.py [--datasets mi100 h200] [--out bench/results/load_memory.json]

Two ways of reading the same packaged files, each in a fresh Python process:

* ``strings``: the reading before categoricals were widened (only ``runtimes.kernel``,
  ``runtimes.algorithm`` and the split columns categorical; ``problem_id``, the heuristics
  columns and ``direction``/``dtype``/``layout`` plain strings);
* ``categoricals``: ``kbench.load`` as it is (``kbench.data.dataset.CATEGORICAL``).

Per way: the memory of every table (``DataFrame.memory_usage(deep=True)``), the load time, the
process's peak resident memory after loading (``ru_maxrss``, includes the interpreter and the
imports), and the peak after building the test-part ``Evaluator`` (with the dataset's reference
heuristic) and scoring that heuristic's own ranking as predictions, as ``kbench evaluate`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
mode, name = sys.argv[1], sys.argv[2]
import kbench, kbench.data.dataset as kd
if mode == "strings":
    kd.CATEGORICAL = {"runtimes": ["kernel", "algorithm"]}  # splits: every split column, as before
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter(); ds = kbench.load(name); load_s = time.perf_counter() - t
rss_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tables = {k: int(v.memory_usage(deep=True).sum()) for k, v in ds.tables.items()}
dtypes = {k: sorted({str(c) for c, d in v.dtypes.items() if str(d) == "category"}) for k, v in ds.tables.items()}
from kbench.scoring.evaluate import Evaluator
t = time.perf_counter()
ev = Evaluator(ds, split="random" if "random" in ds.split_names else ds.split_names[0], reference="default")
h = ds.heuristics
name_ref = ev.reference_name
h = h[(h["heuristic"] == name_ref) & h["problem_id"].isin(ev.ids)].sort_values(["problem_id", "rank"])
preds = h.groupby("problem_id", sort=False, observed=True)["kernel"].agg(";".join).rename("ranking").reset_index()
rec = ev(preds, allow_partial=True)
eval_s = time.perf_counter() - t
rss_eval = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"tables_bytes": tables, "total_bytes": sum(tables.values()), "categorical_columns": dtypes,
                  "load_s": load_s, "peak_rss_before_load_kib": rss0, "peak_rss_after_load_kib": rss_load,
                  "evaluate_s": eval_s, "peak_rss_after_evaluate_kib": rss_eval,
                  "top1_of_reference": rec.overall["top1"]}))
"""


def machine() -> dict:
    return {"platform": platform.platform(), "python": platform.python_version(), "cpu_count": os.cpu_count(),
            "processor": platform.processor() or platform.machine(), "loadavg_1min": os.getloadavg()[0],
            "note": "a shared machine: times are upper bounds; memory figures do not depend on the load"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["mi100", "h200"])
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "load_memory.json"))
    args = ap.parse_args()
    result = {"benchmark": "load_memory", "datasets": {}, "machine": machine()}
    for name in args.datasets:
        runs = {}
        for mode in ("strings", "categoricals"):
            out = subprocess.run([sys.executable, "-c", CHILD, mode, name], capture_output=True, text=True,
                                 check=True)
            runs[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        s, c = runs["strings"], runs["categoricals"]
        assert s["top1_of_reference"] == c["top1_of_reference"], "the two readings must score alike"
        runs["ratio_total_bytes"] = s["total_bytes"] / c["total_bytes"]
        runs["ratio_peak_rss_after_load"] = ((s["peak_rss_after_load_kib"] - s["peak_rss_before_load_kib"])
                                             / (c["peak_rss_after_load_kib"] - c["peak_rss_before_load_kib"]))
        result["datasets"][name] = runs
        print(f"{name}: tables {s['total_bytes'] / 1e6:,.1f} MB -> {c['total_bytes'] / 1e6:,.1f} MB "
              f"({runs['ratio_total_bytes']:.2f}x); load {s['load_s']:.2f} s -> {c['load_s']:.2f} s; peak RSS "
              f"after evaluate {s['peak_rss_after_evaluate_kib'] / 1024:,.0f} MiB -> "
              f"{c['peak_rss_after_evaluate_kib'] / 1024:,.0f} MiB")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

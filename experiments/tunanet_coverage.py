"""How much MIOpen's TunaNet solver lists cover the kernels a find-db actually lists.

Reads a raw MIOpen find-db (``../shared/data/miopen/<id>.HIP.fdb.txt.bz2``),
parses its problem keys with :func:`kbench.sources.problem.parse_miopen_keys` and
reports, for the TunaNet model of that device:

* the model's solver list, and the distinct solvers the find-db lists
  (before any cleaning: raw entries);
* how many problem lines TunaNet supports (MIOpen's support check, see
  ``baselines/tunanet.py``);
* on all lines and on the supported ones: the share whose fastest listed
  solver is one of TunaNet's solvers (an upper bound on its top-1), and the
  share with no TunaNet solver listed at all;
* a rough top-1 on supported lines: the first solver of the TunaNet ranking
  that appears in the line's list, compared with the listed fastest (the
  evaluator of ``kbench evaluate`` is the reference; this is a sanity check),
  also restricted to the lines whose fastest solver is one TunaNet can name.

Usage::

    python experiments/tunanet_coverage.py [--fdb gfx90878] [--json out.json]
"""

from __future__ import annotations

import argparse
import bz2
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbench.sources.problem import parse_miopen_keys  # noqa: E402
from kbench_baselines.tunanet import DEVICE_ARCH, TunaNet  # noqa: E402


def read_fdb(path: Path) -> tuple[pd.Series, pd.DataFrame]:
    keys, rows = [], []
    with bz2.open(path, "rt") as fh:
        for line in fh:
            line = line.strip()
            if not line or "=" not in line:
                continue
            key, val = line.split("=", 1)
            keys.append(key)
            for rank, ent in enumerate(e for e in val.split(";") if e):
                solver, rest = ent.split(":", 1)
                t = float(rest.split(",", 1)[0])
                rows.append((key, solver, t, rank))
    runtimes = pd.DataFrame(rows, columns=["problem_id", "kernel", "time_ms", "rank"])
    return pd.Series(keys, dtype=object), runtimes


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fdb", default="gfx90878", help="find-db id (file <id>.HIP.fdb.txt.bz2)")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "miopen"))
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    keys, rt = read_fdb(Path(args.data) / f"{args.fdb}.HIP.fdb.txt.bz2")
    keys = keys.drop_duplicates()
    problems = parse_miopen_keys(keys)
    arch = DEVICE_ARCH[args.fdb]
    tn = TunaNet(arch=arch)
    solvers = tn.solvers
    sup = tn.supports(problems)

    # Raw entries: the listed fastest is the rank-0 entry of the line.
    fastest = rt[rt["rank"] == 0].drop_duplicates("problem_id").set_index("problem_id")["kernel"]
    in_tn = rt["kernel"].isin(solvers)
    any_tn = in_tn.groupby(rt["problem_id"]).any()
    best_in_tn = fastest.isin(solvers)

    ids_sup = problems.loc[sup.to_numpy(), "problem_id"]
    # Rough top-1 on supported lines (rankings unfiltered by direction, as MIOpen returns them).
    tn._kernel_dirs = None
    ranks = tn.rank_problems(problems[sup.to_numpy()]).set_index("problem_id")["ranking"].str.split(";")
    listed = rt.groupby("problem_id")["kernel"].agg(set)
    joined = pd.DataFrame({"rank": ranks, "listed": listed.reindex(ranks.index),
                           "best": fastest.reindex(ranks.index)})
    first = [next((s for s in r if s in lst), None) for r, lst in zip(joined["rank"], joined["listed"])]
    joined["choice"] = first
    hit = (joined["choice"] == joined["best"]).to_numpy()
    top1 = float(hit.mean()) if len(joined) else float("nan")
    in_list = joined["best"].isin(solvers).to_numpy()
    top1_in_list = float(hit[in_list].mean()) if in_list.any() else float("nan")

    def share(x):
        return float(np.mean(x)) if len(x) else float("nan")

    res = {
        "fdb": args.fdb,
        "arch": arch,
        "tunanet_solvers": solvers,
        "n_tunanet_solvers": len(solvers),
        "n_lines": int(len(problems)),
        "n_distinct_listed_solvers": int(rt["kernel"].nunique()),
        "listed_solvers_not_in_tunanet": sorted(set(rt["kernel"]) - set(solvers)),
        "tunanet_solvers_never_listed": sorted(set(solvers) - set(rt["kernel"])),
        "n_supported": int(sup.sum()),
        "supported_by_direction": problems.loc[sup.to_numpy(), "direction"].value_counts().to_dict(),
        "share_fastest_in_tunanet_list_all": share(best_in_tn.reindex(problems["problem_id"]).to_numpy()),
        "share_fastest_in_tunanet_list_supported": share(best_in_tn.reindex(ids_sup).to_numpy()),
        "share_no_tunanet_solver_listed_supported": share(~any_tn.reindex(ids_sup).to_numpy()),
        "rough_top1_supported": top1,
        "rough_top1_supported_where_fastest_in_tunanet_list": top1_in_list,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()

"""May the collector use cuDNN's kernel cache? Compare a run with it against one without (no GPU needed).

cuDNN compiles the kernels of its runtime-compiled engines (70, 78, 19, 16, 71 on the H100/H200)
for every plan build, and those builds are the collector's largest phase after timing. The
frontend's kernel cache re-uses a compiled kernel across graphs of the same topology, but only for
dynamic-shape graphs, and a dynamic-shape graph may be offered other plans, or run other kernels,
than the static graph a framework builds. So ``kbench collect cudnn --kernel-cache`` stays off until
this check, on the GPU, shows that it changes nothing but the build time::

    kbench collect cudnn --problems raw/h100/corpus.csv.gz --out KC/off --limit 60
    kbench collect cudnn --problems raw/h100/corpus.csv.gz --out KC/on  --limit 60 --kernel-cache
    python tools/collect/kernel_cache_check.py KC/off KC/on > kernel_cache.json

(``bash tools/device/run_on_device.sh kcache raw/h100/corpus.csv.gz BUDGET`` runs all three.)
It compares, over the problem-directions measured in both folders:

* **outcomes**: each run's problem statuses (ok, no_plans, failed, crashed) and the mean number of
  plans cuDNN offered, and each run's processes: started, ended, killed (started without an end
  record: each run stops itself within its budget, so something killed it, a segmentation fault for
  example) and ended by a fatal CUDA error;
* **plans offered** where both runs found plans: per problem (min, mean, max) and by engine, how many
  of the cached run's plans the default run was not offered, and the fastest plans (how often the
  same, and the geomean ratio of their precise times);
* **plan lists**: per heuristic mode (A, B, fallback), the problems whose ordered list of plan names
  is the same, and those whose set is the same (a problem without plans has the empty list);
* **time per phase** (mean seconds per problem-direction, from the problems' ``t_*_s`` columns, over
  the problem-directions measured ``ok`` in both);
* **timings**: the same (problem, plan) timed in both runs, against the single-run repeatability of
  the same folders (:func:`kbench.collect.studies.scaling.agreement`), and whether the fastest plan is the same.

``usable`` is true when every problem measured in both runs is ``ok`` in both, every mode's lists are
the same for every problem, no process crashed, and the timings agree within repeatability.

Measured on an H100 (cuDNN 9.19, frontend 1.32; ``N_KC=40 bash tools/device/run_on_device.sh kcache
raw/h100/corpus.csv.gz 230 25``): **not usable**. Of the 40 problem-directions both runs measured, the
dynamic-shape graphs were offered no plan at all for 13 of 13 backward-data, 11 of 13 backward-filter
and 1 of 14 forward problems. The other 15 were offered 1 to 4 plans (mean 2.9), all from engines 71
and 16, where the static graphs of the same problems are offered 16 to 83 (mean 50.5); 24 of those
43 plans are not in the static lists at all, and the fastest of them is never the static graphs'
fastest plan and is 4.71x slower (geomean over the 15). The cached run needed three processes: two
died without an end record (segmentation faults: the script restarts a run only after exit 3, which
writes one, or 139) and the third stopped on an illegal memory access. A dataset built that way
would measure another, much smaller selection problem than the one frameworks meet. The record and both
raw folders are in ``raw/h100/kernel_cache/`` (re-score with
``python tools/collect/kernel_cache_check.py raw/h100/kernel_cache/off raw/h100/kernel_cache/on``).
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from kbench.collect.raw_store.writer import dedupe, load_env, load_records
from kbench.collect.studies.scaling import agreement, print_json
from kbench.core.errors import KbenchInputError

MODES = {"a": "rank_a", "b": "rank_b", "fallback": "rank_fallback"}


def plan_lists(plans: pd.DataFrame, column: str) -> pd.Series:
    """Per problem-direction, the tuple of plan names in the order of ``column`` (plans absent: rank < 0)."""
    listed = plans[pd.to_numeric(plans[column], errors="coerce").fillna(-1) >= 0]
    listed = listed.sort_values(["key", column], kind="stable")
    return listed.groupby("key")["plan"].agg(tuple)


def compare_lists(off: pd.DataFrame, on: pd.DataFrame, keys) -> dict:
    """For each mode: problems compared, same ordered list, same set, and up to 5 keys that differ."""
    out = {}
    for mode, column in MODES.items():
        a, b = plan_lists(off, column), plan_lists(on, column)
        pairs = [(a.get(k, ()), b.get(k, ())) for k in keys]  # a problem without the mode's list: ()
        same = np.array([x == y for x, y in pairs], dtype=bool)
        same_set = np.array([set(x) == set(y) for x, y in pairs], dtype=bool)
        out[mode] = {"problems": len(keys), "same_list": int(same.sum()), "same_set": int(same_set.sum()),
                     "differ": [str(k) for k in np.asarray(keys)[~same][:5]]}
    return out


def phase_means(problems: pd.DataFrame, keys) -> dict:
    cols = [c for c in problems.columns if c.startswith("t_") and c.endswith("_s")]
    sel = problems.set_index("key").loc[list(keys), cols].apply(pd.to_numeric, errors="coerce")
    return {c: float(sel[c].mean()) for c in cols}


def outcomes(folder, problems: pd.DataFrame, keys) -> dict:
    """Statuses and plans offered over ``keys``, and the run's processes (from env.jsonl)."""
    sel = problems.set_index("key").loc[list(keys)]
    env = load_env(folder)
    phase = env["phase"] if "phase" in env else pd.Series(dtype=object)
    started, ended = env[phase == "start"], env[phase == "end"]
    fatal = int(ended["fatal"].notna().sum()) if "fatal" in ended else 0
    # each run stops itself within its time budget, so a run without an end record was killed
    killed = sorted(set(started["run_id"]) - set(ended["run_id"])) if len(started) else []
    return {"status": {str(k): int(v) for k, v in sel["status"].value_counts().sort_index().items()},
            "plans_offered_mean": float(pd.to_numeric(sel["n_plans"], errors="coerce").fillna(0).mean()),
            "processes": {"started": int(len(started)), "ended": int(len(ended)), "killed": len(killed),
                          "fatal_cuda_error": fatal}}


def no_plans_by_direction(problems: pd.DataFrame, keys) -> dict:
    """Per direction: problem-directions among ``keys``, and how many of them cuDNN offered no plan."""
    sel = problems.set_index("key").loc[list(keys)]
    return {str(d): {"problems": int(len(g)), "no_plans": int(g["status"].eq("no_plans").sum())}
            for d, g in sel.groupby("direction")}


def offered_plans(runs: dict, keys) -> dict:
    """Over ``keys`` (the problem-directions ``ok`` in both runs): the plans each run was offered (min,
    mean, max per problem, and the engines), how many of the cached run's plans the default run was
    not offered, and the fastest plans: how often the same, and the geomean ratio of their precise times."""
    out = {}
    plans = {label: pl[pl["key"].isin(keys)] for label, (_, pl) in runs.items()}
    for label, (problems, _) in runs.items():
        n = pd.to_numeric(problems.set_index("key").loc[list(keys), "n_plans"], errors="coerce")
        engines = pd.to_numeric(plans[label]["engine_id"], errors="coerce").dropna().astype(int)
        out[label] = {"min": float(n.min()), "mean": float(n.mean()), "max": float(n.max()),
                      "engines": sorted(set(engines.tolist()))}
    pairs = plans["on"][["key", "plan"]].merge(plans["off"][["key", "plan"]], how="left", indicator=True)
    out["on_plans"] = int(len(pairs))
    out["on_plans_not_offered_off"] = int((pairs["_merge"] == "left_only").sum())
    best = {}
    for label, pl in plans.items():
        timed = pl.dropna(subset=["precise_ms"])
        timed = timed[timed["precise_ms"] > 0]
        best[label] = timed.loc[timed.groupby("key")["precise_ms"].idxmin(), ["key", "plan", "precise_ms"]]
    both = best["off"].merge(best["on"], on="key", suffixes=("_off", "_on"))
    out["fastest"] = {"problems": int(len(both)),
                      "same_plan": int((both["plan_off"] == both["plan_on"]).sum()),
                      "geomean_on_over_off": (float(np.exp(np.log(both["precise_ms_on"] / both["precise_ms_off"]).mean()))
                                              if len(both) else None)}
    return out


def compare(off, on) -> dict:
    """The check of the module text, for the raw folders ``off`` (default run) and ``on`` (--kernel-cache)."""
    runs = {}
    for label, folder in (("off", off), ("on", on)):
        problems, plans = dedupe(load_records(folder, "problems"), load_records(folder, "plans"))
        if not len(problems) or "status" not in problems:
            raise KbenchInputError(f"{folder}: no problem records; give a folder `kbench collect cudnn` wrote.")
        runs[label] = (problems, plans)
    keys = sorted(set(runs["off"][0]["key"]) & set(runs["on"][0]["key"]))
    if not keys:
        raise KbenchInputError(f"{off} and {on} share no measured problem-direction; run both on the same "
                               "problems (the same --problems file and --limit).")
    results = {label: outcomes(folder, runs[label][0], keys) for label, folder in (("off", off), ("on", on))}
    ok_both = sorted(set(keys)
                     & set(runs["off"][0].loc[runs["off"][0]["status"] == "ok", "key"])
                     & set(runs["on"][0].loc[runs["on"][0]["status"] == "ok", "key"]))
    lists = compare_lists(runs["off"][1], runs["on"][1], keys)
    timing = agreement(off, on)
    phases = {label: phase_means(runs[label][0], ok_both) for label in runs}
    for label in runs:
        results[label]["by_direction"] = no_plans_by_direction(runs[label][0], keys)
    out = {"problem_directions": len(keys), "ok_in_both": len(ok_both), "outcomes": results,
           "offered_ok_in_both": offered_plans(runs, ok_both), "plan_lists": lists, "phase_means_s": phases,
           "timing": timing}
    all_ok = all(r["status"] == {"ok": len(keys)} for r in results.values())
    no_crash = all(not r["processes"]["killed"] and not r["processes"]["fatal_cuda_error"] for r in results.values())
    same_lists = all(v["same_list"] == v["problems"] for v in lists.values())
    out["usable"] = bool(all_ok and no_crash and same_lists and timing["within_repeatability"])
    return out


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2:
        print("usage: python tools/collect/kernel_cache_check.py RAW_OFF RAW_ON", file=sys.stderr)
        return 2
    return print_json(compare, *argv)


if __name__ == "__main__":
    raise SystemExit(main())

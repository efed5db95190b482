"""Numbers of a multi-GPU collection, read from raw folders (no GPU needed).

    python -m kbench.collect.scaling throughput ROOT_OR_FOLDER...   # problem-directions per minute
    python -m kbench.collect.scaling agreement RAW_GPU0 RAW_GPU1    # same problems timed on two GPUs
    python -m kbench.collect.scaling phases RAW                     # time per phase, notes cache or not

**Throughput** comes from each run's ``end`` record in ``env.jsonl`` (problem-
directions measured and seconds elapsed, written by the collector itself).
Ranks of one launch run side by side, so the launch's rate is the sum of the
problem-directions over the longest rank's elapsed time; per GPU it is that
divided by the number of ranks.

**Agreement** compares two raw folders that timed the same problem-directions
on different GPUs of one host: for every (problem-direction, plan) timed
precisely on both, ``|ln(t_gpu1 / t_gpu0)|``; and, as the yardstick, the
single-GPU repeatability of the same folders: ``|ln(repeat_ms / precise_ms)|``
of each problem's best plan (the collector re-times the best plan at the end
of every problem). The GPUs agree when the cross-GPU median and 90th
percentile are no larger than the repeatability's.

**Phases** groups a raw folder's runs by whether they took numerical notes from
the notes cache (:mod:`kbench.collect.notes_cache`; a run whose problems have
``notes_source`` cache or check) or probed every problem, and gives per group
the mean seconds of each collector phase (the problems' ``t_*_s`` columns), the
problem-directions per minute (``end`` records) and the seconds per second the
shard cost model expects (:func:`kbench.collect.shard.expected_seconds`), which
corrects for the groups' different problem mixes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.collect.shard import expected_seconds, shard_folders
from kbench.collect.writer import dedupe, load_env, load_records
from kbench.errors import KbenchInputError


def _folders(paths) -> list[Path]:
    out = []
    for p in map(Path, paths):
        shards = shard_folders(p)
        out += list(shards.values()) if shards else [p]
    return out


def throughput(paths) -> dict:
    """Per-rank and combined problem-directions per minute of the runs in ``paths``."""
    ranks = []
    for folder in _folders(paths):
        env = load_env(folder)
        if not len(env) or "phase" not in env:
            raise KbenchInputError(f"{folder}: no env.jsonl run records; not a collector output folder.")
        end = env[env["phase"] == "end"]
        if not len(end):
            raise KbenchInputError(f"{folder}: no run has ended (no 'end' record in env.jsonl).")
        last = end.iloc[-1]
        ranks.append({"folder": str(folder), "run_id": str(last["run_id"]), "measured": int(last["measured"]),
                      "elapsed_s": float(last["elapsed_s"]),
                      "per_minute": 60.0 * float(last["measured"]) / float(last["elapsed_s"])})
    measured = sum(r["measured"] for r in ranks)
    wall = max(r["elapsed_s"] for r in ranks)
    per_minute = 60.0 * measured / wall
    return {"gpus": len(ranks), "measured": measured, "elapsed_s": wall, "per_minute": per_minute,
            "per_minute_per_gpu": per_minute / len(ranks), "ranks": ranks}


def _quantiles(values) -> dict:
    a = np.asarray(values, dtype=float)
    if not len(a):
        return {"n": 0, "median": None, "p90": None}
    return {"n": int(len(a)), "median": float(np.median(a)), "p90": float(np.percentile(a, 90))}


def agreement(raw_a, raw_b) -> dict:
    """Cross-GPU timing differences against single-GPU repeatability (see the module text)."""
    frames = []
    for raw in (raw_a, raw_b):
        problems, plans = dedupe(load_records(raw, "problems"), load_records(raw, "plans"))
        ok = problems.loc[problems["status"] == "ok", "key"]
        plans = plans[plans["key"].isin(ok)]
        if "precise_ms" not in plans:
            plans = plans.assign(precise_ms=np.nan, repeat_ms=np.nan)
        frames.append(plans[["key", "plan", "precise_ms", "repeat_ms"]].dropna(subset=["precise_ms"]))
    a, b = frames
    both = a.merge(b, on=["key", "plan"], suffixes=("_a", "_b"))
    both = both[(both["precise_ms_a"] > 0) & (both["precise_ms_b"] > 0)]
    cross = np.abs(np.log(both["precise_ms_b"] / both["precise_ms_a"]))
    rep = pd.concat([f.dropna(subset=["repeat_ms"]) for f in frames])
    rep = rep[(rep["repeat_ms"] > 0) & (rep["precise_ms"] > 0)]
    repeat = np.abs(np.log(rep["repeat_ms"] / rep["precise_ms"]))
    best_a = a.loc[a.groupby("key")["precise_ms"].idxmin(), ["key", "plan"]] if len(a) else a[["key", "plan"]]
    best_b = b.loc[b.groupby("key")["precise_ms"].idxmin(), ["key", "plan"]] if len(b) else b[["key", "plan"]]
    same_best = best_a.merge(best_b, on="key", suffixes=("_a", "_b"))
    out = {"problem_directions_on_both": int(both["key"].nunique()), "plans_on_both": int(len(both)),
           "cross_gpu_abs_log_ratio": _quantiles(cross), "single_gpu_repeat_abs_log_ratio": _quantiles(repeat),
           "same_fastest_plan_share": (float((same_best["plan_a"] == same_best["plan_b"]).mean())
                                       if len(same_best) else None)}
    c, r = out["cross_gpu_abs_log_ratio"], out["single_gpu_repeat_abs_log_ratio"]
    out["within_repeatability"] = (None if not c["n"] or not r["n"]
                                   else bool(c["median"] <= r["median"] and c["p90"] <= r["p90"]))
    return out


def phases(raw) -> dict:
    """Time per phase for the runs with and without the notes cache (see the module text)."""
    problems = load_records(raw, "problems")
    if "t_total_s" not in problems:
        raise KbenchInputError(f"{raw}: no problem records with phase times; give a folder `kbench collect cudnn` wrote.")
    ok = problems[problems["status"] == "ok"].copy()
    source = ok["notes_source"] if "notes_source" in ok else pd.Series("", index=ok.index)
    cached_runs = set(ok.loc[source.isin(["cache", "check"]), "run_id"])
    ok["group"] = np.where(ok["run_id"].isin(cached_runs), "notes cache", "probes only")
    ok["expected_s"] = expected_seconds(ok)
    end = load_env(raw)
    end = end[end["phase"] == "end"] if "phase" in end else end
    cols = [c for c in ok.columns if c.startswith("t_") and c.endswith("_s")]
    out = {}
    for group, part in ok.groupby("group"):
        runs = end[end["run_id"].isin(set(part["run_id"]))]
        out[group] = {"runs": int(part["run_id"].nunique()), "problem_directions": int(len(part)),
                      "per_minute": (60.0 * float(runs["measured"].sum()) / float(runs["elapsed_s"].sum())
                                     if len(runs) else None),
                      "seconds_per_expected_second": float(part["t_total_s"].sum() / part["expected_s"].sum()),
                      "mean_s": {c: float(part[c].mean()) for c in cols},
                      "median_s": {c: float(part[c].median()) for c in cols}}
    return out


def print_json(fn, *args) -> int:
    """Print ``fn(*args)`` as JSON; a KbenchError becomes its one-line message and exit code."""
    from kbench.errors import KbenchError
    try:
        print(json.dumps(fn(*args), indent=1))
    except KbenchError as exc:
        print(f"kbench: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) >= 2 and argv[0] == "throughput":
        return print_json(throughput, argv[1:])
    if len(argv) == 3 and argv[0] == "agreement":
        return print_json(agreement, argv[1], argv[2])
    if len(argv) == 2 and argv[0] == "phases":
        return print_json(phases, argv[1])
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())

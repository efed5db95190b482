"""Numbers of a multi-GPU collection, read from raw folders (no GPU needed).

    python -m kbench.collect.studies.scaling throughput ROOT_OR_FOLDER...   # problem-directions per minute
    python -m kbench.collect.studies.scaling agreement RAW_GPU0 RAW_GPU1    # same problems timed on two GPUs
    python -m kbench.collect.studies.scaling phases RAW [--before RUN_ID]   # time per phase, notes cache or not
    python -m kbench.collect.studies.scaling launches RAW... [--since RUN_ID] [--before RUN_ID]  # per launch: GPUs, rates, mix
    python -m kbench.collect.studies.scaling ladder RAW... [--since RUN_ID] [--before RUN_ID]    # against the 1-GPU launch
    python -m kbench.collect.studies.scaling agreement-all RAW_GPU0 RAW_GPU1 ...  # every pair of GPUs
    python -m kbench.collect.studies.scaling agreement-rounds agree0 agree1 agree0_r2 agree1_r2  # against re-runs

**Throughput** comes from each run's ``end`` record in ``env.jsonl`` (problem-
directions measured and seconds elapsed, written by the collector itself).
Ranks of one launch run side by side, so the launch's rate is the sum of the
problem-directions over the longest rank's elapsed time; per GPU it is that
divided by the number of GPUs (ranks that shared a GPU, ``--ranks-per-gpu``,
count as one: the run's ``start`` record says how many shared).

**Agreement** compares two raw folders that timed the same problem-directions
on different GPUs of one host: for every (problem-direction, plan) timed
precisely on both, ``|ln(t_gpu1 / t_gpu0)|``; and, as the yardstick, the
single-GPU repeatability of the same folders: ``|ln(repeat_ms / precise_ms)|``
of each problem's best plan (the collector re-times the best plan at the end
of every problem). The GPUs agree when the cross-GPU median and 90th
percentile are no larger than the repeatability's. That yardstick is strict:
a plan re-timed seconds later in the same process shares its build and its
moment. **Agreement rounds** (``agreement-rounds``) hold the GPUs to the
repeatability that matters for mixing shards instead: every GPU times the same
problem-directions in two or more rounds, one process per GPU and round, and the
cross-GPU pairs of one round are compared with the same-GPU pairs of different
rounds.

**Phases** groups a raw folder's runs by whether they took numerical notes from
the notes cache (:mod:`kbench.collect.measure.notes_cache`; a run whose problems have
``notes_source`` cache or check) or probed every problem, and by whether ranks
shared a GPU (``--ranks-per-gpu``, from the runs' ``start`` records), and gives
per group the mean seconds of each collector phase (the problems' ``t_*_s``
columns; ``t_wait_s`` is a shared rank's wait for the GPU's turn, which
``t_total_s`` leaves out), the timings' within-run agreement (the best plan
re-timed at its problem's end, the verification pass's second reading and how
often a third was needed: ranks sharing a GPU must not widen them), the
problem-directions per minute per GPU (``end``
records: the ranks of one launch, started within a minute of each other,
count once, over their longest elapsed time) and the seconds per second the
shard cost model expects (:func:`kbench.collect.raw_store.shard.expected_seconds`), which
corrects for the groups' different problem mixes.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.collect.raw_store.shard import expected_seconds, shard_folders
from kbench.collect.raw_store.writer import dedupe, load_env, load_records
from kbench.core.errors import KbenchError, KbenchInputError


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
        sharing = run_starts(env).set_index("run_id")["ranks_per_gpu"]
        ranks.append({"folder": str(folder), "run_id": str(last["run_id"]), "measured": int(last["measured"]),
                      "elapsed_s": float(last["elapsed_s"]),
                      "per_minute": 60.0 * float(last["measured"]) / float(last["elapsed_s"]),
                      "ranks_per_gpu": int(sharing[last["run_id"]])})
    measured = sum(r["measured"] for r in ranks)
    wall = max(r["elapsed_s"] for r in ranks)
    per_minute = 60.0 * measured / wall
    gpus = sum(1.0 / r["ranks_per_gpu"] for r in ranks)  # R ranks sharing a GPU count as one GPU
    gpus = int(round(gpus)) if abs(gpus - round(gpus)) < 1e-9 else gpus
    return {"gpus": gpus, "measured": measured, "elapsed_s": wall, "per_minute": per_minute,
            "per_minute_per_gpu": per_minute / gpus, "ranks": ranks}


def launches(paths, since: str | None = None, before: str | None = None) -> list[dict]:
    """One row per launch (ranks of one launcher call, :func:`launch_numbers`) of the runs recorded in
    ``paths`` (raw folders, shard roots or shard folders; a merged raw folder keeps its runs' records),
    in start order, of the runs whose id is not before ``since`` and sorts before ``before``: GPUs (the ranks over
    ``ranks_per_gpu``), problem-directions measured (end records), the longest rank's elapsed seconds,
    problem-directions per minute and per minute per GPU, and the shard cost model's expected seconds
    of the problem-directions measured per GPU-second (:func:`kbench.collect.raw_store.shard.expected_seconds`),
    which corrects for the problem mix of each launch's slice of the corpus; and the share of the wall
    time each GPU spent on problems' GPU parts (their ``t_time_s`` over GPUs times elapsed seconds: ranks
    sharing a GPU hold its turn only for that part), which does not depend on the mix at all."""
    folders = _folders(paths)
    env = pd.concat([load_env(f) for f in folders], ignore_index=True)
    if not len(env) or "phase" not in env:
        raise KbenchInputError(f"{', '.join(map(str, paths))}: no env.jsonl run records; not a collector output folder.")
    runs = run_starts(env)
    if since is not None:
        runs = runs[runs["run_id"].astype(str) >= since]
    if before is not None:
        runs = runs[runs["run_id"].astype(str) < before]
    runs = runs.dropna(subset=["elapsed_s"])
    if not len(runs):
        raise KbenchInputError(f"{', '.join(map(str, paths))}: no run has ended"
                               f"{f' since {since}' if since else ''} (no 'end' record in env.jsonl).")
    problems = pd.concat([load_records(f, "problems") for f in folders], ignore_index=True)
    ok = problems[problems["status"].eq("ok") & problems["run_id"].isin(set(runs["run_id"]))].drop_duplicates("key")
    expected = pd.Series(expected_seconds(ok) if len(ok) else [], index=ok.index, dtype=float)
    expected_by_run = expected.groupby(ok["run_id"]).sum()
    gpu_part = ok["t_time_s"] if "t_time_s" in ok else pd.Series(np.nan, index=ok.index)
    gpu_part_by_run = gpu_part.groupby(ok["run_id"]).sum(min_count=1)
    runs = runs.assign(launch=runs["run_id"].map(launch_numbers(runs)).to_numpy(),
                       gpus=1.0 / runs["ranks_per_gpu"], expected_s=runs["run_id"].map(expected_by_run).fillna(0.0),
                       gpu_part_s=runs["run_id"].map(gpu_part_by_run))
    out = []
    for _, part in runs.sort_values("time").groupby("launch", sort=False):
        gpus = float(part["gpus"].sum())
        gpus = int(round(gpus)) if abs(gpus - round(gpus)) < 1e-9 else gpus
        wall, measured = float(part["elapsed_s"].max()), int(part["measured"].sum())
        out.append({"first_run": str(part["run_id"].min()), "ranks": int(len(part)),
                    "ranks_per_gpu": int(part["ranks_per_gpu"].max()), "gpus": gpus, "measured": measured,
                    "elapsed_s": round(wall, 1), "per_minute": round(60.0 * measured / wall, 1),
                    "per_minute_per_gpu": round(60.0 * measured / wall / gpus, 1),
                    "expected_seconds_per_gpu_second": round(float(part["expected_s"].sum()) / (wall * gpus), 3),
                    "gpu_busy_share": (round(float(part["gpu_part_s"].sum()) / (wall * gpus), 3)
                                       if part["gpu_part_s"].notna().any() else None)})
    return out


def ladder(paths, since: str | None = None, before: str | None = None) -> dict:
    """The scaling table of launches on 1, 2, 4 ... GPUs (``run_on_device.sh ladder``): :func:`launches`,
    each with its speed-up over the first one-GPU launch and its efficiency (per-GPU rate over that
    launch's); the same two on the mix-corrected rate (expected seconds per GPU-second); and the GPU busy
    share over that launch's (``busy_efficiency``): 1.0 where each added GPU is kept as busy as the
    first, whatever the problems of its slice cost."""
    rows = launches(paths, since, before)
    ones = [r for r in rows if r["gpus"] == 1]
    if not ones:
        raise KbenchInputError("no one-GPU launch among the runs: the ladder's first step (1 GPU) is its yardstick.")
    base = ones[0]
    for r in rows:
        r["speedup"] = round(r["per_minute"] / base["per_minute"], 3)
        r["efficiency"] = round(r["per_minute_per_gpu"] / base["per_minute_per_gpu"], 3)
        r["mix_corrected_efficiency"] = round(r["expected_seconds_per_gpu_second"]
                                              / base["expected_seconds_per_gpu_second"], 3)
        r["busy_efficiency"] = (round(r["gpu_busy_share"] / base["gpu_busy_share"], 3)
                                if r["gpu_busy_share"] is not None and base["gpu_busy_share"] else None)
    return {"launches": rows, "yardstick": base["first_run"]}


def agreement_all(paths) -> dict:
    """:func:`agreement` for every pair of ``paths`` (raw folders of the same problem-directions, one per
    GPU), keyed ``"A ~ B"`` by folder name, and whether every pair is within single-GPU repeatability."""
    paths = [Path(p) for p in paths]
    if len(paths) < 2:
        raise KbenchInputError("agreement-all needs at least two raw folders (one per GPU).")
    pairs = {f"{a.name} ~ {b.name}": agreement(a, b) for i, a in enumerate(paths) for b in paths[i + 1:]}
    verdicts = [p["within_repeatability"] for p in pairs.values()]
    return {"pairs": pairs, "all_within_repeatability": (None if None in verdicts else all(verdicts))}


def _quantiles(values) -> dict:
    a = np.asarray(values, dtype=float)
    if not len(a):
        return {"n": 0, "median": None, "p90": None}
    return {"n": int(len(a)), "median": float(np.median(a)), "p90": float(np.percentile(a, 90))}


def _timed_plans(raw) -> pd.DataFrame:
    """The precisely timed plans of ``raw``'s ok problem-directions: key, plan, precise_ms, repeat_ms."""
    problems, plans = dedupe(load_records(raw, "problems"), load_records(raw, "plans"))
    ok = problems.loc[problems["status"] == "ok", "key"]
    plans = plans[plans["key"].isin(ok)]
    if "precise_ms" not in plans:
        plans = plans.assign(precise_ms=np.nan, repeat_ms=np.nan)
    return plans[["key", "plan", "precise_ms", "repeat_ms"]].dropna(subset=["precise_ms"])


def _paired(a: pd.DataFrame, b: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, float | None]:
    """The plans timed on both, their ln(t_b / t_a), and the share of problems with the same fastest plan."""
    both = a.merge(b, on=["key", "plan"], suffixes=("_a", "_b"))
    both = both[(both["precise_ms_a"] > 0) & (both["precise_ms_b"] > 0)]
    ratios = np.log(both["precise_ms_b"] / both["precise_ms_a"]).to_numpy()
    best_a = a.loc[a.groupby("key")["precise_ms"].idxmin(), ["key", "plan"]] if len(a) else a[["key", "plan"]]
    best_b = b.loc[b.groupby("key")["precise_ms"].idxmin(), ["key", "plan"]] if len(b) else b[["key", "plan"]]
    same_best = best_a.merge(best_b, on="key", suffixes=("_a", "_b"))
    share = float((same_best["plan_a"] == same_best["plan_b"]).mean()) if len(same_best) else None
    return both, ratios, share


def agreement(raw_a, raw_b) -> dict:
    """Cross-GPU timing differences against single-GPU repeatability (see the module text)."""
    frames = [_timed_plans(raw_a), _timed_plans(raw_b)]
    both, signed, share = _paired(*frames)
    cross = np.abs(signed)
    rep = pd.concat([f.dropna(subset=["repeat_ms"]) for f in frames])
    rep = rep[(rep["repeat_ms"] > 0) & (rep["precise_ms"] > 0)]
    repeat = np.abs(np.log(rep["repeat_ms"] / rep["precise_ms"]))
    out = {"problem_directions_on_both": int(both["key"].nunique()), "plans_on_both": int(len(both)),
           "cross_gpu_abs_log_ratio": _quantiles(cross), "single_gpu_repeat_abs_log_ratio": _quantiles(repeat),
           "same_fastest_plan_share": share}
    c, r = out["cross_gpu_abs_log_ratio"], out["single_gpu_repeat_abs_log_ratio"]
    out["within_repeatability"] = (None if not c["n"] or not r["n"]
                                   else bool(c["median"] <= r["median"] and c["p90"] <= r["p90"]))
    return out


ROUND_NAME = re.compile(r"^(?P<gpu>.+?)(?:_r(?P<round>\d+))?$")


def agreement_rounds(paths, resamples: int = 2000, seed: int = 0) -> dict:
    """Cross-GPU agreement against the same GPU timed again in another process.

    ``paths`` are raw folders of the same problem-directions named ``<gpu>`` (round 1) or
    ``<gpu>_r<k>`` (round k): in each round every GPU timed them at once, one process each.
    Pairs of one round on different GPUs measure the GPUs' differences; pairs of one GPU in
    different rounds measure that GPU's repeatability across processes (fresh plan builds, the
    other GPUs busy alike), which is what shards timed on different GPUs are to be held to.
    ``within_repeatability``: the pooled cross-GPU median and 90th percentile of |ln(t_b / t_a)|
    are no larger than the pooled same-GPU ones. ``excess``: the cross-GPU minus the same-GPU
    median and 90th percentile with a 95% bootstrap interval (``resamples`` draws of the
    problem-directions with replacement, all plans of a drawn problem-direction together);
    ``indistinguishable`` where both intervals reach zero."""
    folders = []
    for path in map(Path, paths):
        m = ROUND_NAME.match(path.name)
        folders.append((m["gpu"], int(m["round"] or 1), path, _timed_plans(path)))
    pairs, pooled = {}, {"cross_gpu": [], "same_gpu": []}
    for i, (gpu_a, round_a, path_a, a) in enumerate(folders):
        for gpu_b, round_b, path_b, b in folders[i + 1:]:
            kind = ("same_gpu" if gpu_a == gpu_b else "cross_gpu" if round_a == round_b else None)
            if kind is None:
                continue  # another GPU in another round: both effects at once, left out
            both, signed, share = _paired(a, b)
            ratios = np.abs(signed)
            pooled[kind].append(pd.DataFrame({"key": both["key"].to_numpy(), "ratio": ratios}))
            pairs[f"{path_a.name} ~ {path_b.name}"] = {
                "kind": kind, "problem_directions_on_both": int(both["key"].nunique()),
                "plans_on_both": int(len(both)), "abs_log_ratio": _quantiles(ratios),
                # whether B runs slower (> 0) or faster than A overall, not only apart
                "signed_median": float(np.median(signed)) if len(signed) else None,
                "same_fastest_plan_share": share}
    if not pooled["cross_gpu"] or not pooled["same_gpu"]:
        raise KbenchInputError("agreement-rounds needs folders of at least two GPUs, one of them timed in two "
                               "rounds (named GPU and GPU_r2, e.g. agree0 agree1 agree0_r2 agree1_r2).")
    cross, same = (pd.concat(pooled[k], ignore_index=True) for k in ("cross_gpu", "same_gpu"))
    out = {"pairs": pairs, "cross_gpu": _quantiles(cross["ratio"]), "same_gpu": _quantiles(same["ratio"])}
    c, s = out["cross_gpu"], out["same_gpu"]
    out["within_repeatability"] = (None if not c["n"] or not s["n"]
                                   else bool(c["median"] <= s["median"] and c["p90"] <= s["p90"]))
    out["excess"] = _excess_interval(cross, same, resamples, seed)
    out["indistinguishable"] = bool(out["excess"]["median"][0] <= 0 and out["excess"]["p90"][0] <= 0)
    return out


def _excess_interval(cross: pd.DataFrame, same: pd.DataFrame, resamples: int, seed: int) -> dict:
    """2.5%, 50% and 97.5% points of the bootstrap distribution of cross minus same median and p90,
    drawing problem-directions (keys) with replacement."""
    keys = np.union1d(cross["key"].unique(), same["key"].unique())
    rng = np.random.default_rng(seed)
    stats = np.empty((resamples, 2))
    groups = [(f["ratio"].to_numpy(), np.searchsorted(keys, f["key"].to_numpy())) for f in (cross, same)]
    for i in range(resamples):
        weight = np.bincount(rng.integers(0, len(keys), len(keys)), minlength=len(keys))
        values = [np.repeat(r, weight[k]) for r, k in groups]  # a drawn key's plans, as often as drawn
        if not len(values[0]) or not len(values[1]):
            stats[i] = np.nan
            continue
        stats[i] = [np.median(values[0]) - np.median(values[1]),
                    np.percentile(values[0], 90) - np.percentile(values[1], 90)]
    q = np.nanpercentile(stats, [2.5, 50, 97.5], axis=0)
    return {"median": [round(float(x), 5) for x in q[:, 0]], "p90": [round(float(x), 5) for x in q[:, 1]],
            "resamples": int(resamples), "seed": int(seed)}


def launch_numbers(start: pd.DataFrame, gap_s: float = 60.0) -> pd.Series:
    """A launch number per run (index ``run_id``): ranks of one launcher call (``ranks_per_gpu`` > 1, or
    ``world_size`` > 1 where the frame has it) started together are one launch (start times within
    ``gap_s`` of each other); every other run is its own."""
    start = start.sort_values("time")
    shared = start["ranks_per_gpu"] > 1
    if "world_size" in start:
        shared = shared | (start["world_size"] > 1)
    new = ~shared | ~shared.shift(fill_value=False) | (start["time"].diff() > gap_s)
    return pd.Series(new.cumsum().to_numpy(), index=start["run_id"].to_numpy())


def gpu_seconds(runs: pd.DataFrame) -> float:
    """GPU-seconds of ``runs`` (one row per run: ``run_id``, ``time`` of its start, ``elapsed_s``,
    ``ranks_per_gpu``): each launch's longest rank times the GPUs its ranks held (R ranks sharing a GPU
    hold 1/R of it each); a run without ``elapsed_s`` counts nothing."""
    runs = runs.dropna(subset=["elapsed_s"])
    if not len(runs):
        return 0.0
    launch = runs["run_id"].map(launch_numbers(runs[[c for c in ("run_id", "time", "ranks_per_gpu", "world_size")
                                                     if c in runs]]))
    per = runs.assign(launch=launch.to_numpy(), gpus=1.0 / runs["ranks_per_gpu"]).groupby("launch").agg(
        elapsed_s=("elapsed_s", "max"), gpus=("gpus", "sum"))
    return float((per["elapsed_s"] * per["gpus"]).sum())


def run_starts(env: pd.DataFrame) -> pd.DataFrame:
    """One row per run of ``env`` (env.jsonl records): ``run_id``, ``time`` (its start; 0 without a start
    record), ``ranks_per_gpu`` (1 where the start record does not say), ``world_size`` (the launcher's
    ``WORLD_SIZE``; 1 where the start record does not say), ``elapsed_s`` and ``measured``
    (from its end record; NaN without one)."""
    phase = env["phase"] if "phase" in env else pd.Series("end", index=env.index)
    start = env[phase == "start"].drop_duplicates("run_id", keep="last").set_index("run_id")
    end = env[phase == "end"].drop_duplicates("run_id", keep="last").set_index("run_id")
    ids = pd.Index(pd.unique(env["run_id"])) if "run_id" in env else pd.Index([])

    def column(frame, name, default):
        return (frame[name].reindex(ids) if name in frame else pd.Series(default, index=ids, dtype=float)).to_numpy()
    out = pd.DataFrame({"run_id": ids.to_numpy(), "time": column(start, "time", np.nan),
                        "ranks_per_gpu": column(start, "ranks_per_gpu", np.nan),
                        "world_size": pd.to_numeric(pd.Series(column(start, "WORLD_SIZE", np.nan)), errors="coerce"),
                        "elapsed_s": column(end, "elapsed_s", np.nan), "measured": column(end, "measured", np.nan)})
    out["time"] = out["time"].fillna(0.0)
    out["ranks_per_gpu"] = out["ranks_per_gpu"].fillna(1).astype(int)
    out["world_size"] = out["world_size"].fillna(1).astype(int)
    return out


def phases(raw, before: str | None = None) -> dict:
    """Time per phase for the runs with and without the notes cache, and with ranks sharing a GPU or not
    (see the module text); only the runs whose id sorts before ``before``, where given."""
    problems = load_records(raw, "problems")
    if "t_total_s" not in problems:
        raise KbenchInputError(f"{raw}: no problem records with phase times; give a folder `kbench collect cudnn` wrote.")
    ok = problems[problems["status"] == "ok"].copy()
    if before is not None:
        ok = ok[ok["run_id"].astype(str) < before]
    source = ok["notes_source"] if "notes_source" in ok else pd.Series("", index=ok.index)
    cached_runs = set(ok.loc[source.isin(["cache", "check"]), "run_id"])
    runs_all = run_starts(load_env(raw))
    sharing = runs_all.set_index("run_id")["ranks_per_gpu"]
    ok["ranks_per_gpu"] = ok["run_id"].map(sharing).fillna(1).astype(int)
    ok["group"] = np.where(ok["run_id"].isin(cached_runs), "notes cache", "probes only")
    ok["group"] = ok["group"].where(ok["ranks_per_gpu"] == 1,
                                    ok["group"] + ", " + ok["ranks_per_gpu"].astype(str) + " ranks per GPU")
    ok["expected_s"] = expected_seconds(ok)
    cols = [c for c in ok.columns if c.startswith("t_") and c.endswith("_s")]
    wanted = ["key", "repeat_ms", "precise_ms", "verify_ms", "first_ms", "verify2_ms"]
    plans = load_records(raw, "plans")
    plans = (plans[[c for c in wanted if c in plans]].merge(ok[["key", "group"]], on="key") if "key" in plans
             else pd.DataFrame(columns=["key", "group"]))
    out = {}
    for group, part in ok.groupby("group"):
        runs = runs_all[runs_all["run_id"].isin(set(part["run_id"])) & runs_all["elapsed_s"].notna()]
        gpu_s = gpu_seconds(runs)
        measured = float(runs["measured"].sum())
        out[group] = {"runs": int(part["run_id"].nunique()), "problem_directions": int(len(part)),
                      "per_minute": (60.0 * measured / gpu_s if gpu_s > 0 else None),
                      "seconds_per_expected_second": float(part["t_total_s"].sum() / part["expected_s"].sum()),
                      "mean_s": {c: float(part[c].mean()) for c in cols},
                      "median_s": {c: float(part[c].median()) for c in cols},
                      **_timing_repeatability(plans[plans["group"] == group])}
    return out


def _timing_repeatability(plans: pd.DataFrame) -> dict:
    """Within-run agreement of a group's timings, the check that ranks sharing a GPU do not disturb one
    another: |ln(repeat / precise)| of each problem's best plan (re-timed at its problem's end),
    |ln(verify / first)| of the plans the verification pass re-timed, and the share of problems where
    the two disagreed enough for a third timing."""
    def ratio(a, b):
        if a not in plans or b not in plans:
            return _quantiles([])
        both = plans[(plans[a] > 0) & (plans[b] > 0)]
        return _quantiles(np.abs(np.log(both[a] / both[b])))
    verified = plans[plans["verify_ms"].notna()] if "verify_ms" in plans else plans.iloc[:0]
    third = (float(verified["verify2_ms"].notna().groupby(verified["key"]).any().mean())
             if "verify2_ms" in verified and len(verified) else None)
    return {"repeat_abs_log_ratio": ratio("repeat_ms", "precise_ms"),
            "verify_abs_log_ratio": ratio("verify_ms", "first_ms"), "third_timing_share": third}


def print_json(fn, *args) -> int:
    """Print ``fn(*args)`` as JSON; a KbenchError becomes its one-line message and exit code."""
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
    options = {}
    for flag in ("--since", "--before"):  # RUN_ID bounds, taken out of the positional arguments
        if flag in argv:
            i = argv.index(flag)
            options[flag[2:]], argv = (argv[i + 1] if i + 1 < len(argv) else ""), argv[:i] + argv[i + 2:]
    if len(argv) == 2 and argv[0] == "phases" and "since" not in options:
        return print_json(phases, argv[1], options.get("before"))
    if len(argv) >= 3 and argv[0] == "agreement-all" and not options:
        return print_json(agreement_all, argv[1:])
    if len(argv) >= 3 and argv[0] == "agreement-rounds" and not options:
        return print_json(agreement_rounds, argv[1:])
    if len(argv) >= 2 and argv[0] in ("ladder", "launches"):
        return print_json(ladder if argv[0] == "ladder" else launches, argv[1:], options.get("since"),
                          options.get("before"))
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())

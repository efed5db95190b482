"""The data card of a collected cuDNN dataset: every number computed from the raw data.

``render(...)`` returns Markdown; ``kbench collect package --card FILE`` writes
it. The timing-validation section reads the files the probe run left in
``<raw>/validation/`` (Nsight Compute CSV, the collector's own timings of the
same plans, the batch-size scaling run) when they are there.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.collect.label_retiming import front_runners
from kbench.collect.label_retiming.front_runners import label_checks
from kbench.collect.measure import cudnn
from kbench.collect.measure.notes_cache import notes_table
from kbench.collect.measure.strides import strides_row
from kbench.collect.packaging import card_text
from kbench.collect.raw_store.merge import SETTING_FIELDS, measurement_settings
from kbench.collect.studies import validate_timing
from kbench.collect.studies.scaling import gpu_seconds, run_starts
from kbench.sources import repeatability

FIRST_VERSION_PROBLEM_DIRECTIONS = card_text.FIRST_VERSION_PROBLEM_DIRECTIONS


def geomean(x) -> float:
    x = np.asarray(x, dtype=float)[np.isfinite(np.asarray(x, dtype=float)) & (np.asarray(x, dtype=float) > 0)]
    return float(np.exp(np.log(x).mean())) if len(x) else float("nan")


def heuristic_gaps(tables: dict) -> pd.DataFrame:
    """Per (problem, heuristic): time of the heuristic's first kernel / time of the fastest kernel."""
    rt = tables["runtimes"]
    best = rt[rt["rank"] == 0].set_index("problem_id")["time_ms"]
    t = rt.set_index(["problem_id", "kernel"])["time_ms"]
    h = tables["heuristics"]
    first = h[h["rank"] == 0]
    ratio = t.reindex(list(zip(first["problem_id"], first["kernel"]))).to_numpy() / \
        best.reindex(first["problem_id"]).to_numpy()
    out = first[["problem_id", "heuristic", "kernel"]].copy()
    out["gap"] = ratio
    meta = tables["problems"].set_index("problem_id")[["direction", "dtype", "layout_x"]]
    return out.join(meta, on="problem_id")


def _fmt(v, nd=3):
    missing = v is None or (isinstance(v, float) and not np.isfinite(v))
    return "–" if missing else f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def _table(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v) for v in row) + " |")
    return "\n".join(lines)


def gap_table(gaps: pd.DataFrame, by: str | None) -> pd.DataFrame:
    rows = []
    groups = [("all", gaps)] if by is None else list(gaps.groupby(by))
    for g, part in groups:
        for heur, hp in part.groupby("heuristic"):
            rows.append({(by or "set"): g, "heuristic": heur, "problems": len(hp),
                         "geomean time / fastest": geomean(hp["gap"]),
                         "picks the fastest": float((hp["gap"] <= 1.0 + 1e-12).mean()),
                         "p90 time / fastest": float(np.nanpercentile(hp["gap"], 90))})
    return pd.DataFrame(rows)


def noise(plans: pd.DataFrame) -> dict:
    out = {}
    if "repeat_ms" in plans:
        b = plans.dropna(subset=["repeat_ms", "precise_ms"])
        rel = (b["repeat_ms"] / b["precise_ms"] - 1).abs()
        out["repeat"] = dict(n=len(b), median=float(rel.median()), p90=float(rel.quantile(0.9)),
                             max=float(rel.max()))
    p = plans.dropna(subset=["precise_ms"])
    iqr = (p["precise_q3_ms"] - p["precise_q1_ms"]) / p["precise_ms"]
    out["iqr"] = dict(n=len(p), median=float(iqr.median()), p90=float(iqr.quantile(0.9)))
    c = p.dropna(subset=["coarse_ms"])
    d = (c["coarse_ms"] / c["precise_ms"] - 1).abs()
    out["coarse_vs_precise"] = dict(n=len(c), median=float(d.median()), p90=float(d.quantile(0.9)))
    return out


def label_section(problems: pd.DataFrame, plans: pd.DataFrame, tables: dict) -> str:
    """How the labels (each problem's fastest plan) were timed, and what the verification pass did."""
    rt = tables["runtimes"].rename(columns={"problem_id": "key", "kernel": "plan"})
    c = label_checks(rt, plans)
    n = c["problems"]
    lines = [f"* Labels with a coarse time only (never re-timed): {c['label_never_retimed']['n']} of {n} "
             f"({_fmt(100 * c['label_never_retimed']['share'], 2)}%); labels whose coarse time is one replay "
             f"or one execution: {c['label_single_coarse_replay']['n']} "
             f"({c['label_single_coarse_replay_never_retimed']['n']} of them never re-timed).",
             f"* Labels not confirmed by the verification pass: {c['label_unverified']['n']} of {n} "
             f"({_fmt(100 * c['label_unverified']['share'], 1)}%)."]
    if "verified" in plans and plans["verified"].notna().any():
        v = plans["verified"].value_counts()
        # the fastest plan by first times against the fastest by label times, within the candidate set
        r = rt[["key", "plan", "time_ms"]].merge(plans[["key", "plan", "first_ms"]], on=["key", "plan"], how="left")
        r["first"] = r["first_ms"].fillna(r["time_ms"])  # plans not verified: their time is their first time
        by_first = r.sort_values(["key", "first", "plan"]).drop_duplicates("key").set_index("key")["plan"]
        by_label = r.sort_values(["key", "time_ms", "plan"]).drop_duplicates("key").set_index("key")["plan"]
        moved = int((by_first != by_label.reindex(by_first.index)).sum())
        ok = problems[problems["status"] == "ok"]
        tv = ok.get("t_verify_s", pd.Series(dtype=float)).dropna()
        lines += [f"* Verification pass ({front_runners.VERIFY_BAND:.0%} band, at least the best {front_runners.VERIFY_MIN_PLANS}, third "
                  f"timing beyond |log ratio| {front_runners.DISAGREE_LOG}): {int(v.get(front_runners.AGREE, 0))} plans agreed, "
                  f"{int(v.get(front_runners.DISAGREE_RESOLVED, 0))} disagreed and were decided by a third timing, "
                  f"{int(v.get(front_runners.NOT_VERIFIED, 0))} could not be re-timed; the fastest plan changed in {moved} "
                  "problem-directions.",
                  f"* Time of the verification pass per problem-direction: median {_fmt(float(tv.median()), 3)} s, "
                  f"mean {_fmt(float(tv.mean()), 3)} s ({_fmt(float(tv.sum() / ok.loc[tv.index, 't_total_s'].sum()), 3)} "
                  "of the total)." if len(tv) else "* Verification pass time: not recorded."]
    return "\n".join(lines)


def repeats_section(tables: dict) -> str:
    """The test-retest section: statistics of the ``repeats`` table, or that the study has not been run."""
    rep = tables.get("repeats")
    if rep is None or not len(rep):
        return ("The test-retest study has not been run yet: this dataset has no `repeats` table. It is made by "
                "re-measuring a stratified sample in another run (`kbench collect sample`, `kbench collect cudnn`) "
                "and packaging it with `kbench collect package ... --repeats RAW2`.")
    s = repeatability.summary(rep, tables.get("heuristics"))
    pl, sw, nc = s["plans"], s["same_winner"], s["noise_ceiling"]
    rows = [("plans timed in both runs", f"{pl['n']}"),
            ("per-plan |log(t_repeat / t_first)|: median, p90, p99",
             f"{_fmt(pl['median'], 4)}, {_fmt(pl['p90'], 4)}, {_fmt(pl['p99'], 4)}"),
            ("problems whose fastest plan is the same", f"{sw['same']} of {sw['n']} ({_fmt(100 * sw['share'], 1)}%)"),
            ("noise ceiling: first run's winner under the repeat, time / fastest: geomean, p90, max",
             f"{_fmt(nc['geomean'], 4)}, {_fmt(nc['p90'], 4)}, {_fmt(nc['max'], 4)}")]
    if "heuristic_gap" in s:
        hg = s["heuristic_gap"]
        rows.append((f"{hg['heuristic']} time / fastest (geomean), first run and repeat ({hg['n']} problems)",
                     f"{_fmt(hg['run_a'], 4)}, {_fmt(hg['run_b'], 4)}"))
    tab = pd.DataFrame(rows, columns=["statistic", "value"])
    by = ""
    if "timing" in tables.get("runtimes", pd.DataFrame()):
        per = repeatability.plan_repeatability_by(repeatability.run_pairs(rep), tables["runtimes"], "timing")
        for c in ("median", "p90", "p99"):
            per[c] = per[c].map(lambda v: _fmt(v, 4))
        by = ("\n\nPer-plan |log(t_repeat / t_first)| by how the first run's time was taken (`runtimes.timing`: "
              "`verified` = re-timed by the verification pass, `precise` / `coarse` = the first sitting's "
              "precise or coarse median, `single` = single executions of a slow plan):\n\n" + _table(per))
    return (f"{s['problems']} problem-directions were measured again in another run (`repeats` table, run 0 = "
            f"`runtimes`, run 1 = the repeat):\n\n{_table(tab)}{by}\n\nThe noise ceiling is what a selector that "
            "always picks the first run's fastest plan scores when judged by the repeat: differences between "
            "selectors smaller than its distance from 1 are within measurement noise.")


def validation(raws) -> str:
    for raw in ([raws] if isinstance(raws, (str, Path)) else raws):
        v = Path(raw) / "validation"
        if (v / "ncu.csv").exists() and (v / "measure.json").exists():
            order = [tuple(o) for o in json.loads((v / "ncu_order.json").read_text())]
            ncu = pd.DataFrame(validate_timing.read_ncu((v / "ncu.csv").read_text(), order))
            meas = pd.DataFrame(json.loads((v / "measure.json").read_text()))
            m = meas.merge(ncu, on=["problem", "plan"], how="left")
            tab = pd.DataFrame({
                "problem": m["problem"], "plan": m["plan"],
                "ncu kernel µs": m["ncu_ms"] * 1e3, "collector µs": m["graph_ms"] * 1e3,
                "one launch at a time µs": m["naive_single_ms"] * 1e3,
                "collector / ncu": m["graph_ms"] / m["ncu_ms"], "replay IQR / median": m["graph_iqr_rel"]})
            text = _table(tab)
            if (v / "scaling.json").exists():
                sc = pd.DataFrame(json.loads((v / "scaling.json").read_text()))
                sc = sc.assign(**{"µs": sc["ms"] * 1e3, "TFLOP/s": sc["gflop"] / sc["ms"] / 1e3})
                text += ("\n\nTime against work (3x3 conv, 64->64 channels, 56x56, FP16 NHWC, batch n; "
                         "best mode-A plan that builds):\n\n" + _table(sc[["n", "plan", "µs", "TFLOP/s"]]))
            return text
    return "(no validation files found)"


def launch_bound_line(plans: pd.DataFrame, tables: dict) -> str:
    """How many of the shipped plans and labels :func:`cudnn.launch_bound_mask` flags."""
    mask = cudnn.launch_bound_mask(plans)
    rt = tables["runtimes"]
    win = rt.sort_values(["problem_id", "time_ms", "kernel"], kind="stable").drop_duplicates("problem_id")
    flagged = set(zip(plans.loc[mask, "key"], plans.loc[mask, "plan"]))
    n_lab = sum((k, p) in flagged for k, p in zip(win["problem_id"], win["kernel"]))
    return (f"In the shipped runs `launch_bound_mask` flags {int(mask.sum()):,} of {int(plans['coarse_ms'].notna().sum()):,} "
            f"timed plans ({_fmt(100 * mask.sum() / max(1, plans['coarse_ms'].notna().sum()), 1)}%) in "
            f"{plans.loc[mask, 'key'].nunique():,} problem-directions; {n_lab} of the {len(win):,} labels are such a "
            "plan. A launch-bound time can only be too long, so the risk is a true winner timed out of first place.")


def protocol_line(problems: pd.DataFrame | None) -> str:
    """Which shipped runs used the collector before the run-to-run outlier fix: their problems have no
    verification pass of their own (``verify_passes`` empty), so their labels were re-timed later."""
    since = "the Labels section says how their labels were re-timed\nsince (`kbench collect verify-labels`)."
    per_run = (problems.groupby("run_id")["verify_passes"].apply(lambda v: bool(v.isna().all()))
               if problems is not None and "verify_passes" in problems else None)
    if per_run is None or per_run.all():
        return "Every shipped run used the old protocol; " + since
    old = per_run[per_run].index
    n_old = int(problems["run_id"].isin(old).sum())
    return (f"{len(old)} of the {len(per_run)} shipped runs ({n_old:,} problem-directions) used the old protocol; {since} "
            f"The other {len(per_run) - len(old)} ran the fixed collector, verification pass included.")


def outlier_section(raws, plans: pd.DataFrame | None = None, tables: dict | None = None,
                    problems: pd.DataFrame | None = None) -> str:
    """The diagnosis of run-to-run outliers, from ``validation/run_to_run_outliers`` of a raw folder."""
    for raw in ([raws] if isinstance(raws, (str, Path)) else raws):
        v = Path(raw) / "validation" / "run_to_run_outliers"
        if not (v / "old").exists():
            continue
        d = validate_timing.diagnosis(v)
        f = d["first"]
        us = lambda col: f[col] * 1e3  # noqa: E731, B023 (used within this iteration)
        first = pd.DataFrame({"module loading": f["module loading"], "plan": f["plan"],
                              "first execution µs": us("first_ms"), "second, launched alone µs": us("second_ms"),
                              "one replay of 1, no spin µs": us("k1_nospin_ms"),
                              "one replay of 1, spin µs": us("k1_spin_ms"), "reference µs": us("ref_ms")})
        o = d["outliers"]
        worst = d["worst"].assign(**{"old µs": d["worst"]["coarse_ms_old"] * 1e3,
                                     "new µs": d["worst"]["coarse_ms_new"] * 1e3})
        ph = d["phases"].rename(index=lambda c: c.removeprefix("t_").removesuffix("_s"))
        return (
            "A re-run of the collection found shipped winners 5-7x slower when measured again. Traced on an H100\n"
            "(`raw/h100/validation/run_to_run_outliers`, `python -m kbench.collect.studies.validate_timing outliers`), two effects\n"
            "combine:\n\n"
            "1. **The first execution of a plan is slow** (cuDNN's set-up of the plan on first use; it stays\n"
            "   with `CUDA_MODULE_LOADING=EAGER`, so it is not CUDA's lazy module loading). The collector chose\n"
            "   the executions per replay (k) from it, so a fast plan could get k = 1, or be sent to\n"
            "   single-execution timing.\n"
            "2. **A short replay times the host.** Without work queued ahead, the start event runs before the\n"
            "   host has launched the replay: a replay of one execution, or one launch alone, measures the\n"
            "   host's launch latency. The warm-up check that should have raised k looked at one replay only.\n\n"
            f"Per traced plan (median of 10 replays where several):\n\n{_table(first)}\n\n"
            "The same problem-directions with the collector before the fix (k from the first execution,\n"
            "no spin kernel) and after it (k from a warm, spin-protected execution; every timed launch\n"
            "queued behind a spin kernel; replays shorter than half the target recaptured; replays slower\n"
            "than 1.5x the warm execution timed again; verification pass), in one lease:\n\n"
            f"{_table(d['protocol'])}\n\n"
            f"Of {o['plans compared']} plans timed by both, {o['>= 1.5x']['plans']} were 1.5x or more slower before "
            f"the fix and {o['>= 3.0x']['plans']} 3x or more (at most {o['max ratio']:.1f}x); "
            f"`launch_bound_mask` flags {o['>= 3.0x']['flagged by launch_bound_mask']} of the {o['>= 3.0x']['plans']} "
            "(a replay that the host stretched past half the target looks like a measurement in the\n"
            "recorded data; only the comparison with the warm execution, which the new collector makes,\n"
            "shows it):\n\n"
            f"{_table(worst[['plan', 'inner_k', 'old µs', 'new µs', 'ratio']])}\n\n"
            "Seconds per problem-direction by phase (the old run came second on the same machine, so its\n"
            "build phase used the engines the first run had compiled; compare the other phases):\n\n"
            f"{_table(ph.reset_index().rename(columns={'index': 'phase'}))}\n\n"
            + protocol_line(problems) + " "
            + (launch_bound_line(plans, tables) if plans is not None and tables is not None else ""))
    return "(no issue-16 validation files found)"


#: the transfer track's largest k-shot budget (``kbench.transfer_task.K_BUDGETS``, a higher layer: a test keeps
#: the two equal): a train part smaller than this cannot give a transfer task that many target problems
LARGEST_SHOT_BUDGET = 1000


def small_parts_line(splits: pd.DataFrame, runtimes: pd.DataFrame, name: str) -> str:
    """How many plans are a training label in each split, and which train parts are under the transfer
    track's largest k-shot budget."""
    n_plans = runtimes["kernel"].nunique()
    fastest = repeatability.winners(runtimes, "time_ms")
    labels, small = [], []
    for split in [c for c in splits.columns if c != "problem_id"]:
        train = splits.loc[splits[split] == "train", "problem_id"]
        winners = fastest[fastest.index.isin(train)].nunique()
        labels.append(f"`{split}` {winners:,} (over {len(train):,} problems)")
        if len(train) < LARGEST_SHOT_BUDGET:
            small.append(f"`{split}` ({len(train):,})")
    text = (f"Plans that are the fastest on a train problem, of the {n_plans:,} measured: " + ", ".join(labels)
            + ". A classifier over plans never sees the others as a label; models that score (problem, plan) "
            "rows share what they learn across plans.")
    if small:
        parts = "part of" if len(small) == 1 else "parts of"
        verb = "is" if len(small) == 1 else "are"
        text += (f"\n\n**Small parts.** The train {parts} {' and '.join(small)} {verb} under the transfer track's "
                 f"largest k-shot budget ({LARGEST_SHOT_BUDGET:,}), so that budget is refused with {name} as the "
                 "target.")
    return text


def notes_line(problems: pd.DataFrame, plans: pd.DataFrame) -> str:
    """Whether the numerical notes are a function of the engine in this data, and how they were read
    (filter probes, or the notes cache of kbench.collect.notes_cache)."""
    t = notes_table(problems, plans)
    line = (f"* Numerical notes per (direction, dtype, layout, engine): {len(t):,} keys over "
            f"{int(t['records'].sum()):,} plan records whose notes were read, "
            f"{int((t['note_sets'] > 1).sum())} with more than one note set.")
    source = problems["notes_source"].fillna("") if "notes_source" in problems else pd.Series("", index=problems.index)
    if not source.isin(["cache", "check"]).any():
        return line + " Every problem's notes were read by the filter probes."
    probed = int(source.isin(["probe", "check"]).sum())
    differ = int(pd.to_numeric(problems["notes_cache_diff"], errors="coerce").fillna(0).sum())
    return (line + f" Notes read by the filter probes in {probed:,} problem-directions "
            f"({int((source == 'check').sum()):,} of them checks of the notes cache), taken from the cache "
            f"(`kbench.collect.notes_cache`) in {int((source == 'cache').sum()):,}; plans whose checked notes "
            f"differed from the cache's: {differ}.")


def status_line(n_measured: int, target: int = FIRST_VERSION_PROBLEM_DIRECTIONS) -> str:
    """The card's release status: a draft until ``target`` problem-directions are measured."""
    return (f"**Released**: {n_measured:,} problem-directions measured (the first version's target was "
            f"{target:,}); the collection grows from version to version." if n_measured >= target else
            f"**Draft**: {n_measured:,} of the first version's {target:,} problem-directions measured; the "
            "collection is being continued.")


def alignment_section(name: str, runtimes: pd.DataFrame, other_name: str, other: pd.DataFrame) -> str:
    """The card's check that two GPUs' datasets align (same problem ids, same plan names): shared
    problems and plans, how often the fastest plan is the same, and the best-time ratio."""
    a = runtimes.astype({"problem_id": str, "kernel": str})
    b = other.astype({"problem_id": str, "kernel": str})
    shared = sorted(set(a["problem_id"]) & set(b["problem_id"]))
    if not shared:
        return f"## Alignment with {other_name}\n\nNo problem id in common with `{other_name}`.\n"
    n_here = a["problem_id"].nunique()
    a, b = a[a["problem_id"].isin(shared)], b[b["problem_id"].isin(shared)]
    pairs_a, pairs_b = set(zip(a["problem_id"], a["kernel"])), set(zip(b["problem_id"], b["kernel"]))
    best = lambda t: t.sort_values(["problem_id", "time_ms", "kernel"]).drop_duplicates("problem_id").set_index(  # noqa: E731
        "problem_id")
    ba = best(a)
    bb = best(b).reindex(ba.index)
    ratio = (ba["time_ms"] / bb["time_ms"]).to_numpy(dtype=float)  # here / other
    q = np.quantile(ratio, [0.1, 0.5, 0.9])
    return (f"## Alignment with {other_name}\n\n"
            f"`kbench.load('{name}').align('{other_name}')` pairs {len(shared):,} problem-directions (of "
            f"{n_here:,} here): the same problem ids, measured by the same collector and corpus "
            f"order. Plans of those problems (problem, plan name): {len(pairs_a):,} here, {len(pairs_b):,} on {other_name}, "
            f"{len(pairs_a & pairs_b):,} in both. The fastest plan is the same in "
            f"{int((ba['kernel'] == bb['kernel']).sum()):,} of {len(shared):,} "
            f"({(ba['kernel'] == bb['kernel']).mean():.1%}); fastest time here / on {other_name}: geomean "
            f"{float(np.exp(np.log(ratio).mean())):.3f}, p10 {q[0]:.3f}, median {q[1]:.3f}, p90 {q[2]:.3f}.\n")


def _capped_runs(problems: pd.DataFrame) -> set:
    """Runs of the final protocol: their problem records carry the per-problem time-cap field."""
    return set(problems.loc[problems["truncated"].notna(), "run_id"]) if "truncated" in problems else set()


def _phased_runs(problems: pd.DataFrame) -> set:
    """Runs that record phase timers; they also time far-behind plans with one coarse replay."""
    return set(problems.loc[problems["t_heur_s"].notna(), "run_id"]) if "t_heur_s" in problems else set()


def hosts_row(env: pd.DataFrame) -> str:
    """A machine-table row of the cores each run could use and the GPU it took (from each run's start
    record; ``cpu_count`` is the run's CPU affinity, so a run pinned with taskset counts its pinned cores,
    not the host's), when runs differ in either; empty otherwise, so the card of a collection on one-GPU
    machines reads as before."""
    start = env[env["phase"] == "start"].drop_duplicates("run_id", keep="last") if "phase" in env else env.iloc[:0]
    if "cpu_count" not in start or not len(start):
        return ""
    gpu = (start["gpu_selected"] if "gpu_selected" in start else pd.Series(None, index=start.index, dtype=object))
    cores = pd.to_numeric(start["cpu_count"], errors="coerce")
    unknown = int(cores.isna().sum())  # runs of collectors older than the field
    start = start.assign(gpu=gpu.fillna("0").astype(str), cores=cores)[cores.notna()].astype({"cores": int})
    if start["cores"].nunique() <= 1 and start["gpu"].nunique() <= 1:
        return ""
    def runs(n):
        return f"{n} run{'s' if n != 1 else ''}"
    parts = [f"{runs(unknown)} with no cores recorded"] if unknown else []
    for cores, part in start.groupby("cores"):
        gpus = sorted(part["gpu"].unique(), key=lambda g: (len(g), g))
        parts.append(f"{runs(len(part))} with {cores} cores"
                     + (f", on GPUs {', '.join(gpus)} of one host" if len(gpus) > 1 else ""))
    return f"| cores each run could use, and its GPU (start records; pinned runs count their pinned cores) | {'; '.join(parts)} |\n"


def machine_section(first: pd.Series, ok: pd.DataFrame, env: pd.DataFrame | None = None,
                    retimed: dict | None = None) -> str:
    """``first``: the first run's start record in env.jsonl; ``env``: every record (for :func:`hosts_row`)."""
    sm = pd.concat([ok.get("sm_clock_mhz_start"), ok.get("sm_clock_mhz_end")]).dropna()
    temp = pd.concat([ok.get("temp_c_start"), ok.get("temp_c_end")]).dropna()
    return f"""## Machine and software

| | |
|---|---|
| GPU | {first['gpu']} ({first['sm_count']} SMs, compute capability {first['cc']}, L2 {int(first['l2_bytes']) >> 20} MiB) |
| driver | {first.get('smi_driver_version')} |
| cuDNN (backend) | {first['cudnn_backend']} |
| cuDNN frontend (`nvidia-cudnn-frontend`) | {first['cudnn_frontend']} |
| PyTorch | {first['torch']} (CUDA {first['torch_cuda']}, its cuDNN {first['torch_cudnn']}) |
| Python | {first['python']} |
| power limit, persistence, compute mode | {first.get('smi_power_limit')} W, {first.get('smi_persistence_mode')}, {first.get('smi_compute_mode')} (never changed) |
| SM clock per problem (NVML, start and end of each problem) | median {_fmt(float(sm.median()), 0)} MHz, min {_fmt(float(sm.min()), 0)}, max {_fmt(float(sm.max()), 0)} |
| GPU temperature per problem | median {_fmt(float(temp.median()), 0)} °C, max {_fmt(float(temp.max()), 0)} °C |
| TF32 | `NVIDIA_TF32_OVERRIDE` {_override(first)}; PyTorch `allow_tf32` for cuDNN = {first['torch_allow_tf32_cudnn']} |
{hosts_row(env) if env is not None else ""}{strides_row(env, retimed) if env is not None else ""}{settings_rows(env, skip=("tensor_strides",) if retimed else ()) if env is not None else ""}"""


def _override(first: pd.Series) -> str:
    value = first.get("env_NVIDIA_TF32_OVERRIDE")
    return "unset" if value is None or (isinstance(value, float) and value != value) else f"= {value}"


def settings_rows(env: pd.DataFrame, skip: tuple[str, ...] = ()) -> str:
    """A machine-table row per measurement setting (:data:`~kbench.collect.merge.SETTING_FIELDS`) in which the
    runs differ, naming each value and its runs; empty when every run agrees (the rows above hold).
    ``skip``: settings another row explains."""
    start = env[env["phase"] == "start"].drop_duplicates("run_id", keep="last") if "phase" in env else env.iloc[:0]
    if not len(start):
        return ""
    settings = measurement_settings(start)
    rows = []
    for col, (what, _) in SETTING_FIELDS.items():
        if col not in skip and settings[col].nunique() > 1:
            runs = start.groupby(settings[col].to_numpy())["run_id"].agg(list)
            rows.append(f"| {what} (runs differ) | " + "; ".join(
                f"{value}: {len(ids)} run{'s' if len(ids) != 1 else ''} ({', '.join(map(str, ids[:3]))}"
                + (", …" if len(ids) > 3 else "") + ")" for value, ids in runs.items()) + " |\n")
    return "".join(rows)


def _runs_table(problems: pd.DataFrame, env: pd.DataFrame, sharing: pd.DataFrame) -> pd.DataFrame:
    """One row per run: problem-directions, ranks sharing its GPU, elapsed time, rate, clocks and temperatures."""
    start = env[env["phase"] == "start"]
    end = env[env["phase"] == "end"]
    runs = []
    for rid, s in start.set_index("run_id").sort_index().iterrows():  # run ids begin with their UTC start
        e = end[end["run_id"] == rid]
        measured = int((problems["run_id"] == rid).sum())
        el = float(e["elapsed_s"].iloc[0]) if len(e) and pd.notna(e["elapsed_s"].iloc[0]) else None
        runs.append({"run": rid, "problem-directions": measured, "ranks per GPU": int(sharing.loc[rid, "ranks_per_gpu"]),
                     "elapsed s": el, "per minute": 60 * measured / el if el else None,
                     "SM MHz start": s.get("smi_clocks_sm"), "°C start": s.get("smi_temperature_gpu"),
                     "SM MHz end": e["smi_clocks_sm"].iloc[0] if len(e) else None,
                     "°C end": e["smi_temperature_gpu"].iloc[0] if len(e) else None})
    return pd.DataFrame(runs)


def _phase_table(ok: pd.DataFrame) -> pd.DataFrame:
    # every phase the collector times (kbench.collect.cudnn.collector.CudnnCollector.measure), in its order
    phases = [("per problem-direction, s", "t_total_s"), ("cuDNN's plan lists, s", "t_heur_s"),
              ("numerical notes, s", "t_notes_s"), ("building plans, s", "t_build_s"),
              ("checking + coarse timing, s", "t_coarse_s"),
              ("of which capturing CUDA graphs (runs that record it), s", "t_capture_s"),
              ("PyTorch's choice, s", "t_torch_s"),
              ("precise re-timing, s", "t_precise_s"), ("verification pass, s", "t_verify_s"),
              ("checking + timing (all), s", "t_time_s"),
              ("waiting for the GPU's turn (ranks sharing a GPU; not in the total), s", "t_wait_s")]
    phases = [(label, col) for label, col in phases if col in ok]
    return pd.DataFrame({"": [label for label, _ in phases],
                         "median": [ok[col].median() for _, col in phases],
                         "mean": [ok[col].mean() for _, col in phases]})


def runs_section(problems: pd.DataFrame, env: pd.DataFrame, ok: pd.DataFrame) -> str:
    """The runs table, the throughput (GPU-seconds where ranks shared a GPU) and the time per phase."""
    sharing = run_starts(env).set_index("run_id")
    runs = _runs_table(problems, env, sharing)
    shared_runs = bool((runs["ranks per GPU"] > 1).any())
    if not shared_runs:
        runs = runs.drop(columns="ranks per GPU")

    def gpu_s(run_ids) -> float:  # ranks that shared a GPU count once, over their longest elapsed time
        return gpu_seconds(sharing.loc[sorted(run_ids)].reset_index())
    with_end = runs["elapsed s"].notna()
    tot_el, tot_m = gpu_s(set(runs.loc[with_end, "run"])), int(runs.loc[with_end, "problem-directions"].sum())
    capped = _capped_runs(problems)
    cap_runs = runs[runs["run"].isin(capped) & with_end]
    cap_m, cap_el = int(cap_runs["problem-directions"].sum()), gpu_s(set(cap_runs["run"]))
    slowest_uncapped = problems.loc[~problems["run_id"].isin(capped), "t_total_s"].max()
    shared_note = ("; runs with 2 or more ranks per GPU shared it, taking turns (`kbench.collect.gpu_turn`): "
                   "their per-minute column is per rank, and a launch's ranks count once in the GPU-seconds below"
                   if shared_runs else "")
    unit, per_gpu = ("GPU-seconds", " per GPU") if shared_runs else ("s", "")
    return f"""Runs (environment recorded at start and end of each; the first run was stopped by its time limit
before writing its end record){shared_note}:

{_table(runs)}

Throughput with the precise method: {cap_m} problem-directions in {_fmt(cap_el, 0)} {unit} = **{_fmt(60 * cap_m / cap_el if cap_el else float('nan'), 1)} per minute{per_gpu}**
in the runs with the final protocol (per-problem time cap); {tot_m} in {_fmt(tot_el, 0)} {unit} =
{_fmt(60 * tot_m / tot_el if tot_el else float('nan'), 1)} per minute over all runs with an end record (before the cap, one
problem took {_fmt(float(slowest_uncapped), 0)} s).

{_table(_phase_table(ok))}
"""


def measured_section(problems: pd.DataFrame, plans: pd.DataFrame, ok: pd.DataFrame, corpus: str) -> str:
    per_pd = ok["n_plans"]
    built = plans["build_ok"].astype(bool)
    ran = plans["exec_ok"].astype(bool)
    wrong = ran & ~plans["correct"].astype(bool)
    truncated = int(ok["truncated"].fillna(False).astype(bool).sum()) if "truncated" in ok else 0
    counts = (ok.groupby(["dtype", "layout", "direction"]).size().unstack("direction").fillna(0)
              .astype(int).reset_index())
    kinds = ok["kind"].value_counts().rename_axis("kind").reset_index(name="problem-directions")
    three = card_text.is_3d(ok)
    corpus_text = (card_text.CORPUS_3D_TEXT if three else card_text.CORPUS_2D_TEXT).format(corpus=corpus)
    return f"""## What was measured

{len(problems)} problem-directions ({len(ok)} measured without a setup failure), {len(plans)} (problem, plan)
records. Plans per problem-direction: median {_fmt(float(per_pd.median()), 0)}, mean {_fmt(float(per_pd.mean()), 1)},
max {_fmt(float(per_pd.max()), 0)}. {int(built.sum())} plans built, {int(ran.sum())} ran,
{int(wrong.sum())} computed a wrong answer (over the tolerance; flagged, not in `runtimes`),
{truncated} problems were cut short by the per-problem time cap (`censored = True`).

{_table(counts)}

{_table(kinds)}

{corpus_text}{composition(ok) if three else ""}"""


def composition(ok: pd.DataFrame) -> str:
    sentence, per_network = card_text.network_composition(ok)
    return f"\n{sentence}\n\n{_table(per_network)}\n"


def protocol_section(first: pd.Series, problems: pd.DataFrame) -> str:
    capped, phased = _capped_runs(problems), _phased_runs(problems)
    far_behind = (f" (from run `{min(phased)}` on: one replay for a plan whose first run took over "
                  f"{cudnn.FAR_BEHIND:g}x the fastest correct first run so far)") if phased else ""
    return f"""## Measurement protocol

* One cuDNN graph per heuristic mode (A, B, FALLBACK) records each mode's order; a fourth graph
  asks for all three and holds the union of distinct plans. Every plan is built.
* Inputs are uniform(-1, 1) random (never zeros); the output is filled with NaN before the check run.
* Correctness: relative L2 error against PyTorch's convolution in float64 from the same inputs;
  tolerance {cudnn.TOLERANCE}. FP32: the error TF32 rounding of the inputs alone would cause
  (`e_tf32`) is computed per problem; a plan is `fp32` precise if its error is under
  {cudnn.FP32_PRECISE_FRACTION} x `e_tf32`, else `reduced`.
* Timing, one plan at a time on one stream: a CUDA graph of k back-to-back executions (k up to
  {cudnn.MAX_INNER}, so that one replay lasts about {cudnn.COARSE_TARGET_MS} ms) is captured, replayed once to warm up,
  then each replay is timed with CUDA events; time per execution = replay time / k. Since the outlier fix the
  collector chooses k from a second, warm execution (the first is kept as `first_exec_ms`), queues
  every timed launch behind a spin kernel, recaptures replays shorter than half the target and re-times
  replays slower than {cudnn.WARM_CONSISTENCY}x the warm execution; the runs shipped so far predate that (see
  "Run-to-run outliers").
  Coarse: median of {cudnn.COARSE_REPLAYS} replays for every plan{far_behind}. Precise: the plans within
  {int(cudnn.PRECISE_BAND * 100)}% of the best coarse time (at most {cudnn.PRECISE_MAX_PLANS}), the first valid plan of mode A and B
  (also restricted to the candidate set), the best plan of the set and PyTorch's choice get
  {cudnn.PRECISE_ROUNDS} rounds of up to {cudnn.PRECISE_REPLAYS} replays, the plans taking turns; the fastest is timed once
  more at the end (`repeat_ms`). Plans slower than {cudnn.SLOW_PLAN_MS} ms per execution are timed by single
  executions; after {cudnn.PROBLEM_TIME_CAP_S} s on one problem the remaining (lowest-ranked) plans are not run.
  Runs before run `{min(capped) if capped else '–'}` had neither of these two limits (and the first run no GPU warm-up).
* The L2 cache ({int(first['l2_bytes']) >> 20} MiB) is **not** flushed: executions run back to back on the same
  buffers, as consecutive steps of a layer do; problems whose tensors fit in L2 are measured warm.
* Clocks are never set; the GPU is kept busy for 2 s before the first problem of a run.
* Verification (runs with `verified_ms` in their plan records): the front-runners are timed again in a
  fresh seeded order, a third time where the readings disagree (`kbench.collect.label_retiming.front_runners`).
* `runtimes.time_ms` is the verification's label time where it ran (`timing = verified`: the median
  of the readings), else the precise median where a plan was re-timed (`timing = precise`), else the
  coarse median (`coarse`, or `single` for slow plans); `time_min_ms`, `time_q1_ms`, `time_q3_ms`,
  `n_reps` give the spread and the repetitions.
"""


VALIDATION_TEXT = """From about 25 µs up the collector's time is within a few percent of ncu's kernel duration. Kernels of
a few µs take less time back to back than ncu's one-kernel-at-a-time duration (ncu serialises and
replays each kernel alone); one launch at a time from Python sits on a floor of about 25 µs, which
is what the collector avoids. The n = 1 scaling row was that script's first measurement, taken
without a warm-up (the first table has the same plan at 5.2 µs); from n = 16 on, time grows with
the work."""


def noise_section(plans: pd.DataFrame) -> str:
    nz = noise(plans)
    rep = nz.get("repeat", {})
    return f"""## Noise

* Re-timing the fastest plan at the end of its problem: |repeat / precise - 1| median
  {_fmt(rep.get('median'), 4)}, p90 {_fmt(rep.get('p90'), 4)}, max {_fmt(rep.get('max'), 4)} ({rep.get('n')} problems).
* Spread of precisely timed plans, IQR / median: median {_fmt(nz['iqr']['median'], 4)}, p90 {_fmt(nz['iqr']['p90'], 4)} ({nz['iqr']['n']} plans).
* Coarse against precise median of the same plan: |ratio - 1| median {_fmt(nz['coarse_vs_precise']['median'], 4)},
  p90 {_fmt(nz['coarse_vs_precise']['p90'], 4)}: the slow plans that only got coarse timing are this precise.
"""


def fp32_first_plan_is_full_fp32(ok: pd.DataFrame, plans_ok: pd.DataFrame) -> np.ndarray:
    """Per FP32 problem-direction: is cuDNN mode A's first plan that ran correctly a full-FP32 one?"""
    order = ok.loc[ok["dtype"] == "FP32", ["key", "heur_a"]]
    listed = (order.assign(plan=order["heur_a"].fillna("").str.split(";")).explode("plan")
              .reset_index(drop=True))
    listed = listed[listed["plan"].fillna("") != ""].assign(pos=lambda d: d.groupby("key").cumcount())
    good = plans_ok.loc[plans_ok["exec_ok"].astype(bool) & plans_ok["correct"].astype(bool),
                        ["key", "plan", "precision"]].drop_duplicates(["key", "plan"])
    firsts = listed.merge(good, on=["key", "plan"]).sort_values(["key", "pos"]).drop_duplicates("key")
    # one value per FP32 problem-direction that has such a plan, in the problems' order
    return (firsts.set_index("key").reindex(order["key"]).dropna(subset=["plan"])["precision"] == "fp32").to_numpy()


def precision_section(problems: pd.DataFrame, plans: pd.DataFrame, ok: pd.DataFrame) -> str:
    rpr = plans["numeric_notes"].fillna("")
    n_rpr = int(rpr.str.contains("REDUCED_PRECISION_REDUCTION").sum())
    n_noted = int(plans["numeric_notes"].notna().sum())
    plans_ok = plans.merge(ok[["key", "dtype"]], on="key")
    fp32 = plans_ok[(plans_ok["dtype"] == "FP32") & plans_ok["exec_ok"].astype(bool)]
    tc = fp32["numeric_notes"].fillna("").str.contains("TENSOR_CORE")
    reduced, full = fp32["precision"] == "reduced", fp32["precision"] == "fp32"
    fp32_first = fp32_first_plan_is_full_fp32(ok, plans_ok)
    return f"""## Candidate sets and precision

* FP16, BF16: every plan that computes the right answer, except plans with cuDNN's
  REDUCED_PRECISION_REDUCTION note ({n_rpr} of the {n_noted} plan records whose notes were read carry it).
{notes_line(problems, plans)}
* FP32 (default variant): full-FP32 plans only (`precision = fp32`, no tensor-core or down-convert
  note). TF32 / down-converting plans are the opt-in `tf32` variant
  (`kbench collect package --variant tf32`). Of {len(fp32)} FP32 plan runs, {int(full.sum())} are `fp32` and
  {int(reduced.sum())} `reduced`; {_fmt(float(tc[reduced].mean()) if reduced.any() else float('nan'), 3)} of the reduced
  ones carry cuDNN's TENSOR_CORE note, {_fmt(float(tc[full].mean()) if full.any() else float('nan'), 3)} of the fp32 ones.
* cuDNN's mode-A first valid plan is a full-FP32 plan in {_fmt(float(np.mean(fp32_first)) if len(fp32_first) else float('nan'), 3)} of {len(fp32_first)} FP32
  problem-directions: cuDNN's default choice for FP32 data is usually TF32. The `heuristics` table
  therefore holds each order restricted to the candidate set (what it would pick from the set).
"""


def coverage_line(coverage: dict | None) -> str:
    """The share of PyTorch's own choices (``cudnn.benchmark = False``) that the candidate set holds."""
    return "" if not coverage or not coverage.get("torch_choice_matched") else (
        f" PyTorch's own choice (`cudnn.benchmark = False`) is in the set for {coverage['torch_choice_in_set']:,} of the "
        f"{coverage['torch_choice_matched']:,} problem-directions where it was matched to a plan "
        f"({100 * coverage['share_in_set']:.2f}%).")


def heuristic_section(tables: dict, ok: pd.DataFrame, variant: str = "default") -> str:
    gaps = heuristic_gaps(tables)
    pt = ok["torch_status"].value_counts().rename_axis("PyTorch choice").reset_index(name="problem-directions")
    return f"""## cuDNN's heuristic against the fastest plan

Time of the heuristic's first plan in the candidate set over the fastest plan's time
({variant} variant; `pytorch` = what PyTorch runs with `cudnn.benchmark = False`, where it was
matched to a plan of the set):

{_table(gap_table(gaps, None))}

Per direction:

{_table(gap_table(gaps, 'direction'))}

Per data type:

{_table(gap_table(gaps, 'dtype'))}

PyTorch's choice was identified by kernel names (PyTorch profiler) against cuDNN's first
{cudnn.TORCH_PROFILE_TOP} mode-A plans and the fastest one:

{_table(pt)}
"""


def splits_section(tables: dict, name: str) -> str:
    sizes = {c: tables['splits'][c].value_counts().to_dict() for c in tables['splits'].columns if c != 'problem_id'}
    rule = card_text.split_rule(tables["problems"])
    return f"""## Splits

{rule} Sizes: {json.dumps(sizes)}.

{small_parts_line(tables['splits'], tables['runtimes'], name)}
"""


def render(name: str, problems: pd.DataFrame, plans: pd.DataFrame, env: pd.DataFrame, tables: dict,
           raws, align: tuple[str, pd.DataFrame] | None = None, retimed: dict | None = None,
           measured: pd.DataFrame | None = None, variant: str = "default", coverage: dict | None = None) -> str:
    """The card. ``measured``: every problem record the runs wrote, superseded ones too (for the runs
    table); ``variant``: the candidate set of ``name`` (``<base>-<variant>``, the base's raw folder);
    ``coverage``: :func:`kbench.collect.package.torch_choice_coverage` of the set."""
    first = env[env["phase"] == "start"].iloc[0]
    ok = problems[problems["status"] == "ok"]
    suffix = "" if variant == "default" else f"-{variant}"
    base = name.removesuffix(suffix)
    # an aligned dataset is collected from its partner's corpus file, so both follow one order
    partner = align[0].removesuffix(suffix) if align is not None else None
    corpus = (f"`raw/{partner}/corpus.csv.gz` (shared with {partner}: one order for both)" if align is not None
              else f"`raw/{base}/corpus.csv.gz`")
    header = f"""# {name}: cuDNN engine configurations on an {first['gpu']}

Kernel-selection data measured by `kbench collect cudnn` (kbench's own collector): for each
convolution problem, every execution plan (engine configuration, named like
`eng67_k2=5_k13=0_...`) that cuDNN proposes with heuristic mode A, mode B and its fallback list,
built, checked against PyTorch and timed. {status_line(len(ok), card_text.first_version_target(ok))} Every number below is generated from the
raw data in `raw/{base}/`{" and the re-timing folders named below" if retimed else ""} by `kbench/collect/card.py`.

Candidate set: **`{variant}`** ({cudnn.VARIANT_TEXT[variant]}; docs/variants.md).{coverage_line(coverage)}
"""
    sections = [
        header, machine_section(first, ok, env, retimed),
        runs_section(problems if measured is None else measured, env, ok), measured_section(problems, plans, ok, corpus),
        protocol_section(first, problems),
        "## Timing validation (probe run)\n\nNsight Compute (`ncu --metrics gpu__time_duration.sum "
        "--clock-control none --cache-control none`)\nagainst the collector's method on the same plans, and the "
        f"one-launch-at-a-time method the\ncollector avoids:\n\n{validation(raws)}\n\n{VALIDATION_TEXT}\n",
        f"## Run-to-run outliers\n\n{outlier_section(raws, plans, tables, problems)}\n",
        noise_section(plans),
        f"## Labels\n\n{label_section(problems, plans, tables)}\n",
        f"## Test-retest\n\n{repeats_section(tables)}\n",
        precision_section(problems, plans, ok), heuristic_section(tables, ok, variant), splits_section(tables, name),
    ]
    text = "\n".join(sections)
    if align is not None:
        text = "\n".join([text, alignment_section(name, tables["runtimes"], *align)])
    return text

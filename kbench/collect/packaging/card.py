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
from kbench.collect.packaging import card_3d
from kbench.collect.raw_store.merge import SETTING_FIELDS, measurement_settings
from kbench.collect.studies import validate_timing
from kbench.collect.studies.scaling import gpu_seconds, run_starts
from kbench.core.card_writer import render_template
from kbench.sources import repeatability
from kbench.sources.splits import HELD_OUT_NETWORKS_3D

FIRST_VERSION_PROBLEM_DIRECTIONS = card_3d.FIRST_VERSION_PROBLEM_DIRECTIONS


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
    verification = None
    if "verified" in plans and plans["verified"].notna().any():
        v = plans["verified"].value_counts()
        # the fastest plan by first times against the fastest by label times, within the candidate set
        r = rt[["key", "plan", "time_ms"]].merge(plans[["key", "plan", "first_ms"]], on=["key", "plan"], how="left")
        r["first"] = r["first_ms"].fillna(r["time_ms"])  # plans not verified: their time is their first time
        by_first = r.sort_values(["key", "first", "plan"]).drop_duplicates("key").set_index("key")["plan"]
        by_label = r.sort_values(["key", "time_ms", "plan"]).drop_duplicates("key").set_index("key")["plan"]
        ok = problems[problems["status"] == "ok"]
        tv = ok.get("t_verify_s", pd.Series(dtype=float)).dropna()
        verification = {
            "band": f"{front_runners.VERIFY_BAND:.0%}", "min_plans": front_runners.VERIFY_MIN_PLANS,
            "disagree_log": front_runners.DISAGREE_LOG, "agreed": int(v.get(front_runners.AGREE, 0)),
            "resolved": int(v.get(front_runners.DISAGREE_RESOLVED, 0)),
            "not_verified": int(v.get(front_runners.NOT_VERIFIED, 0)),
            "moved": int((by_first != by_label.reindex(by_first.index)).sum()),
            "time_median": _fmt(float(tv.median()), 3) if len(tv) else None,
            "time_mean": _fmt(float(tv.mean()), 3) if len(tv) else None,
            "time_share": _fmt(float(tv.sum() / ok.loc[tv.index, "t_total_s"].sum()), 3) if len(tv) else None}
    return render_template(
        "cudnn_labels.md.j2", checks=c, never_retimed_percent=_fmt(100 * c["label_never_retimed"]["share"], 2),
        unverified_percent=_fmt(100 * c["label_unverified"]["share"], 1), verification=verification)


def repeats_section(tables: dict) -> str:
    """The test-retest section: statistics of the ``repeats`` table, or that the study has not been run."""
    rep = tables.get("repeats")
    if rep is None or not len(rep):
        return render_template("cudnn_repeats.md.j2", statistics_table=None)
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
    timing_table = None
    if "timing" in tables.get("runtimes", pd.DataFrame()):
        per = repeatability.plan_repeatability_by(repeatability.run_pairs(rep), tables["runtimes"], "timing")
        for c in ("median", "p90", "p99"):
            per[c] = per[c].map(lambda v: _fmt(v, 4))
        timing_table = _table(per)
    return render_template(
        "cudnn_repeats.md.j2", problems=s["problems"],
        statistics_table=_table(pd.DataFrame(rows, columns=["statistic", "value"])), timing_table=timing_table)


def validation_section(raws) -> str:
    """The timing-validation section: the probe run's Nsight Compute times against the collector's own
    timings of the same plans, and its batch-size scaling run, from the first of ``raws`` that has them."""
    ncu_table = scaling_table = None
    for raw in ([raws] if isinstance(raws, (str, Path)) else raws):
        v = Path(raw) / "validation"
        if (v / "ncu.csv").exists() and (v / "measure.json").exists():
            order = [tuple(o) for o in json.loads((v / "ncu_order.json").read_text())]
            ncu = pd.DataFrame(validate_timing.read_ncu((v / "ncu.csv").read_text(), order))
            meas = pd.DataFrame(json.loads((v / "measure.json").read_text()))
            m = meas.merge(ncu, on=["problem", "plan"], how="left")
            ncu_table = _table(pd.DataFrame({
                "problem": m["problem"], "plan": m["plan"],
                "ncu kernel µs": m["ncu_ms"] * 1e3, "collector µs": m["graph_ms"] * 1e3,
                "one launch at a time µs": m["naive_single_ms"] * 1e3,
                "collector / ncu": m["graph_ms"] / m["ncu_ms"], "replay IQR / median": m["graph_iqr_rel"]}))
            if (v / "scaling.json").exists():
                sc = pd.DataFrame(json.loads((v / "scaling.json").read_text()))
                sc = sc.assign(**{"µs": sc["ms"] * 1e3, "TFLOP/s": sc["gflop"] / sc["ms"] / 1e3})
                scaling_table = _table(sc[["n", "plan", "µs", "TFLOP/s"]])
            break
    return render_template("cudnn_validation.md.j2", ncu_table=ncu_table, scaling_table=scaling_table)


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
        worst = d["worst"].assign(**{"old µs": d["worst"]["coarse_ms_old"] * 1e3,
                                     "new µs": d["worst"]["coarse_ms_new"] * 1e3})
        ph = d["phases"].rename(index=lambda c: c.removeprefix("t_").removesuffix("_s"))
        return render_template(
            "cudnn_outliers.md.j2", found=True, first_table=_table(first), protocol_table=_table(d["protocol"]),
            outliers=d["outliers"], max_ratio=f"{d['outliers']['max ratio']:.1f}",
            worst_table=_table(worst[["plan", "inner_k", "old µs", "new µs", "ratio"]]),
            phase_table=_table(ph.reset_index().rename(columns={"index": "phase"})),
            protocol_line=protocol_line(problems),
            launch_bound_line=launch_bound_line(plans, tables) if plans is not None and tables is not None else "")
    return render_template("cudnn_outliers.md.j2", found=False)


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
        return render_template("cudnn_alignment.md.j2", other=other_name, shared=None)
    n_here = a["problem_id"].nunique()
    a, b = a[a["problem_id"].isin(shared)], b[b["problem_id"].isin(shared)]
    pairs_a, pairs_b = set(zip(a["problem_id"], a["kernel"])), set(zip(b["problem_id"], b["kernel"]))
    best = lambda t: t.sort_values(["problem_id", "time_ms", "kernel"]).drop_duplicates("problem_id").set_index(  # noqa: E731
        "problem_id")
    ba = best(a)
    bb = best(b).reindex(ba.index)
    ratio = (ba["time_ms"] / bb["time_ms"]).to_numpy(dtype=float)  # here / other
    q = np.quantile(ratio, [0.1, 0.5, 0.9])
    same = ba["kernel"] == bb["kernel"]
    return render_template(
        "cudnn_alignment.md.j2", name=name, other=other_name, shared=f"{len(shared):,}", here=f"{n_here:,}",
        plans_here=f"{len(pairs_a):,}", plans_other=f"{len(pairs_b):,}", plans_both=f"{len(pairs_a & pairs_b):,}",
        same_fastest=f"{int(same.sum()):,}", same_fastest_share=f"{same.mean():.1%}",
        ratio_geomean=f"{float(np.exp(np.log(ratio).mean())):.3f}", ratio_p10=f"{q[0]:.3f}",
        ratio_median=f"{q[1]:.3f}", ratio_p90=f"{q[2]:.3f}")


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
    extra_rows = "" if env is None else (
        hosts_row(env) + strides_row(env, retimed) + settings_rows(env, skip=("tensor_strides",) if retimed else ()))
    return render_template(
        "cudnn_machine.md.j2", first=first, l2_mib=int(first["l2_bytes"]) >> 20,
        sm_median=_fmt(float(sm.median()), 0), sm_min=_fmt(float(sm.min()), 0), sm_max=_fmt(float(sm.max()), 0),
        temp_median=_fmt(float(temp.median()), 0), temp_max=_fmt(float(temp.max()), 0),
        tf32_override=_override(first), extra_rows=extra_rows)


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
    return render_template(
        "cudnn_runs.md.j2", shared_runs=shared_runs, runs_table=_table(runs),
        unit="GPU-seconds" if shared_runs else "s", per_gpu=" per GPU" if shared_runs else "",
        capped_problems=cap_m, capped_seconds=_fmt(cap_el, 0),
        capped_rate=_fmt(60 * cap_m / cap_el if cap_el else float("nan"), 1),
        total_problems=tot_m, total_seconds=_fmt(tot_el, 0),
        total_rate=_fmt(60 * tot_m / tot_el if tot_el else float("nan"), 1),
        slowest_uncapped=_fmt(float(slowest_uncapped), 0), phase_table=_table(_phase_table(ok)))


def measured_section(problems: pd.DataFrame, plans: pd.DataFrame, ok: pd.DataFrame, corpus: str,
                     env: pd.DataFrame | None = None, retimed: dict | None = None) -> str:
    """What was measured: counts of problems and plans, the composition tables and the corpus;
    ``retimed`` (:func:`kbench.collect.package.overlay_retimed`'s info) names the folders whose
    measurements replaced the base's, with the per-problem time cap their runs had."""
    per_pd = ok["n_plans"]
    built = plans["build_ok"].astype(bool)
    ran = plans["exec_ok"].astype(bool)
    wrong = ran & ~plans["correct"].astype(bool)
    truncated = int(ok["truncated"].fillna(False).astype(bool).sum()) if "truncated" in ok else 0
    counts = (ok.groupby(["dtype", "layout", "direction"]).size().unstack("direction").fillna(0)
              .astype(int).reset_index())
    kinds = ok["kind"].value_counts().rename_axis("kind").reset_index(name="problem-directions")
    three_d = card_3d.is_3d(ok)
    return render_template(
        "cudnn_measured.md.j2", problems=len(problems), measured=len(ok), plan_records=len(plans),
        plans_median=_fmt(float(per_pd.median()), 0), plans_mean=_fmt(float(per_pd.mean()), 1),
        plans_max=_fmt(float(per_pd.max()), 0), built=int(built.sum()), ran=int(ran.sum()),
        wrong=int(wrong.sum()), truncated=truncated, counts_table=_table(counts), kinds_table=_table(kinds),
        corpus=corpus, three_d=three_d, retimed_line=retimed_line(retimed, env),
        **(composition(ok) if three_d else {}))


def retimed_line(retimed: dict | None, env: pd.DataFrame | None) -> str:
    """One sentence naming the re-timing folders, their runs and the time cap those runs had."""
    if not retimed:
        return ""
    runs = retimed["runs"]
    caps = set()
    if env is not None and "problem_time_cap_s" in env:
        starts = env[(env["phase"] == "start") & env["run_id"].astype(str).isin(runs)]
        caps = {float(c) for c in starts["problem_time_cap_s"].dropna()}
    cap = f", per-problem time cap {_fmt(max(caps), 0)} s" if caps else ""
    n = retimed["problem_directions"]
    folders = ", ".join(f"`{r}`" for r in retimed["raw"])
    return (f"{n:,} problem-direction{'s' if n != 1 else ''} measured again in {folders} "
            f"({len(runs)} run{'s' if len(runs) != 1 else ''}{cap}): those measurements replace the base folder's.")


def composition(ok: pd.DataFrame) -> dict:
    """The 3D card's composition figures: depth shares, and the problem-directions of each network's
    layers (:func:`card_3d.network_composition`)."""
    figures, per_network = card_3d.network_composition(ok)
    return {**figures, "networks_table": _table(per_network)}


def protocol_section(first: pd.Series, problems: pd.DataFrame) -> str:
    """The measurement protocol, with the collector's settings (:mod:`kbench.collect.measure.cudnn`)."""
    capped, phased = _capped_runs(problems), _phased_runs(problems)
    return render_template(
        "cudnn_protocol.md.j2", cudnn=cudnn, first_phased_run=min(phased) if phased else None,
        far_behind=f"{cudnn.FAR_BEHIND:g}", precise_band_percent=int(cudnn.PRECISE_BAND * 100),
        first_capped_run=min(capped) if capped else "–", l2_mib=int(first["l2_bytes"]) >> 20)


def noise_section(plans: pd.DataFrame) -> str:
    """The noise section: repeat against precise time, spread of precise timings, coarse against precise."""
    nz = noise(plans)
    rep = nz.get("repeat", {})
    return render_template(
        "cudnn_noise.md.j2", repeat_median=_fmt(rep.get("median"), 4), repeat_p90=_fmt(rep.get("p90"), 4),
        repeat_max=_fmt(rep.get("max"), 4), repeat_n=rep.get("n"), iqr_median=_fmt(nz["iqr"]["median"], 4),
        iqr_p90=_fmt(nz["iqr"]["p90"], 4), iqr_n=nz["iqr"]["n"],
        coarse_median=_fmt(nz["coarse_vs_precise"]["median"], 4), coarse_p90=_fmt(nz["coarse_vs_precise"]["p90"], 4))


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
    """The candidate sets by data type, and how often cuDNN's first FP32 plan is a full-FP32 one."""
    rpr = plans["numeric_notes"].fillna("")
    n_rpr = int(rpr.str.contains("REDUCED_PRECISION_REDUCTION").sum())
    n_noted = int(plans["numeric_notes"].notna().sum())
    plans_ok = plans.merge(ok[["key", "dtype"]], on="key")
    fp32 = plans_ok[(plans_ok["dtype"] == "FP32") & plans_ok["exec_ok"].astype(bool)]
    tc = fp32["numeric_notes"].fillna("").str.contains("TENSOR_CORE")
    reduced, full = fp32["precision"] == "reduced", fp32["precision"] == "fp32"
    fp32_first = fp32_first_plan_is_full_fp32(ok, plans_ok)
    return render_template(
        "cudnn_precision.md.j2", reduced_precision_reduction=n_rpr, noted=n_noted,
        notes_line=notes_line(problems, plans), fp32_runs=len(fp32), fp32_full=int(full.sum()),
        fp32_reduced=int(reduced.sum()),
        reduced_tensor_core=_fmt(float(tc[reduced].mean()) if reduced.any() else float("nan"), 3),
        full_tensor_core=_fmt(float(tc[full].mean()) if full.any() else float("nan"), 3),
        first_plan_full_share=_fmt(float(np.mean(fp32_first)) if len(fp32_first) else float("nan"), 3),
        first_plan_problems=len(fp32_first))


def coverage_line(coverage: dict | None) -> str:
    """The share of PyTorch's own choices (``cudnn.benchmark = False``) that the candidate set holds."""
    return "" if not coverage or not coverage.get("torch_choice_matched") else (
        f" PyTorch's own choice (`cudnn.benchmark = False`) is in the set for {coverage['torch_choice_in_set']:,} of the "
        f"{coverage['torch_choice_matched']:,} problem-directions where it was matched to a plan "
        f"({100 * coverage['share_in_set']:.2f}%).")


def heuristic_section(tables: dict, ok: pd.DataFrame, variant: str = "default") -> str:
    """cuDNN's heuristic (and PyTorch's choice) against the fastest plan: overall, per direction and dtype."""
    gaps = heuristic_gaps(tables)
    pt = ok["torch_status"].value_counts().rename_axis("PyTorch choice").reset_index(name="problem-directions")
    return render_template(
        "cudnn_heuristic.md.j2", variant=variant, all_table=_table(gap_table(gaps, None)),
        direction_table=_table(gap_table(gaps, "direction")), dtype_table=_table(gap_table(gaps, "dtype")),
        torch_profile_top=cudnn.TORCH_PROFILE_TOP, pytorch_table=_table(pt))


def splits_section(tables: dict, name: str) -> str:
    """How the standard splits are made, their sizes, and the plans that are a training label."""
    sizes = {c: tables["splits"][c].value_counts().to_dict() for c in tables["splits"].columns if c != "problem_id"}
    return render_template(
        "cudnn_splits.md.j2", three_d=bool((tables["problems"]["spatial_dims"] == 3).all()),
        held_out_networks=", ".join(HELD_OUT_NETWORKS_3D), sizes=json.dumps(sizes),
        small_parts_line=small_parts_line(tables["splits"], tables["runtimes"], name))


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
    header = render_template(
        "cudnn_header.md.j2", name=name, gpu=first["gpu"], base=base, retimed=bool(retimed), variant=variant,
        status=status_line(len(ok), card_3d.first_version_target(ok)),
        variant_text=cudnn.VARIANT_TEXT[variant], coverage=coverage_line(coverage))
    sections = [
        header, machine_section(first, ok, env, retimed),
        runs_section(problems if measured is None else measured, env, ok), measured_section(problems, plans, ok, corpus, env, retimed),
        protocol_section(first, problems),
        validation_section(raws), outlier_section(raws, plans, tables, problems), noise_section(plans),
        label_section(problems, plans, tables), repeats_section(tables),
        precision_section(problems, plans, ok), heuristic_section(tables, ok, variant), splits_section(tables, name),
    ]
    text = "\n".join(sections)
    if align is not None:
        text = "\n".join([text, alignment_section(name, tables["runtimes"], *align)])
    return text

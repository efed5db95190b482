"""Check the collector's timing method on the GPU (run on the CUDA machine).

Three checks, each printing a table and writing JSON:

``measure``
    For a few problems (small to large) and their first cuDNN plans, the
    collector's time (CUDA-graph replays of back-to-back executions, median)
    next to the naive one-launch-at-a-time time, to show the launch floor.
``ncu-target`` (run under Nsight Compute)
    Executes the same plans between marker kernels, so that ``ncu`` measures
    each plan's kernels; :func:`read_ncu` turns ncu's CSV into per-execution
    kernel time to compare with ``measure``::

        ncu --csv --metrics gpu__time_duration.sum --clock-control none \
            --cache-control none --profile-from-start off \
            python -m kbench.collect.studies.validate_timing ncu-target > ncu.csv
``scaling``
    The best plan of one layer at batch 1..256: time must grow with the work.
``outliers``
    The run-to-run outlier diagnosis: for recorded problem-directions and named plans
    (``outlier-cases`` picks them from a raw folder: the two re-run outliers the
    diagnosis started from and the launch-bound measurements of :func:`cudnn.launch_bound_mask`
    that were later timed precisely), a fresh process times each plan's first
    execution, a second one, graph replays of one execution with and without a
    spin kernel in front, the collector's old protocol (``k`` from the first
    execution, no spin) and its new one, next to a reference (``k`` for the
    coarse target, 20 replays behind a spin). Run it once as is and once with
    ``CUDA_MODULE_LOADING=EAGER`` to see what lazy loading adds to a first
    execution.

It never changes clocks (``--clock-control none`` keeps ncu from locking them).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from kbench.collect.measure import cudnn as cudnn_collector
from kbench.collect.raw_store.writer import load_records
from kbench.sources.problem import expected_output_size

PROBLEMS = [  # (name, geometry, dtype, layout, direction)
    ("tiny-1x1", dict(n=1, c=64, k=64, x_h=14, x_w=14, fil_h=1, fil_w=1), "FP16", "NHWC", "F"),
    ("resnet-3x3-n1", dict(n=1, c=64, k=64, x_h=56, x_w=56, fil_h=3, fil_w=3, pad_h=1, pad_w=1), "FP16", "NHWC", "F"),
    ("resnet-3x3-n32", dict(n=32, c=64, k=64, x_h=56, x_w=56, fil_h=3, fil_w=3, pad_h=1, pad_w=1), "FP16", "NHWC", "F"),
    ("resnet-3x3-n32-fp32-dgrad", dict(n=32, c=128, k=128, x_h=28, x_w=28, fil_h=3, fil_w=3, pad_h=1, pad_w=1), "FP32", "NCHW", "B"),
    ("dw-3x3-n16-wgrad", dict(n=16, c=256, k=256, groups=256, x_h=28, x_w=28, fil_h=3, fil_w=3, pad_h=1, pad_w=1), "BF16", "NHWC", "W"),
]
PLANS_PER_PROBLEM = 3
NCU_REPS = 3


def problem(geo, dtype, layout, direction):
    p = {**cudnn_collector.DEFAULTS, **geo, "dtype": dtype, "layout": layout, "direction": direction}
    p["y_h"] = int(expected_output_size(p["x_h"], p["fil_h"], p["pad_h"], p["stride_h"], p["dil_h"]))
    p["y_w"] = int(expected_output_size(p["x_w"], p["fil_w"], p["pad_w"], p["stride_w"], p["dil_w"]))
    return p


def prepared(col, p, nplans=PLANS_PER_PROBLEM):
    """(graph, pack, [(index, name)]) for the first plans of mode A that build."""
    x, w, y, out = col._tensors(p)
    g, pack, names, err = col._plan_list(p, x, w, y, [col.modes["a"]])
    chosen = []
    for i, n in enumerate(names):
        try:
            g.build_plan_at_index(i)
            ws = g.get_workspace_size_plan_at_index(i)
            if ws <= cudnn_collector.WORKSPACE_CAP:
                chosen.append((i, n, ws))
        except Exception:  # noqa: BLE001
            continue
        if len(chosen) == nplans:
            break
    need = max([c[2] for c in chosen] + [1])
    if col.workspace.numel() < need:
        col.workspace = col.torch.empty(need, dtype=col.torch.uint8, device="cuda")
    return g, pack, [(i, n) for i, n, _ in chosen], (x, w, y, out)


def measure(col, problems=PROBLEMS):
    rows = []
    for name, geo, dt, lay, d in problems:
        p = problem(geo, dt, lay, d)
        g, pack, plans, keep = prepared(col, p)
        for i, pname in plans:
            naive = [col._single_ms(g, pack, i) for _ in range(20)]
            single = float(np.median(naive))
            ps = cudnn_collector.PlanState(i, {})
            ps.k = cudnn_collector.inner_count(single)
            ps.graph = col._capture(g, pack, i, ps.k)
            col._replays(ps, 2)
            t = col._replays(ps, 20)
            rows.append(dict(problem=name, plan=pname, naive_single_ms=single, k=ps.k,
                             graph_ms=float(np.median(t)), graph_iqr_rel=float(
                                 (np.percentile(t, 75) - np.percentile(t, 25)) / np.median(t))))
    return rows


def ncu_target(col, problems=PROBLEMS):
    """Execute each plan NCU_REPS times between spin-kernel markers, inside a profiler range."""
    t = col.torch
    order = []
    prepared_all = []
    for name, geo, dt, lay, d in problems:
        p = problem(geo, dt, lay, d)
        prepared_all.append((name,) + prepared(col, p))
    t.cuda.synchronize()
    t.cuda.profiler.start()
    with t.cuda.stream(col.stream):
        t.cuda._sleep(100)
        for name, g, pack, plans, _keep in prepared_all:
            for i, pname in plans:
                for _ in range(NCU_REPS):
                    col._run(g, pack, i)
                    t.cuda._sleep(100)
                    order.append((name, pname))
    t.cuda.synchronize()
    t.cuda.profiler.stop()
    return order


def read_ncu(csv_text: str, order: list) -> list[dict]:
    """Per (problem, plan): median over repetitions of the summed kernel durations (ms)."""
    import csv
    import io
    lines = [ln for ln in csv_text.splitlines() if ln.startswith('"')]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    names, dur = [], []
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = r.get("Metric Unit", "ns")
        v = float(str(r["Metric Value"]).replace(",", ""))
        scale = {"ns": 1e-6, "nsecond": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}.get(unit, 1e-6)
        names.append(r["Kernel Name"])
        dur.append(v * scale)
    segs, cur = [], []
    for n, v in zip(names, dur):
        if "spin_kernel" in n:
            segs.append(cur)
            cur = []
        else:
            cur.append(v)
    segs.append(cur)
    segs = segs[1:1 + len(order)]  # the first marker opens the sequence
    per = {}
    for (prob, plan), seg in zip(order, segs):
        per.setdefault((prob, plan), []).append(sum(seg))
    return [dict(problem=k[0], plan=k[1], ncu_ms=float(np.median(v)), ncu_kernels_per_exec=None)
            for k, v in per.items()]


def scaling(col):
    rows = []
    base = dict(c=64, k=64, x_h=56, x_w=56, fil_h=3, fil_w=3, pad_h=1, pad_w=1)
    for n in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        p = problem({**base, "n": n}, "FP16", "NHWC", "F")
        g, pack, plans, keep = prepared(col, p, nplans=1)
        i, pname = plans[0]
        ps = cudnn_collector.PlanState(i, {})
        ps.k = cudnn_collector.inner_count(col._single_ms(g, pack, i))
        ps.graph = col._capture(g, pack, i, ps.k)
        col._replays(ps, 2)
        rows.append(dict(n=n, plan=pname, ms=float(np.median(col._replays(ps, 10))),
                         gflop=2 * n * 64 * 64 * 9 * 56 * 56 / 1e9))
    return rows


# ------------------------------------------------------------------------- run-to-run outliers
#: problem-directions whose shipped winner ran 5-7x slower when re-measured (the h100 re-run recorded
#: in raw/h100/validation/run_to_run_outliers)
RERUN_OUTLIERS = {
    "80-21-21-3x3-8-21-21-128-3x3-1x1-3x3-0-NCHW-BF16-F": ["eng22_k2=16_k13=0_k14=3_k18=0_k23=2"],
    "16-112-112-1x1-32-112-112-16-0x0-1x1-1x1-0-NCHW-FP16-B": ["eng63_k25=0"],
}


def outlier_cases(raw_dir, n_launch_bound: int = 8, ratio: float = 3.0) -> dict:
    """{problem key: [plan names]}: the issue's two re-run outliers plus the recorded plans
    whose coarse time was launch-bound and at least ``ratio`` times their precise time."""
    plans = load_records(raw_dir, "plans")
    cases = {k: list(v) for k, v in RERUN_OUTLIERS.items()}
    lb = plans[cudnn_collector.launch_bound_mask(plans) & (plans["coarse_ms"] >= ratio * plans["precise_ms"])]
    for key, grp in lb.sort_values("coarse_ms", ascending=False).groupby("key", sort=False):
        if len(cases) >= len(RERUN_OUTLIERS) + n_launch_bound:
            break
        cases.setdefault(key, []).extend(grp["plan"].head(2).tolist())
    for key, names in cases.items():  # each problem's recorded winner as the yardstick
        sub = plans[(plans["key"] == key) & plans["correct"].fillna(False).astype(bool)]
        if len(sub):
            t = sub["precise_ms"].fillna(sub["coarse_ms"])
            best = str(sub.loc[t.idxmin(), "plan"])
            if best not in names:
                names.append(best)
    return cases


def _events(col, n):
    t = col.torch
    return [(t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)) for _ in range(n)]


def _timed_single(col, g, pack, i, spin: bool) -> float:
    t = col.torch
    (s, e), = _events(col, 1)
    with t.cuda.stream(col.stream):
        if spin:
            t.cuda._sleep(cudnn_collector.spin_cycles(1))
        s.record()
        col._run(g, pack, i)
        e.record()
    e.synchronize()
    return s.elapsed_time(e)


def _timed_replays(col, graph, k: int, n: int, spin: bool) -> list[float]:
    t = col.torch
    evs = _events(col, n)
    with t.cuda.stream(col.stream):
        if spin:
            t.cuda._sleep(cudnn_collector.spin_cycles(n))
        for s, e in evs:
            s.record()
            graph.replay()
            e.record()
    col.stream.synchronize()
    return [s.elapsed_time(e) / k for s, e in evs]


def _plan_trace(col, g, pack, i) -> dict:
    """Every measurement of one plan, in the order a fresh collector process would meet it."""
    med = lambda v: float(np.median(v))  # noqa: E731
    r = {"clock_mhz_before": col.nvml.sample().get("sm_clock_mhz")}
    r["first_ms"] = _timed_single(col, g, pack, i, spin=False)
    r["second_ms"] = _timed_single(col, g, pack, i, spin=False)
    r["spin_single_ms"] = _timed_single(col, g, pack, i, spin=True)
    g1 = col._capture(g, pack, i, 1)
    r["k1_upload_ms"] = _timed_replays(col, g1, 1, 1, spin=False)[0]
    r["k1_nospin_ms"] = _timed_replays(col, g1, 1, 10, spin=False)
    r["k1_spin_ms"] = _timed_replays(col, g1, 1, 10, spin=True)
    # the collector before the outlier fix: k from the first execution, warm-up check, no spin
    single = r["first_ms"] if r["first_ms"] >= cudnn_collector.COARSE_TARGET_MS else r["second_ms"]
    k = cudnn_collector.inner_count(single)
    go = col._capture(g, pack, i, k)
    warm = _timed_replays(col, go, k, 1, spin=False)[0]
    if warm * k < cudnn_collector.COARSE_TARGET_MS / 2 and k < cudnn_collector.MAX_INNER:
        k = cudnn_collector.inner_count(warm)
        go = col._capture(g, pack, i, k)
        _timed_replays(col, go, k, 1, spin=False)
    r["old_k"], r["old_warm_ms"] = k, warm
    r["old_coarse_ms"] = med(_timed_replays(col, go, k, cudnn_collector.COARSE_REPLAYS, spin=False))
    # the collector after: k from a warm execution, spin kernel, recapture of short replays
    k = cudnn_collector.inner_count(r["spin_single_ms"])
    gn = col._capture(g, pack, i, k)
    _timed_replays(col, gn, k, 1, spin=True)
    times = _timed_replays(col, gn, k, cudnn_collector.COARSE_REPLAYS, spin=True)
    if med(times) * k < cudnn_collector.COARSE_TARGET_MS / 2 and k < cudnn_collector.MAX_INNER:
        k = cudnn_collector.inner_count(med(times))
        gn = col._capture(g, pack, i, k)
        _timed_replays(col, gn, k, 1, spin=True)
        times = _timed_replays(col, gn, k, cudnn_collector.COARSE_REPLAYS, spin=True)
    r["new_k"], r["new_coarse_ms"] = k, med(times)
    # reference: k for the coarse target from the spin-protected k=1 replays, 20 replays
    k = cudnn_collector.inner_count(min(r["k1_spin_ms"]))
    gr = col._capture(g, pack, i, k)
    _timed_replays(col, gr, k, 1, spin=True)
    ref = _timed_replays(col, gr, k, 20, spin=True)
    r["ref_k"], r["ref_ms"], r["ref_iqr_rel"] = k, med(ref), float(
        (np.percentile(ref, 75) - np.percentile(ref, 25)) / med(ref))
    return r


def outliers(col, cases: dict, corpus, out_path=None) -> list[dict]:
    """Trace each case's plans (see :func:`_plan_trace`); written after every problem."""
    import os
    todo = cudnn_collector.load_problems(corpus)
    todo = todo[todo["key"].isin(list(cases))]
    rows = []
    for _, row in todo.iterrows():
        p = {k: cudnn_collector._py(v) for k, v in row.items()}
        x, w, y, out = col._tensors(p)
        g, pack, names, err = col._plan_list(p, x, w, y, list(col.modes.values()))
        for pname in cases[p["key"]]:
            rec = {"key": p["key"], "plan": pname,
                   "cuda_module_loading": os.environ.get("CUDA_MODULE_LOADING", "")}
            try:
                i = names.index(pname)
                g.build_plan_at_index(i)
                need = int(g.get_workspace_size_plan_at_index(i))
                if col.workspace.numel() < need:
                    col.workspace = col.torch.empty(need, dtype=col.torch.uint8, device="cuda")
                rec.update(_plan_trace(col, g, pack, i))
            except Exception as exc:  # noqa: BLE001 - recorded, the next plan goes on
                rec["error"] = cudnn_collector._err(exc)
                col._check_cuda()
            rows.append(rec)
        if out_path:
            with open(out_path, "w") as fh:
                json.dump(rows, fh, indent=1)
    return rows


PHASES = ("t_heur_s", "t_notes_s", "t_build_s", "t_coarse_s", "t_torch_s", "t_precise_s", "t_verify_s")


def diagnosis(vdir) -> dict:
    """The run-to-run outlier evidence recorded in ``vdir`` (``raw/h100/validation/run_to_run_outliers``), as tables.

    ``first``: per traced plan (``outliers`` run, default and eager module loading) the first
    execution, a second one launched alone, a spin-protected one, graph replays of one
    execution without / with a spin kernel, and the reference time. ``protocol``: the
    collector before the fix (``old/``) and after it (``new/``) on the same problems in the
    same lease: launch-bound plans, plans whose old coarse time is 1.5x / 3x the new one,
    and whether :func:`cudnn.launch_bound_mask` flags every one of them. ``phases``: seconds
    per problem-direction of each phase, old and new.
    """
    from pathlib import Path

    import pandas as pd

    vdir = Path(vdir)
    traces = []
    for mode in ("lazy", "eager"):
        path = vdir / f"outliers_{mode}.json"
        if path.exists():
            d = pd.DataFrame(json.loads(path.read_text()))
            d.insert(0, "module loading", "EAGER" if mode == "eager" else "default (lazy)")
            traces.append(d)
    first = pd.concat(traces, ignore_index=True) if traces else pd.DataFrame()
    if len(first):
        first = first.assign(k1_nospin_ms=first["k1_nospin_ms"].map(np.median),
                             k1_spin_ms=first["k1_spin_ms"].map(np.median))
    out = {"first": first}
    runs = {name: (load_records(vdir / name, "plans"), load_records(vdir / name, "problems"))
            for name in ("old", "new") if (vdir / name).exists()}
    if len(runs) == 2:
        (old, old_pd), (new, new_pd) = runs["old"], runs["new"]
        both = old.merge(new[["key", "plan", "coarse_ms"]], on=["key", "plan"], suffixes=("_old", "_new"))
        ratio = both["coarse_ms_old"] / both["coarse_ms_new"]
        flagged = cudnn_collector.launch_bound_mask(both.rename(columns={"coarse_ms_old": "coarse_ms"}))
        rows = []
        for name, plans in (("before the fix", old), ("after the fix", new)):
            rows.append({"protocol": name, "problem-directions": int(plans["key"].nunique()),
                         "plans timed": int(plans["coarse_ms"].notna().sum()),
                         "launch-bound": int(cudnn_collector.launch_bound_mask(plans).sum())})
        out["protocol"] = pd.DataFrame(rows)
        out["outliers"] = {f">= {t}x": {"plans": int((ratio >= t).sum()),
                                        "flagged by launch_bound_mask": int((flagged & (ratio >= t)).sum())}
                           for t in (1.5, 3.0)}
        out["outliers"]["max ratio"] = float(ratio.max())
        out["outliers"]["plans compared"] = int(len(both))
        out["worst"] = both.assign(ratio=ratio).sort_values("ratio", ascending=False).head(6)[
            ["key", "plan", "inner_k", "coarse_ms_old", "coarse_ms_new", "ratio"]]
        out["phases"] = pd.DataFrame({name: pd.concat([pd_[[c for c in PHASES if c in pd_]].sum() / len(pd_),
                                                       pd.Series({"t_total_s": pd_["t_total_s"].sum() / len(pd_)})])
                                      for name, pd_ in (("before", old_pd), ("after", new_pd))})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="validate the collector's timing method")
    ap.add_argument("what", choices=["measure", "ncu-target", "scaling", "read-ncu", "outlier-cases",
                                     "outliers"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--raw", default="raw/h100", help="outlier-cases: the raw folder to pick cases from")
    ap.add_argument("--cases", default=None, help="outliers: the JSON written by outlier-cases")
    ap.add_argument("--corpus", default="raw/h100/corpus.csv.gz", help="outliers: the corpus of the cases")
    ap.add_argument("--ncu-csv", default=None)
    ap.add_argument("--order", default=None)
    args = ap.parse_args(argv)
    if args.what == "read-ncu":
        order = [tuple(o) for o in json.load(open(args.order))]
        rows = read_ncu(open(args.ncu_csv).read(), order)
    elif args.what == "outlier-cases":
        cases = outlier_cases(args.raw)
        print(json.dumps(cases, indent=1))
        if args.out:
            with open(args.out, "w") as fh:
                json.dump(cases, fh, indent=1)
        return 0
    elif args.what == "outliers":
        col = cudnn_collector.CudnnCollector(cudnn_collector.Options(notes=False, torch_choice=False))
        col.warm_up()
        rows = outliers(col, json.load(open(args.cases)), args.corpus, args.out)
        for r in rows:
            print({k: v for k, v in r.items() if not isinstance(v, list)})
        return 0
    else:
        col = cudnn_collector.CudnnCollector(cudnn_collector.Options(notes=False, torch_choice=False))
        if args.what == "measure":
            rows = measure(col)
        elif args.what == "scaling":
            rows = scaling(col)
        else:
            rows = ncu_target(col)
    for r in rows:
        print(r)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

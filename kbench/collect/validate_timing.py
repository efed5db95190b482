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
            python -m kbench.collect.validate_timing ncu-target > ncu.csv
``scaling``
    The best plan of one layer at batch 1..256: time must grow with the work.

It never changes clocks (``--clock-control none`` keeps ncu from locking them).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from kbench.collect import cudnn as C

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
    p = {**C.DEFAULTS, **geo, "dtype": dtype, "layout": layout, "direction": direction}
    from kbench.problem import expected_output_size
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
            if ws <= C.WORKSPACE_CAP:
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
            ps = C.PlanState(i, {})
            ps.k = C.inner_count(single)
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
        for name, g, pack, plans, keep in prepared_all:
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
        ps = C.PlanState(i, {})
        ps.k = C.inner_count(col._single_ms(g, pack, i))
        ps.graph = col._capture(g, pack, i, ps.k)
        col._replays(ps, 2)
        rows.append(dict(n=n, plan=pname, ms=float(np.median(col._replays(ps, 10))),
                         gflop=2 * n * 64 * 64 * 9 * 56 * 56 / 1e9))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="validate the collector's timing method")
    ap.add_argument("what", choices=["measure", "ncu-target", "scaling", "read-ncu"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--ncu-csv", default=None)
    ap.add_argument("--order", default=None)
    args = ap.parse_args(argv)
    if args.what == "read-ncu":
        order = [tuple(o) for o in json.load(open(args.order))]
        rows = read_ncu(open(args.ncu_csv).read(), order)
    else:
        col = C.CudnnCollector(C.Options(notes=False, torch_choice=False))
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

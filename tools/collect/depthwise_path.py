"""Which GPU kernels PyTorch's own convolution launches for depthwise problems, and for how long.

``kbench verify-on-gpu --live-references`` timed PyTorch's convolution (``pytorch_op``) beside the
plan cuDNN mode A picks. On depthwise convolutions PyTorch was slower (docs/variants.md): for NCHW,
ATen sends most of them to its own ``CudaDepthwise2d`` (``use_cudnn_depthwise`` in
``aten/src/ATen/native/Convolution.cpp``); for NHWC, ATen always chooses cuDNN, so the slowdown
needs another cause. This diagnostic runs PyTorch's convolution of each depthwise problem of a
verification plan under ``torch.profiler`` (tensors, strides and flags exactly as the verification
built them) and lists every GPU kernel one call launches, with its time::

    python tools/collect/depthwise_path.py run --plan raw/h200-pytorch/verify/xgboost-plans-safe/plan.json.gz \\
        --out OUT/depthwise_path.jsonl --time-budget 240                     # on the GPU (then gzip -n)
    python tools/collect/depthwise_path.py report --runs raw/h200-pytorch/verify/depthwise_path/depthwise_path.jsonl.gz \\
        --verify raw/h200-pytorch/verify/xgboost-plans-safe --out experiments/results/depthwise_path_h200.json

``report`` joins each problem's kernels with the verification's times (PyTorch's op and mode A's
plan, graph-timed medians) and with PyTorch's recorded choice in the dataset, and groups them by layout, data type and direction: the share of calls
that ran a cuDNN kernel, an ATen depthwise kernel, and extra kernels (copies, fills) beside the
convolution, and how much of PyTorch's time those extras take.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.gpu_check.command import read_live, read_raw
from kbench.gpu_check.plan import PYTORCH_OP_UNIT
from kbench.gpu_check.score import measured_times

#: calls profiled per problem (the kernels' times are their mean)
PROFILED_CALLS = 3
#: plans at least this long (ms) hide a per-call cost of a few microseconds
LONG_MS = 0.05


def is_depthwise(p: dict) -> bool:
    """Every group has one input channel."""
    return p["groups"] > 1 and p["groups"] == p["c"]


def kernel_kind(name: str) -> str:
    """The family of a GPU kernel from its name: ATen's depthwise kernels, ATen elementwise/copy/fill
    kernels, or a convolution kernel of cuDNN (every other name: cuDNN's engines have many names)."""
    low = name.lower()
    if "depthwise" in low and ("at::native" in low or "conv_depthwise" in low):
        return "aten_depthwise"
    if any(s in low for s in ("elementwise", "copy", "fill", "vectorized", "reduce_kernel", "memset")):
        return "aten_other"
    return "cudnn"


def read_plan(path: Path) -> dict:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def run(plan_path: Path, out: Path, time_budget: float) -> int:
    from torch.profiler import ProfilerActivity, profile

    from kbench.collect.measure import cudnn as cudnn_collector
    from kbench.gpu_check import live as live_timing

    plan = read_plan(plan_path)
    rule_of = plan["live"]["filters"]
    done = set()
    if out.exists():
        done = {json.loads(line)["problem_id"] for line in out.read_text().splitlines() if line.strip()}
    col = cudnn_collector.CudnnCollector(cudnn_collector.Options(notes=False, torch_choice=False, precise=False, seed=plan["seed"]))
    t = col.torch
    t.backends.cudnn.benchmark = False
    t.backends.cudnn.deterministic = False
    items = [it for it in plan["problems"] if is_depthwise(it["problem"]) and it["problem_id"] not in done]
    t0 = time.perf_counter()
    with out.open("a") as f:
        for i, it in enumerate(items):
            if time.perf_counter() - t0 > time_budget:
                print(f"budget spent after {i} of {len(items)} problems", flush=True)
                break
            p = it["problem"]
            t.backends.cudnn.allow_tf32 = bool(rule_of[p["dtype"]]["allow_tf32"])
            x, w, y, _ = col._tensors(p)
            col._fill_inputs(p, x, w, y)
            unit = live_timing.pytorch_op_unit(col, p, x, w, y)
            unit.run()
            t.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(PROFILED_CALLS):
                    unit.run()
                t.cuda.synchronize()
            kernels: dict[str, list[float]] = {}
            for ev in prof.events():
                if ev.device_type.name == "CUDA":
                    kernels.setdefault(ev.name, []).append(ev.time_range.elapsed_us() / 1000.0)  # the kernel on the GPU, ms
            row = {"problem_id": it["problem_id"], "kernels": [
                {"name": n, "kind": kernel_kind(n), "calls": len(v) / PROFILED_CALLS, "ms_per_call": sum(v) / PROFILED_CALLS}
                for n, v in kernels.items()]}
            f.write(json.dumps(row) + "\n")
            f.flush()
            del x, w, y
    print(f"{len(items)} depthwise problems listed, written to {out}", flush=True)
    return 0


def recorded_choice_is_mode_a_first(dataset: str, ids: list[str]) -> dict[str, bool]:
    """{problem: PyTorch's recorded choice (the dataset's ``pytorch`` heuristic) is mode A's first plan}."""
    import kbench
    h = kbench.load(dataset).heuristics
    h = h[h["problem_id"].isin(ids) & h["heuristic"].isin(["pytorch", "cudnn_mode_a"])]
    first = h.sort_values("rank").groupby(["problem_id", "heuristic"], observed=True)["kernel"].first().unstack()
    both = first.dropna(subset=["pytorch", "cudnn_mode_a"]) if {"pytorch", "cudnn_mode_a"} <= set(first) else first.iloc[:0]
    return (both["pytorch"].astype(str) == both["cudnn_mode_a"].astype(str)).to_dict()


def report(runs: Path, verify: Path, out: Path) -> int:
    opener = gzip.open if str(runs).endswith(".gz") else open
    with opener(runs, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    plan = read_plan(verify / "plan.json.gz")
    problem = {it["problem_id"]: it["problem"] for it in plan["problems"]}
    raw, _, _, _ = read_raw(verify / "raw.jsonl.gz")
    times = measured_times(raw).set_index(["problem_id", "plan"])["ms"]
    mode_a_unit = read_live(verify / "raw.jsonl.gz")[0].set_index("problem_id")["live_mode_a"].to_dict()
    recs = []
    for r in rows:
        pid, p = r["problem_id"], problem[r["problem_id"]]
        k = pd.DataFrame(r["kernels"])
        by_kind = k.groupby("kind")["ms_per_call"].sum() if len(k) else pd.Series(dtype=float)
        total = float(by_kind.sum())
        rec = {"problem_id": pid, "layout": p["layout"], "dtype": p["dtype"], "direction": p["direction"],
               "kernels_per_call": float(k["calls"].sum()) if len(k) else 0.0,
               "ran_cudnn": bool(by_kind.get("cudnn", 0) > 0), "ran_aten_depthwise": bool(by_kind.get("aten_depthwise", 0) > 0),
               "extra_share": float(by_kind.get("aten_other", 0.0) / total) if total else 0.0,
               "kernel_names": sorted(k["name"].str.slice(0, 80).unique().tolist()) if len(k) else []}
        if pid in mode_a_unit and (pid, PYTORCH_OP_UNIT) in times.index:
            op_ms, mode_a_ms = float(times[(pid, PYTORCH_OP_UNIT)]), float(times[(pid, mode_a_unit[pid])])
            rec.update(op_over_mode_a=op_ms / mode_a_ms, kernels_over_mode_a=total / mode_a_ms,
                       op_minus_mode_a_us=1000.0 * (op_ms - mode_a_ms), mode_a_ms=mode_a_ms)
        recs.append(rec)
    d = pd.DataFrame(recs)
    same = recorded_choice_is_mode_a_first(plan["dataset"]["name"], d["problem_id"].tolist())
    d["pytorch_choice_is_mode_a_first"] = d["problem_id"].map(same)

    def geomean(s):
        s = s.dropna()
        return round(float(np.exp(np.log(s).mean())), 3) if len(s) else None
    groups = []
    for (layout, dtype, direction), g in d.groupby(["layout", "dtype", "direction"]):
        groups.append({"layout": layout, "dtype": dtype, "direction": direction, "problems": int(len(g)),
                       "share_cudnn": round(float(g["ran_cudnn"].mean()), 3),
                       "share_aten_depthwise": round(float(g["ran_aten_depthwise"].mean()), 3),
                       "kernels_per_call_median": float(g["kernels_per_call"].median()),
                       "extra_share_median": round(float(g["extra_share"].median()), 3),
                       "op_over_mode_a_geomean": geomean(g.get("op_over_mode_a", pd.Series(dtype=float)))})
    # per layout and direction: is PyTorch's kernel itself slower, or the call around it?
    timed = d.dropna(subset=["op_over_mode_a"]) if "op_over_mode_a" in d else d.iloc[:0]
    by_direction = []
    for (layout, direction), g in timed.groupby(["layout", "direction"]):
        long_ones = g[g["mode_a_ms"] >= LONG_MS]
        by_direction.append({"layout": layout, "direction": direction, "problems": int(len(g)),
                             "kernels_over_mode_a_geomean": geomean(g["kernels_over_mode_a"]),
                             "op_over_mode_a_geomean": geomean(g["op_over_mode_a"]),
                             "op_minus_mode_a_us_median": round(float(g["op_minus_mode_a_us"].median()), 1),
                             "pytorch_choice_is_mode_a_first": int(g["pytorch_choice_is_mode_a_first"].eq(True).sum()),
                             f"problems_mode_a_ge_{LONG_MS}ms": int(len(long_ones)),
                             f"op_over_mode_a_geomean_mode_a_ge_{LONG_MS}ms": geomean(long_ones["op_over_mode_a"])})
    out.write_text(json.dumps({"runs": str(runs), "verify": str(verify), "groups": groups,
                               "by_layout_direction": by_direction, "problems": recs}, indent=1) + "\n")
    print(pd.DataFrame(groups).to_string(index=False))
    print(pd.DataFrame(by_direction).to_string(index=False))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--plan", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--time-budget", type=float, default=240.0)
    s = sub.add_parser("report")
    s.add_argument("--runs", type=Path, required=True)
    s.add_argument("--verify", type=Path, required=True)
    s.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    if a.cmd == "run":
        return run(a.plan, a.out, a.time_budget)
    return report(a.runs, a.verify, a.out)


if __name__ == "__main__":
    sys.exit(main())

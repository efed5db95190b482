"""Issue 40: do the table's times agree with the same plans run as a PyTorch program runs them?

Reads the GPU re-timings with live references (every ``verification<suffix>.json`` under
``raw/<dataset>/verify/`` whose record has a ``live`` part, with the run plan ``plan<suffix>.json.gz``
and raw rows ``raw<suffix>.jsonl.gz`` beside it: ``kbench verify-on-gpu --live-references``; an
entry's earlier run keeps its files under a suffix such as ``-entry-2026-11-25``). Each re-timed plan was timed twice there, with the
tensors PyTorch passes (its strides, ``tensor_strides: pytorch`` in the run's environment):

* **graph**: the collector's protocol (k runs captured in a CUDA graph, median of replays, median over
  the interleaved rounds);
* **eager**: k launches from Python behind a spin kernel, no graph, as an eager PyTorch program runs.

For every (problem, plan) pair with a table time of at least 0.05 ms, it compares both with the table:
the median |ln(measured / table)|, and every pair over 1.5x apart with what tells its cause apart.
A pair whose graph time agrees with the table (within 1.2x) while its eager time does not is host-bound
in eager mode: the kernels run as fast as the table says, and the launches from Python are slower than
the GPU. It also gives the eager/graph ratio by kernel time, and for grouped convolutions (``_g`` in the
problem id) apart, where the eager cost concentrates.

Last, it sets PyTorch's own convolution (``pytorch:conv``, timed by the same protocol) against the plan
that live cuDNN mode A picked, by kind of convolution: ungrouped, grouped, and depthwise (groups equal to
the input channels), where ATen may take its own depthwise kernels instead of cuDNN
(``ConvBackend::CudaDepthwise2d`` in ``aten/src/ATen/native/Convolution.cpp``).

    python experiments/timing_agreement.py    # -> experiments/results/timing_agreement.json
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def live_runs(root: Path = ROOT) -> dict[str, tuple[Path, Path]]:
    """{run name: (plan, raw rows)} of every re-timing with live references and its files beside it.

    The name is the folder under ``raw/`` without ``verify/``, plus the files' suffix:
    ``h100/xgboost-plans-safe-entry-2026-11-25``, ``h200-pytorch/networks/xgboost-plans-safe``.
    """
    runs = {}
    for record in sorted(root.glob("raw/*/verify/**/verification*.json")):
        suffix = record.name[len("verification"):-len(".json")]
        plan, raw = record.parent / f"plan{suffix}.json.gz", record.parent / f"raw{suffix}.jsonl.gz"
        if json.loads(record.read_text()).get("live") and plan.exists() and raw.exists():
            folder = record.parent.relative_to(root / "raw").parts
            runs["/".join((folder[0], *folder[2:])) + suffix] = (plan, raw)
    return runs
MIN_MS = 0.05  # the threshold: shorter kernels are launch-bound
OFF = np.log(1.5)
GRAPH_AGREES = np.log(1.2)
BINS = [MIN_MS, 0.1, 0.2, 0.5, 1.0, 5.0, np.inf]


def raw_rows(raw_path: Path) -> list[dict]:
    """The run's raw rows, read once for every figure."""
    return [json.loads(line) for line in gzip.open(raw_path, "rt")]


def pairs(plan_path: Path, rows: list[dict]) -> tuple[pd.DataFrame, dict]:
    """(problem, plan) pairs of the run's table plans: table, graph and eager ms; and the run's device."""
    plan = json.loads(gzip.open(plan_path, "rt").read())
    device = next((r for r in rows if r.get("kind") == "run"), {}).get("env", {})
    raw = pd.DataFrame([r for r in rows if r.get("kind") in ("time", "eager")])
    graph = (raw[raw["kind"] == "time"].groupby(["problem_id", "plan"])["ms"].median().rename("graph_ms"))
    eager = raw[raw["kind"] == "eager"].set_index(["problem_id", "plan"])["ms"].rename("eager_ms")
    table = pd.DataFrame([(i["problem_id"], name, ms) for i in plan["problems"] for name, ms in i["table_ms"].items()],
                         columns=["problem_id", "plan", "table_ms"]).set_index(["problem_id", "plan"])
    df = table.join(graph, how="inner").join(eager, how="inner").reset_index()
    return df[df["table_ms"] >= MIN_MS].reset_index(drop=True), device


def summary(df: pd.DataFrame) -> dict:
    log_graph = np.log(df["graph_ms"] / df["table_ms"])
    log_eager = np.log(df["eager_ms"] / df["table_ms"])
    grouped = df["problem_id"].str.contains("_g", regex=False)
    off = df[np.abs(log_eager) > OFF].assign(
        grouped=grouped, graph_over_table=df["graph_ms"] / df["table_ms"], eager_over_table=df["eager_ms"] / df["table_ms"])
    host_bound = np.abs(np.log(off["graph_over_table"])) <= GRAPH_AGREES
    ratio = df["eager_ms"] / df["graph_ms"]
    by_time = (df.assign(ratio=ratio, bin=pd.cut(df["graph_ms"], BINS).astype(str))
               .groupby("bin", sort=False)["ratio"].agg(["size", "median", lambda x: x.quantile(0.95)]))
    by_time.columns = ["pairs", "median_eager_over_graph", "p95_eager_over_graph"]
    return {
        "pairs": int(len(df)),
        "graph": {"median_abs_log_ratio": float(np.median(np.abs(log_graph))),
                  "over_1_5x": int(np.sum(np.abs(log_graph) > OFF))},
        "eager": {"median_abs_log_ratio": float(np.median(np.abs(log_eager))),
                  "over_1_5x": int(len(off)),
                  "over_1_5x_graph_agrees": int(host_bound.sum()),
                  "over_1_5x_grouped": int(off["grouped"].sum()),
                  "over_1_5x_eager_slower": int((off["eager_over_table"] > 1).sum())},
        "eager_over_graph_median": {"grouped": float(ratio[grouped].median()) if grouped.any() else None,
                                    "not_grouped": float(ratio[~grouped].median())},
        "grouped_share_of_pairs": float(grouped.mean()),
        "eager_over_graph_by_kernel_ms": by_time.reset_index().to_dict(orient="records"),
        "over_1_5x": off.assign(graph_agrees=host_bound)[
            ["problem_id", "plan", "table_ms", "graph_ms", "eager_ms", "grouped", "graph_agrees"]].round(4)
        .to_dict(orient="records"),
    }


def pytorch_op_vs_mode_a(rows: list[dict]) -> dict:
    """Geomean of PyTorch's op time over live mode A's plan time, by kind of convolution, dtype and direction."""
    if not any(r.get("live") for r in rows if r.get("kind") == "problem"):
        return {}
    graph = pd.DataFrame([r for r in rows if r.get("kind") == "time"]).groupby(["problem_id", "plan"])["ms"].median()
    df = pd.DataFrame([{"problem_id": r["problem_id"], **r["live"]} for r in rows
                       if r.get("kind") == "problem" and r.get("live")])
    at = lambda col: graph.reindex(pd.MultiIndex.from_arrays([df["problem_id"], df[col]])).to_numpy()  # noqa: E731
    df["log_ratio"] = np.log(at("pytorch_op") / at("live_mode_a"))
    df = df[np.isfinite(df["log_ratio"])]
    fields = df["problem_id"].str.split("-")
    groups = df["problem_id"].str.extract(r"_g(\d+)$")[0].astype(float)
    channels = fields.str[0].astype(float)
    df["kind"] = np.select([groups.isna(), groups == channels], ["ungrouped", "depthwise"], "grouped")
    df["dtype"] = df["problem_id"].str.extract(r"-(FP32|FP16|BF16)-")[0]
    df["direction"] = fields.str[-1].str[0]

    def table(frame: pd.DataFrame, keys: list[str]) -> list[dict]:
        g = frame.groupby(keys)["log_ratio"].agg(["size", "mean"])
        return [{**dict(zip(keys, k if isinstance(k, tuple) else (k,))), "problems": int(n),
                 "op_over_mode_a_geomean": round(float(np.exp(m)), 4)} for k, (n, m) in g.iterrows()]
    return {"problems": int(len(df)), "op_over_mode_a_geomean": round(float(np.exp(df["log_ratio"].mean())), 4),
            "by_kind": table(df, ["kind"]),
            "depthwise_by_dtype_direction": table(df[df["kind"] == "depthwise"], ["dtype", "direction"])}


def main() -> int:
    out = {"min_ms": MIN_MS, "runs": {}}
    for key, (plan_path, raw_path) in live_runs().items():
        rows = raw_rows(raw_path)
        df, device = pairs(plan_path, rows)
        out["runs"][key] = {"gpu": device.get("gpu"), "tensor_strides": device.get("tensor_strides"), **summary(df),
                            "pytorch_op_vs_live_mode_a": pytorch_op_vs_mode_a(rows)}
        s = out["runs"][key]
        print(f"{key} ({s['gpu']}): {s['pairs']} pairs; graph median |ln| {s['graph']['median_abs_log_ratio']:.4f}, "
              f"{s['graph']['over_1_5x']} over 1.5x; eager {s['eager']['median_abs_log_ratio']:.4f}, "
              f"{s['eager']['over_1_5x']} over 1.5x ({s['eager']['over_1_5x_graph_agrees']} with the graph time "
              f"agreeing, {s['eager']['over_1_5x_grouped']} grouped)")
    path = ROOT / "experiments/results/timing_agreement.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"-> {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

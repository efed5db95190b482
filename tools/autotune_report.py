"""What PyTorch's autotune settled on, from ``kbench collect autotune`` records: the tables of docs/autotune.md.

    python tools/autotune_report.py                                   # prints the r3d_18 tables
    python tools/autotune_report.py raw/models/r3d_18.autotune --write docs/autotune.md   # rewrites its block
    python tools/autotune_report.py --dataset h200-pytorch --split random --part test    # where a dataset has it

A records folder (``autotune*.jsonl[.gz]``, beside it optionally the traced ``problems.csv`` naming each
problem-direction's layers) gives one row per problem-direction and a summary; ``--dataset`` gives, over a
part of a split, how ``pytorch_autotune`` (the plan PyTorch settled on) compares with ``autotune_top10``
(the best of mode A's first 10 plans, each timed exactly) and the oracle, in the dataset's own times.
Every figure is computed from the files; nothing is typed by hand.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
from report import update_doc_block  # tools/ is the script's folder, first on sys.path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "raw" / "models" / "r3d_18.autotune"
START, END = "<!-- autotune-r3d:start -->", "<!-- autotune-r3d:end -->"
#: cuDNN's own helper kernels that PyTorch's call launches around the convolution (layout padding)
HELPER = "nhwcAddPaddingKernel"


def records(folder: Path) -> pd.DataFrame:
    """One row per problem-direction of a records folder, with the problems file's layers where it is there."""
    import sys

    sys.path.insert(0, str(ROOT))
    from kbench.collect.measure.cudnn.autotune import read_lines, record_files

    rows = [rec for f in record_files(folder) for _, rec in read_lines(f)]
    df = pd.DataFrame(rows)
    problems = folder / "problems.csv"
    if problems.exists():
        traced = pd.read_csv(problems)[["problem_id", "layers", "multiplicity"]]
        df = df.merge(traced.rename(columns={"problem_id": "key"}), on="key", how="left")
    return df


def positions(rec) -> list[int]:
    """Where the plans matched to PyTorch's kernels sit in the collector's mode-A list (0 first)."""
    order = str(rec.get("mode_a") or "").split(";")
    return [order.index(p) for p in str(rec.get("torch_autotune_plans") or "").split(";") if p in order]


def _ms(v) -> str:
    return "–" if v is None or pd.isna(v) else f"{v:,.1f}"


def problem_table(df: pd.DataFrame) -> str:
    """The per-problem-direction table."""
    lines = [
        "| direction | layer | calls per step | mode A plans | profiled | matched plans | at positions of mode A "
        "| helper kernels | first call, ms | second call, ms | tuning (first less second), ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in df.to_dict("records"):
        layers = str(rec.get("layers") or "").split(";")
        layer = layers[0] + (f" (+{len(layers) - 1})" if len(layers) > 1 else "") if layers[0] else "–"
        mode_a = len([p for p in str(rec.get("mode_a") or "").split(";") if p])
        plans = [p for p in str(rec.get("torch_autotune_plans") or "").split(";") if p]
        helpers = str(rec.get("torch_autotune_kernels") or "").count(HELPER)
        calls = rec.get("multiplicity")
        lines.append(
            f"| {rec['direction']} | `{layer}` | {'–' if calls is None or pd.isna(calls) else int(calls)} "
            f"| {mode_a} | {rec.get('n_profiled', '–')} | {len(plans)} "
            f"| {', '.join(map(str, positions(rec))) or '–'} | {helpers} | {_ms(rec.get('first_call_ms'))} "
            f"| {_ms(rec.get('second_call_ms'))} | {_ms(rec.get('first_call_cost_ms'))} |"
        )
    return "\n".join(lines)


def summary(df: pd.DataFrame) -> str:
    """The summary paragraph and the per-direction table."""
    ok = df[df["status"] == "ok"]
    matched = ok[ok["torch_autotune_status"] == "matched"]
    n_plans = matched["torch_autotune_plans"].fillna("").str.split(";").map(lambda ps: len([p for p in ps if p]))
    first = [min(positions(r)) for r in matched.to_dict("records") if positions(r)]
    helpers = int(ok["torch_autotune_kernels"].fillna("").str.contains(HELPER).sum())
    counts = ", ".join(f"{d} {int((df['direction'] == d).sum())}" for d in ("F", "B", "W"))
    cost = ok["first_call_cost_ms"]
    text = (
        f"{len(df)} problem-directions ({counts}); {len(ok)} probed without error, {len(matched)} matched to "
        f"mode-A plans by kernel names. {int((n_plans > 1).sum())} matched more than one plan (plans whose knobs "
        f"launch the same kernels); the first matched plan sits at positions {min(first)} to {max(first)} of the "
        f"collector's mode-A list, counted from 0 (median {statistics.median(first):g})"
        + (
            ", so within the first 10 of PyTorch's list too (its filter and errata list only remove plans: a plan "
            "moves forward, never back)"
            if max(first) < 10
            else ""
        )
        + f". On {helpers} problem-directions PyTorch's call launched cuDNN's `{HELPER}` helpers around the "
        f"convolution, and they matched all the same: the profiled plans launch them too. The first call took {_ms(ok['first_call_ms'].median())} ms (median; at most "
        f"{_ms(ok['first_call_ms'].max())} ms), the second {ok['second_call_ms'].median():.3f} ms; PyTorch's "
        f"tuning, the first call less the second, {_ms(cost.sum())} ms over all {len(ok)} "
        f"(median {_ms(cost.median())} ms)."
    )
    rows = [
        "| direction | problem-directions | tuning, sum (ms) | tuning, median (ms) | tuning, max (ms) |",
        "|---|---|---|---|---|",
    ]
    for d in ("F", "B", "W"):
        c = ok.loc[ok["direction"] == d, "first_call_cost_ms"]
        if len(c):
            rows.append(f"| {d} | {len(c)} | {_ms(c.sum())} | {_ms(c.median())} | {_ms(c.max())} |")
    return text + "\n\n" + "\n".join(rows)


def folder_markdown(folder: Path) -> str:
    df = records(folder)
    return summary(df) + "\n\n" + problem_table(df)


def dataset_breakdown(ds, split: str = "random", part: str = "test") -> dict:
    """``pytorch_autotune`` against ``autotune_top10`` and the oracle over a part (the dataset's times)."""
    ids = set(map(str, ds.split(split)[part]))
    rt = ds.runtimes.astype({"problem_id": str, "kernel": str})
    rt = rt[rt["problem_id"].isin(ids)]
    t = rt.set_index(["problem_id", "kernel"])["time_ms"]
    best = rt.groupby("problem_id")["time_ms"].min()
    heur = ds.heuristics.astype({"problem_id": str, "kernel": str, "heuristic": str})
    heur = heur[heur["problem_id"].isin(ids)]
    real = heur[heur["heuristic"] == "pytorch_autotune"].set_index("problem_id")["kernel"]
    mode_a = heur[heur["heuristic"] == "cudnn_mode_a"].sort_values(["problem_id", "rank"])
    first10 = mode_a.groupby("problem_id")["kernel"].agg(lambda s: list(s)[:10])
    rows = []
    for pid, plan in real.items():
        top = first10.get(pid, [])
        if not top:
            continue
        times = [t[(pid, k)] for k in top]
        ideal = top[int(np.argmin(times))]
        rows.append(
            {
                "t_real": t[(pid, plan)],
                "t_ideal": min(times),
                "t_best": best[pid],
                "same": plan == ideal,
                "in_first_10": plan in top,
            }
        )
    df = pd.DataFrame(rows, columns=["t_real", "t_ideal", "t_best", "same", "in_first_10"])
    gm = lambda v: float(np.exp(np.mean(np.log(v)))) if len(v) else None  # noqa: E731
    out = {
        "part_problems": len(ids),
        "with_pytorch_autotune": len(df),
        "same_plan_as_autotune_top10": float(df["same"].mean()) if len(df) else None,
        "in_mode_a_first_10": float(df["in_first_10"].mean()) if len(df) else None,
        "pytorch_autotune_over_autotune_top10": gm(df["t_real"] / df["t_ideal"]),
        "pytorch_autotune_over_oracle": gm(df["t_real"] / df["t_best"]),
        "autotune_top10_over_oracle": gm(df["t_ideal"] / df["t_best"]),
    }
    table = ds.tables.get("autotune")
    if table is not None:
        cost = table.astype({"problem_id": str}).set_index("problem_id")["first_call_cost_ms"].reindex(list(real.index))
        out["first_call_cost_ms"] = {"sum": float(cost.sum()), "median": float(cost.median())}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", nargs="?", default=str(DEFAULT), help="a kbench collect autotune records folder")
    p.add_argument("--write", default=None, metavar="DOC", help=f"rewrite the block {START} .. {END} of DOC")
    p.add_argument("--dataset", default=None, help="instead: pytorch_autotune against autotune_top10 in a dataset")
    p.add_argument("--split", default="random")
    p.add_argument("--part", default="test")
    args = p.parse_args()
    if args.dataset:
        import json

        import kbench

        print(json.dumps(dataset_breakdown(kbench.load(args.dataset), args.split, args.part), indent=1))
        return
    body = folder_markdown(Path(args.folder))
    if args.write:
        update_doc_block(Path(args.write), START, END, body + "\n")
    else:
        print(body)


if __name__ == "__main__":
    main()

"""Render the baseline result records into Markdown tables (docs/baselines.md).

    python tools/baselines_table.py                      # rewrites the block in docs/baselines.md
    python tools/baselines_table.py --print              # prints the tables only
    python tools/baselines_table.py --root results/final --methods oracle rules xgboost

Reads ``<root>/<dataset>/<split>/<method>/result.json`` (records written by
``kbench baseline run`` / ``kbench run``); every number comes from a record.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from report import update_doc_block  # tools/ is the script's folder, first on sys.path

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- baselines:start -->", "<!-- baselines:end -->"
DEFAULT_METHODS = ["oracle", "random", "single-best", "rules", "nearest-neighbour", "xgboost", "xgboost-ranker"]


def _f(v, digits=4, pct=False):
    if v is None:
        return "–"
    return f"{100 * v:.2f}%" if pct else f"{v:.{digits}f}"


def _pm(rec, key, pct=False):
    o = rec["metrics"]["overall"]
    s = (rec.get("seeds") or {}).get("std", {}).get(key)
    n = len((rec.get("seeds") or {}).get("seeds", []))
    base = _f(o.get(key), pct=pct)
    if n > 1 and s is not None:
        base += f" ± {_f(s, pct=pct)}"
    return base


def tables(root: Path, dataset: str, split: str, methods: list[str]) -> str:
    recs = {}
    for m in methods:
        p = root / dataset / split / m / "result.json"
        if p.exists():
            recs[m] = json.loads(p.read_text())
    if not recs:
        return f"_no records for {dataset}/{split} under {root}_\n"
    any_rec = next(iter(recs.values()))
    n = int(any_rec["metrics"]["overall"]["n"])
    out = [f"### {dataset}, split `{split}`, test part ({n:,} problems; speed-up over `{any_rec.get('reference')}`)",
           "",
           "| method | seeds | top-1 | within 5% | mean LoP | LoP@5 | geomean slowdown | speed-up (geomean) "
           "| speed-up (total) | train s | predict ms/problem |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m, r in recs.items():
        o, ex = r["metrics"]["overall"], r.get("extra", {})
        seeds = len((r.get("seeds") or {}).get("seeds", [])) or 1
        out.append(f"| {m} | {seeds} | {_pm(r, 'top1', True)} | {_pm(r, 'within5', True)} | {_pm(r, 'lop_mean')} "
                   f"| {_pm(r, 'lop_at_5')} | {_f(o.get('geomean_slowdown'))} | {_pm(r, 'speedup_geomean')} "
                   f"| {_f(o.get('speedup_total'))} | {_f(ex.get('fit_time_s'), 1)} "
                   f"| {_f(ex.get('predict_ms_per_problem'), 3)} |")
    out += ["", "Per direction (mean over seeds): top-1 / speed-up over the reference, geomean and total-time", "",
            "| method | top-1 F | top-1 B | top-1 W | speed-up F (geo / total) | B (geo / total) | W (geo / total) |",
            "|---|---|---|---|---|---|---|"]
    for m, r in recs.items():
        bd = r["metrics"].get("by_direction", {})
        cells = [_f(bd.get(d, {}).get("top1"), pct=True) for d in "FBW"]
        cells += [f"{_f(bd.get(d, {}).get('speedup_geomean'), 3)} / {_f(bd.get(d, {}).get('speedup_total'), 3)}"
                  for d in "FBW"]
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=str(ROOT / "leaderboard"))
    ap.add_argument("--dataset", default="mi100")
    ap.add_argument("--splits", nargs="+", default=["random", "networks"])
    ap.add_argument("--methods", nargs="+", default=DEFAULT_METHODS)
    ap.add_argument("--print", action="store_true", help="print instead of rewriting docs/baselines.md")
    args = ap.parse_args()
    body = "\n".join(tables(Path(args.root), args.dataset, s, args.methods) for s in args.splits)
    if args.print:
        print(body)
        return
    update_doc_block(ROOT / "docs" / "baselines.md", START, END, body)


if __name__ == "__main__":
    main()

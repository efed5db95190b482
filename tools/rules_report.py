"""How the ``rules`` heuristic's choices distribute over kernel families.

    python tools/rules_report.py                 # rewrites the block in docs/baselines.md
    python tools/rules_report.py --print

For the test part of each split: which rule fired, the family of the rules'
first choice, and the family of the fastest measured kernel (the oracle's),
per direction. Every number is computed here from the dataset.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from report import update_doc_block  # tools/ is the script's folder, first on sys.path

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- rules:start -->", "<!-- rules:end -->"


def report(ds, split: str) -> str:
    from kbench_baselines.rules import kernel_family, rules_report
    ids = ds.split(split)["test"]
    rep = rules_report(ds, ids)
    best = ds.best.drop_duplicates("problem_id").set_index("problem_id")["kernel"].reindex(rep["problem_id"])
    rep["best_family"] = best.map(kernel_family(sorted(best.unique()))).to_numpy()
    rep["hit"] = rep["first_kernel"].to_numpy() == best.to_numpy()
    n = len(rep)
    out = [f"#### {ds.name}, split `{split}`, test part ({n:,} problems)", "",
           "| rule fired | problems | share | first choice is the fastest kernel |", "|---|---|---|---|"]
    by_rule = rep.groupby("rule", sort=False).agg(problems=("hit", "size"), hit=("hit", "mean"))
    for rule, r in by_rule.sort_values("problems", ascending=False).iterrows():
        out.append(f"| {rule} | {int(r.problems):,} | {r.problems / n:.1%} | {r.hit:.1%} |")
    fams = sorted(set(rep["first_family"]) | set(rep["best_family"]))
    out += ["", "| direction | family | rules' first choice | fastest kernel (oracle) |", "|---|---|---|---|"]
    for d in ("F", "B", "W"):
        sub = rep[rep["direction"] == d]
        a = sub["first_family"].value_counts(normalize=True)
        b = sub["best_family"].value_counts(normalize=True)
        for f in fams:
            if a.get(f, 0) or b.get(f, 0):
                out.append(f"| {d} | {f} | {a.get(f, 0):.1%} | {b.get(f, 0):.1%} |")
    return "\n".join(out) + "\n"


def main() -> None:
    sys.path.insert(0, str(ROOT))
    import kbench
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="mi100")
    ap.add_argument("--splits", nargs="+", default=["random", "networks"])
    ap.add_argument("--print", action="store_true")
    args = ap.parse_args()
    ds = kbench.load(args.dataset)
    body = "\n".join(report(ds, s) for s in args.splits)
    if args.print:
        print(body)
        return
    update_doc_block(ROOT / "docs" / "baselines.md", START, END, body)


if __name__ == "__main__":
    pd.set_option("display.width", 200)
    main()

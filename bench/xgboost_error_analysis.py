"""Where the top-1 errors of a kernel-selection model are: by class, list length and kernel pair.

    python bench/xgboost_error_analysis.py [--preds results/mi100/random/xgboost/seed-0/preds.csv.gz]
        [--dataset mi100] [--split random] [--out bench/results/xgboost_errors.json]

Re-scores the predictions with the Evaluator's scorer and writes JSON: top-1 per
(spatial dims, dtype), per layout and per number of listed kernels; the most frequent
(fastest kernel, chosen kernel) pairs among the errors; the median LoP of the errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preds", default=str(ROOT / "results/mi100/random/xgboost/seed-0/preds.csv.gz"))
    ap.add_argument("--dataset", default="mi100")
    ap.add_argument("--split", default="random")
    ap.add_argument("--out", default=str(ROOT / "bench/results/xgboost_errors.json"))
    args = ap.parse_args()

    import kbench
    from kbench.evaluate import Evaluator, read_predictions
    from kbench.metrics import score_rankings

    ds = kbench.load(args.dataset)
    ev = Evaluator(ds, args.split, reference=None)
    prob, kern, _ = ev._to_long(read_predictions(args.preds)[0], False)
    c = score_rankings(ev.table, prob, kern)
    t = ev.table
    p = ds.problems.set_index("problem_id").loc[t.problem_ids].reset_index()
    p["top1"] = c.top[1]
    p["lop"] = c.t_choice / t.t_best - 1
    p["choice"] = t.kernels[c.choice_kernel]
    p["best"] = t.kernels[np.nanargmin(t.times, axis=1)]
    p["n_listed"] = (~np.isnan(t.times)).sum(axis=1)
    err = p[~p["top1"]]

    def table(by):
        g = p.groupby(by)["top1"].agg(["mean", "count"]).reset_index()
        return [{**{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}} for r in g.to_dict("records")]

    pairs = err.groupby(["best", "choice"]).size().sort_values(ascending=False).head(15)
    out = {"dataset": args.dataset, "split": args.split, "preds": str(args.preds), "problems": int(len(p)),
           "top1": float(p["top1"].mean()), "within5": float((p["lop"] <= 0.05).mean()),
           "share_censored": float(c.censored.mean()), "errors_median_lop": float(err["lop"].median()),
           "by_dims_dtype": table(["spatial_dims", "dtype"]), "by_layout": table("layout"),
           "by_n_listed": table(pd.cut(p["n_listed"], [0, 1, 2, 3, 4, 10, 1000]).astype(str)),
           "top_error_pairs": [{"fastest": b, "chosen": ch, "problems": int(n)} for (b, ch), n in pairs.items()]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: out[k] for k in ("top1", "within5", "share_censored", "errors_median_lop")}, indent=2))


if __name__ == "__main__":
    main()

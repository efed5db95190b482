"""``xgboost``'s two decision rules side by side, on valid only: one fit per seed, two rankings.

    python experiments/xgboost_decision_trial.py [--dataset mi100] [--split random] [--seeds 0]
        [--out experiments/results/xgboost_decision_trial.json]

``probability`` ranks the class kernels by predicted probability of being fastest;
``expected_slowdown`` by the expected log slowdown sum_j p_j C[j, k] under the training
cost matrix (``XGBoostMulticlass.slowdown_costs``). Both come from the same fitted boosters,
scored by kbench's Evaluator on the split's valid part (speed-up over the default reference).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    import kbench
    from kbench.scoring.evaluate import Evaluator
    from kbench_baselines import get_baseline

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="mi100")
    ap.add_argument("--split", default="random")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--out", default=str(ROOT / "experiments" / "results" / "xgboost_decision_trial.json"))
    args = ap.parse_args()
    ds = kbench.load(args.dataset)
    parts = ds.split(args.split)
    ev = Evaluator(ds, split=args.split, part="valid", reference="default")
    rows = []
    for seed in args.seeds:
        model = get_baseline("xgboost", decision="expected_slowdown")
        model.fit(ds, parts["train"], parts["valid"], seed=seed)
        costs = model.costs
        for decision in ("probability", "expected_slowdown"):
            model.costs = costs if decision == "expected_slowdown" else {}
            m = ev(model.predict(ds, parts["valid"])).metrics
            o = m["overall"]
            row = {"seed": seed, "decision": decision,
                   **{k: o[k] for k in ("top1", "within5", "geomean_slowdown", "lop_mean", "speedup_geomean",
                                        "speedup_total")},
                   "by_direction": {d: {k: v[k] for k in ("top1", "speedup_geomean", "speedup_total")}
                                    for d, v in m["by_direction"].items()}}
            rows.append(row)
            print(json.dumps(row), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"dataset": ds.name, "split": args.split, "part": "valid",
                                          "reference": ev.reference_name, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Valid-only trial: does averaging xgboost's and reformer-onehot's probabilities raise top-1 (issue 4)?

    python experiments/ensemble_valid_trial.py        # writes experiments/results/ensemble_valid_trial.json

Both models are fitted on mi100 random's train part (seed 0) and scored on its valid part only;
the fused score is w * p_xgboost + (1 - w) * p_reformer over the kernels either model scores.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import numpy as np  # noqa: E402

import kbench  # noqa: E402
from kbench.scoring.evaluate import Evaluator  # noqa: E402
from kbench_baselines import get_baseline  # noqa: E402
from kbench_baselines.base import predictions_frame, problems_of, rank_by_scores  # noqa: E402


def main() -> None:
    ds = kbench.load("mi100")
    parts = ds.split("random")
    ev = Evaluator(ds, "random", part="valid", reference=None)
    t = time.time()
    xg = get_baseline("xgboost").fit(ds, parts["train"], parts["valid"], seed=0)
    ro = get_baseline("reformer-onehot", verbose=False).fit(ds, parts["train"], parts["valid"], seed=0)
    fit_s = time.time() - t
    rows = []
    pv = problems_of(ds, parts["valid"])
    sx = xg.scores(ds, pv)                      # 2 + prob for class kernels; (0,2) otherwise
    pr = ro.scores(ds, parts["valid"])          # softmax DataFrame indexed by problem_id
    pr = pr.reindex(columns=list(xg.space.names)).fillna(0.0).loc[pv["problem_id"].to_numpy()].to_numpy()
    allowed = xg.space.allowed(pv)
    px = np.where(sx >= 2.0, sx - 2.0, 0.0)
    base = np.where(sx >= 2.0, 0.0, sx / 2.0)  # tie-break order for kernels no booster scores
    for w in (1.0, 0.8, 0.7, 0.6, 0.5, 0.4):
        fused = w * px + (1 - w) * pr
        score = np.where(allowed, 2.0 + fused + 1e-6 * base, base)
        preds = predictions_frame(pv["problem_id"], rank_by_scores(score, xg.space.names, allowed))
        o = ev(preds).metrics["overall"]
        rows.append({"w_xgboost": w, "valid_top1": o["top1"], "within5": o["within5"]})
        print(json.dumps(rows[-1]), flush=True)
    out = ROOT / "experiments" / "results" / "ensemble_valid_trial.json"
    out.write_text(json.dumps({"dataset": "mi100", "split": "random", "part": "valid", "seed": 0,
                               "fit_s_both": fit_s, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()

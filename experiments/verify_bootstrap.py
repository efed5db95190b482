"""Issue 19: how sure is a GPU-measured speed-up over cuDNN mode A of 1.10? A bootstrap over test problems.

For each entry re-timed on the GPU (``raw/<dataset>/verify/<method>`` for h100 and h200: the plan and
raw timings that its ``verification.json`` is scored from), resample the test problems with replacement 10,000 times
(seed 0) and report the 2.5 / 97.5 percentiles of the geomean speed-up, measured and from the table.

    python experiments/verify_bootstrap.py    # -> experiments/results/verify_bootstrap.json
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbench.gpu_check.command import read_raw  # noqa: E402
from kbench.gpu_check.score import measured_times, role_times  # noqa: E402


def interval(log_ratio: np.ndarray, rng: np.random.Generator, n_boot: int = 10_000) -> dict:
    idx = rng.integers(0, len(log_ratio), size=(n_boot, len(log_ratio)))
    means = log_ratio[idx].mean(axis=1)
    lo, hi = np.exp(np.percentile(means, [2.5, 97.5]))
    return {"geomean": float(np.exp(log_ratio.mean())), "ci95": [float(lo), float(hi)],
            "share_of_resamples_at_least_1_10": float((means >= np.log(1.10)).mean())}


def bootstrap(folder: Path) -> dict:
    """Intervals of one re-timed entry, from the plan and raw timings its verification.json is scored from."""
    plan = json.loads(gzip.open(folder / "plan.json.gz").read())
    raw, _, _, _ = read_raw(folder / "raw.jsonl.gz")
    df = role_times(plan, measured_times(raw))
    rng = np.random.default_rng(0)
    return {"dataset": plan["dataset"], "problems": int(len(df)),
            "measured": interval(np.log(df["m_mode_a"] / df["m_choice"]).to_numpy(), rng),
            "table": interval(np.log(df["t_mode_a"] / df["t_choice"]).to_numpy(), rng)}


def main() -> int:
    out = {"command": "python experiments/verify_bootstrap.py", "resamples": 10_000, "seed": 0, "entries": {}}
    for dataset in ("h100", "h200"):
        out["entries"][dataset] = {method: bootstrap(ROOT / "raw" / dataset / "verify" / method)
                                   for method in ("xgboost-plans-safe", "xgboost-plans")}
    path = ROOT / "experiments" / "results" / "verify_bootstrap.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

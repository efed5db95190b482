"""Issue 45 item 4: top-1 and geomean slowdown against the size of the train part, for a board's best model.

Each point trains the model on a seeded random share of the split's train part (the share's problems
drawn with the fit's own seed; early stopping on the whole valid part, as on the board) and scores
the whole test part. The 100% point is the board's own fit; with ``--full-from-board`` it is read
from the board entry's per-seed figures (``leaderboard/<dataset>/<split>/<model>/result.json``, the
same fit with the same seed) instead of being trained again.

    python experiments/learning_curve.py --dataset mi100 --model xgboost
    python experiments/learning_curve.py --dataset h200-pytorch --model xgboost-plans-safe --full-from-board
    # -> experiments/results/learning_curve_<dataset>.json; the board of that dataset and split shows it
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import kbench  # noqa: E402
from kbench.scoring.evaluate import Evaluator  # noqa: E402
from kbench_baselines import get_baseline  # noqa: E402

FIGURES = ("top1", "geomean_slowdown", "speedup_geomean")


def train_share(train: pd.Index, fraction: float, seed: int) -> pd.Index:
    """A seeded random share of the train part, in the part's own order (all of it at 1.0)."""
    if fraction >= 1.0:
        return train
    rng = np.random.default_rng(seed)
    return train[np.sort(rng.choice(len(train), int(round(fraction * len(train))), replace=False))]


def board_seed_figures(dataset: str, split: str, model: str) -> dict[int, dict]:
    """{seed: figures} of the board entry's per-seed test figures."""
    doc = json.loads((ROOT / "leaderboard" / dataset / split / model / "result.json").read_text())
    return {int(seed): {k: fig[k] for k in FIGURES}
            for seed, fig in zip(doc["seeds"]["seeds"], doc["seeds"]["per_seed"], strict=True)}


def summary(rows: list[dict]) -> list[dict]:
    frame = pd.DataFrame(rows)
    out = []
    for fraction, g in frame.groupby("fraction"):
        rec = {"fraction": float(fraction), "train_problems": int(g["train_problems"].iloc[0]), "seeds": int(len(g))}
        for k in FIGURES:
            rec[f"{k}_mean"] = float(g[k].mean())
            rec[f"{k}_std"] = float(g[k].std(ddof=1)) if len(g) > 1 else 0.0
        out.append(rec)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--split", default="random")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.05, 0.1, 0.3, 1.0])
    ap.add_argument("--full-from-board", action="store_true",
                    help="take the 100%% points from the board entry's per-seed figures (the same fits)")
    a = ap.parse_args(argv)
    ds = kbench.load(a.dataset)
    parts = ds.split(a.split)
    train = pd.Index(parts["train"])
    evaluate = Evaluator(ds, a.split, part="test")
    board = board_seed_figures(a.dataset, a.split, a.model) if a.full_from_board else {}
    rows = []
    for fraction in a.fractions:
        for seed in a.seeds:
            ids = train_share(train, fraction, seed)
            row = {"fraction": fraction, "seed": seed, "train_problems": int(len(ids))}
            if fraction >= 1.0 and seed in board:
                row.update(board[seed], source="board entry")
            else:
                t0 = time.perf_counter()
                model = get_baseline(a.model).fit(ds, ids, parts["valid"], seed=seed)
                row["fit_s"] = round(time.perf_counter() - t0, 1)
                overall = evaluate(model.predict(ds, parts["test"])).overall
                row.update({k: float(overall[k]) for k in FIGURES}, source="fitted here")
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = ROOT / "experiments" / "results" / f"learning_curve_{a.dataset}.json"
    command = ("python experiments/learning_curve.py --dataset " + a.dataset + " --model " + a.model
               + (f" --split {a.split}" if a.split != "random" else "")
               + " --seeds " + " ".join(map(str, a.seeds)) + (" --full-from-board" if a.full_from_board else ""))
    out.write_text(json.dumps({"dataset": a.dataset, "split": a.split, "part": "test", "model": a.model,
                               "reference": evaluate.reference_name, "seeds": a.seeds, "command": command,
                               "rows": rows, "summary": summary(rows)}, indent=1) + "\n")
    print(f"-> {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

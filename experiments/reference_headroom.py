"""Issue 40: where is the headroom of a selector over cuDNN's heuristics and PyTorch, per NVIDIA board?

For each collected NVIDIA dataset's ``random`` test part, from the table: the oracle's speed-up over
every recorded reference (cuDNN mode A, mode B, PyTorch's choice, PyTorch's ``benchmark = True``
autotune over mode A's first 10), how often each reference already picks the fastest plan, how the
log-headroom over cuDNN mode B splits by direction and data type, and, for the board's best learned
entry (its stored seed-0 predictions, or ``--preds DATASET=FILE``), its speed-up over each reference
and the share of each reference's headroom it closes (ratio of log-geomeans). It also gives what a
speed-up of 1.10 over mode B would need: that share of the oracle's margin over mode B.

    python experiments/reference_headroom.py [--datasets h100 h200 h100-pytorch h200-pytorch]
        [--preds h200-pytorch=results/boards/h200-pytorch/random/xgboost-plans-safe/seed-0/preds.csv.gz]
        # -> experiments/results/reference_headroom.json
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

from kbench.leaderboard.store import PREDS_FILE, read_seed_predictions  # noqa: E402
from kbench.scoring.evaluate import Evaluator, read_predictions  # noqa: E402
from kbench.scoring.metrics import score_rankings  # noqa: E402

ENTRY = "xgboost-plans-safe"  # the best learned entry of every NVIDIA random board
STRONG = "cudnn_mode_b"       # the strongest recorded heuristic on every NVIDIA board
AIM = 1.10


def gm(v) -> float:
    return float(np.exp(np.nanmean(np.log(v))))


def entry_times(ev: Evaluator, preds: pd.DataFrame) -> np.ndarray:
    prob, kern, predicted = ev._to_long(preds, allow_partial=False)
    return np.where(predicted, score_rankings(ev.table, prob, kern).t_choice, np.nan)


def board(dataset: str, preds_path: str | None) -> dict:
    ev = Evaluator(dataset, split="random")
    t_best = ev.table.t_best
    refs = {r.name: r.t for r in ev.references if r.name != "cudnn_fallback"}
    out = {"dataset": dataset, "version": ev.dataset.version, "problems": int(len(t_best)), "references": {}}
    for name, t in refs.items():
        ok = ~np.isnan(t)
        out["references"][name] = {
            "problems": int(ok.sum()),
            "oracle_speedup_geomean": gm(t[ok] / t_best[ok]),
            "picks_the_fastest_share": float(np.mean(t[ok] <= t_best[ok] * (1 + 1e-12)))}
    # where the headroom over mode B lies: each group's share of the summed log(t_B / t_best)
    t_b = refs[STRONG]
    ok = ~np.isnan(t_b)
    log_room = np.log(t_b[ok] / t_best[ok])
    groups = {}
    for key, labels in (("direction", ev.table.direction[ok]), ("dtype", ev.table.dtype[ok])):
        frame = pd.DataFrame({"g": labels, "room": log_room})
        shares = frame.groupby("g")["room"].sum() / log_room.sum()
        counts = frame.groupby("g")["room"].size()
        groups[key] = {str(g): {"problems": int(counts[g]), "log_headroom_share": float(shares[g])} for g in shares.index}
    out[f"headroom_over_{STRONG}"] = groups
    margin = out["references"][STRONG]["oracle_speedup_geomean"]
    out[f"aim_{AIM}_over_{STRONG}_needs_share_of_oracle_margin"] = float(np.log(AIM) / np.log(margin))
    # the entry
    if preds_path is None:
        store = ROOT / "leaderboard" / dataset / "random" / ENTRY / PREDS_FILE
        if not store.exists():
            return out
        seeds = read_seed_predictions(store)
        preds, source = seeds[min(seeds)], str(store.relative_to(ROOT))
    else:
        preds, _ = read_predictions(preds_path)
        source = preds_path
    t_c = entry_times(ev, preds)
    entry = {"method": ENTRY, "predictions": source, "slowdown_geomean": gm(t_c / t_best), "over": {}}
    for name, t in refs.items():
        ok = ~np.isnan(t) & ~np.isnan(t_c)
        speedup, room = gm(t[ok] / t_c[ok]), gm(t[ok] / t_best[ok])
        entry["over"][name] = {"speedup_geomean": speedup,
                               "headroom_closed": float(np.log(speedup) / np.log(room)) if room > 1 else None}
    out["entry"] = entry
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["h100", "h200", "h100-pytorch", "h200-pytorch"])
    ap.add_argument("--preds", nargs="*", default=[], metavar="DATASET=FILE",
                    help="the entry's predictions for a dataset whose board has no stored entry yet")
    ap.add_argument("--out", default=str(ROOT / "experiments" / "results" / "reference_headroom.json"))
    args = ap.parse_args()
    given = dict(p.split("=", 1) for p in args.preds)
    result = {"command": "python experiments/reference_headroom.py " + " ".join(sys.argv[1:]),
              "boards": [board(d, given.get(d)) for d in args.datasets]}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for b in result["boards"]:
        refs = ", ".join(f"{n} {r['oracle_speedup_geomean']:.3f}" for n, r in b["references"].items())
        print(f"{b['dataset']}: oracle over {refs}")
        if "entry" in b:
            over = ", ".join(f"{n} {r['speedup_geomean']:.3f}" for n, r in b["entry"]["over"].items())
            print(f"  {ENTRY}: over {over}")


if __name__ == "__main__":
    main()

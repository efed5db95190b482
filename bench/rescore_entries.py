"""Re-score leaderboard entries from their per-seed predictions with the current Evaluator.

    python bench/rescore_entries.py DATASET [DATASET ...] [--results results] [--leaderboard leaderboard]

For each entry ``leaderboard/<dataset>/<split>/<method>/`` whose per-seed predictions are in
``results/<dataset>/<split>/<method>/seed-<k>/preds.csv.gz`` (as ``kbench run`` writes them),
every seed is scored again and the record re-aggregated; the entry's metadata, extra figures and
seed-0 predictions file stay as they are. Used when a scoring rule changes (e.g. the reference
heuristic of a dataset), so no model has to be retrained.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from kbench.evaluate import Evaluator
from kbench.leaderboard.store import record_json
from kbench.records import EvaluationResult, aggregate_seeds


def rescore(entry: Path, results: Path) -> EvaluationResult:
    old = EvaluationResult.model_validate_json((entry / "result.json").read_text())
    seeds = old.seeds.seeds if old.seeds else [0]
    ev = Evaluator(old.dataset.name, split=old.split, part=old.part)
    per_seed = []
    for seed in seeds:
        folder = results / old.dataset.name / old.split / old.method / f"seed-{seed}"
        record = ev(pd.read_csv(folder / "preds.csv.gz"), method=old.method)
        seed_old = folder / "result.json"
        if seed_old.exists():
            record.extra = EvaluationResult.model_validate_json(seed_old.read_text()).extra
        per_seed.append(record)
    new = aggregate_seeds(per_seed, seeds)
    new.predictions, new.extra, new.date = old.predictions, old.extra, old.date
    (entry / "result.json").write_text(record_json(new))
    return new


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--results", default="results")
    ap.add_argument("--leaderboard", default="leaderboard")
    args = ap.parse_args()
    for ds in args.datasets:
        for entry in sorted(Path(args.leaderboard, ds).glob("*/*")):
            if (entry / "result.json").exists():
                new = rescore(entry, Path(args.results))
                o = new.metrics["overall"]
                print(f"{entry}: reference {new.reference}, speed-up {o.get('speedup_geomean')}, "
                      f"LoP@30 {o.get('lop_at_30'):.4f}")


if __name__ == "__main__":
    main()

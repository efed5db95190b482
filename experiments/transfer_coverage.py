"""Issue 18: on h200 1.4.0 `source-oracle` fell from 1.0061 to 1.9121 geomean slowdown. Is that the device
gap, or the target test problems the source dataset does not hold?

h200 1.4.0 holds all of raw/h200 (21,992 problem-directions), further along the shared corpus order than
h100 1.3.0 (12,339), so part of its `random` test part has no H100 measurement: there `source-oracle`
falls back to the source's single best plan. This scores every h100 -> h200 transfer entry's committed
seed-0 predictions on the two parts of the target test part separately: the problems the source
dataset holds (its own `random` test part: the split hashes the geometry alike on both GPUs) and the
rest (`Evaluator(..., allow_partial=True)` on each part).

    python experiments/transfer_coverage.py     # -> experiments/results/transfer_coverage.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

import kbench  # noqa: E402
from kbench.scoring.evaluate import Evaluator, read_predictions  # noqa: E402

SOURCE, TARGET = "h100", "h200"
METRICS = ("n", "top1", "geomean_slowdown", "speedup_geomean")


def main() -> int:
    source, target = kbench.load(SOURCE), kbench.load(TARGET)
    test_ids = pd.Index(target.split("random")["test"])
    measured_on_source = test_ids.isin(source.runtimes["problem_id"].astype(str).unique())
    parts = {"source_measured": set(test_ids[measured_on_source]),
             "source_not_measured": set(test_ids[~measured_on_source])}
    on_source_test = pd.Index(source.split("random")["test"])
    evaluator = Evaluator(TARGET, "random")
    out = {"command": "python experiments/transfer_coverage.py",
           "source": {"name": SOURCE, "version": source.version},
           "target": {"name": TARGET, "version": target.version},
           "test_problems": int(len(test_ids)),
           "source_measured": int(measured_on_source.sum()),
           "source_measured_in_source_test_part": int(test_ids[measured_on_source].isin(on_source_test).sum()),
           "entries": {}}
    board = ROOT / "leaderboard" / "transfer" / f"{SOURCE}-to-{TARGET}"
    for record_path in sorted(board.glob("*/k*.json")):
        record = json.loads(record_path.read_text(encoding="utf-8"))
        assert record["dataset"]["version"] == target.version, record_path
        preds, _ = read_predictions(record_path.parent / record["predictions"]["path"])
        entry = {}
        for part, ids in parts.items():
            overall = evaluator(preds[preds["problem_id"].isin(ids)], allow_partial=True).metrics["overall"]
            entry[part] = {m: overall[m] for m in METRICS}
        out["entries"][f"{record['method']}/{record_path.stem}"] = entry
    path = ROOT / "experiments" / "results" / "transfer_coverage.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How far one board entry moves between two machines or software builds: the differences of two records.

    python experiments/reproduction.py --dataset mi100 --split random --method reformer \
        --before main:leaderboard/mi100/random/reformer/result.json \
        --after leaderboard/mi100/random/reformer/result.json

``--before`` and ``--after`` are record files, or ``REV:PATH`` for a record as committed at a git
revision (an entry that was replaced). Writes, for the method, each record's torch version, CPU,
seeds, overall metrics and their std over seeds, and the differences (after - before) into
``experiments/results/reproduction_<dataset>_<split>.json`` (other methods' comparisons in that
file are kept); the board's note and ``kbench run``'s comparison with the board read it
(:mod:`kbench.leaderboard.reproduction`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbench.leaderboard.reproduction import COMPARED, REPRODUCTION  # noqa: E402
from kbench.scoring.records import EvaluationResult  # noqa: E402


def read_record(source: str) -> tuple[EvaluationResult, str]:
    """The record at ``source`` (a file, or REV:PATH in git) and how to get it again."""
    if Path(source).exists():
        return EvaluationResult.model_validate_json(Path(source).read_text(encoding="utf-8")), source
    text = subprocess.run(["git", "show", source], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    rev = subprocess.run(["git", "rev-parse", "--short", source.split(":", 1)[0]], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    return EvaluationResult.model_validate_json(text), f"git show {rev}:{source.split(':', 1)[1]}"


def summary(record: EvaluationResult, source: str) -> dict:
    env = record.environment
    overall = record.metrics["overall"]
    return {"source": source, "torch": env.packages.get("torch") if env else None, "cpu": env.cpu if env else None,
            "kbench_code": env.git.describe() if env else None, "date": record.date,
            "seeds": record.seeds.seeds if record.seeds else None,
            "metrics": {k: overall.get(k) for k in COMPARED},
            "std_over_seeds": {k: record.seeds.std.get(k) for k in COMPARED} if record.seeds else {}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--split", required=True)
    ap.add_argument("--method", required=True)
    ap.add_argument("--before", required=True, help="record file, or REV:PATH")
    ap.add_argument("--after", required=True, help="record file, or REV:PATH")
    args = ap.parse_args()
    before, after = (summary(*read_record(s)) for s in (args.before, args.after))
    for side, rec in (("before", before), ("after", after)):
        if rec["seeds"] is None:
            sys.exit(f"experiments/reproduction.py: the {side} record holds no seeds")
    out = ROOT / REPRODUCTION.format(dataset=args.dataset, split=args.split)
    doc = json.loads(out.read_text()) if out.exists() else {"dataset": args.dataset, "split": args.split,
                                                           "entries": {}}
    doc["entries"][args.method] = {
        "before": before, "after": after, "seeds": min(len(before["seeds"]), len(after["seeds"])),
        "difference": {k: after["metrics"][k] - before["metrics"][k] for k in COMPARED
                       if isinstance(after["metrics"][k], float) and isinstance(before["metrics"][k], float)},
        "command": " ".join(["python", "experiments/reproduction.py"] + sys.argv[1:])}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(json.dumps(doc["entries"][args.method], indent=2, sort_keys=True))


if __name__ == "__main__":
    main()

"""Rule 7 (corrected labels): an entry re-scored from its stored seed-0 predictions keeps one seed.

Uses the committed h100 entries: xgboost-plans was re-scored on h100 1.1.0 with
``bench/rescore_entries.py --relabel h100``.
"""
import json
from pathlib import Path

from kbench.leaderboard.schema import record_problems
from kbench.records import EvaluationResult

ROOT = Path(__file__).resolve().parents[2] / "leaderboard" / "h100" / "random" / "xgboost-plans"


def _record(**relabel_changes):
    rec = EvaluationResult.model_validate_json((ROOT / "result.json").read_text())
    if relabel_changes is not None:
        rec.extra = {**rec.extra, "relabel": {**rec.extra["relabel"], **relabel_changes}}
    return rec


def test_relabelled_entry_with_one_seed_is_valid():
    rec = _record()
    assert rec.seeds.seeds == [0] and rec.extra["relabel"]["seeds_before"] == [0, 1, 2, 3, 4]
    assert rec.extra["relabel"]["from_dataset"]["version"] == "1.0.0" and rec.dataset.version == "1.1.0"
    assert record_problems(rec) == []


def test_one_seed_without_the_relabel_mark_breaks_the_seed_rule():
    rec = _record()
    rec.extra = {k: v for k, v in rec.extra.items() if k != "relabel"}
    assert any("1 seed(s); the rules ask for at least 5" in p for p in record_problems(rec))


def test_relabel_mark_must_name_a_valid_earlier_entry():
    assert any("seeds_before" in p for p in record_problems(_record(seeds_before=[0])))
    same = json.loads((ROOT / "result.json").read_text())["dataset"]
    assert any("earlier version" in p for p in record_problems(_record(from_dataset=same)))
    assert any("keeps its first seed" in p for p in record_problems(_record(seeds_before=[3, 0, 1, 2, 4])))

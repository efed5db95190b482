"""Rule 7 (corrected labels): an entry re-scored from its stored seed-0 predictions keeps one seed.

Uses a real relabelled record: the h100 random xgboost-plans entry as
``kbench leaderboard rescore --relabel h100`` (then a script) wrote it when h100 1.1.0 came out (session 6), kept in
``data/relabelled-result.json`` after the entry itself was re-run with 5 seeds (session 8).
"""
import json
from pathlib import Path

from kbench.leaderboard.schema import record_problems
from kbench.scoring.records import EvaluationResult

RECORD = Path(__file__).resolve().parent / "data" / "relabelled-result.json"


def _record(**relabel_changes):
    rec = EvaluationResult.model_validate_json(RECORD.read_text())
    if relabel_changes:
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
    same = json.loads(RECORD.read_text())["dataset"]
    assert any("earlier version" in p for p in record_problems(_record(from_dataset=same)))
    assert any("keeps its first seed" in p for p in record_problems(_record(seeds_before=[3, 0, 1, 2, 4])))


def test_relabel_script_refuses_unknown_names_without_writing(tmp_path):
    """kbench leaderboard rescore --relabel: an unknown dataset or method is one message and exit 2, and the
    entries are left as they are (a typo in --methods must not silently re-score nothing)."""
    import shutil
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    board = tmp_path / "leaderboard"
    shutil.copytree(root / "leaderboard" / "h100" / "networks" / "oracle", board / "h100" / "networks" / "oracle")
    before = {p: p.read_bytes() for p in board.rglob("*") if p.is_file()}
    for args, messages in ((["--relabel", "nope"], ["unknown dataset 'nope'"]),
                           (["--relabel", "h100", "--methods", "orcale"],
                            ["--methods: no h100 entry named orcale under", "its entries are oracle."])):
        run = subprocess.run([sys.executable, "-m", "kbench.cli", "leaderboard", "rescore", *args, "--leaderboard", str(board)], capture_output=True,
                             text=True, cwd=tmp_path)
        assert run.returncode == 2, run.stderr
        assert all(m in run.stderr for m in messages) and "Traceback" not in run.stderr
    assert {p: p.read_bytes() for p in board.rglob("*") if p.is_file()} == before

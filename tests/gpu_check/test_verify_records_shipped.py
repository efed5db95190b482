"""Every GPU re-timing record on the board follows from the timings committed beside it.

A board entry's ``verification.json`` (shown as "(GPU ×)") is scored on the CPU from the run plan
and the raw GPU timings that ``raw/<dataset>/verify/<method>/`` keeps gzipped. Scoring those files
again must give the same record, so nobody has to trust a speed-up that the repository cannot
reproduce.
"""

import gzip
import json
import shutil

import pytest

from kbench.cli import main
from kbench.sources.dataset_files import REPO_ROOT

BOARD_RECORDS = sorted((REPO_ROOT / "leaderboard").glob("*/*/*/verification.json"))


def _significant(obj, digits: int = 12):
    """``obj`` with every float rounded to ``digits`` significant digits, recursively."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: _significant(v, digits) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_significant(v, digits) for v in obj]
    return obj


def _timings_folder(record: dict):
    """``raw/<dataset>/verify/<method>/`` for the ``random`` split, ``.../verify/<split>/<method>/`` else."""
    split = [] if record["split"] == "random" else [record["split"]]
    return REPO_ROOT.joinpath("raw", record["dataset"]["name"], "verify", *split, record["method"])


def _first_seed_sha256(entry) -> str:
    """The sha256 a re-timing of the entry's first seed records."""
    from kbench.leaderboard.store import first_seed, read_seed_predictions
    return first_seed(read_seed_predictions(entry / "preds.parquet"))[1]


def test_the_gpu_records_stay_in_the_repository():
    """The re-timings of xgboost-plans-safe and xgboost-plans on the H100 and the H200 are kept with
    their raw timings after their dataset version or their entry is superseded (an earlier run's files
    carry a suffix, e.g. ``verification-1.4.0.json`` or ``verification-entry-2026-11-25.json``)."""
    kept = {(p.parts[-4], p.parts[-2]) for p in (REPO_ROOT / "raw").glob("*/verify/*/verification*.json")}
    assert kept >= {(d, m) for d in ("h100", "h200") for m in ("xgboost-plans-safe", "xgboost-plans")}


def test_every_gpu_record_of_the_current_entry_is_on_the_board():
    """A re-timing record in raw/<dataset>/verify/ that timed an entry's current predictions (its dataset
    version ships and its predictions are the entry's first seed) belongs on the board; one of an older
    version or of predictions the entry no longer makes must not stand beside the entry."""
    import kbench
    records = sorted((REPO_ROOT / "raw").glob("*/verify/**/verification.json"))
    assert records
    for path in records:
        record = json.loads(path.read_text(encoding="utf-8"))
        name, method, split = record["dataset"]["name"], record["method"], record["split"]
        entry = REPO_ROOT / "leaderboard" / name / split / method
        current = (record["dataset"]["version"] == kbench.load(name).info["version"] and (entry / "result.json").exists()
                   and record["predictions"]["sha256"] == _first_seed_sha256(entry))
        board = entry / "verification.json"
        if current and path.parent == _timings_folder(record):
            assert board.exists(), path
        if board.exists():  # whatever stands on the board timed the entry's current predictions
            on_board = json.loads(board.read_text(encoding="utf-8"))
            assert on_board["predictions"]["sha256"] == _first_seed_sha256(entry), board


@pytest.mark.parametrize("board_record", BOARD_RECORDS, ids=lambda p: "/".join(p.parts[-4:-1]))
def test_board_record_rescores_from_its_committed_timings(board_record, tmp_path, capsys):
    record = json.loads(board_record.read_text(encoding="utf-8"))
    folder = _timings_folder(record)
    # the record beside the timings is the board's own
    assert json.loads((folder / "verification.json").read_text(encoding="utf-8")) == record
    # raw_autotune.jsonl: the autotune pass of a plan with live references, where the run had one
    for name in ("plan.json", "raw.jsonl", "raw_autotune.jsonl"):
        if name == "raw_autotune.jsonl" and not (folder / f"{name}.gz").exists():
            continue
        with gzip.open(folder / f"{name}.gz", "rb") as src, open(tmp_path / name, "wb") as dst:
            shutil.copyfileobj(src, dst)

    assert main(["verify-on-gpu", "--out", str(tmp_path), "--score-only", "--method", record["method"]]) == 0
    capsys.readouterr()
    rescored = json.loads((tmp_path / "verification.json").read_text(encoding="utf-8"))
    # the date and kbench_version are the scoring's own (the day, the scorer); everything measured or
    # derived must match
    for key in ("date", "kbench_version"):
        rescored.pop(key), record.pop(key)
    # equal to the last bits but for float sums, whose last digit depends on numpy's summation order
    assert _significant(rescored) == _significant(record)

"""`kbench leaderboard rescore --stored`: records scored before a metric existed gain it from their stored
predictions, and the board validates again; a one-seed entry keeps its stored figures."""

import json
import shutil

import pytest

from kbench.cli import main
from kbench.leaderboard.rescorer import validate_board
from kbench.leaderboard.store import PREDS_FILE, read_seed_predictions, seed_predictions_parquet
from kbench.scoring.prediction_files import sha256_bytes

NEW = ("best_of_", "kendall_tau", "ndcg_at_", "references", "networks")


def strip_new(tree):
    """A record as a version-1 scorer wrote it: none of the figures added since."""
    if isinstance(tree, dict):
        return {k: strip_new(v) for k, v in tree.items() if not k.startswith(NEW)}
    if isinstance(tree, list):
        return [strip_new(v) for v in tree]
    return tree


@pytest.fixture
def board(toy_board, tmp_path):
    dst = tmp_path / "leaderboard"
    shutil.copytree(toy_board, dst)
    return dst


def test_rescore_stored_brings_old_records_up_to_date(board, toy):
    model = board / "toy/random/toy-model"
    # toy-model becomes a one-seed entry: only seed 0's predictions stay stored
    stored = read_seed_predictions(model / PREDS_FILE)
    data = seed_predictions_parquet({0: stored[0]})
    (model / PREDS_FILE).write_bytes(data)
    before = {}
    for path in sorted(board.glob("toy/random/*/result.json")):
        doc = json.loads(path.read_text())
        if path.parent == model:
            doc["predictions"]["sha256"] = sha256_bytes(data)
        doc["environment"]["cpu"] = "CPU: the machine that made the predictions"
        before[path.parent.name] = doc
        old = strip_new(doc)
        old["schema_version"] = 1
        path.write_text(json.dumps(old, indent=2) + "\n")
    with pytest.raises(Exception, match="missing from the record"):
        validate_board(board)
    assert main(["leaderboard", "rescore", "--stored", "--leaderboard", str(board)]) == 0
    summary = validate_board(board)
    assert summary["rescored"] == len(before) and summary["partial"] == ["toy/random/toy-model"]
    for name, doc in before.items():
        new = json.loads((board / "toy/random" / name / "result.json").read_text())
        assert new["schema_version"] == 3
        # the software that wrote the predictions, not the re-scoring machine's
        assert new["environment"] == doc["environment"]
        o = new["metrics"]["overall"]
        assert o["geomean_slowdown"] == doc["metrics"]["overall"]["geomean_slowdown"]
        assert "best_of_3" in o and "toy_heuristic" in o["references"]
        if name != "toy-model":  # every seed stored: re-aggregated whole, the figures a run writes now
            assert new["metrics"] == doc["metrics"] and new["seeds"] == doc["seeds"]
    # the one-seed entry: the new figures come from seed 0 (std undefined), the others stay as stored
    seeds = json.loads((model / "result.json").read_text())["seeds"]
    assert seeds["per_seed"][0]["best_of_3"] == seeds["mean"]["best_of_3"] and seeds["std"]["best_of_3"] is None
    assert "best_of_3" not in seeds["per_seed"][1]
    assert seeds["mean"]["geomean_slowdown"] == before["toy-model"]["seeds"]["mean"]["geomean_slowdown"]


def test_rescore_stored_names_an_unknown_dataset(board, toy, capsys):
    assert main(["leaderboard", "rescore", "--stored", "nosuch", "--leaderboard", str(board)]) == 2
    assert "no entries of nosuch" in capsys.readouterr().err

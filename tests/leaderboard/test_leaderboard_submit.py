"""`kbench submit`: re-scoring from the predictions file, version and checksum checks, the entry layout."""

import gzip
import json
import shutil

import pytest

from kbench.cli import main
from kbench.core.errors import KbenchInputError
from kbench.leaderboard.rescorer import validate_board
from kbench.leaderboard.store import read_seed_predictions
from kbench.leaderboard.submit import submit
from kbench.scoring.prediction_files import read_predictions


@pytest.fixture
def run_dir(toy_board, tmp_path):
    """A writable copy of the toy run's results for toy-model (result.json, meta.json, seed-*/)."""
    src = toy_board.parent / "results" / "toy" / "random" / "toy-model"
    dst = tmp_path / "toy-model"
    shutil.copytree(src, dst)
    return dst


def test_submit_rescores_and_adds_the_entry(run_dir, toy, tmp_path, capsys):
    root = tmp_path / "lb"
    code = main(["submit", str(run_dir / "result.json"), "--meta", str(run_dir / "meta.json"),
                 "--leaderboard", str(root)])
    assert code == 0
    out = capsys.readouterr().out
    assert "re-scored seed(s) [0, 1, 2, 3, 4]" in out
    folder = root / "toy" / "random" / "toy-model"
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "preds.parquet", "result.json"]
    assert (root / "README.md").exists() and (root / "site" / "index.html").exists()
    assert validate_board(root)["partial"] == []
    # every seed's predictions are stored, each reading back as the run's file (already lean)
    stored = read_seed_predictions(folder / "preds.parquet")
    assert sorted(stored) == [0, 1, 2, 3, 4]
    for seed, frame in stored.items():
        assert frame.equals(read_predictions(run_dir / f"seed-{seed}" / "preds.csv.gz")[0])
    # again without --replace: refused; with it: fine
    with pytest.raises(KbenchInputError, match="--replace"):
        submit(run_dir / "result.json", run_dir / "meta.json", root=root)
    submit(run_dir / "result.json", run_dir / "meta.json", root=root, replace=True)


def test_submit_detects_claimed_metrics_that_do_not_reproduce(run_dir, toy, tmp_path):
    path = run_dir / "result.json"
    doc = json.loads(path.read_text())
    for per_seed in doc["seeds"]["per_seed"]:
        per_seed["top1"] = min(1.0, per_seed["top1"] + 0.05)
    path.write_text(json.dumps(doc))
    # the summary no longer follows from the per-seed scores
    with pytest.raises(KbenchInputError, match="seeds.mean.top1"):
        submit(path, run_dir / "meta.json", root=tmp_path / "lb")
    # a consistent record whose scores the predictions do not give
    from kbench.scoring.records import EvaluationResult, aggregate_seeds
    seed_records = []
    for seed in range(5):
        rec = EvaluationResult.model_validate_json((run_dir / f"seed-{seed}" / "result.json").read_text())
        rec.metrics["overall"]["top1"] = min(1.0, rec.metrics["overall"]["top1"] + 0.05)
        seed_records.append(rec)
    agg = aggregate_seeds(seed_records, list(range(5)))
    agg.predictions.path = "seed-0/preds.csv.gz"
    path.write_text(agg.model_dump_json())
    with pytest.raises(KbenchInputError, match=r"(?s)does not give the record's figures.*seeds.per_seed\[0\] \(seed 0\).top1: claimed"):
        submit(path, run_dir / "meta.json", root=tmp_path / "lb")
    assert not (tmp_path / "lb").exists()


def test_submit_detects_other_predictions(run_dir, toy, tmp_path):
    # the record's own predictions file replaced by another (its sha256 differs)
    named = run_dir / "seed-0" / "preds.csv.gz"
    named.write_bytes(gzip.compress(gzip.decompress((run_dir / "seed-1" / "preds.csv.gz").read_bytes()) + b"\n"))
    with pytest.raises(KbenchInputError, match="not the file the record was scored from"):
        submit(run_dir / "result.json", run_dir / "meta.json", root=tmp_path / "lb")


def test_submit_refuses_one_csv_for_several_seeds(run_dir, toy, tmp_path):
    with pytest.raises(KbenchInputError, match=r"a CSV holds one seed's predictions, the record lists seeds"):
        submit(run_dir / "result.json", run_dir / "meta.json", root=tmp_path / "lb",
               preds=run_dir / "seed-0" / "preds.csv.gz")


def test_submit_checks_versions_and_checksums(run_dir, toy, tmp_path):
    for field, value, message in (("checksum", "cd" * 32, "scored on other data"),
                                  ("version", "0.9.0", "version")):
        for name in ("result.json", "meta.json"):
            doc = json.loads((run_dir / name).read_text())
            doc["dataset"][field] = value
            (run_dir / name).write_text(json.dumps(doc))
        with pytest.raises(KbenchInputError, match=message):
            submit(run_dir / "result.json", run_dir / "meta.json", root=tmp_path / "lb")
    shutil.rmtree(run_dir)


def test_submit_checks_kbench_version_and_seeds(run_dir, toy, tmp_path):
    for name in ("result.json", "meta.json"):
        doc = json.loads((run_dir / name).read_text())
        doc["kbench_version"] = "0.0.1"
        (run_dir / name).write_text(json.dumps(doc))
    with pytest.raises(KbenchInputError, match="kbench 0.0.1"):
        submit(run_dir / "result.json", run_dir / "meta.json", root=tmp_path / "lb")
    # a single-seed record (kbench evaluate --json) is refused by the rules
    seed0 = run_dir / "seed-0" / "result.json"
    with pytest.raises(KbenchInputError, match="at least 5"):
        submit(seed0, run_dir / "meta.json", root=tmp_path / "lb")


def test_submit_meta_must_describe_the_record(run_dir, toy, tmp_path):
    doc = json.loads((run_dir / "meta.json").read_text())
    doc["method"] = "another-method"
    (run_dir / "meta.json").write_text(json.dumps(doc))
    assert main(["submit", str(run_dir / "result.json"), "--meta", str(run_dir / "meta.json"),
                 "--leaderboard", str(tmp_path / "lb")]) == 2


@pytest.mark.parametrize("missing", ["seed-0", "seed-3"])
def test_submit_without_predictions_is_refused(run_dir, toy, tmp_path, missing):
    """Every seed's predictions are re-scored: a record missing any of them is refused, nothing written."""
    shutil.rmtree(run_dir / missing)
    with pytest.raises(KbenchInputError, match=rf"no predictions for seed\(s\) \[{missing[-1]}\]"):
        submit(run_dir / "result.json", run_dir / "meta.json", root=tmp_path / "lb")
    assert not (tmp_path / "lb").exists()


def test_submit_takes_a_stored_parquet(run_dir, toy, tmp_path):
    """An entry's preds.parquet (every seed) is a valid --preds: re-submitting a board entry works."""
    root = tmp_path / "lb"
    submit(run_dir / "result.json", run_dir / "meta.json", root=root)
    entry = root / "toy" / "random" / "toy-model"
    report = submit(entry / "result.json", entry / "meta.json", root=tmp_path / "lb2")
    assert report.seeds_rescored == [0, 1, 2, 3, 4]
    assert (tmp_path / "lb2" / "toy" / "random" / "toy-model" / "preds.parquet").read_bytes() == \
        (entry / "preds.parquet").read_bytes()

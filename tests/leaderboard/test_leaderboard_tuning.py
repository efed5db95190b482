"""Tuning-parameter entries on the leaderboard: records, validation, re-scoring, tables."""

import numpy as np
import pytest

import kbench
from kbench import __version__
from kbench.core.errors import KbenchInputError
from kbench.leaderboard import site
from kbench.leaderboard.rescorer import validate_board
from kbench.leaderboard.schema import SubmissionMeta, parse_record, record_problems, validate_tree
from kbench.leaderboard.store import gzip_bytes, seed_predictions_parquet, write_entry
from kbench.leaderboard.submit import submit
from kbench.scoring.evaluate import evaluate_tuning
from kbench.scoring.records import DatasetRef, TuningResult, aggregate_seeds

SOLVER = "ConvAsm1x1U"
PARAMS = ["read_size", "k_mult", "chunks_per_wave", "chunk_size", "n_mult", "c_mult", "waves_c_in_group",
          "waves_k_in_group"]


@pytest.fixture(scope="module")
def tuning():
    ds = kbench.load("mi50-tuning")
    test = ds.split("random")["test"]
    truth = ds.targets[(ds.targets["solver"] == SOLVER) & ds.targets["problem_id"].isin(test)]
    oracle = truth[["problem_id"] + PARAMS].reset_index(drop=True)
    # a worse one: the first parameter replaced by another legal value on every other problem
    worse = oracle.copy()
    rows = np.arange(len(worse)) % 2 == 0
    worse.loc[rows, "read_size"] = np.where(worse.loc[rows, "read_size"] == 1, 2, 1)
    return ds, oracle, worse


def meta_for(ds, method, role="entry"):
    return SubmissionMeta(method=method, role=role, paper=None, code="baselines/seq2seq.py", contact="tests",
                          command="pytest", n_parameters=None, model_size_bytes=None, training_hardware="CPU",
                          training_time_s=1.0, inference_latency_ms=None, external_data=False,
                          kbench_version=__version__,
                          dataset=DatasetRef(name=ds.name, version=ds.version, checksum=ds.checksum),
                          split="random")


def entry(ds, frame, method, seeds=(0, 1, 2, 3, 4)):
    rec = evaluate_tuning(ds, frame, SOLVER, "random", "test", method=method)
    return aggregate_seeds([rec] * len(seeds), list(seeds))


def test_oracle_and_hand_worked_scores(tuning):
    ds, oracle, worse = tuning
    o = evaluate_tuning(ds, oracle, SOLVER, method="oracle").metrics
    assert o["average_accuracy"] == 1.0 and o["perfect_prediction"] == 1.0 and o["n_missing"] == 0
    w = evaluate_tuning(ds, worse, SOLVER, method="worse").metrics
    half = int((np.arange(len(worse)) % 2 == 0).sum())
    # one of 8 parameters wrong on `half` problems
    assert w["average_accuracy"] == pytest.approx(1 - half / (8 * len(worse)))
    assert w["perfect_prediction"] == pytest.approx(1 - half / len(worse))


def test_tuning_entries_validate_rank_and_render(tuning, tmp_path):
    ds, oracle, worse = tuning
    root = tmp_path / "lb"
    for method, frame in (("good", oracle), ("worse", worse)):
        rec = entry(ds, frame, method)
        assert isinstance(rec, TuningResult) and rec.seeds.mean["average_accuracy"] == rec.overall["average_accuracy"]
        write_entry(root, rec, meta_for(ds, method), seed_predictions_parquet({s: frame for s in rec.seeds.seeds}))
    assert validate_tree(root) == {"entries": 2, "files": 6}
    back = parse_record(root / "mi50-tuning" / "random" / "good" / "result.json")
    assert isinstance(back, TuningResult) and back.solver == SOLVER
    files = site.render(root)
    md = files["README.md"].decode()
    assert "## mi50-tuning · split random" in md
    lines = [ln for ln in md.splitlines() if ln.startswith("| 1 |") or ln.startswith("| 2 |")]
    assert "good" in lines[0] and "100.00% det." in lines[0] and "worse" in lines[1]
    page = files["site/mi50-tuning.html"].decode()
    assert 'data-col="perfect"' in page and 'data-method="good"' in page
    assert site.render(root) == files  # deterministic


def test_too_few_seeds_and_missing_problems_are_reported(tuning):
    ds, oracle, _ = tuning
    issues = record_problems(entry(ds, oracle, "good", seeds=(0, 1)))
    assert any("2 seed(s)" in i for i in issues)
    partial = evaluate_tuning(ds, oracle.iloc[:10], SOLVER, method="part", allow_partial=True)
    partial = aggregate_seeds([partial] * 5, [0, 1, 2, 3, 4])
    assert any("without a prediction" in i for i in record_problems(partial))


def test_submit_rescores_tuning_records(tuning, tmp_path):
    ds, oracle, worse = tuning
    rec = entry(ds, worse, "worse")
    src = tmp_path / "sub"
    src.mkdir()
    for seed in rec.seeds.seeds:  # as kbench run writes them: one file per seed beside the record
        (src / f"seed-{seed}").mkdir()
        (src / f"seed-{seed}" / "preds.csv.gz").write_bytes(gzip_bytes(worse.to_csv(index=False).encode()))
    rec.predictions.path = "seed-0/preds.csv.gz"
    rec.predictions.sha256 = None
    (src / "result.json").write_text(rec.model_dump_json(indent=2))
    (src / "meta.json").write_text(meta_for(ds, "worse").model_dump_json(indent=2))
    report = submit(src / "result.json", src / "meta.json", root=tmp_path / "lb")
    assert report.seeds_rescored == [0, 1, 2, 3, 4]
    assert validate_board(tmp_path / "lb")["partial"] == []
    # a record whose claimed accuracy is not what its predictions give is refused
    rec.seeds.per_seed = [dict(p, average_accuracy=0.5) for p in rec.seeds.per_seed]
    rec.seeds.mean["average_accuracy"] = 0.5
    rec.metrics["average_accuracy"] = 0.5
    (src / "result.json").write_text(rec.model_dump_json(indent=2))
    with pytest.raises(KbenchInputError, match="average_accuracy"):
        submit(src / "result.json", src / "meta.json", root=tmp_path / "lb2")

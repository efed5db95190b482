"""`kbench run --jobs N`: (baseline, seed) pairs in worker processes give the records of --jobs 1."""

import json

import pytest
from lbtoy import FakeBaseline

from kbench.cli import main
from kbench.core.errors import KbenchInputError
from kbench.leaderboard.runner import run_benchmark
from kbench.leaderboard.runner_pool import checked_jobs, pool_tasks

SEEDS = [0, 1]


def _run(out, **kw):
    kw.setdefault("seeds", SEEDS)
    return run_benchmark("toy", "random", out=out, progress=False, log=lambda m: None, **kw)


def _seed_files(root, methods):
    return {(m, s, f): (root / "toy" / "random" / m / f"seed-{s}" / f).read_bytes()
            for m in methods for s in SEEDS for f in ("preds.csv.gz",)}


def _metrics(root, method):
    doc = json.loads((root / "toy" / "random" / method / "result.json").read_text())
    return doc["metrics"], doc["seeds"]["per_seed"], doc["extra"]["valid"]["per_seed"]


def test_jobs_give_the_predictions_and_scores_of_one_process(toy, fakes, tmp_path):
    one = _run(tmp_path / "one", jobs=1)
    two = _run(tmp_path / "two", jobs=2)
    assert not one.failed and not two.failed
    assert [o.method for o in two.outcomes] == [o.method for o in one.outcomes]
    assert [o.ran for o in two.outcomes] == [SEEDS] * len(fakes)
    # byte for byte: each seed's predictions file, and every metric of every seed and of their aggregate
    assert _seed_files(tmp_path / "two", fakes) == _seed_files(tmp_path / "one", fakes)
    for name in fakes:
        assert _metrics(tmp_path / "two", name) == _metrics(tmp_path / "one", name)
    # a deterministic baseline's second seed is a copy of its first in both
    extra = json.loads((tmp_path / "two/toy/random/toy-rules/seed-1/result.json").read_text())["extra"]
    assert extra["copied_from_seed"] == 0


def test_jobs_resume_what_is_finished(toy, fakes, tmp_path):
    _run(tmp_path / "r", jobs=2, baselines=["toy-model"])
    report = _run(tmp_path / "r", jobs=2)
    outcome = {o.method: o for o in report.outcomes}
    assert outcome["toy-model"].resumed == SEEDS and outcome["toy-model"].ran == []
    assert outcome["toy-random"].resumed == [] and outcome["toy-random"].ran == SEEDS


def test_a_failing_seed_in_a_worker_is_reported_and_the_rest_is_kept(toy, fakes, tmp_path):
    from kbench_baselines import base

    class Broken(FakeBaseline):
        stochastic = True

        def fit(self, dataset, train_ids, valid_ids=None, seed=0):
            if seed == 1:
                raise RuntimeError("power cut")
            return super().fit(dataset, train_ids, valid_ids, seed)

    Broken.name = "broken"
    base.BASELINES["broken"] = Broken
    report = _run(tmp_path / "r", jobs=2, baselines=["broken", "toy-model"])
    assert [o.method for o in report.failed] == ["broken"]
    broken = report.failed[0]
    assert broken.error == "seed 1: RuntimeError: power cut" and broken.ran == [0] and broken.record is None
    assert "power cut" in broken.traceback.read_text()
    assert (tmp_path / "r/toy/random/broken/seed-0/result.json").exists()
    assert not (tmp_path / "r/toy/random/broken/result.json").exists()
    assert (tmp_path / "r/toy/random/toy-model/result.json").exists()


def test_pool_tasks_fit_a_deterministic_method_once_and_time_latency_on_each_first_fit():
    stochastic = type("S", (), {"stochastic": True})
    deterministic = type("D", (), {"stochastic": False})
    classes = {"s": stochastic, "d": deterministic, "done": deterministic}
    records = {"s": {1: "finished"}, "d": {}, "done": {0: "finished"}}
    assert pool_tasks(classes, records, [0, 1, 2]) == [("s", 0, True), ("s", 2, False), ("d", 0, True)]


def test_jobs_must_be_a_positive_whole_number(toy, fakes, tmp_path, capsys):
    assert checked_jobs(3) == 3 and checked_jobs(None) >= 1
    for bad in (0, -2, True):
        with pytest.raises(KbenchInputError, match="--jobs"):
            checked_jobs(bad)
    assert main(["run", "--dataset", "toy", "--out", str(tmp_path / "r"), "--no-progress", "--jobs", "0"]) == 2
    assert "--jobs 0: give a whole number of worker processes >= 1" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_pool_tasks_start_the_longest_known_fits_first():
    stochastic = type("S", (), {"stochastic": True})
    classes = {"quick": stochastic, "slow": stochastic, "unknown": stochastic}
    records = {name: {} for name in classes}
    tasks = pool_tasks(classes, records, [0, 1], fit_seconds={"quick": 1.0, "slow": 76.0})
    assert tasks == [("unknown", 0, True), ("unknown", 1, False), ("slow", 0, True), ("slow", 1, False),
                     ("quick", 0, True), ("quick", 1, False)]


def test_board_fit_seconds_reads_the_entries_training_time(toy, fakes, tmp_path):
    from kbench.leaderboard.runner import board_fit_seconds
    _run(tmp_path / "r", jobs=1, seeds=[0, 1, 2, 3, 4], update_leaderboard=True, leaderboard_root=tmp_path / "lb")
    meta = json.loads((tmp_path / "lb/toy/random/toy-model/meta.json").read_text())
    seconds = board_fit_seconds(tmp_path / "lb", "toy", "random", ["toy-model", "not-on-board"])
    assert seconds == {"toy-model": meta["training_time_s"]}

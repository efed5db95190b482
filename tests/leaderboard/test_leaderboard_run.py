"""`kbench run`: every registered baseline, several seeds, records as it goes, resumable."""

import json

import pandas as pd
import pytest
from lbtoy import FakeBaseline, run_fakes

from kbench.cli import main
from kbench.core.errors import KbenchInputError
from kbench.leaderboard.runner import run_benchmark
from kbench.leaderboard.schema import validate_tree


def _run(tmp_path, **kw):
    return run_benchmark("toy", "random", out=tmp_path / "results", progress=False, log=lambda m: None, **kw)


def test_run_trains_every_registered_baseline(toy, fakes, tmp_path):
    report = _run(tmp_path)
    assert sorted(o.method for o in report.outcomes) == sorted(fakes)
    assert not report.failed
    for name in fakes:
        folder = tmp_path / "results" / "toy" / "random" / name
        assert sorted(p.name for p in folder.iterdir()) == [
            "meta.json", "result.json", "seed-0", "seed-1", "seed-2", "seed-3", "seed-4"]
        agg = json.loads((folder / "result.json").read_text())
        assert agg["seeds"]["seeds"] == [0, 1, 2, 3, 4] and len(agg["seeds"]["per_seed"]) == 5
        assert agg["extra"]["valid"]["mean"]["top1"] is not None
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["inference_latency_ms"] > 0 and meta["training_time_s"] >= 0
    roles = {n: json.loads((tmp_path / "results/toy/random" / n / "meta.json").read_text())["role"] for n in fakes}
    assert roles == {"toy-model": "entry", "toy-rules": "entry", "toy-oracle": "ceiling", "toy-random": "floor"}
    # a deterministic baseline is fitted once and its predictions serve every seed
    assert fakes["toy-rules"].fits == 1 and fakes["toy-model"].fits == 5


def test_run_resumes_and_picks_up_new_baselines(toy, fakes, tmp_path):
    from kbench_baselines import base

    class Flaky(FakeBaseline):
        stochastic, fits, crash_at = True, 0, 2

        def fit(self, dataset, train_ids, valid_ids=None, seed=0):
            if seed == type(self).crash_at:
                type(self).crash_at = None  # crash once, as an interrupted run would stop
                raise RuntimeError("power cut")
            return super().fit(dataset, train_ids, valid_ids, seed)

    Flaky.name = "flaky"
    base.BASELINES["flaky"] = Flaky  # registered after the runner was written: no code change needed
    report = _run(tmp_path)
    flaky = next(o for o in report.outcomes if o.method == "flaky")
    assert flaky.error and "power cut" in flaky.error and flaky.ran == [0, 1]
    assert [o.method for o in report.failed] == ["flaky"]
    fits_before = {n: getattr(c, "fits", 0) for n, c in fakes.items()}
    report = _run(tmp_path)
    assert not report.failed
    flaky = next(o for o in report.outcomes if o.method == "flaky")
    assert flaky.resumed == [0, 1] and flaky.ran == [2, 3, 4] and Flaky.fits == 2 + 3
    for name, cls in fakes.items():  # finished (method, seed) records are skipped
        assert getattr(cls, "fits", 0) == fits_before[name]
        assert next(o for o in report.outcomes if o.method == name).resumed == [0, 1, 2, 3, 4]


def test_a_fit_loaded_from_the_models_cache_records_its_training_time(toy, fakes, tmp_path):
    """A model that loads a fit it cached (the pooled models score six boards with one training) says
    what the training took; the run records that as the fit time, not the load, and marks the seed."""
    from kbench_baselines import base

    class Cached(FakeBaseline):
        stochastic = True

        def fit(self, dataset, train_ids, valid_ids=None, seed=0):
            super().fit(dataset, train_ids, valid_ids, seed)
            self.fit_info["cached_training_time_s"] = 471.25 + seed
            return self

    Cached.name = "cached"
    base.BASELINES["cached"] = Cached
    _run(tmp_path, baselines=["cached", "toy-model"], seeds=[0, 1])
    folder = tmp_path / "results" / "toy" / "random"
    for seed in (0, 1):
        extra = json.loads((folder / "cached" / f"seed-{seed}" / "result.json").read_text())["extra"]
        assert extra["fit_time_s"] == 471.25 + seed and extra["fit_from_cache"] is True
        assert "fit_from_cache" not in json.loads((folder / "toy-model" / f"seed-{seed}" / "result.json")
                                                  .read_text())["extra"]
    assert json.loads((folder / "cached" / "result.json").read_text())["extra"]["fit_time_s_per_seed"] == [471.25,
                                                                                                           472.25]


def test_a_fit_gets_a_checkpoint_per_seed_and_a_resumed_fit_records_its_whole_training(toy, fakes, tmp_path):
    """The runner hands each seed's fit a training-state path inside the seed folder; a fit that
    resumed from it (seq2seq) reports every session's training time, which the record keeps with the
    epochs it resumed at; the state file is removed once the seed is written."""
    from kbench_baselines import base

    seen = {}

    class Resuming(FakeBaseline):
        stochastic = True

        def fit(self, dataset, train_ids, valid_ids=None, seed=0):
            super().fit(dataset, train_ids, valid_ids, seed)
            seen[seed] = self.fit_checkpoint
            self.fit_checkpoint.parent.mkdir(parents=True, exist_ok=True)
            self.fit_checkpoint.write_bytes(b"state")  # as a fit writes after each epoch
            self.fit_info.update({"resumed_at_epochs": [3] if seed == 1 else [], "fit_time_s": 812.5})
            return self

    Resuming.name = "resuming"
    base.BASELINES["resuming"] = Resuming
    _run(tmp_path, baselines=["resuming"], seeds=[0, 1])
    folder = tmp_path / "results" / "toy" / "random" / "resuming"
    assert seen == {s: folder / f"seed-{s}" / "fit-state.safetensors" for s in (0, 1)}
    assert not list(folder.rglob("fit-state.safetensors"))
    extra = {s: json.loads((folder / f"seed-{s}" / "result.json").read_text())["extra"] for s in (0, 1)}
    assert extra[1]["fit_time_s"] == 812.5 and extra[1]["fit_resumed_at_epochs"] == [3]
    assert extra[0]["fit_time_s"] != 812.5 and "fit_resumed_at_epochs" not in extra[0]


def test_run_redoes_records_of_other_data(toy, fakes, tmp_path):
    _run(tmp_path, baselines=["toy-model"], seeds=[0, 1])
    path = tmp_path / "results/toy/random/toy-model/seed-1/result.json"
    doc = json.loads(path.read_text())
    doc["dataset"]["checksum"] = "ef" * 32
    path.write_text(json.dumps(doc))
    report = _run(tmp_path, baselines=["toy-model"], seeds=[0, 1])
    assert report.outcomes[0].resumed == [0] and report.outcomes[0].ran == [1]


def test_run_updates_the_leaderboard(toy, fakes, tmp_path, capsys):
    code = main(["run", "--dataset", "toy", "--out", str(tmp_path / "results"), "--update-leaderboard",
                 "--leaderboard", str(tmp_path / "lb"), "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    assert "kbench run: toy split random" in out
    for name in fakes:
        assert name in out
    assert validate_tree(tmp_path / "lb")["entries"] == len(fakes)
    assert (tmp_path / "lb" / "site" / "index.html").exists()


def test_run_bad_input_is_one_clear_message(toy, fakes, tmp_path, capsys):
    base_args = ["run", "--dataset", "toy", "--out", str(tmp_path / "r"), "--no-progress"]
    assert main(base_args + ["--baselines", "toy-modle"]) == 2
    err = capsys.readouterr().err
    assert "unknown baseline 'toy-modle'" in err and "Did you mean 'toy-model'" in err
    assert main(base_args + ["--update-leaderboard", "--seeds", "0", "1"]) == 2
    assert "at least 5 seeds" in capsys.readouterr().err
    assert main(base_args + ["--split", "networks"]) == 2
    assert "no split 'networks'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_run_without_supporting_baselines(toy, fakes, tmp_path):
    for cls in fakes.values():
        cls.supports = lambda self, dataset: False
    with pytest.raises(KbenchInputError, match="no baseline in the registry supports"):
        _run(tmp_path)


def test_run_fakes_helper_is_deterministic(tmp_path):
    """The same run twice gives the same predictions files (fixed seeds, deterministic gzip)."""
    a = run_fakes(tmp_path / "a", baselines=["toy-model"], seeds=[0, 1])
    b = run_fakes(tmp_path / "b", baselines=["toy-model"], seeds=[0, 1])
    assert not a.failed and not b.failed
    for seed in (0, 1):
        rel = f"toy/random/toy-model/seed-{seed}/preds.csv.gz"
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()


def test_run_table_marks_a_deterministic_method_and_shows_no_spread_for_it(toy, fakes, tmp_path):
    """A deterministic baseline's 5 seeds are copies of one fit: the table says so instead of '± 0'."""
    from kbench.leaderboard.runner import report_records, results_frame
    report = _run(tmp_path, baselines=["toy-rules", "toy-model"])
    rows = results_frame(report_records(report)).set_index("method")
    assert bool(rows.loc["toy-rules", "deterministic"]) is True and pd.isna(rows.loc["toy-rules", "± std"])
    model = next(o.record for o in report.outcomes if o.method == "toy-model")
    assert bool(rows.loc["toy-model", "deterministic"]) is False
    assert rows.loc["toy-model", "± std"] == model.seeds.std["geomean_slowdown"]
    assert rows.loc["toy-rules", "n seeds"] == 5 == rows.loc["toy-model", "n seeds"]

"""``kbench baseline list`` / ``kbench baseline run`` end to end on a small dataset folder."""

import json

import pytest

from kbench.cli import main
from kbench.data.build import write_dataset
from kbench.scoring.records import EvaluationResult
from tests.baselines.helpers import small_subset


@pytest.fixture(scope="module")
def small_folder(mi100, tmp_path_factory):
    sub = small_subset(mi100, n_train=1500, n_valid=300, n_test=400)
    info = {k: v for k, v in mi100.info.items() if k not in ("files", "checksum", "kbench_schema", "built_with_kbench")}
    info["name"] = "mi100-small"
    path = tmp_path_factory.mktemp("data") / "mi100-small"
    write_dataset(path, sub.tables, info)
    return path


def test_list(capsys):
    assert main(["baseline", "list", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["baseline"]: r for r in out["baselines"]}
    for name in ("oracle", "random", "single-best", "nearest-neighbour", "rules", "xgboost", "xgboost-ranker"):
        assert "mi100" in rows[name]["datasets"].split(", ")
    assert rows["xgboost-ranker"]["in kbench run"] == "no"
    assert main(["baseline", "list"]) == 0
    assert "nearest-neighbour" in capsys.readouterr().out


def test_unknown_baseline_exit_2(capsys):
    assert main(["baseline", "run", "xgbost", "--dataset", "mi100"]) == 2
    err = capsys.readouterr().err
    assert "unknown baseline 'xgbost'" in err and "Did you mean 'xgboost'" in err and "Traceback" not in err


def test_bad_param_exit_2(capsys, small_folder, tmp_path):
    assert main(["baseline", "run", "single-best", "--dataset", str(small_folder), "--param", "depth=3",
                 "--out", str(tmp_path)]) == 2
    assert "does not take these parameters" in capsys.readouterr().err


def test_run_writes_records(small_folder, tmp_path, capsys):
    rc = main(["baseline", "run", "random", "--dataset", str(small_folder), "--split", "random",
               "--seeds", "0", "1", "--out", str(tmp_path), "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "top-1" in out and "per seed" in out
    folder = tmp_path / "mi100-small" / "random" / "random"
    for f in ("result.json", "preds.csv", "preds.csv.gz", "meta.json", "seed-0/preds.csv.gz", "seed-1/result.json"):
        assert (folder / f).exists(), f
    rec = EvaluationResult.model_validate_json((folder / "result.json").read_text())
    assert rec.method == "random" and rec.part == "test" and rec.reference == "rules"
    assert rec.seeds.seeds == [0, 1] and len(rec.seeds.per_seed) == 2 and rec.seeds.std["top1"] is not None
    # the written predictions re-score to the seed-0 record
    rc = main(["evaluate", str(folder / "preds.csv.gz"), "--dataset", str(small_folder), "--split", "random",
               "--json", str(tmp_path / "again.json")])
    assert rc == 0
    again = json.loads((tmp_path / "again.json").read_text())
    seed0 = json.loads((folder / "seed-0" / "result.json").read_text())
    assert again["metrics"]["overall"]["top1"] == seed0["metrics"]["overall"]["top1"]


def test_changed_params_never_reuse_finished_seeds(small_folder, tmp_path, capsys):
    common = ["baseline", "run", "nearest-neighbour", "--dataset", str(small_folder), "--out", str(tmp_path),
              "--no-progress", "--no-csv"]
    assert main(common + ["--param", "k=2"]) == 0
    folder = tmp_path / "mi100-small" / "random" / "nearest-neighbour"
    assert json.loads((folder / "params.json").read_text()) == {"k": 2}
    assert main(common + ["--param", "k=2"]) == 0  # same parameters: the finished seed is reused
    capsys.readouterr()
    assert main(common) == 2
    assert "already holds results made with parameters" in capsys.readouterr().err

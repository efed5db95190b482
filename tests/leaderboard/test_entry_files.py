"""From one-seed records to a submitted entry without hand work: `kbench record aggregate` lays them out,
`kbench submit --init-meta` writes the meta.json to fill in, and a meta.json's errors name every field."""

import gzip
import hashlib
import json
import shutil

import pytest

from kbench.cli import main
from kbench.core.errors import KbenchInputError
from kbench.leaderboard.entry_files import aggregate_records, meta_template
from kbench.leaderboard.schema import PLACEHOLDER, SubmissionMeta, parse_meta
from kbench.scoring.records import EvaluationResult


@pytest.fixture
def seed_records(toy_board, tmp_path):
    """Five records as `kbench evaluate preds-k.csv --json seed-k.json` writes them: each names its plain CSV
    (as given on the command line, here an absolute path) and that file's sha256."""
    src = toy_board.parent / "results" / "toy" / "random" / "toy-model"
    runs = tmp_path / "runs"
    runs.mkdir()
    paths = []
    for seed in range(5):
        csv = runs / f"preds-{seed}.csv"
        csv.write_bytes(gzip.decompress((src / f"seed-{seed}" / "preds.csv.gz").read_bytes()))
        record = EvaluationResult.model_validate_json((src / f"seed-{seed}" / "result.json").read_text())
        record.seeds, record.extra = None, {}
        record.predictions.path, record.predictions.sha256 = str(csv), hashlib.sha256(csv.read_bytes()).hexdigest()
        path = runs / f"seed-{seed}.json"
        path.write_text(record.model_dump_json())
        paths.append(path)
    shutil.copy(src / "meta.json", tmp_path / "meta.json")
    return paths


def test_aggregate_then_submit_adds_the_entry(seed_records, toy, tmp_path, capsys):
    out = tmp_path / "entry"
    assert main(["record", "aggregate", *map(str, seed_records), "--seeds", "0", "1", "2", "3", "4",
                 "--out", str(out)]) == 0
    assert "next: kbench submit --init-meta meta.json" in capsys.readouterr().out
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == \
        ["result.json"] + [f"seed-{k}/{name}" for k in range(5) for name in ("preds.csv.gz", "result.json")]
    joined = json.loads((out / "result.json").read_text())
    assert joined["seeds"]["seeds"] == [0, 1, 2, 3, 4] and joined["predictions"]["path"] == "seed-0/preds.csv.gz"
    assert gzip.decompress((out / "seed-3" / "preds.csv.gz").read_bytes()) == \
        (seed_records[3].parent / "preds-3.csv").read_bytes()
    assert main(["submit", str(out / "result.json"), "--meta", str(tmp_path / "meta.json"),
                 "--leaderboard", str(tmp_path / "lb")]) == 0
    printed = capsys.readouterr().out
    assert "re-scored seed(s) [0, 1, 2, 3, 4]" in printed
    assert "(no `kbench leaderboard build` needed)" in printed
    assert (tmp_path / "lb" / "toy" / "random" / "toy-model" / "preds.parquet").exists()


def test_aggregate_refuses_mixed_and_altered_records(seed_records, toy, tmp_path):
    with pytest.raises(KbenchInputError, match=r"--seeds lists 2 seed\(s\) for 5 record\(s\)"):
        aggregate_records(seed_records, tmp_path / "e1", seeds=[0, 1])
    other = json.loads(seed_records[1].read_text())
    other["split"] = "networks"
    seed_records[1].write_text(json.dumps(other))
    with pytest.raises(KbenchInputError, match="the records differ in split"):
        aggregate_records(seed_records, tmp_path / "e2")
    other["split"] = "random"
    seed_records[1].write_text(json.dumps(other))
    (seed_records[2].parent / "preds-2.csv").write_bytes(b"problem_id,kernel\n")
    with pytest.raises(KbenchInputError, match="not the file that record was scored from"):
        aggregate_records(seed_records, tmp_path / "e3")
    with pytest.raises(KbenchInputError, match="overlaps the input"):
        aggregate_records(seed_records, seed_records[0].parent)


def test_init_meta_writes_every_field_to_fill_in(seed_records, toy, tmp_path, capsys):
    meta = tmp_path / "new-meta.json"
    assert main(["submit", "--init-meta", str(meta), str(seed_records[0])]) == 0
    printed = capsys.readouterr().out
    doc = json.loads(meta.read_text())
    assert set(doc) == set(SubmissionMeta.model_fields)
    assert doc["method"] == "toy-model" and doc["split"] == "random" and doc["dataset"]["name"] == "toy"
    assert doc["contact"] == PLACEHOLDER + "e-mail address, GitHub handle or team name"
    assert "fill in description, paper, code, contact, command, n_parameters" in printed
    # the template as written is refused until every placeholder is replaced, and the message names them
    with pytest.raises(KbenchInputError, match=r"still holds the template's placeholder .* in description, "
                                               r"paper, code, contact, command"):
        parse_meta(meta)
    assert main(["submit", "--init-meta", str(meta)]) == 2  # never over an existing file
    template = meta_template()
    assert template["dataset"]["checksum"].startswith(PLACEHOLDER)


def test_a_meta_error_names_every_missing_field(tmp_path):
    path = tmp_path / "meta.json"
    path.write_text("{}")
    with pytest.raises(KbenchInputError) as raised:
        parse_meta(path)
    assert "(top level): missing required field(s) method, paper, code, contact, command, n_parameters, " \
           "model_size_bytes, training_hardware, training_time_s, inference_latency_ms, external_data, " \
           "kbench_version, dataset, split" in str(raised.value)
    required = [name for name, field in SubmissionMeta.model_fields.items() if field.is_required()]
    assert len(required) == 14


def test_record_csv_turns_a_board_parquet_into_a_valid_csv(tmp_path, capsys):
    """The old hint, read_parquet(...).to_csv(...), wrote the list-valued rankings as Python reprs beside a
    seed column: not a predictions file. `kbench record csv` writes one seed's CSV, which scores exactly
    as the board's record says for that seed."""
    import pandas as pd

    from kbench.scoring.evaluate import Evaluator
    from kbench.scoring.prediction_files import read_predictions
    entry = __import__("pathlib").Path(__file__).resolve().parents[2] / "leaderboard" / "mi100" / "random" / "xgboost"
    naive = tmp_path / "naive.csv"
    pd.read_parquet(entry / "preds.parquet").to_csv(naive, index=False)
    assert main(["validate", str(naive), "--dataset", "mi100"]) == 2
    out = tmp_path / "seed2.csv"
    assert main(["record", "csv", str(entry / "preds.parquet"), "--seed", "2", "--out", str(out)]) == 0
    assert "seed 2, 36,821 rows" in capsys.readouterr().out
    record = json.loads((entry / "result.json").read_text())
    got = Evaluator("mi100", split="random", reference=None)(read_predictions(out)[0]).overall
    want = record["seeds"]["per_seed"][record["seeds"]["seeds"].index(2)]
    assert got["geomean_slowdown"] == pytest.approx(want["geomean_slowdown"], rel=1e-12)
    assert got["top1"] == want["top1"]
    assert main(["record", "csv", str(entry / "preds.parquet"), "--seed", "9", "--out", str(tmp_path / "x.csv")]) == 2

"""The JSON Schemas of the leaderboard files and the validator of the leaderboard folder."""

import json
import shutil

import jsonschema
import pytest

from kbench.cli import main
from kbench.core.errors import KbenchInputError
from kbench.leaderboard.schema import (
    SCHEMA_DIR,
    SCHEMA_FILES,
    generated_schemas,
    parse_meta,
    parse_record,
    schema_text,
    validate_tree,
)

ENTRY = "toy/random/toy-model"


def test_shipped_schemas_are_up_to_date():
    for key, schema in generated_schemas().items():
        path = SCHEMA_DIR / SCHEMA_FILES[key]
        assert path.exists(), f"{path} missing: run `kbench leaderboard schema --write`"
        assert path.read_text() == schema_text(schema), f"{path} stale: run `kbench leaderboard schema --write`"
        jsonschema.Draft202012Validator.check_schema(schema)


def test_good_files_validate(toy_board, toy):
    for folder in sorted(p for p in toy_board.glob("*/*/*") if p.is_dir()):
        doc = json.loads((folder / "result.json").read_text())
        jsonschema.validate(doc, generated_schemas()["result"])
        jsonschema.validate(json.loads((folder / "meta.json").read_text()), generated_schemas()["submission"])
        assert parse_record(folder / "result.json").method == folder.name
        assert parse_meta(folder / "meta.json").method == folder.name
    assert validate_tree(toy_board)["entries"] == 4
    assert main(["leaderboard", "validate", "--leaderboard", str(toy_board)]) == 0


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("counts"), "counts"),
    (lambda d: d.update(split=3), "split"),
    (lambda d: d.update(unexpected_field=1), "unexpected_field"),
    (lambda d: d["dataset"].pop("checksum"), "checksum"),
    (lambda d: d.update(record_type="something.else"), "record_type"),
])
def test_bad_records_are_rejected(toy_board, tmp_path, mutate, message):
    doc = json.loads((toy_board / ENTRY / "result.json").read_text())
    mutate(doc)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(KbenchInputError, match=message):
        parse_record(path)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("contact"), "contact"),
    (lambda d: d.update(method="Has Spaces"), "method"),
    (lambda d: d.update(paper="not a url"), "paper"),
    (lambda d: d.update(external_data="no"), "external_data"),
    (lambda d: d.update(n_parameters=-1), "n_parameters"),
    (lambda d: d.update(role="winner"), "role"),
    (lambda d: d.pop("inference_latency_ms"), "inference_latency_ms"),
])
def test_bad_meta_is_rejected(toy_board, tmp_path, mutate, message):
    doc = json.loads((toy_board / ENTRY / "meta.json").read_text())
    mutate(doc)
    path = tmp_path / "meta.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(KbenchInputError, match=message):
        parse_meta(path)


def test_not_json_is_one_clear_error(tmp_path, capsys):
    path = tmp_path / "result.json"
    path.write_text("{not json")
    with pytest.raises(KbenchInputError, match="not valid JSON"):
        parse_record(path)
    meta = tmp_path / "meta.json"
    meta.write_text("[]")
    assert main(["submit", str(path), "--meta", str(meta), "--leaderboard", str(tmp_path / "lb")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kbench: error:") and "Traceback" not in err


def _copy(toy_board, tmp_path):
    dst = tmp_path / "leaderboard"
    shutil.copytree(toy_board, dst)
    return dst


@pytest.mark.parametrize("damage, message", [
    (lambda root: (root / ENTRY / "notes.txt").write_text("x"), "unexpected file"),
    (lambda root: (root / "stray.json").write_text("{}"), "unexpected file"),
    (lambda root: (root / ENTRY / "meta.json").unlink(), "missing meta.json"),
    (lambda root: shutil.move(root / ENTRY, root / "toy/random/other-name"), "not the folder's"),
    (lambda root: (root / ENTRY / "preds.parquet").write_bytes(b"changed"), "sha256"),
])
def test_tree_problems_are_listed(toy_board, toy, tmp_path, damage, message):
    root = _copy(toy_board, tmp_path)
    damage(root)
    with pytest.raises(KbenchInputError, match=message):
        validate_tree(root)


def test_tree_rules_and_data_checks(toy_board, toy, tmp_path):
    root = _copy(toy_board, tmp_path)
    path = root / ENTRY / "result.json"
    doc = json.loads(path.read_text())
    doc["seeds"]["seeds"] = doc["seeds"]["seeds"][:3]
    doc["seeds"]["per_seed"] = doc["seeds"]["per_seed"][:3]
    doc["dataset"]["checksum"] = "cd" * 32
    path.write_text(json.dumps(doc))
    with pytest.raises(KbenchInputError) as info:
        validate_tree(root)
    text = str(info.value)
    assert "at least 5" in text and "checksum" in text and "differs from the record" in text

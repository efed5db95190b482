"""Trust: tampered records refused, inputs never written, no measurement silently dropped, atomic writes.

Each case a red-team pass found (as a new user, a careless or a dishonest submitter would) and its
next neighbour: a tampered record is refused naming the field, an output that is an input (by inode)
is refused, a merge that would lose plans is refused, a Hub cache clean-up never leaves the cache.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

import pandas as pd
import pytest
from advkit import adversarial, refused, snapshot

from kbench.cli import main
from kbench.collect.raw_store.merge import merge
from kbench.collect.raw_store.writer import compact
from kbench.core.errors import DataIntegrityError, KbenchInputError
from kbench.core.output_files import atomic_write_text
from kbench.data.dataset import read_dataset_folder
from kbench.leaderboard.rescorer import validate_board
from kbench.leaderboard.store import PREDS_FILE, read_seed_predictions, seed_predictions_parquet, write_entry
from kbench.leaderboard.submit import submit
from kbench.scoring.evaluate import Evaluator
from kbench.scoring.prediction_files import MAX_COLUMNS
from kbench.scoring.records import EvaluationResult, aggregate_seeds

REPO = Path(__file__).resolve().parents[2]
SHARDS = REPO / "tests" / "collect" / "fixtures" / "two_shards"
TUNING = ["--dataset", "mi50-tuning"]


# ----------------------------------------------------------------------------- fixtures
# toy_run, toy, run_dir and board: the toy run and leaderboard (tests/adversarial/conftest.py)


@pytest.fixture(scope="module")
def good() -> pd.DataFrame:
    """Valid mi300x test predictions: every measured kernel, slowest first."""
    ev = Evaluator("mi300x", split="random", reference=None)
    rt = ev.dataset.runtimes
    rt = rt[rt["problem_id"].isin(set(ev.ids))].sort_values(["problem_id", "time_ms"], ascending=[True, False])
    return rt.groupby("problem_id", sort=True)["kernel"].agg(";".join).rename("ranking").reset_index()


@pytest.fixture
def work(tmp_path) -> Path:
    (tmp_path / "in").mkdir()
    return tmp_path / "in"


def _seed_records(run_dir: Path) -> list[EvaluationResult]:
    return [EvaluationResult.model_validate_json((run_dir / f"seed-{s}" / "result.json").read_text())
            for s in range(5)]


def _write_consistent(run_dir: Path, records: list[EvaluationResult]) -> None:
    """A record aggregated from (tampered) per-seed records: mean, std and overall all agree."""
    agg = aggregate_seeds(records, list(range(5)))
    agg.predictions.path = "seed-0/preds.csv.gz"
    (run_dir / "result.json").write_text(agg.model_dump_json())


def _submit_argv(run_dir: Path, root: Path) -> list[str]:
    return ["submit", str(run_dir / "result.json"), "--meta", str(run_dir / "meta.json"), "--leaderboard",
            str(root), "--no-build"]


# ----------------------------------------------------------------------------- tampered records
@adversarial("submissions", "error", fixed="42")
def test_other_seeds_raised_with_a_consistent_summary(capsys, run_dir, tmp_path):
    """Seeds 1-4 raised to 0.999 top-1, mean/std/overall recomputed: seed 0 alone still matches."""
    recs = _seed_records(run_dir)
    for rec in recs[1:]:
        rec.metrics["overall"]["top1"] = 0.999
    _write_consistent(run_dir, recs)
    refused(capsys, _submit_argv(run_dir, tmp_path / "lb"),
            ["seeds.per_seed[1] (seed 1).top1: claimed 0.999", "metrics.overall.top1"], [run_dir.parent])
    assert not (tmp_path / "lb").exists()


@adversarial("submissions", "error", fixed="42")
def test_a_tampered_direction_metric(capsys, run_dir, tmp_path):
    """metrics.by_direction was never checked: a speed-up of 50 stretched the site's axis."""
    doc = json.loads((run_dir / "result.json").read_text())
    direction = sorted(doc["metrics"]["by_direction"])[0]
    doc["metrics"]["by_direction"][direction]["speedup_geomean"] = 50.0
    (run_dir / "result.json").write_text(json.dumps(doc))
    refused(capsys, _submit_argv(run_dir, tmp_path / "lb"),
            [f"metrics.by_direction.{direction}.speedup_geomean: claimed 50.0"], [run_dir.parent])


@adversarial("submissions", "error", fixed="42")
def test_a_tampered_dtype_metric_and_counts(capsys, run_dir, tmp_path):
    """The neighbours of by_direction: by_dtype and the counts."""
    doc = json.loads((run_dir / "result.json").read_text())
    dtype = sorted(doc["metrics"]["by_dtype"])[0]
    doc["metrics"]["by_dtype"][dtype]["top1"] = 1.0
    doc["counts"]["failures"] = 0 if doc["counts"]["failures"] else 1
    (run_dir / "result.json").write_text(json.dumps(doc))
    refused(capsys, _submit_argv(run_dir, tmp_path / "lb"),
            [f"metrics.by_dtype.{dtype}.top1", "counts.failures"], [run_dir.parent])


@adversarial("submissions", "error", fixed="42")
def test_a_record_without_predictions(capsys, run_dir, tmp_path):
    """Accepted and ranked #1 before; now refused, nothing written."""
    for seed in range(5):
        shutil.rmtree(run_dir / f"seed-{seed}")
    refused(capsys, _submit_argv(run_dir, tmp_path / "lb"), ["no predictions for seed(s) [0, 1, 2, 3, 4]"],
            [run_dir.parent])
    assert not (tmp_path / "lb").exists()


@adversarial("submissions", "error", fixed="42")
def test_a_record_missing_one_seeds_predictions(capsys, run_dir, tmp_path):
    shutil.rmtree(run_dir / "seed-4")
    refused(capsys, _submit_argv(run_dir, tmp_path / "lb"), ["no predictions for seed(s) [4]"], [run_dir.parent])


@adversarial("submissions", "error", fixed="42")
def test_validate_rescores_a_tampered_board(capsys, board):
    """`kbench leaderboard validate` called a tampered board valid: it never re-scored."""
    result = board / "toy" / "random" / "toy-model" / "result.json"
    doc = json.loads(result.read_text())
    doc["seeds"]["per_seed"][2]["top1"] = 0.999
    values = [p["top1"] for p in doc["seeds"]["per_seed"]]
    mean = sum(values) / len(values)
    doc["seeds"]["mean"]["top1"] = doc["metrics"]["overall"]["top1"] = mean
    doc["seeds"]["std"]["top1"] = pd.Series(values).std(ddof=1)
    result.write_text(json.dumps(doc, indent=2))
    refused(capsys, ["leaderboard", "validate", "--leaderboard", str(board)],
            ["toy/random/toy-model", "seeds.per_seed[2] (seed 2).top1: claimed 0.999"], [board])


@adversarial("submissions", "error", fixed="42")
def test_validate_rescores_swapped_predictions(capsys, board):
    """The neighbour: other predictions stored with a matching sha256 in the record."""
    folder = board / "toy" / "random" / "toy-model"
    seeds = read_seed_predictions(folder / PREDS_FILE)
    seeds[0] = seeds[0].assign(ranking=seeds[0]["ranking"].str.split(";").map(lambda r: ";".join(r[::-1])))
    data = seed_predictions_parquet(seeds)
    (folder / PREDS_FILE).write_bytes(data)
    doc = json.loads((folder / "result.json").read_text())
    doc["predictions"]["sha256"] = hashlib.sha256(data).hexdigest()
    (folder / "result.json").write_text(json.dumps(doc, indent=2))
    refused(capsys, ["leaderboard", "validate", "--leaderboard", str(board)],
            ["toy/random/toy-model", "seeds.per_seed[0] (seed 0)"], [board])


@adversarial("submissions", "error", fixed="42")
def test_validate_refuses_an_entry_without_predictions(capsys, board):
    (board / "toy" / "random" / "toy-model" / PREDS_FILE).unlink()
    refused(capsys, ["leaderboard", "validate", "--leaderboard", str(board)],
            ["toy/random/toy-model", f"no {PREDS_FILE}"], [board])


@adversarial("submissions", "accepted", fixed="42")
def test_the_untampered_board_is_rescored_whole(board):
    summary = validate_board(board)
    assert summary["rescored"] == summary["entries"] and summary["partial"] == []


def _shows_only_rescored_figures(root: Path, method: str, claimed: float) -> None:
    """The built board: the tampered valid figure in no table, and in the downloads only as reported_valid_*."""
    for page in ("README.md", "site/index.html", "site/toy.html"):
        text = (root / page).read_text()
        assert f"{claimed:.4f}" not in text and repr(claimed) not in text, page
        assert "valid geomean slowdown" not in text and "recomputable from stored test predictions" in text, page
    entry = {e["method"]: e for e in json.loads((root / "site/boards/toy-random.json").read_text())["entries"]}[method]
    assert entry["reported_valid_geomean_slowdown"] == claimed
    assert "valid_geomean_slowdown" not in entry and "valid" not in entry


@adversarial("submissions", "accepted", fixed="42")
def test_a_tampered_valid_figure_on_the_board(capsys, board):
    """extra.valid (the submitter's validation figures) has no stored predictions to re-score it: validate
    and build accept the record, and the figure shows in no table, only as reported_* in the JSON download."""
    result = board / "toy" / "random" / "toy-model" / "result.json"
    doc = json.loads(result.read_text())
    doc["extra"]["valid"]["mean"]["geomean_slowdown"] = 0.0271828  # below 1: no predictions score it
    result.write_text(json.dumps(doc, indent=2))
    assert main(["leaderboard", "validate", "--leaderboard", str(board)]) == 0, capsys.readouterr().err
    assert main(["leaderboard", "build", "--leaderboard", str(board), "--no-progress"]) == 0
    _shows_only_rescored_figures(board, "toy-model", 0.0271828)


@adversarial("submissions", "accepted", fixed="42")
def test_a_submission_with_a_tampered_valid_figure(capsys, run_dir, tmp_path):
    """The neighbour: submitted so. Accepted (the test figures re-score), the board built by submit hides it."""
    doc = json.loads((run_dir / "result.json").read_text())
    doc["extra"]["valid"]["mean"]["geomean_slowdown"] = 0.0314159
    (run_dir / "result.json").write_text(json.dumps(doc))
    root = tmp_path / "lb"
    assert main(_submit_argv(run_dir, root)[:-1]) == 0, capsys.readouterr().err  # without --no-build
    _shows_only_rescored_figures(root, "toy-model", 0.0314159)


@adversarial("concurrency", "error", fixed="42")
def test_two_submits_of_one_method_at_once(run_dir, tmp_path):
    """Both reported "added" before and one entry was lost; now one is added, the other refused."""
    root, outcomes = tmp_path / "lb", []
    start = threading.Barrier(2)

    def one():
        start.wait()
        try:
            submit(run_dir / "result.json", run_dir / "meta.json", root=root)
            outcomes.append("added")
        except KbenchInputError as exc:
            outcomes.append(str(exc))
    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("added") == 1, outcomes
    assert any("already holds an entry" in o for o in outcomes), outcomes
    assert validate_board(root)["entries"] == 1


@adversarial("concurrency", "accepted", fixed="42")
def test_concurrent_writers_of_one_output_never_leave_it_torn(tmp_path):
    """Two `evaluate --json same.json` left invalid JSON in 15 of 210 trials; the writes are atomic now."""
    out = tmp_path / "same.json"
    docs = [json.dumps({"writer": k, "pad": str(k) * 200_000}) for k in range(2)]
    for _ in range(20):
        threads = [threading.Thread(target=atomic_write_text, args=(out, doc)) for doc in docs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert json.loads(out.read_text())["writer"] in (0, 1)
    assert [p.name for p in tmp_path.iterdir()] == ["same.json"]  # no temporary file left behind


# ----------------------------------------------------------------------------- inputs never written
@pytest.fixture
def tuning_preds(tmp_path):
    """A valid mi50-tuning predictions file: the test part's targets of ConvAsm1x1U."""
    from kbench.data.dataset import load
    ds = load("mi50-tuning")
    ids = set(ds.split("random")["test"])
    targets = ds.targets[(ds.targets["solver"] == "ConvAsm1x1U") & ds.targets["problem_id"].isin(ids)]
    path = tmp_path / "tuning" / "tpreds.csv"
    path.parent.mkdir()
    targets.drop(columns=["solver"]).to_csv(path, index=False)
    return path


@adversarial("predictions", "error", fixed="42")
def test_json_over_a_tuning_predictions_file(capsys, tuning_preds):
    refused(capsys, ["evaluate", str(tuning_preds), *TUNING, "--json", str(tuning_preds)],
            ["--json", "is the input file"], [tuning_preds.parent])


@adversarial("predictions", "error", fixed="42")
@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_json_through_a_link_to_the_predictions(capsys, work, good, link):
    """The guard compared resolved paths, so a hard link passed it; inodes are compared now."""
    victim = work / "victim.csv"
    good.to_csv(victim, index=False)
    alias = work / "v.json"
    os.link(victim, alias) if link == "hard" else alias.symlink_to(victim)
    refused(capsys, ["evaluate", str(victim), "--dataset", "mi300x", "--json", str(alias)],
            ["is the input file", str(victim)], [work])


@adversarial("predictions", "error", fixed="42")
@pytest.mark.parametrize("where, message", [("dir", "is a folder"), ("under-file", "is a file, not a folder"),
                                            ("dev-full", "not a regular file")])
def test_json_where_no_file_can_be_written(capsys, work, good, where, message):
    preds = work / "preds.csv"
    good.to_csv(preds, index=False)
    target = {"dir": work, "under-file": preds / "out.json", "dev-full": Path("/dev/full")}[where]
    refused(capsys, ["evaluate", str(preds), "--dataset", "mi300x", "--json", str(target)], [message], [work])


@adversarial("predictions", "accepted", fixed="42")
def test_a_file_name_that_is_not_utf8(capsys, work, good, tmp_path):
    name = os.fsdecode(b"preds-\xff.csv")
    preds = work / name
    good.to_csv(preds, index=False)
    out = tmp_path / os.fsdecode(b"out-\xfe.json")
    assert main(["evaluate", str(preds), "--dataset", "mi300x", "--json", str(out), "-q"]) == 0
    record = json.loads(out.read_bytes())
    assert record["predictions"]["path"].endswith("preds-\\xff.csv")


@adversarial("predictions", "error", fixed="42")
@pytest.mark.parametrize("command", ["evaluate", "validate", "against", "tuning"])
def test_cr_only_line_endings(capsys, work, good, tuning_preds, command):
    def cr(frame_or_path, path):
        text = (frame_or_path.read_text() if isinstance(frame_or_path, Path)
                else frame_or_path.to_csv(index=False))
        path.write_bytes(text.replace("\n", "\r").encode())
        return path
    if command == "tuning":
        bad = cr(tuning_preds, work / "t-cr.csv")
        argv = ["evaluate", str(bad), *TUNING]
    elif command == "against":
        plain = work / "ok.csv"
        good.to_csv(plain, index=False)
        bad = cr(good, work / "ref-cr.csv")
        argv = ["evaluate", str(plain), "--dataset", "mi300x", "--against", str(bad)]
    else:
        bad = cr(good, work / "cr.csv")
        argv = [command, str(bad), "--dataset", "mi300x"]
    refused(capsys, argv, [str(bad), "carriage return only"], [work])


@adversarial("predictions", "accepted", fixed="42")
def test_validate_a_tuning_predictions_file(capsys, tuning_preds):
    """`kbench validate` raised a traceback on every tuning dataset, even for a valid file."""
    capsys.readouterr()
    assert main(["validate", str(tuning_preds), *TUNING]) == 0
    assert "valid for mi50-tuning random/test solver ConvAsm1x1U" in capsys.readouterr().out


@adversarial("predictions", "error", fixed="42")
def test_validate_a_tuning_file_without_its_columns(capsys, work):
    bad = work / "t.csv"
    bad.write_text("problem_id\nx\n")
    refused(capsys, ["validate", str(bad), *TUNING], [], [work])


@adversarial("predictions", "error", fixed="42")
@pytest.mark.parametrize("columns", [1_000_000, MAX_COLUMNS + 1])
def test_a_very_wide_header(capsys, work, columns):
    """40k columns took 11.6 s and 1M over 10 minutes (a quadratic duplicate check); now linear, with a limit."""
    path = work / "wide.csv"
    path.write_text(",".join(f"c{i}" for i in range(columns)) + "\n")
    refused(capsys, ["evaluate", str(path), "--dataset", "mi300x"],
            [f"{columns:,} columns", f"at most {MAX_COLUMNS:,}"], [work])


@adversarial("predictions", "error", fixed="42")
def test_duplicates_in_a_header_within_the_limit(capsys, work):
    path = work / "dups.csv"
    path.write_text(",".join(["problem_id"] + [f"c{i % 400}" for i in range(MAX_COLUMNS - 1)]) + "\n")
    refused(capsys, ["evaluate", str(path), "--dataset", "mi300x"], ["appear more than once", "'c0'"], [work])


# ----------------------------------------------------------------------------- merge
@pytest.fixture
def shards(tmp_path):
    root = tmp_path / "run"
    shutil.copytree(SHARDS, root, ignore=shutil.ignore_patterns("README.md"))
    return root


@adversarial("collector", "error", fixed="42")
def test_merge_a_shard_whose_plans_file_is_missing(shards, tmp_path):
    """Merged 12 problem-directions with plans for 5 and marked all done; refused now, nothing written."""
    compact(shards / "shard-0-of-2")
    plans = sorted((shards / "shard-0-of-2").glob("plans-*.parquet"))
    assert plans
    for p in plans:
        p.unlink()
    before = snapshot(shards)
    with pytest.raises(KbenchInputError, match="has no plans-0000.parquet beside it"):
        merge([shards], out=tmp_path / "merged")
    assert not (tmp_path / "merged").exists() and snapshot(shards) == before


@adversarial("collector", "error", fixed="42")
def test_merge_a_shard_whose_plans_are_cut_short(shards, tmp_path):
    """The neighbour: the plans file is there but holds the plans of some problem-directions only."""
    folder = shards / "shard-1-of-2"
    compact(folder)
    (path,) = folder.glob("plans-*.parquet")
    plans = pd.read_parquet(path)
    plans[plans["key"] == plans["key"].iloc[0]].to_parquet(path, index=False)
    with pytest.raises(KbenchInputError, match=r"problem-direction\(s\) found plans but have no plan records"):
        merge([shards], out=tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def _set_env(folder: Path, **values) -> None:
    lines = [json.loads(line) for line in (folder / "env.jsonl").read_text().splitlines()]
    for line in lines:
        for key, value in values.items():
            if value is None:
                line.pop(key, None)
            else:
                line[key] = value
    (folder / "env.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


@adversarial("collector", "error", fixed="42")
@pytest.mark.parametrize("field, value, named", [
    ("torch_allow_tf32_cudnn", False, "PyTorch allow_tf32 for cuDNN"),
    ("env_NVIDIA_TF32_OVERRIDE", "0", "NVIDIA_TF32_OVERRIDE"),
    ("smi_power_limit", "500.00", "power limit"),
    ("smi_clocks_max_sm", "1500", "maximum SM clock"),
    ("torch", "2.99.0", "PyTorch"),
    ("tensor_strides", "pytorch", "tensor-stride convention")])
def test_merge_shards_measured_in_other_settings(shards, tmp_path, field, value, named):
    """Only GPU, driver, cuDNN and frontend were compared; TF32, clocks, power, torch and strides now too."""
    _set_env(shards / "shard-1-of-2", **{field: value})
    with pytest.raises(KbenchInputError, match=f"{named} '?{value}'? differs") as err:
        merge([shards], out=tmp_path / "merged")
    assert f"({field})" in str(err.value)
    assert not (tmp_path / "merged").exists()


@adversarial("collector", "accepted", fixed="42")
def test_merge_counts_a_missing_stride_key_as_legacy(shards, tmp_path):
    """A run without ``tensor_strides`` is of the legacy convention: it merges with an explicit legacy run."""
    _set_env(shards / "shard-1-of-2", tensor_strides="legacy")
    report = merge([shards], out=tmp_path / "merged")
    assert report["versions"]["tensor_strides"] == "legacy"


@adversarial("collector", "error", fixed="42")
@pytest.mark.parametrize("content", [b"\xff\xfe\x00binary\x89PNG", b"[1, 2]\n"], ids=["binary", "not-an-object"])
def test_merge_an_unreadable_env_jsonl(capsys, shards, tmp_path, content):
    (shards / "shard-0-of-2" / "env.jsonl").write_bytes(content)
    refused(capsys, ["collect", "merge", str(shards), "--out", str(tmp_path / "merged")],
            [str(shards / "shard-0-of-2" / "env.jsonl")], [shards])


def test_the_card_lists_each_runs_setting_where_runs_differ():
    from kbench.collect.packaging.card import settings_rows
    env = pd.DataFrame([{"run_id": "a", "phase": "start", "torch_allow_tf32_cudnn": True},
                        {"run_id": "b", "phase": "start", "torch_allow_tf32_cudnn": False,
                         "tensor_strides": "pytorch"}])
    rows = settings_rows(env)
    assert "| PyTorch allow_tf32 for cuDNN (runs differ) | False: 1 run (b); True: 1 run (a) |" in rows
    assert "| tensor-stride convention (runs differ) | legacy: 1 run (a); pytorch: 1 run (b) |" in rows
    assert settings_rows(env.iloc[:1]) == ""


# ----------------------------------------------------------------------------- Hub cache and checksums
def _cached_file(cache: Path, name: str, data: bytes, blob_name: str | None = None) -> Path:
    """A huggingface_hub cache entry: snapshots/<commit>/<name> -> ../../blobs/<blob name>."""
    blobs = cache / "datasets--o--r" / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    blob = blobs / (blob_name or hashlib.sha256(data).hexdigest())
    blob.write_bytes(data)
    link = cache / "datasets--o--r" / "snapshots" / "c0ffee" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    return link


@adversarial("data", "error", fixed="42")
def test_hub_cleanup_never_deletes_outside_the_cache(tmp_path, monkeypatch):
    from kbench.data.hub_download import _check_file
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path / "cache"))
    outside = tmp_path / "precious.parquet"
    outside.write_bytes(b"the user's own file")
    link = tmp_path / "cache" / "hub" / "datasets--o--r" / "snapshots" / "c0ffee" / "data.parquet"
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    with pytest.raises(DataIntegrityError, match="sha256 does not match"):
        _check_file(link.parent, "data.parquet", {"bytes": outside.stat().st_size, "sha256": "0" * 64}, "hf://o/r")
    assert outside.read_bytes() == b"the user's own file"


@adversarial("data", "error", fixed="42")
def test_hub_cleanup_keeps_a_file_that_verifies(tmp_path, monkeypatch):
    """One corrupted hash in kbench_manifest.json deleted the good cached blob; a blob that matches its
    content address is what the Hub sent, so it is kept and the manifest blamed."""
    from kbench.data.hub_download import _check_file
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path / "cache"))
    data = b"good parquet bytes"
    link = _cached_file(tmp_path / "cache" / "hub", "data.parquet", data)
    with pytest.raises(DataIntegrityError, match="it was kept"):
        _check_file(link.parent, "data.parquet", {"bytes": len(data), "sha256": "0" * 64}, "hf://o/r")
    assert link.read_bytes() == data
    # the neighbour: a blob whose bytes changed after download is removed (link and blob), inside the cache
    blob = link.resolve()
    blob.write_bytes(b"tampered bytes....")
    with pytest.raises(DataIntegrityError, match="removed from the Hub cache"):
        _check_file(link.parent, "data.parquet", {"bytes": len(data), "sha256": "0" * 64}, "hf://o/r")
    assert not link.exists() and not link.is_symlink() and not blob.exists()


def _dataset_copy(tmp_path: Path) -> Path:
    src = REPO / "kbench" / "datasets" / "mi100"
    dst = tmp_path / "mi100"
    shutil.copytree(src, dst)
    return dst


@adversarial("data", "error", fixed="42")
def test_a_dataset_edited_consistently_with_its_file_hashes(tmp_path):
    """An edited parquet with its sha256 updated in the manifest kept the original ds.checksum."""
    folder = _dataset_copy(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    table = folder / "runtimes.parquet"
    frame = pd.read_parquet(table)
    frame.iloc[:10].to_parquet(table, index=False)
    manifest["files"]["runtimes.parquet"].update(sha256=hashlib.sha256(table.read_bytes()).hexdigest(),
                                                 bytes=table.stat().st_size)
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    with pytest.raises(DataIntegrityError, match="is not what its files' sha256 give"):
        read_dataset_folder(folder)


@adversarial("data", "error", fixed="42")
def test_a_dataset_checksum_edited_alone(tmp_path):
    folder = _dataset_copy(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["checksum"] = "ab" * 32
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    with pytest.raises(DataIntegrityError, match="the manifest was edited"):
        read_dataset_folder(folder)


def test_the_dataset_checksum_is_recomputed_from_the_file_hashes():
    """Hand-worked: sha256 over 'name:sha256' of each file, in name order."""
    from kbench.sources.dataset_files import dataset_checksum
    files = {"b.parquet": {"sha256": "22"}, "a.parquet": {"sha256": "11"}}
    assert dataset_checksum(files) == hashlib.sha256(b"a.parquet:11b.parquet:22").hexdigest()


# ----------------------------------------------------------------------------- stored predictions
def test_stored_predictions_read_back_identical_for_every_seed(run_dir, tmp_path):
    """The parquet store gives back each seed's text exactly, deterministic seeds stored once."""
    frames = {s: pd.read_csv(run_dir / f"seed-{s}" / "preds.csv.gz", dtype=str, keep_default_na=False)
              for s in range(5)}
    frames[7] = frames[0]
    data = seed_predictions_parquet(frames)
    assert seed_predictions_parquet(frames) == data  # deterministic bytes
    path = tmp_path / PREDS_FILE
    path.write_bytes(data)
    back = read_seed_predictions(path)
    assert sorted(back) == [0, 1, 2, 3, 4, 7]
    for seed, frame in frames.items():
        assert back[seed].equals(frame)
    assert len(gzip.compress(data)) > 0  # a plain bytes object


def test_write_entry_writes_the_record_last(run_dir, tmp_path):
    rec = EvaluationResult.model_validate_json((run_dir / "result.json").read_text())
    from kbench.leaderboard.schema import parse_meta
    folder = write_entry(tmp_path / "lb", rec, parse_meta(run_dir / "meta.json"),
                         seed_predictions_parquet({0: pd.DataFrame({"problem_id": ["a"], "ranking": ["k"]})}))
    back = json.loads((folder / "result.json").read_text())
    assert back["predictions"]["path"] == PREDS_FILE
    assert back["predictions"]["sha256"] == hashlib.sha256((folder / PREDS_FILE).read_bytes()).hexdigest()


@adversarial("submissions", "accepted", fixed="42",
             limit="a one-seed entry (recorded before every seed was stored; marked ‡ on the site) has its first "
                   "seed re-scored only: a change to its seed means, by_direction or by_dtype goes unseen until it "
                   "is re-run with every seed")
def test_a_one_seed_entry_is_rescored_for_its_stored_seed_only(board):
    folder = board / "toy" / "random" / "toy-model"
    seeds = read_seed_predictions(folder / PREDS_FILE)
    data = seed_predictions_parquet({0: seeds[0]})
    (folder / PREDS_FILE).write_bytes(data)
    doc = json.loads((folder / "result.json").read_text())
    doc["predictions"]["sha256"] = hashlib.sha256(data).hexdigest()
    direction = sorted(doc["metrics"]["by_direction"])[0]
    doc["metrics"]["by_direction"][direction]["speedup_geomean"] = 50.0  # not seen: the limit
    (folder / "result.json").write_text(json.dumps(doc, indent=2))
    assert validate_board(board)["partial"] == ["toy/random/toy-model"]
    doc["seeds"]["per_seed"][0]["top1"] = 0.5  # its stored seed is re-scored (summary kept consistent)
    values = pd.Series([p["top1"] for p in doc["seeds"]["per_seed"]])
    doc["seeds"]["mean"]["top1"] = doc["metrics"]["overall"]["top1"] = values.mean()
    doc["seeds"]["std"]["top1"] = values.std(ddof=1)
    (folder / "result.json").write_text(json.dumps(doc, indent=2))
    with pytest.raises(KbenchInputError, match=r"seeds.per_seed\[0\] \(seed 0\).top1"):
        validate_board(board)

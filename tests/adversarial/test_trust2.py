"""Trust II (issue 62): no name read from a file becomes a path, every rendered name escaped for its
medium, every GPU re-timing and transfer record re-derived from its raw inputs, no traceback.

Each case a red-team pass found, tried as an attacker would on a clone, and its next neighbour.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from advkit import adversarial, case, refused, snapshot

from kbench.cli import main
from kbench.core.errors import DataIntegrityError, KbenchInputError
from kbench.core.escaping import csv_cell, markdown_cell, safe_href
from kbench.core.identifiers import check_identifier, confined_path, path_under
from kbench.data.dataset import read_dataset_folder
from kbench.leaderboard.site import build
from kbench.sources.dataset_files import PACKAGE_DATA, dataset_checksum

REPO = Path(__file__).resolve().parents[2]
FIXED = "62"


# ----------------------------------------------------------------------------- fixtures
# toy_run, toy, run_dir and board: the toy run and leaderboard (tests/adversarial/conftest.py)
def edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=1))


@pytest.fixture
def dataset_copy(tmp_path) -> Path:
    """A copy of the shipped mi300x-tuning folder (the smallest) under another folder name."""
    dst = tmp_path / "dsx"
    shutil.copytree(PACKAGE_DATA / "mi300x-tuning", dst)
    return dst


# ----------------------------------------------------------------------------- names become paths
BAD_NAMES = ["../escaped", "/tmp/abs", "index", ".", "..", "a/b", "Upper", "", "x" * 65, "site", "transfer"]


@pytest.mark.parametrize("name", [case(n, f"identifier-{i}", "data", "error", fixed=FIXED)
                                  for i, n in enumerate(BAD_NAMES)])
def test_a_name_that_is_no_identifier_never_becomes_a_path(tmp_path, name):
    with pytest.raises(KbenchInputError, match="identifier|reserved"):
        check_identifier(name, "dataset")
    with pytest.raises(KbenchInputError):
        path_under(tmp_path, ("dataset", name), ("split", "random"))
    assert list(tmp_path.iterdir()) == []


@adversarial("data", "error", fixed=FIXED)
def test_a_link_inside_the_tree_does_not_lead_out(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "toy").symlink_to(tmp_path)
    with pytest.raises(KbenchInputError, match="leads outside"):
        path_under(tmp_path / "root", ("dataset", "toy"), ("split", "random"))


@pytest.mark.parametrize("name", [case("../escaped", "manifest-name-dotdot", "data", "error", fixed=FIXED),
                                  case("/tmp/escaped", "manifest-name-absolute", "data", "error", fixed=FIXED),
                                  case("index", "manifest-name-reserved", "data", "error", fixed=FIXED)])
def test_a_manifest_name_that_is_no_identifier(capsys, dataset_copy, tmp_path, name):
    """`"name": "../escaped"` made `kbench run --dataset ./dsx` write to escaped/: the name is refused
    when the folder loads, before anything is written."""
    edit_json(dataset_copy / "manifest.json", lambda d: d.update(name=name))
    refused(capsys, ["run", "--dataset", str(dataset_copy), "--baselines", "random", "--seeds", "0",
                     "--out", str(tmp_path / "results")], ["manifest.json", "not an identifier" if name != "index"
                                                            else "reserved"], [tmp_path])
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/escaped").exists()


@adversarial("data", "error", fixed=FIXED)
def test_a_manifest_name_that_disagrees_with_the_registered_name(dataset_copy):
    """The checksum covers the files, not the name: a name edited to another dataset's is refused."""
    edit_json(dataset_copy / "manifest.json", lambda d: d.update(name="mi100"))
    with pytest.raises(DataIntegrityError, match="loaded as 'mi300x-tuning'"):
        read_dataset_folder(dataset_copy, "mi300x-tuning")


HUB_TOKEN = "hf_test_token"


@pytest.fixture
def local_hub(tmp_path, monkeypatch):
    """The loopback stand-in for the Hub (tests/hub/hubserver.py) as HF_ENDPOINT, with no real token or cache."""
    pytest.importorskip("huggingface_hub")
    import importlib

    import huggingface_hub.constants as hf_constants
    from hubserver import HubServer
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "HF_OIDC_ID_TOKEN", "HF_HUB_OFFLINE",
                "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path / "kbench-cache"))
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    # huggingface_hub's own download bars write to stderr, which the messages checked here share
    monkeypatch.setattr(importlib.import_module("huggingface_hub.utils.tqdm"), "are_progress_bars_disabled",
                        lambda name=None: True)
    with HubServer(tokens=[HUB_TOKEN]) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        yield server


def publish_renamed(hub, folder: Path, repo_id: str, data_name: str, hub_name: str | None) -> None:
    """mi300x-tuning published to ``repo_id`` as an attacker would publish a repo of their own: its
    data/manifest.json names the dataset ``data_name`` and kbench_manifest.json ``hub_name`` (no name where
    None), with the sha256 and size kbench_manifest.json lists for data/manifest.json made to agree."""
    import hashlib

    import huggingface_hub

    from kbench.hub import build_hub_folder
    build_hub_folder(PACKAGE_DATA / "mi300x-tuning", folder)
    edit_json(folder / "data" / "manifest.json", lambda d: d.update(name=data_name))
    data = (folder / "data" / "manifest.json").read_bytes()

    def agree(doc):
        doc["files"]["data/manifest.json"].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
        doc.pop("name")
        if hub_name is not None:
            doc["name"] = hub_name
    edit_json(folder / "kbench_manifest.json", agree)
    api = huggingface_hub.HfApi(endpoint=hub.endpoint, token=HUB_TOKEN)
    api.create_repo(repo_id, repo_type="dataset")
    api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="dataset")


@pytest.mark.parametrize("names", [
    case(("../escaped", "mi300x-tuning"), "hf-manifest-name-dotdot", "data", "error", fixed=FIXED),
    case(("/tmp/escaped", "mi300x-tuning"), "hf-manifest-name-absolute", "data", "error", fixed=FIXED),
    case(("../escaped", None), "hf-manifest-name-dotdot-unnamed-repo", "data", "error", fixed=FIXED),
    case(("../escaped", "../escaped"), "hf-manifest-name-dotdot-both", "data", "error", fixed=FIXED)])
def test_a_manifest_name_that_is_no_identifier_through_the_hub(capsys, local_hub, tmp_path, names):
    """The hf:// form of the attack above: a dataset repo whose data/manifest.json (and kbench_manifest.json)
    names the dataset ``../escaped`` or an absolute path, consistent with the sha256 the repo lists, is
    refused when it is downloaded, before `kbench run` writes anything."""
    import kbench
    data_name, hub_name = names
    publish_renamed(local_hub, tmp_path / "hub-folder", "org/renamed", data_name, hub_name)
    with pytest.raises(DataIntegrityError, match="not an identifier") as err:
        kbench.load("hf://org/renamed")
    assert "manifest" in str(err.value)
    work = tmp_path / "work"
    work.mkdir()
    refused(capsys, ["run", "--dataset", "hf://org/renamed", "--baselines", "random", "--seeds", "0",
                     "--out", str(work / "results")], ["manifest", "not an identifier"], [work])
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/escaped").exists()
    assert any("/resolve/" in path for _, path in local_hub.requests)  # it was downloaded from the Hub


@pytest.mark.parametrize("entry", [case("../../outside.parquet", "manifest-file-dotdot", "data", "error", fixed=FIXED),
                                   case("/etc/passwd", "manifest-file-absolute", "data", "error", fixed=FIXED),
                                   case("sub/problems.parquet", "manifest-file-subfolder", "data", "error",
                                        fixed=FIXED)])
def test_manifest_files_outside_the_folder(dataset_copy, entry):
    """A manifest (a Hub snapshot's data/manifest.json too) may list only files of its own folder,
    even when its checksum is made consistent with the edited list."""
    def change(doc):
        doc["files"][entry] = doc["files"].pop("problems.parquet")
        doc["checksum"] = dataset_checksum(doc["files"])
    edit_json(dataset_copy / "manifest.json", change)
    with pytest.raises(DataIntegrityError, match="refused|subfolder|inside"):
        read_dataset_folder(dataset_copy)


@adversarial("submissions", "error", fixed=FIXED)
def test_submit_with_an_absolute_dataset_name(capsys, run_dir, tmp_path, toy_run):
    """`dataset.name` an absolute path wrote the entry into that folder."""
    target = tmp_path / "elsewhere"
    shutil.copytree(toy_run / "results" / "toy", target / "data-copy", dirs_exist_ok=True)
    for name in ("result.json", "meta.json"):
        edit_json(run_dir / name, lambda d: d["dataset"].update(name=str(target)))
    root = tmp_path / "lb"
    refused(capsys, ["submit", str(run_dir / "result.json"), "--meta", str(run_dir / "meta.json"),
                     "--leaderboard", str(root)], [str(run_dir / "result.json")], [target, run_dir.parent])
    assert not root.exists()


@pytest.mark.parametrize("folder", [case("index", "board-folder-index", "submissions", "error", fixed=FIXED),
                                    case("Bad Name", "board-folder-space", "submissions", "error", fixed=FIXED)])
def test_a_board_folder_that_would_overwrite_a_generated_page(capsys, board, folder):
    """A board folder named `index/` overwrote site/index.html."""
    build(board)
    shutil.copytree(board / "toy", board / folder)
    refused(capsys, ["leaderboard", "build", "--leaderboard", str(board)], ["dataset folder", repr(folder)],
            [board / "site", board / "README.md"])
    with pytest.raises(KbenchInputError, match=f"the dataset folder '{folder}'"):
        from kbench.leaderboard.schema import validate_tree
        validate_tree(board, check_data=False)


@adversarial("data", "error", fixed=FIXED)
def test_publish_dry_run_into_a_packaged_dataset_folder(capsys):
    """`publish --dry-run --out` wrote inside the installed dataset's own folder."""
    target = PACKAGE_DATA / "mi300x-tuning" / "hub-copy"
    try:
        refused(capsys, ["publish", "mi300x-tuning", "--repo-id", "org/x", "--dry-run", "--out", str(target)],
                ["--out", "overlaps the input"], [PACKAGE_DATA / "mi300x-tuning"])
    finally:
        shutil.rmtree(target, ignore_errors=True)


@adversarial("data", "error", fixed=FIXED)
def test_publish_out_to_a_symlink(capsys, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    refused(capsys, ["publish", "mi300x-tuning", "--repo-id", "org/x", "--dry-run", "--out", str(tmp_path / "link")],
            ["symbolic link"], [tmp_path])


@adversarial("data", "error", fixed=FIXED)
def test_publish_out_with_a_300_character_name(capsys, tmp_path):
    refused(capsys, ["publish", "mi300x-tuning", "--repo-id", "org/x", "--dry-run", "--out",
                     str(tmp_path / ("n" * 300))], ["too long"], [tmp_path])


# ----------------------------------------------------------------------------- escaping
@adversarial("submissions", "accepted", fixed=FIXED)
def test_escaping_for_each_medium():
    assert markdown_cell("a|b\nc") == "a\\|b c"
    assert csv_cell("=HYPERLINK(\"http://x\")").startswith("'=") and csv_cell("-1+1") == "'-1+1"
    assert csv_cell("toy-model") == "toy-model"
    assert safe_href("javascript:alert(1)") is None and safe_href("data:text/html,x") is None
    assert safe_href("//evil.example/x") is None
    assert safe_href("https://example.org") == "https://example.org" and safe_href("../baselines/x.py")


def _verification(gpu: str, method: str = "toy-model"):
    """A made-up GPU re-timing record of a toy entry (the board renders it; validate would refuse it)."""
    from kbench.scoring.records import (
        DatasetRef,
        PredictionsRef,
        SpeedupFigures,
        VerificationFigures,
        VerificationRecord,
    )
    one = SpeedupFigures(problems=12, speedup_geomean=1.0625, speedup_total=1.0625, oracle_speedup_geomean=1.125,
                         slowdown_vs_oracle_geomean=1.05, choice_is_mode_a=0.25)
    figs = VerificationFigures(overall=one, by_direction={"F": one}, by_dtype={"FP32": one})
    return VerificationRecord(
        kbench_version="0.1.0", method=method, dataset=DatasetRef(name="toy", version="1", checksum="c"),
        split="random", part="test", predictions=PredictionsRef(path="preds.csv.gz", rows=12, sha256="0" * 64),
        date="2026-11-24", protocol={"seed": 0, "rounds": 5, "replays": 3}, problems_planned=12,
        problems_measured=12, device={"gpu": gpu}, measured=figs, table=figs)


HOSTILE_NAME = "[x](javascript:alert(1)) <img src=x onerror=alert(2)> | cell\nbreak"


@adversarial("submissions", "accepted", fixed=FIXED)
def test_names_in_the_readme_tables_and_the_gpu_note_are_escaped(board):
    """Newlines and `|` in a display name broke out of the README table; the "(GPU ×)" note inserted
    the display and GPU names raw (`<img onerror>`, `[x](javascript:…)`)."""
    entry = board / "toy" / "random" / "toy-model"
    edit_json(entry / "meta.json", lambda d: d.update(display_name=HOSTILE_NAME))
    (entry / "verification.json").write_text(_verification("<img src=x onerror=alert(3)>").model_dump_json())
    build(board)
    readme = (board / "README.md").read_text()
    assert "<img" not in readme and "](javascript:" not in readme
    rows = [line for line in readme.splitlines() if "javascript" in line]
    assert rows and all(line.startswith(("|", "_")) for line in rows)  # the name stays in its cell or note
    table_row = next(line for line in rows if line.startswith("|"))
    header = next(line for line in readme.splitlines() if line.startswith("| rank"))
    assert table_row.replace("\\|", "").count("|") == header.count("|")
    page = (board / "site" / "toy.html").read_text()
    assert "<img src=x" not in page


@adversarial("submissions", "accepted", fixed=FIXED)
def test_a_formula_in_a_name_reaches_the_csv_quoted(board):
    """`=HYPERLINK(…)` reached the CSV downloads unquoted."""
    edit_json(board / "toy" / "random" / "toy-model" / "meta.json",
              lambda d: d.update(display_name='=HYPERLINK("http://evil.example","x")'))
    build(board)
    text = (board / "site" / "boards" / "toy-random.csv").read_text()
    assert "'=HYPERLINK" in text
    assert not any(cell.startswith("=") for line in text.splitlines() for cell in line.split(","))


# ----------------------------------------------------------------------------- locks and writes
@adversarial("concurrency", "accepted", fixed=FIXED)
def test_the_site_is_rendered_under_the_build_lock(board, monkeypatch):
    """render() ran outside the build lock: two submits at once left the site without one entry."""
    import fcntl

    from kbench.leaderboard import site
    seen = []
    real = site.render

    def probe(root, *a, **k):
        fd = os.open(root, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            seen.append("free")
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            seen.append("held")
        finally:
            os.close(fd)
        return real(root, *a, **k)
    monkeypatch.setattr(site, "render", probe)
    site.build(board)
    assert seen == ["held"]


@adversarial("submissions", "accepted", fixed=FIXED)
def test_submit_replace_removes_the_replaced_re_timing(capsys, run_dir, tmp_path):
    """`submit --replace` kept the old verification.json, which re-timed the replaced predictions."""
    root = tmp_path / "lb"
    argv = ["submit", str(run_dir / "result.json"), "--meta", str(run_dir / "meta.json"), "--leaderboard", str(root),
            "--no-build"]
    assert main(argv) == 0, capsys.readouterr().err
    stale = root / "toy" / "random" / "toy-model" / "verification.json"
    stale.write_text(_verification("NVIDIA H200").model_dump_json())
    assert main(argv + ["--replace"]) == 0, capsys.readouterr().err
    assert "verification.json" in capsys.readouterr().out
    assert not stale.exists()


@adversarial("collector", "error", fixed=FIXED)
def test_a_read_only_folder_for_leaderboard_build(capsys, board, monkeypatch):
    """A read-only folder (simulated: the tests run as root) is the machine's fault: exit 1, one message,
    the previous site whole."""
    import tempfile
    build(board)
    before = snapshot(board)

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system", str(board))
    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    capsys.readouterr()
    assert main(["leaderboard", "build", "--leaderboard", str(board)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kbench: error: ") and "Traceback" not in err and "writable" in err
    assert snapshot(board) == before


@adversarial("collector", "error", fixed=FIXED)
def test_a_full_disk_while_writing_an_entry(capsys, run_dir, tmp_path, monkeypatch):
    """A full disk during `submit`: exit 1, one message naming the file, no half-written file."""
    import tempfile
    real = tempfile.mkstemp

    def full(*a, **k):
        fd, name = real(*a, **k)
        os.close(fd)
        os.unlink(name)
        raise OSError(errno.ENOSPC, "No space left on device")
    root = tmp_path / "lb"
    monkeypatch.setattr(tempfile, "mkstemp", full)
    capsys.readouterr()
    assert main(["submit", str(run_dir / "result.json"), "--meta", str(run_dir / "meta.json"),
                 "--leaderboard", str(root)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kbench: error: ") and "disk is full" in err and "Traceback" not in err
    assert not any(p.is_file() and p.name != ".submit.lock" for p in root.rglob("*"))


@pytest.mark.parametrize("argv", [case(["info", "x" * 5000], "info-5000-characters", "data", "error", fixed=FIXED),
                                  case(["submit", "", "--meta", ""], "submit-empty-paths", "submissions", "error",
                                       fixed=FIXED)])
def test_odd_arguments_get_one_message(capsys, argv):
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("kbench: error: ") and "Traceback" not in err
    assert len(err) < 1000


# ----------------------------------------------------------------------------- confined paths
@adversarial("data", "error", fixed=FIXED)
def test_confined_path_refuses_what_leaves_its_root(tmp_path):
    for rel in ("../x", "/etc/passwd", "a/../../x", "", "a\\..\\x"):
        with pytest.raises(KbenchInputError):
            confined_path(tmp_path, rel)
    assert confined_path(tmp_path, "data/manifest.json") == tmp_path / "data" / "manifest.json"


@adversarial("data", "error", fixed=FIXED)
def test_a_damaged_hub_format_field(monkeypatch, tmp_path):
    """A malformed `kbench_hub_format` or file entry in kbench_manifest.json gave a traceback."""
    from kbench.data import hub_download
    manifest = tmp_path / "snap" / "kbench_manifest.json"
    manifest.parent.mkdir()
    for doc in ({"kbench_hub_format": "one", "files": {}}, {"kbench_hub_format": 1, "files": {"data/x": 3}}):
        manifest.write_text(json.dumps(doc))

        class FakeHub:
            @staticmethod
            def hf_hub_download(*a, **k):
                return str(manifest)
        monkeypatch.setattr(hub_download, "_hf", lambda: FakeHub)
        with pytest.raises(DataIntegrityError, match="damaged"):
            hub_download.download_from_hub("org/x")


# ----------------------------------------------------------------------------- GPU re-timings
VERIFIED = ("h100-pytorch", "random", "xgboost-plans-safe")


@pytest.fixture(scope="module")
def rescoring_cache():
    """Scoring a re-timing again takes seconds: the cases here share one scoring per set of raw inputs."""
    from kbench.gpu_check import command
    make_record, make_plan = command.make_record, command.make_plan
    records, plans = {}, {}

    def cached_record(plan, out_dir, method=None):
        key = (command.input_sha256(_stored(out_dir, "raw.jsonl")), json.dumps(plan, sort_keys=True), method)
        if key not in records:
            records[key] = make_record(plan, out_dir, method)
        return records[key]

    def cached_plan(predictions, dataset, *args, **kw):
        key = (id(predictions), getattr(dataset, "name", dataset), args)
        if key not in plans:
            plans[key] = make_plan(predictions, dataset, *args, **kw)
        return json.loads(json.dumps(plans[key]))
    command.make_record, command.make_plan = cached_record, cached_plan
    yield
    command.make_record, command.make_plan = make_record, make_plan


def _stored(folder: Path, name: str) -> Path:
    return folder / f"{name}.gz" if (folder / f"{name}.gz").exists() else folder / name


@pytest.fixture(scope="module")
def first_seed_preds():
    from kbench.leaderboard.store import first_seed, read_seed_predictions
    dataset, split, method = VERIFIED
    return first_seed(read_seed_predictions(REPO / "leaderboard" / dataset / split / method / "preds.parquet"))


@pytest.fixture
def retimed(tmp_path, rescoring_cache) -> tuple[Path, Path]:
    """(entry folder, raw timings folder): a copy of a board entry with its GPU re-timing and the raw
    timings it was scored from, laid out as in the repository (leaderboard/..., raw/.../verify/...)."""
    dataset, split, method = VERIFIED
    entry = tmp_path / "leaderboard" / dataset / split / method
    entry.mkdir(parents=True)
    shutil.copy(REPO / "leaderboard" / dataset / split / method / "verification.json", entry)
    raw = tmp_path / "raw" / dataset / "verify" / method
    raw.mkdir(parents=True)
    for name in ("plan.json.gz", "raw.jsonl.gz"):
        shutil.copy(REPO / "raw" / dataset / "verify" / method / name, raw)
    return entry, raw


def rescore_problems(entry: Path, first_seed_preds, dataset: str | None = None) -> list[str]:
    from kbench.leaderboard.integrity import verification_rescore_problems
    from kbench.leaderboard.schema import verification_problems
    from kbench.leaderboard.store import parse_record
    name, split, method = VERIFIED
    record = parse_record(REPO / "leaderboard" / name / split / method / "result.json")
    out = verification_problems(entry / "verification.json", record, dataset or name, split, method,
                                first_seed_sha256=first_seed_preds[1])
    return out + verification_rescore_problems(entry, dataset or name, split, method, entry.parents[3],
                                               first_seed_preds)


@adversarial("submissions", "accepted", fixed=FIXED)
def test_an_untouched_re_timing_is_scored_again_whole(retimed, first_seed_preds):
    assert rescore_problems(retimed[0], first_seed_preds) == []


def _set(path: str, value):
    def change(doc):
        *parents, leaf = path.split(".")
        for key in parents:
            doc = doc[int(key)] if isinstance(doc, list) else doc[key]
        if isinstance(doc, list):
            doc[int(leaf)] = value
        else:
            doc[leaf] = value
    return change


TAMPERED = [
    case(("measured.overall.speedup_geomean", 9.99, "not what its raw timings give"), "gpu-speedup-9.99",
         "submissions", "error", fixed=FIXED),
    case(("measured.overall.speedup_geomean", -1.5, "negative"), "gpu-speedup-negative", "submissions", "error",
         fixed=FIXED),
    case(("measured.overall.speedup_geomean", float("nan"), "finite"), "gpu-speedup-nan", "submissions", "error",
         fixed=FIXED),
    case(("problems_measured", 999_999, "measured 999,999 problems"), "gpu-999999-problems", "submissions", "error",
         fixed=FIXED),
    case(("live.references.live_mode_a.speedup_ci95.1", 1.5, "not what its raw timings give"), "gpu-live-interval",
         "submissions", "error", fixed=FIXED),
    case(("device.gpu", "NVIDIA H20", "timed on an NVIDIA H20,"), "gpu-name-prefix", "submissions", "error", fixed=FIXED),
    case(("device", {}, "names no GPU"), "gpu-device-empty", "submissions", "error", fixed=FIXED),
    case(("predictions.sha256", None, "names no predictions.sha256"), "gpu-predictions-sha-null", "submissions",
         "error", fixed=FIXED),
    case(("inputs", None, "no sha256 of its raw inputs"), "gpu-inputs-missing", "submissions", "error", fixed=FIXED),
    case(("inputs.raw.jsonl", "0" * 64, "inputs.raw.jsonl"), "gpu-inputs-sha-edited", "submissions", "error",
         fixed=FIXED),
]


@pytest.mark.parametrize("change", TAMPERED)
def test_a_tampered_re_timing_is_refused(retimed, first_seed_preds, change):
    """verification.json's figures were trusted as written: 9.99× passed validate and showed on the README."""
    path, value, must = change
    if path.startswith("inputs."):
        edit_json(retimed[0] / "verification.json", lambda d: d["inputs"].update({path[len("inputs."):]: value}))
    else:
        edit_json(retimed[0] / "verification.json", _set(path, value))
    problems = rescore_problems(retimed[0], first_seed_preds)
    assert any(must in p for p in problems), problems


@adversarial("submissions", "error", fixed=FIXED)
def test_a_missing_gpu_field_with_a_matching_nvidia_smi_name(retimed, first_seed_preds):
    edit_json(retimed[0] / "verification.json", lambda d: d["device"].pop("gpu"))
    assert any("names no GPU" in p for p in rescore_problems(retimed[0], first_seed_preds))


@adversarial("submissions", "error", fixed=FIXED)
def test_a_re_timing_whose_raw_inputs_are_missing(retimed, first_seed_preds):
    (retimed[1] / "raw.jsonl.gz").unlink()
    assert any("raw inputs are missing" in p for p in rescore_problems(retimed[0], first_seed_preds))


@adversarial("submissions", "error", fixed=FIXED)
def test_raw_timings_edited_under_their_record(retimed, first_seed_preds):
    rows = gzip.decompress((retimed[1] / "raw.jsonl.gz").read_bytes()).decode().splitlines()
    edited = [line.replace('"ms": ', '"ms": 1', 1) if '"kind": "time"' in line and i % 7 == 0 else line
              for i, line in enumerate(rows)]
    (retimed[1] / "raw.jsonl.gz").write_bytes(gzip.compress(("\n".join(edited) + "\n").encode()))
    problems = rescore_problems(retimed[0], first_seed_preds)
    assert any("inputs.raw.jsonl" in p for p in problems), problems


@adversarial("submissions", "error", fixed=FIXED)
def test_a_cherry_picked_subset_rescored_consistently(retimed, first_seed_preds, capsys):
    """Drop the problems where the choice lost from raw.jsonl, re-score with --score-only: the speed-up
    rose, and validate passed. The timed problems must be the seeded prefix of the plan's order."""
    entry, raw = retimed
    record = json.loads((entry / "verification.json").read_text())
    plan = json.loads(gzip.decompress((raw / "plan.json.gz").read_bytes()))
    lost = {p["problem_id"] for p in plan["problems"][:800] if p["roles"]["choice"] != p["roles"]["mode_a"]}
    lost = set(sorted(lost)[: len(lost) // 2])
    rows = gzip.decompress((raw / "raw.jsonl.gz").read_bytes()).decode().splitlines()
    kept = [line for line in rows if json.loads(line).get("problem_id") not in lost]
    (raw / "raw.jsonl.gz").unlink()
    (raw / "raw.jsonl").write_text("\n".join(kept) + "\n")
    (raw / "plan.json").write_bytes(gzip.decompress((raw / "plan.json.gz").read_bytes()))
    (raw / "plan.json.gz").unlink()
    assert main(["verify-on-gpu", "--out", str(raw), "--score-only", "--method", record["method"]]) == 0
    capsys.readouterr()
    shutil.copy(raw / "verification.json", entry / "verification.json")
    problems = rescore_problems(entry, first_seed_preds)
    assert any("seeded prefix" in p for p in problems), problems


@adversarial("submissions", "error", fixed=FIXED)
def test_a_re_timing_copied_to_a_dataset_verify_on_gpu_cannot_time(retimed, first_seed_preds, tmp_path):
    """A record copied to v100-tiles (which verify-on-gpu refuses to time) passed."""
    from kbench.leaderboard.integrity import verification_rescore_problems
    edit_json(retimed[0] / "verification.json", lambda d: d["dataset"].update(name="v100-tiles"))
    problems = verification_rescore_problems(retimed[0], "v100-tiles", "networks", VERIFIED[2], tmp_path,
                                             first_seed_preds)
    assert any("was not measured by 'kbench collect cudnn'" in p for p in problems), problems


@adversarial("collector", "error", fixed=FIXED)
def test_score_only_does_not_write_through_a_link_to_the_raw_timings(tmp_path, capsys):
    """`ln DIR/raw.jsonl DIR/verification.json` then --score-only overwrote the raw GPU timings."""
    dataset, _, method = VERIFIED
    for name in ("plan.json", "raw.jsonl"):
        (tmp_path / name).write_bytes(gzip.decompress((REPO / "raw" / dataset / "verify" / method /
                                                       f"{name}.gz").read_bytes()))
    os.link(tmp_path / "raw.jsonl", tmp_path / "verification.json")
    refused(capsys, ["verify-on-gpu", "--out", str(tmp_path), "--score-only"], ["raw.jsonl", "the same file"],
            [tmp_path])


@pytest.mark.parametrize("row", [
    case('{"kind": "time", "plan": "p", "ms": 1.0}', "raw-row-without-problem", "collector", "error", fixed=FIXED),
    case('{"kind": "time", "problem_id": "x", "plan": "p", "ms": "fast"}', "raw-row-text-time", "collector",
         "error", fixed=FIXED),
    case('{"kind": "problem", "status": "failed"}', "raw-failed-row-without-problem", "collector", "error",
         fixed=FIXED),
    case('{"kind": "run_end", "seconds": "long"}', "raw-run-end-text", "collector", "error", fixed=FIXED)])
def test_score_only_on_malformed_raw_rows(tmp_path, capsys, row):
    dataset, _, method = VERIFIED
    (tmp_path / "plan.json").write_bytes(gzip.decompress((REPO / "raw" / dataset / "verify" / method /
                                                          "plan.json.gz").read_bytes()))
    (tmp_path / "raw.jsonl").write_text(row + "\n")
    refused(capsys, ["verify-on-gpu", "--out", str(tmp_path), "--score-only"], ["raw.jsonl", "damaged"],
            [tmp_path])


@adversarial("submissions", "error", fixed=FIXED)
def test_a_nan_re_timing_is_refused_by_the_build(capsys, board):
    """NaN in verification.json passed validate, then the build crashed."""
    build(board)
    record = _verification("NVIDIA H200").model_dump(mode="json")
    record["measured"]["overall"]["speedup_geomean"] = float("nan")
    (board / "toy" / "random" / "toy-model" / "verification.json").write_text(json.dumps(record))
    refused(capsys, ["leaderboard", "build", "--leaderboard", str(board)], ["verification.json", "finite"],
            [board / "site", board / "README.md"])


# ----------------------------------------------------------------------------- the transfer track
TRANSFER = REPO / "leaderboard" / "transfer" / "mi100-to-mi300x" / "target-xgboost"


@pytest.fixture
def transfer_copy(tmp_path) -> Path:
    folder = tmp_path / "transfer" / "mi100-to-mi300x" / "target-xgboost"
    shutil.copytree(TRANSFER, folder)
    return folder


def transfer_check(path: Path) -> list[str]:
    from kbench.leaderboard.integrity import transfer_record_problems
    from kbench.leaderboard.rescorer import Rescorer
    return transfer_record_problems(path, Rescorer())


@adversarial("submissions", "accepted", fixed=FIXED)
def test_an_untouched_transfer_record_is_re_scored(transfer_copy):
    assert transfer_check(transfer_copy / "kfull.json") == []


@pytest.mark.parametrize("change", [
    case(("metrics.overall.top1", 0.999, "metrics.overall.top1"), "transfer-top1-edited", "submissions", "error",
         fixed=FIXED),
    case(("seeds.per_seed.0.top1", 0.999, "seeds.per_seed[0] (seed 0).top1"), "transfer-per-seed-edited",
         "submissions", "error", fixed=FIXED),
    case(("predictions.sha256", None, "predictions.sha256"), "transfer-sha-null", "submissions", "error",
         fixed=FIXED),
    case(("method", "source-xgboost", "not the folder's"), "transfer-method-moved", "submissions", "error",
         fixed=FIXED)])
def test_a_tampered_transfer_record(transfer_copy, change):
    """`metrics.overall.top1` edited to 0.999 in a transfer record showed as 99.90%."""
    path, value, must = change
    edit_json(transfer_copy / "kfull.json", _set(path, value))
    problems = transfer_check(transfer_copy / "kfull.json")
    assert any(must in p for p in problems), problems


@adversarial("submissions", "accepted", fixed=FIXED)
def test_a_transfer_method_name_is_escaped_in_the_readme(tmp_path):
    from kbench.leaderboard.transfer_track import transfer_markdown
    folder = tmp_path / "transfer" / "mi100-to-mi300x" / "target-xgboost"
    shutil.copytree(TRANSFER, folder)
    edit_json(folder / "kfull.json", lambda d: d.update(method="x | y\n| z <b>"))
    text = transfer_markdown(tmp_path)
    row = next(line for line in text.splitlines() if "x " in line and line.startswith("|"))
    assert "<b>" not in text and row.replace("\\|", "").count("|") == 4


STALE_LIMIT = ("a transfer record scored on a dataset version that is no longer installed cannot be re-scored: "
               "validate lists it as stale and the README marks its table, until `kbench transfer run` makes it "
               "again")


@adversarial("submissions", "error", fixed=FIXED, limit=STALE_LIMIT)
def test_a_transfer_record_of_another_dataset_version_is_marked_stale(tmp_path):
    from kbench.leaderboard.integrity import STALE_MARK
    from kbench.leaderboard.transfer_track import transfer_markdown
    folder = tmp_path / "transfer" / "mi100-to-mi300x" / "target-xgboost"
    shutil.copytree(TRANSFER, folder)
    edit_json(folder / "kfull.json", lambda d: d["dataset"].update(checksum="0" * 64, version="0.9.0"))
    problems = transfer_check(folder / "kfull.json")
    assert len(problems) == 1 and problems[0].startswith(STALE_MARK) and "0.9.0" in problems[0]
    assert "_Stale: scored on mi300x 0.9.0" in transfer_markdown(tmp_path)


# ----------------------------------------------------------------------------- long-form predictions
@pytest.fixture(scope="module")
def tied_long_form():
    """mi300x random test predictions in long form, every kernel of a problem with one of two scores."""
    from kbench.scoring.evaluate import Evaluator
    ev = Evaluator("mi300x", split="random", reference=None)
    rt = ev.dataset.runtimes
    rt = rt[rt["problem_id"].isin(set(ev.ids))][["problem_id", "kernel"]].reset_index(drop=True)
    rt["score"] = (np.arange(len(rt)) % 2).astype(float)
    return ev, rt


@pytest.mark.parametrize("order", [case("file", "long-form-ties-file-order", "predictions", "accepted", fixed=FIXED),
                                   case("shuffled", "long-form-ties-shuffled", "predictions", "accepted",
                                        fixed=FIXED),
                                   case("reversed", "long-form-ties-reversed", "predictions", "accepted",
                                        fixed=FIXED)])
def test_tied_scores_are_broken_by_kernel_name_not_row_order(tied_long_form, order):
    """The same rows gave top-1 0.605 in file order, 0.132 shuffled and 0.008 reversed."""
    ev, rows = tied_long_form
    shown = {"file": rows, "shuffled": rows.sample(frac=1.0, random_state=3), "reversed": rows.iloc[::-1]}[order]
    assert ev(shown).overall == ev(rows).overall


@adversarial("predictions", "accepted", fixed=FIXED)
def test_verify_on_gpu_ranks_long_form_predictions_by_score():
    """verify-on-gpu took the first row per problem and ignored `score`: its choice was the oracle in
    0% of the problems where kbench evaluate gave top-1 1.000."""
    from kbench.gpu_check.plan import role_plans
    runtimes = pd.DataFrame({"problem_id": ["p1"] * 3 + ["p2"] * 3, "kernel": ["a", "b", "c"] * 2,
                             "time_ms": [3.0, 1.0, 2.0, 1.0, 2.0, 3.0]})
    heuristics = pd.DataFrame({"problem_id": ["p1", "p2"], "heuristic": "cudnn_mode_a", "rank": 0, "kernel": "c"})
    # the slowest kernel first in the file, the fastest with the highest score; p2's two best tie
    preds = pd.DataFrame({"problem_id": ["p1", "p1", "p1", "p2", "p2", "p2"], "kernel": ["a", "c", "b", "c", "b", "a"],
                          "score": [0.1, 0.5, 0.9, 0.0, 0.7, 0.7]})
    for frame in (preds, preds.iloc[::-1]):
        roles = role_plans(frame, runtimes, heuristics, ["p1", "p2"]).set_index("problem_id")
        assert roles.loc["p1", "choice"] == "b" and roles.loc["p2", "choice"] == "a"


# ----------------------------------------------------------------------------- selector files
def _problem(**change) -> dict:
    from kbench.selector import REQUIRED
    problem = {c: 1 for c in REQUIRED}
    problem.update(direction="F", dtype="FP32", layout_x="NCHW", layout_w="NCHW", layout_y="NCHW", spatial_dims=2,
                   n=8, c=16, k=32, x_h=14, x_w=14, y_h=14, y_w=14, fil_h=3, fil_w=3)
    problem.update(change)
    return problem


@pytest.fixture
def tiny_selector(tmp_path) -> Path:
    """A two-class selector of stumps, written as export writes one (selector.json + trees.safetensors)."""
    from kbench import selector
    columns = list(selector.problem_vector(_problem()))
    forest = selector.Forest(left=[1, -1, -1, 4, -1, -1], right=[2, -1, -1, 5, -1, -1], feature=[0, 0, 0, 1, 0, 0],
                             threshold=[0.5, 1.0, -1.0, 0.5, -1.0, 1.0], default_left=[True] * 6, roots=[0, 3],
                             group=[0, 1], base=[0.0, 0.0], depth=1)
    meta = {"kernels": ["k0", "k1", "k2"], "columns": columns, "classes": {"F": ["k0", "k1"]},
            "directions": {"F": ["k0", "k1", "k2"]}, "prior": {"F": [1.0, 1.0, 1.0]}, "model": "tiny", "params": {},
            "seed": 0, "fit_info": {}, "dataset": {"name": "mi100", "version": "1", "checksum": "c"}}
    return selector.save(tmp_path / "sel", meta, {"F": forest})


@adversarial("data", "accepted", fixed=FIXED)
def test_a_whole_selector_loads_and_ranks(tiny_selector):
    from kbench import selector
    assert selector.load(tiny_selector).choose(_problem())[:2] in (["k0", "k1"], ["k1", "k0"])


def _edit_selector(folder: Path, meta_change=None, array_change=None) -> None:
    from safetensors.numpy import load_file, save_file
    if meta_change:
        edit_json(folder / "selector.json", meta_change)
    if array_change:
        arrays = dict(load_file(str(folder / "trees.safetensors")))
        array_change(arrays)
        save_file(arrays, str(folder / "trees.safetensors"))


SELECTOR_DAMAGE = {
    "depth-40": (lambda d: d["depth"].update(F=40), None, "depth"),
    "depth-lowered": (lambda d: d["depth"].update(F=0), None, "deeper than the stated depth"),
    "negative-child": (None, lambda a: a.__setitem__("F.left", np.array([-5, -1, -1, 4, -1, -1], np.int32)),
                       "child index"),
    "child-out-of-range": (None, lambda a: a.__setitem__("F.right", np.array([2, -1, -1, 50, -1, -1], np.int32)),
                           "child index"),
    "child-loop": (None, lambda a: a.__setitem__("F.left", np.array([0, -1, -1, 4, -1, -1], np.int32)), "loop"),
    "nan-leaf": (None, lambda a: a.__setitem__("F.threshold", np.array([0.5, np.nan, -1, 0.5, -1, 1], np.float32)),
                 "not finite"),
    "unknown-direction": (lambda d: d["directions"].update(X=["k0"]), None, "'directions'"),
    "class-not-a-kernel": (lambda d: d["classes"].update(F=["k0", "zz"]), None, "'classes'"),
    "prior-short": (lambda d: d["prior"].update(F=[1.0]), None, "'prior'"),
}


@pytest.mark.parametrize("damage", [case(k, f"selector-{k}", "data", "error", fixed=FIXED) for k in SELECTOR_DAMAGE])
def test_a_damaged_or_edited_selector_is_refused(tiny_selector, damage):
    """An edited depth or negative child indices changed rankings silently; `depth: 40` took 3.6 GB."""
    from kbench import selector
    meta_change, array_change, must = SELECTOR_DAMAGE[damage]
    _edit_selector(tiny_selector, meta_change, array_change)
    with pytest.raises(KbenchInputError, match=must.replace("(", r"\(")):
        selector.load(tiny_selector)


@pytest.mark.parametrize("content", [case(b"", "selector-trees-empty", "data", "error", fixed=FIXED),
                                     case("truncated", "selector-trees-truncated", "data", "error", fixed=FIXED)])
def test_a_truncated_trees_file(tiny_selector, content):
    from kbench import selector
    trees = tiny_selector / "trees.safetensors"
    trees.write_bytes(trees.read_bytes()[:40] if content == "truncated" else content)
    with pytest.raises(KbenchInputError, match="trees.safetensors"):
        selector.load(tiny_selector)


@pytest.mark.parametrize("value", [case(float("nan"), "selector-field-nan", "data", "error", fixed=FIXED),
                                   case(float("inf"), "selector-field-inf", "data", "error", fixed=FIXED),
                                   case(10 ** 400, "selector-field-huge", "data", "error", fixed=FIXED),
                                   case("64", "selector-field-text", "data", "error", fixed=FIXED),
                                   case(None, "selector-field-none", "data", "error", fixed=FIXED)])
def test_the_selector_api_on_a_field_that_is_no_size(tiny_selector, value):
    from kbench import selector
    with pytest.raises(KbenchInputError, match=r"c=.{1,40} is not a whole number >= 1 \(at most 2,147,483,648\)"):
        selector.load(tiny_selector).choose(_problem(c=value))


@adversarial("data", "error", fixed=FIXED)
def test_an_unknown_direction_is_an_error_not_an_empty_ranking(tiny_selector):
    from kbench import selector
    sel = selector.load(tiny_selector)
    with pytest.raises(KbenchInputError, match="direction"):
        sel.choose(_problem(direction="X"))
    with pytest.raises(KbenchInputError, match="ranks no kernel for direction 'B'"):
        sel.choose(_problem(direction="B"))


@adversarial("data", "error", fixed=FIXED)
def test_a_selector_copied_under_another_datasets_name(tiny_selector, tmp_path, monkeypatch):
    """A mi100 selector copied under h200-pytorch returned MIOpen solver names."""
    from kbench import selector
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path / "cache"))
    shutil.copytree(tiny_selector, tmp_path / "cache" / "selectors" / "h200-pytorch")
    with pytest.raises(KbenchInputError, match="exported for dataset 'mi100', not 'h200-pytorch'"):
        selector.load("h200-pytorch")
    shutil.copytree(tiny_selector, tmp_path / "cache" / "selectors" / "mi100")
    assert selector.load("mi100").choose(_problem())


# ----------------------------------------------------------------------------- seq2seq training states
@pytest.fixture(scope="module")
def seq2seq_state(tmp_path_factory):
    """(dataset, ids, params, the training state of a fit cut after 2 of 3 epochs)."""
    pytest.importorskip("torch")
    import importlib.util
    spec = importlib.util.spec_from_file_location("seq2seq_tests", REPO / "tests" / "baselines" / "test_seq2seq.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from kbench_baselines.seq2seq import Seq2Seq
    ds = module._toy_dataset()
    ids = ds.problems["problem_id"].to_numpy()
    params = {**module.SMALL, "max_epochs": 3, "patience": 10}
    state = tmp_path_factory.mktemp("fit") / "fit-state.safetensors"

    class Cut(Exception):
        pass

    def cut(rec):
        if rec["epoch"] == 2:
            raise Cut
    with pytest.raises(Cut):
        Seq2Seq(**params).fit(ds, ids[:32], ids[32:40], seed=0, log=cut, checkpoint=state)
    return ds, ids, params, state


def _forge_loop(state: Path, change, out: Path) -> Path:
    from kbench_baselines.base import load_safetensors, save_safetensors
    arrays, meta = load_safetensors(state)
    doc = json.loads(meta["fit_state"])
    change(doc)
    save_safetensors(out, arrays, {"fit_state": json.dumps(doc)})
    return out


@adversarial("data", "error", fixed=FIXED)
def test_a_training_state_of_other_labels_is_refused(seq2seq_state, tmp_path):
    """The fingerprint held sizes only: a state trained on other labels was resumed."""
    from kbench_baselines.seq2seq import Seq2Seq
    ds, ids, params, state = seq2seq_state
    copy = tmp_path / "fit-state.safetensors"
    shutil.copy(state, copy)
    from types import SimpleNamespace
    targets = ds.targets.copy()
    value_cols = [c for c in targets.columns if c not in ("problem_id", "solver")]
    targets[value_cols] = np.roll(targets[value_cols].to_numpy(), 5, axis=0)  # same sizes, other labels
    other = SimpleNamespace(name=ds.name, problems=ds.problems, targets=targets)
    with pytest.raises(KbenchInputError, match="another configuration, seed or training set"):
        Seq2Seq(**params).fit(other, ids[:32], ids[32:40], seed=0, checkpoint=copy)


@pytest.mark.parametrize("forgery", [
    case(("epochs_done", 10 ** 6, "epochs_done"), "fit-state-epochs-forged", "data", "error", fixed=FIXED),
    case(("best_epoch", -3, "best_epoch"), "fit-state-best-epoch-negative", "data", "error", fixed=FIXED),
    case(("bad", 10 ** 9, "bad"), "fit-state-bad-forged", "data", "error", fixed=FIXED),
    case(("best_key", None, "best_key"), "fit-state-best-key-missing", "data", "error", fixed=FIXED),
    case(("elapsed_s", float("nan"), "elapsed_s"), "fit-state-elapsed-nan", "data", "error", fixed=FIXED)])
def test_forged_counters_of_a_training_state(seq2seq_state, tmp_path, forgery):
    """`epochs_done=10**6` was resumed; a damaged state was reported as `KeyError: 'best_key'`."""
    from kbench_baselines.seq2seq import Seq2Seq
    ds, ids, params, state = seq2seq_state
    key, value, must = forgery
    forged = _forge_loop(state, lambda d: d["loop"].update({key: value}) if value is not None
                         else d["loop"].pop(key), tmp_path / "fit-state.safetensors")
    with pytest.raises(KbenchInputError, match=f"damaged training state .*{must}"):
        Seq2Seq(**params).fit(ds, ids[:32], ids[32:40], seed=0, checkpoint=forged)


@adversarial("data", "error", fixed=FIXED)
def test_a_fifo_as_the_training_state_does_not_hang(tmp_path):
    """A FIFO as fit-state.safetensors hung `kbench run`."""
    from kbench_baselines.base import load_safetensors
    fifo = tmp_path / "fit-state.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(KbenchInputError, match="not a regular file"):
        load_safetensors(fifo)


# ----------------------------------------------------------------------------- collect merge
SHARDS = REPO / "tests" / "collect" / "fixtures" / "two_shards"


@pytest.fixture
def shards(tmp_path) -> Path:
    root = tmp_path / "run"
    shutil.copytree(SHARDS, root, ignore=shutil.ignore_patterns("README.md"))
    return root


@adversarial("collector", "error", fixed=FIXED)
def test_merge_a_run_without_its_start_line(capsys, shards, tmp_path):
    """The environment was checked per folder: a run_id with no start line merged under another run's GPU,
    TF32 and stride settings."""
    env = shards / "shard-1-of-2" / "env.jsonl"
    lines = [json.loads(line) for line in env.read_text().splitlines()]
    for line in lines:
        if line.get("phase") == "start":
            line["run_id"] = "20990101T000000-other"
    env.write_text("".join(json.dumps(line) + "\n" for line in lines))
    refused(capsys, ["collect", "merge", str(shards), "--out", str(tmp_path / "merged")],
            ["shard-1-of-2", "no start line"], [shards])
    assert not (tmp_path / "merged").exists()


@adversarial("collector", "error", fixed=FIXED)
def test_merge_problems_without_a_key(capsys, shards, tmp_path):
    from kbench.collect.raw_store.writer import compact
    compact(shards / "shard-0-of-2")
    problems = sorted((shards / "shard-0-of-2").glob("problems-*.parquet"))[0]
    frame = pd.read_parquet(problems)
    frame.loc[frame.index[0], "key"] = None
    frame.to_parquet(problems)
    refused(capsys, ["collect", "merge", str(shards), "--out", str(tmp_path / "merged")],
            ["shard-0-of-2", "without a key"], [shards])


@adversarial("collector", "error", fixed=FIXED)
def test_merge_out_under_a_file_leaves_nothing_behind(capsys, shards, tmp_path):
    (tmp_path / "afile").write_text("x")
    refused(capsys, ["collect", "merge", str(shards), "--out", str(tmp_path / "afile" / "merged")],
            ["afile", "is a file"], [shards, tmp_path / "afile"])
    assert not list(tmp_path.glob(".*merging*")) and not list(tmp_path.glob("**/.merged.merging-*"))


@adversarial("collector", "error", fixed=FIXED)
def test_merge_out_on_a_read_only_folder(capsys, shards, tmp_path, monkeypatch):
    """A read-only folder for `merge --out` (simulated: the tests run as root): exit 1, one message, no
    `.merging-PID` copy left behind."""
    from kbench.collect.raw_store import merge as merge_module

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(merge_module, "fsync_write", read_only)
    capsys.readouterr()
    assert main(["collect", "merge", str(shards), "--out", str(tmp_path / "merged")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kbench: error: ") and "writable" in err and "Traceback" not in err
    assert not list(tmp_path.glob(".merged.merging-*")) and not (tmp_path / "merged").exists()


# ----------------------------------------------------------------------------- unclear messages
@pytest.mark.parametrize("argv", [
    case(["run", "--dataset", "mi300x", "--baselines", "random", "--seeds", "-1"], "run-seeds-negative",
         "submissions", "error", fixed=FIXED),
    case(["baseline", "run", "random", "--dataset", "mi300x", "--seeds", "-1"], "baseline-seeds-negative",
         "submissions", "error", fixed=FIXED)])
def test_a_negative_seed_is_bad_input_not_a_baseline_failure(capsys, tmp_path, argv):
    """`--seeds -1` was reported as a baseline failure (exit 1)."""
    refused(capsys, argv + ["--out", str(tmp_path / "out")], ["--seeds", "-1"], [tmp_path])
    assert not (tmp_path / "out").exists()


@adversarial("predictions", "error", fixed=FIXED)
def test_an_empty_against_path_is_not_silently_ignored(capsys, tmp_path):
    preds = tmp_path / "p.csv"
    preds.write_text("problem_id,ranking\n")
    refused(capsys, ["evaluate", str(preds), "--dataset", "mi300x", "--against", ""], ["--against", "empty"],
            [tmp_path])


@adversarial("submissions", "error", fixed=FIXED)
def test_an_empty_relabel_name_is_not_silently_ignored(capsys, board):
    refused(capsys, ["leaderboard", "rescore", "--leaderboard", str(board), "--relabel", ""], ["--relabel", "empty"],
            [board])


@adversarial("data", "error", fixed=FIXED)
def test_a_full_disk_during_publish_out(capsys, tmp_path, monkeypatch):
    """A full disk during `publish --out`: exit 1, one message, no half-written folder."""
    from kbench import hub

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(hub, "write_split_parts", full)
    capsys.readouterr()
    assert main(["publish", "mi300x-tuning", "--repo-id", "org/x", "--dry-run", "--out", str(tmp_path / "hubdir")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kbench: error: ") and "disk is full" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@adversarial("collector", "error", fixed=FIXED)
def test_a_read_only_folder_for_score_only(capsys, tmp_path, monkeypatch):
    """A read-only folder for `verify-on-gpu --out`: exit 1, the raw timings untouched."""
    import tempfile
    dataset, _, method = VERIFIED
    for name in ("plan.json", "raw.jsonl"):
        (tmp_path / name).write_bytes(gzip.decompress((REPO / "raw" / dataset / "verify" / method /
                                                       f"{name}.gz").read_bytes()))
    before = snapshot(tmp_path)

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    capsys.readouterr()
    assert main(["verify-on-gpu", "--out", str(tmp_path), "--score-only"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kbench: error: ") and "verification.json" in err and "Traceback" not in err
    assert snapshot(tmp_path) == before


@adversarial("collector", "error", fixed=FIXED)
def test_collect_package_with_a_name_that_is_no_identifier(capsys, shards, tmp_path):
    """`collect package --name ../x` would name a dataset that could never be loaded (and write its name
    into paths)."""
    refused(capsys, ["collect", "package", str(shards), "--name", "../escaped", "--out", str(tmp_path / "ds")],
            ["--name", "not an identifier"], [shards, tmp_path])


# ----------------------------------------------------------------------------- generated files
@adversarial("submissions", "accepted", fixed=FIXED)
def test_figures_computed_at_build_time_are_written_rounded():
    """The noise ceiling's figures, computed at build time, differed in their 16th digit between
    environments, so `leaderboard build --check` failed in a fresh venv: they are written with 12
    significant digits, and the stored board files hold them so."""
    from kbench.leaderboard.noise import NOISE_METHOD, significant
    assert significant({"a": [1.0449595920674009, 2]}) == {"a": [1.04495959207, 2]}
    assert significant(1.044959592067401) == significant(1.0449595920674009)

    def floats(tree):
        if isinstance(tree, dict):
            return [x for v in tree.values() for x in floats(v)]
        if isinstance(tree, list):
            return [x for v in tree for x in floats(v)]
        return [tree] if isinstance(tree, float) else []
    checked = 0
    for path in sorted((REPO / "leaderboard" / "site" / "boards").glob("*.json")):
        for entry in json.loads(path.read_text())["entries"]:
            if entry["method"] == NOISE_METHOD:
                values = floats(entry["metrics"]) + floats(entry["references"] or {})
                assert all(v == float(f"{v:.12g}") for v in values), path.name
                checked += 1
    assert checked >= 4


@adversarial("data", "error", fixed=FIXED)
def test_a_training_state_with_damaged_weights(seq2seq_state, tmp_path):
    """A damaged state was trained on and its predictions refused as "preds.csv.gz is invalid"; the file
    that is damaged is named now."""
    from kbench_baselines.base import load_safetensors, save_safetensors
    from kbench_baselines.seq2seq import Seq2Seq
    ds, ids, params, state = seq2seq_state
    arrays, meta = load_safetensors(state)
    name = next(k for k in arrays if k.startswith("net.") and arrays[k].dtype.kind == "f")
    arrays[name] = np.full_like(arrays[name], np.nan)
    forged = tmp_path / "fit-state.safetensors"
    save_safetensors(forged, arrays, meta)
    with pytest.raises(KbenchInputError, match=f"{forged}: a damaged training state .*not finite"):
        Seq2Seq(**params).fit(ds, ids[:32], ids[32:40], seed=0, checkpoint=forged)

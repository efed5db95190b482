"""Broken data: shipped dataset files and the Hub cache (flipped byte, truncated, missing file or
manifest), partial downloads, offline with an empty cache, a wrong revision, two processes filling
one cache at once. Hub cases run against the stand-in server of tests/hub/hubserver.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from advkit import adversarial, case, refused

import kbench
from kbench.core.errors import DataIntegrityError, KbenchError, KbenchInputError
from kbench.data import dataset as dataset_module

pytest.importorskip("huggingface_hub")
import huggingface_hub.constants as hf_constants  # noqa: E402
from hubserver import HubServer  # noqa: E402

from kbench.hub import hub_cache_dir, load_from_hub, publish  # noqa: E402

TOKEN = "hf_test_token"
REPO = Path(__file__).resolve().parents[2]


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:1000])


def remove(path: Path) -> None:
    path.unlink()


DAMAGE = {"flipped-byte": (flip, "sha256 does not match"), "truncated": (truncate, "truncated"),
          "missing-file": (remove, "missing")}


@pytest.fixture
def shipped(tmp_path, monkeypatch) -> Path:
    """A copy of the shipped mi300x folder that kbench.load('mi300x') reads instead of the package's."""
    folder = tmp_path / "datasets" / "mi300x"
    shutil.copytree(dataset_module._dataset_dir("mi300x"), folder)
    monkeypatch.setattr(dataset_module, "_dataset_dir", lambda name: tmp_path / "datasets" / name)
    return folder


@pytest.mark.parametrize("damage", [case(k, f"shipped-{k}", "data", "error") for k in DAMAGE])
def test_damaged_shipped_file(capsys, shipped, damage):
    alter, what = DAMAGE[damage]
    alter(shipped / "runtimes.parquet")
    refused(capsys, ["info", "mi300x"], [str(shipped / "runtimes.parquet"), what, "Reinstall kbench"], [shipped])


@adversarial("data", "error")
def test_shipped_dataset_without_its_manifest(capsys, shipped):
    (shipped / "manifest.json").unlink()
    refused(capsys, ["info", "mi300x"], ["'mi300x'", "not in this installation", "kbench build-data mi300x"],
            [shipped])


@adversarial("data", "error", fixed=True)
def test_dataset_folder_without_its_manifest(capsys, shipped):
    (shipped / "manifest.json").unlink()
    refused(capsys, ["info", str(shipped)], [str(shipped), "without manifest.json", "Copy the whole folder"],
            [shipped])


@adversarial("data", "error")
def test_dataset_folder_with_a_truncated_manifest(capsys, shipped):
    text = (shipped / "manifest.json").read_text()
    (shipped / "manifest.json").write_text(text[: len(text) // 2])
    refused(capsys, ["info", str(shipped)], [str(shipped / "manifest.json"), "not valid JSON"], [shipped])


# ----------------------------------------------------------------------------- the Hub
@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path / "kbench-cache"))
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return tmp_path


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """A 120-problem slice of mi300x as a dataset folder."""
    from kbench.data.build import split_sizes, write_dataset
    ds = kbench.load("mi300x")
    sub = ds.subset(ds.problems["problem_id"].iloc[:120])
    info = {k: v for k, v in ds.manifest.items() if k not in ("files", "checksum", "kbench_schema",
                                                               "built_with_kbench")}
    info.update(name="small", splits=split_sizes(sub.tables["splits"]))
    path = tmp_path_factory.mktemp("data") / "small"
    write_dataset(path, sub.tables, info)
    return path


@pytest.fixture
def hub(hub_env, small):
    with HubServer(tokens=[TOKEN]) as server:
        publish(small, "org/small", token=TOKEN, endpoint=server.endpoint)
        yield server


def cached_file(name: str) -> Path:
    hits = [p for p in hub_cache_dir().rglob(name) if "snapshots" in p.parts]
    assert len(hits) == 1, hits
    return hits[0].resolve()  # the blob behind the snapshot link


CACHE_LIMIT = ("a file missing from the Hub cache, offline, is reported as the revision not being cached "
               "(\"load it once with network access\"), without naming the missing file")


@pytest.mark.parametrize("damage", [case(k, f"cache-{k}", "data", "error",
                                         limit=CACHE_LIMIT if k == "missing-file" else None) for k in DAMAGE])
def test_damaged_hub_cache_is_detected_then_repaired(hub, damage, monkeypatch):
    want = load_from_hub("org/small", endpoint=hub.endpoint)
    alter, _ = DAMAGE[damage]
    if damage == "missing-file":  # the snapshot link goes: hf's cache then has no copy
        link = [p for p in hub_cache_dir().rglob("runtimes.parquet") if "snapshots" in p.parts][0]
        link.unlink()
    else:
        alter(cached_file("runtimes.parquet"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(KbenchError) as info:
        load_from_hub("org/small", endpoint=hub.endpoint)
    # a damaged copy is named; a missing one makes the snapshot incomplete: "load it with network access"
    want_text = "network access" if damage == "missing-file" else "runtimes.parquet"
    assert want_text in str(info.value) and "hf://org/small" in str(info.value)
    # online again: the bad copy was dropped, so the next load fetches it afresh and verifies it
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    got = load_from_hub("org/small", endpoint=hub.endpoint)
    assert got.checksum == want.checksum and got.runtimes.equals(want.runtimes)


@adversarial("data", "error")
def test_hub_cache_without_the_kbench_manifest(hub, monkeypatch):
    load_from_hub("org/small", endpoint=hub.endpoint)
    [link] = [p for p in hub_cache_dir().rglob("kbench_manifest.json") if "snapshots" in p.parts]
    link.unlink()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(KbenchError, match="hf://org/small"):
        load_from_hub("org/small", endpoint=hub.endpoint)


@pytest.mark.parametrize("damage", [case("truncated", "partial-download", "data", "error"),
                                    case("flipped", "corrupt-download", "data", "error")])
def test_a_bad_download_is_refused_and_not_cached(hub, damage):
    def alter(data: bytes) -> bytes:
        return data[: len(data) // 2] if damage == "truncated" else data[:100] + bytes([data[100] ^ 1]) + data[101:]
    hub.corrupt["data/runtimes.parquet"] = alter
    with pytest.raises(DataIntegrityError, match="runtimes.parquet"):
        load_from_hub("org/small", endpoint=hub.endpoint)
    assert not [p for p in hub_cache_dir().rglob("runtimes.parquet") if "snapshots" in p.parts]
    del hub.corrupt["data/runtimes.parquet"]
    assert len(load_from_hub("org/small", endpoint=hub.endpoint).problems) == 120


@adversarial("data", "error")
def test_offline_with_an_empty_cache(hub_env, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    refused(capsys, ["info", "hf://org/nothing-here"], ["hf://org/nothing-here", "not in the Hub cache"],
            [hub_env / "tmp"])


@adversarial("data", "error")
def test_a_wrong_revision(hub):
    with pytest.raises(KbenchInputError) as info:
        load_from_hub("org/small", revision="no-such-branch", endpoint=hub.endpoint)
    assert "no-such-branch" in str(info.value) and "org/small" in str(info.value)
    assert not [p for p in hub_cache_dir().rglob("*.parquet")]  # nothing cached for it


@adversarial("data", "accepted")
def test_two_processes_fill_one_empty_cache_at_once(hub, hub_env):
    code = ("import kbench, sys; ds = kbench.load('hf://org/small'); "
            "print(ds.checksum, len(ds.runtimes), ds.runtimes['time_ms'].sum())")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_ENDPOINT": hub.endpoint}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in outs]
    assert outs[0][0] == outs[1][0]
    # the cache they left behind loads offline and verifies
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        hf_constants.HF_HUB_OFFLINE = True
        ds = load_from_hub("org/small", endpoint=hub.endpoint)
    finally:
        del os.environ["HF_HUB_OFFLINE"]
        hf_constants.HF_HUB_OFFLINE = False
    assert outs[0][0].split()[0] == ds.checksum

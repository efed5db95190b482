"""kbench publish / kbench.load("hf://...") against a local stand-in for the Hub (loopback only).

The real ``huggingface_hub`` client talks to ``tests/hub/hubserver.py`` on 127.0.0.1; the
published folder is read back with the real ``datasets`` library.
"""

from __future__ import annotations

import hashlib
import json
import socket
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("huggingface_hub")
import huggingface_hub  # noqa: E402
import huggingface_hub.constants as hf_constants  # noqa: E402
import yaml  # noqa: E402

import kbench  # noqa: E402
from kbench.cli import main as cli_main  # noqa: E402
from kbench.core.errors import DataIntegrityError, KbenchError, KbenchInputError  # noqa: E402
from kbench.data.build import sha256_file, split_sizes, write_dataset  # noqa: E402
from kbench.hub import HubError, build_hub_folder, hub_cache_dir, load_from_hub, publish  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from hubserver import HubServer  # noqa: E402

TOKEN = "hf_test_token"


# -- fixtures ---------------------------------------------------------------------
@pytest.fixture(autouse=True)
def hub_env(tmp_path, monkeypatch):
    """No real token, no real cache, no telemetry; everything reverted by monkeypatch."""
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "HF_OIDC_ID_TOKEN", "HF_HUB_OFFLINE",
                "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path / "kbench-cache"))
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp_path


@pytest.fixture
def hub():
    with HubServer(tokens=[TOKEN]) as server:
        yield server
    assert not server.unhandled, f"client used endpoints the stand-in lacks: {server.unhandled}"


@pytest.fixture(scope="module")
def mini(tmp_path_factory) -> Path:
    """A 300-problem slice of mi300x written as a dataset folder (categoricals included)."""
    ds = kbench.load("mi300x")
    sub = ds.subset(ds.problems["problem_id"].iloc[:300])
    info = {k: v for k, v in ds.manifest.items()
            if k not in ("files", "checksum", "kbench_schema", "built_with_kbench")}
    info.update(name="mini300x", splits=split_sizes(sub.tables["splits"]))
    path = tmp_path_factory.mktemp("data") / "mini300x"
    write_dataset(path, sub.tables, info)
    return path


def assert_same_dataset(got, want):
    assert list(got.tables) == list(want.tables)
    for name, table in want.tables.items():
        pd.testing.assert_frame_equal(got.tables[name], table, check_exact=True)
        assert got.tables[name].dtypes.to_dict() == table.dtypes.to_dict()
    assert got.manifest == want.manifest
    assert got.name == want.name and got.checksum == want.checksum


def folder_digest(path: Path) -> dict:
    return {str(p.relative_to(path)): sha256_file(p) for p in sorted(path.rglob("*")) if p.is_file()}


def hub_files(server, repo_id, rev="main") -> dict[str, bytes]:
    repo = server.repos[repo_id]
    return repo.commits[repo.resolve(rev)]["files"]


# -- publish -> load ----------------------------------------------------------------
def test_publish_load_round_trip_mi300x(hub, monkeypatch, hub_env):
    res = publish("mi300x", "org/kbench-mi300x", token=TOKEN, endpoint=hub.endpoint)
    # one commit on top of the repo's initial one, with every file, named after the kbench version
    repo = hub.repos["org/kbench-mi300x"]
    assert len(repo.commits) == 2 and repo.refs["main"] == res.commit
    assert f"kbench {kbench.__version__}" in repo.commits[res.commit]["message"]
    files = hub_files(hub, "org/kbench-mi300x")
    assert sorted(files) == sorted([".gitattributes", *res.files])
    tables = ["problems", "runtimes", "splits", "heuristics"]  # the problem-keyed ones (not kernels)
    parts = {f"parts/{s}/{p}/{t}.parquet" for s in ("random", "networks", "shapes") for p in ("train", "validation", "test")
             for t in tables}
    assert {p for p in res.files} == {"README.md", "kbench_manifest.json", "data/manifest.json",
                                      "data/problems.parquet", "data/runtimes.parquet",
                                      "data/kernels.parquet", "data/splits.parquet", "data/heuristics.parquet"} | parts
    # the parquet files and dataset manifest are the embedded ones, byte for byte
    embedded = Path(kbench.__file__).parent / "datasets" / "mi300x"
    for name in ("problems.parquet", "runtimes.parquet", "kernels.parquet", "splits.parquet", "heuristics.parquet",
                 "manifest.json"):
        assert files[f"data/{name}"] == (embedded / name).read_bytes()
    kmanifest = json.loads(files["kbench_manifest.json"])
    assert kmanifest["kbench_schema"] == 1 and kmanifest["version"] == kbench.load("mi300x").version == "1.1.0"
    assert kmanifest["files"]["data/runtimes.parquet"]["rows"] == 37792
    for path, meta in kmanifest["files"].items():
        assert hashlib.sha256(files[path]).hexdigest() == meta["sha256"]

    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)  # kbench.load has no endpoint argument
    ds = kbench.load("hf://org/kbench-mi300x")
    assert isinstance(ds, kbench.Dataset)
    assert_same_dataset(ds, kbench.load("mi300x"))
    assert Path(ds.path).is_relative_to(hub_env / "kbench-cache" / "hub")
    assert res.commit in str(ds.path)
    # kbench.load fetches data/ alone: the split copies for `datasets` stay on the Hub
    fetched = {path for _, path in hub.requests if "/resolve/" in path}
    assert fetched and not [p for p in fetched if "/parts/" in p]


def test_hf_cache_is_the_standard_one(hub, mini, monkeypatch, tmp_path):
    """Without KBENCH_CACHE, downloads go to HF_HUB_CACHE (else $HF_HOME/hub), where `datasets` looks too."""
    publish(mini, "org/std", token=TOKEN, endpoint=hub.endpoint)
    monkeypatch.delenv("KBENCH_CACHE")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    assert hub_cache_dir() == tmp_path / "hf-home" / "hub"
    ds = load_from_hub("org/std", endpoint=hub.endpoint)
    assert Path(ds.path).is_relative_to(tmp_path / "hf-home" / "hub" / "datasets--org--std" / "snapshots")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    ds = load_from_hub("org/std", endpoint=hub.endpoint)
    assert Path(ds.path).is_relative_to(tmp_path / "hub-cache" / "datasets--org--std")
    assert_same_dataset(ds, kbench.load(str(mini)))
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path / "mine"))  # the override still wins
    assert hub_cache_dir() == tmp_path / "mine" / "hub"


def test_published_folder_loads_with_datasets(hub, mini, tmp_path):
    datasets = pytest.importorskip("datasets")
    publish(mini, "org/mini", token=TOKEN, endpoint=hub.endpoint)
    folder = tmp_path / "repo"  # the whole repository as the Hub holds it
    for path, data in hub_files(hub, "org/mini").items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    readme = (folder / "README.md").read_text()
    meta = yaml.safe_load(readme.split("---\n")[1])
    assert meta["license"] == "mit"
    assert "## Citation" in readme and "khan2019miopen" in readme
    configs = [c["config_name"] for c in meta["configs"]]
    assert configs == ["problems", "problems-networks", "problems-shapes", "runtimes", "runtimes-networks",
                       "runtimes-shapes", "kernels", "splits", "splits-networks", "splits-shapes", "heuristics",
                       "heuristics-networks", "heuristics-shapes"]
    assert [i["config_name"] for i in meta["dataset_info"]] == configs
    want = kbench.load(str(mini))
    for cfg, info in zip(meta["configs"], meta["dataset_info"]):
        name = cfg["config_name"]
        table_name, _, split = name.partition("-")
        table = want.tables[table_name]
        loaded = datasets.load_dataset(str(folder), name=name, cache_dir=str(tmp_path / "hf-ds"))
        assert list(loaded) == [s["name"] for s in info["splits"]]
        for hf_split, sizes in zip(loaded, info["splits"]):
            assert loaded[hf_split].num_rows == sizes["num_examples"]
        if "whole_table" in loaded:  # the whole table, as kbench holds it
            got = loaded["whole_table"].to_pandas()
            expect = table.astype({c: str for c in table.columns if isinstance(table[c].dtype, pd.CategoricalDtype)})
            pd.testing.assert_frame_equal(got, expect, check_dtype=False)
        if "problem_id" in table:
            parts = want.split(split or "random")
            assert list(loaded)[:3] == ["train", "validation", "test"]
            for hf_split, part in (("train", "train"), ("validation", "valid"), ("test", "test")):
                got = loaded[hf_split].to_pandas()
                expect = table[table["problem_id"].isin(parts[part])]
                assert len(got) == len(expect)
                assert set(got["problem_id"]) == set(expect["problem_id"].astype(str))
            if table_name in ("problems", "splits"):  # one row per problem: the sizes of ds.split(...)
                assert [loaded[p].num_rows for p in ("train", "validation", "test")] == \
                    [len(parts[p]) for p in ("train", "valid", "test")]
        else:
            assert list(loaded) == ["whole_table"]


def test_dry_run_folder_has_no_test_problem_in_train(tmp_path):
    """`kbench publish --dry-run --out DIR` on a whole shipped dataset, read by the real `datasets`: no
    test or validation problem of a split is reachable through its `train`, and the sizes are ds.split's."""
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "hub-folder"
    assert cli_main(["publish", "mi300x", "--repo-id", "org/mi300x", "--dry-run", "--out", str(out)]) == 0
    ds = kbench.load("mi300x")
    for config, split in (("problems", "random"), ("problems-networks", "networks"), ("runtimes", "random"),
                          ("runtimes-networks", "networks"), ("heuristics", "random")):
        loaded = datasets.load_dataset(str(out), config, cache_dir=str(tmp_path / "hf-ds"))
        parts = ds.split(split)
        train = set(loaded["train"]["problem_id"])
        assert train <= set(parts["train"])
        assert not train & (set(parts["test"]) | set(parts["valid"]))
        assert set(loaded["test"]["problem_id"]) <= set(parts["test"])
        if config.startswith("problems"):
            assert {p: loaded[h].num_rows for p, h in (("train", "train"), ("valid", "validation"),
                                                       ("test", "test"))} == {p: len(v) for p, v in parts.items()}
        else:
            table = ds.tables[config.split("-")[0]]
            assert loaded["train"].num_rows == int(table["problem_id"].isin(parts["train"]).sum())
    assert kbench.load(str(out / "data")).checksum == ds.checksum  # kbench's own files are the shipped ones


def test_build_hub_folder_never_overwrites(mini, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(KbenchInputError, match="not an empty folder"):
        build_hub_folder(mini, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"


def test_publish_modified_dataset_round_trips(hub, mini):
    """A Dataset changed in memory is written afresh (not copied), and still comes back equal."""
    ds = kbench.load(str(mini))
    sub = ds.subset(ds.problems["problem_id"].iloc[::3])
    before = folder_digest(mini)
    publish(sub, "org/sub", token=TOKEN, endpoint=hub.endpoint)
    got = load_from_hub("org/sub", endpoint=hub.endpoint)
    for name, table in sub.tables.items():
        pd.testing.assert_frame_equal(got.tables[name], table, check_exact=True)
    assert got.manifest["files"]["problems.parquet"]["rows"] == len(sub.problems) == 100
    assert got.manifest["splits"] == split_sizes(sub.tables["splits"])
    assert folder_digest(mini) == before  # the user's dataset folder is untouched


# -- revisions, cache, offline ------------------------------------------------------
def test_revision_pinning(hub, mini):
    v1 = kbench.load(str(mini))
    first = publish(mini, "org/pinned", token=TOKEN, endpoint=hub.endpoint).commit
    v2 = v1.subset(v1.problems["problem_id"].iloc[:120])
    second = publish(v2, "org/pinned", token=TOKEN, endpoint=hub.endpoint).commit
    assert first != second
    assert len(load_from_hub("org/pinned", endpoint=hub.endpoint).problems) == 120
    assert_same_dataset(load_from_hub("org/pinned", revision=first, endpoint=hub.endpoint), v1)
    got2 = load_from_hub("org/pinned", revision=second, endpoint=hub.endpoint)
    pd.testing.assert_frame_equal(got2.runtimes, v2.runtimes)
    with pytest.raises(KbenchInputError, match="revision 'nope' not found"):
        load_from_hub("org/pinned", revision="nope", endpoint=hub.endpoint)
    # --revision BRANCH: the branch is created from main, main does not move
    on_branch = publish(mini, "org/pinned", revision="v1", token=TOKEN, endpoint=hub.endpoint).commit
    assert hub.repos["org/pinned"].refs == {"main": second, "v1": on_branch}
    assert_same_dataset(load_from_hub("org/pinned", revision="v1", endpoint=hub.endpoint), v1)


def test_private_repo_needs_token_to_load(hub, mini, monkeypatch):
    publish(mini, "org/private", private=True, token=TOKEN, endpoint=hub.endpoint)
    assert hub.repos["org/private"].private
    with pytest.raises(KbenchInputError, match="no such dataset repo on the Hub, or it is private.*hf auth login"):
        load_from_hub("org/private", endpoint=hub.endpoint)
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # the usual huggingface_hub token sources apply
    assert_same_dataset(load_from_hub("org/private", endpoint=hub.endpoint), kbench.load(str(mini)))


def test_offline_load_from_cache(mini, monkeypatch):
    want = kbench.load(str(mini))
    with HubServer(tokens=[TOKEN]) as server:
        sha = publish(mini, "org/offline", token=TOKEN, endpoint=server.endpoint).commit
        load_from_hub("org/offline", endpoint=server.endpoint)  # fills the Hub cache
        n_requests = len(server.requests)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        assert_same_dataset(load_from_hub("org/offline", endpoint=server.endpoint), want)
        assert_same_dataset(load_from_hub("org/offline", revision=sha, endpoint=server.endpoint), want)
        assert len(server.requests) == n_requests  # offline: not one request
    # the server is gone (connections refused): still loads from the cache, by branch and by commit
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(server.endpoint.rsplit(":", 1)[1])), timeout=2).close()
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    assert_same_dataset(kbench.load("hf://org/offline"), want)
    assert_same_dataset(kbench.load("hf://org/offline", revision=sha), want)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(KbenchInputError, match="not in the Hub cache.*HF_HUB_OFFLINE"):
        kbench.load("hf://org/never-downloaded")


# -- failures -----------------------------------------------------------------------
def _flip_middle_byte(data: bytes) -> bytes:
    i = len(data) // 2
    return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]


@pytest.mark.parametrize("alter, what", [(_flip_middle_byte, "sha256 does not match"),
                                         (lambda data: data[:-100], "size")])
def test_corrupted_download_rejected(hub, mini, alter, what):
    publish(mini, "org/corrupt", token=TOKEN, endpoint=hub.endpoint)
    hub.corrupt["data/runtimes.parquet"] = alter
    with pytest.raises(DataIntegrityError, match=what) as err:
        load_from_hub("org/corrupt", endpoint=hub.endpoint)
    assert "data/runtimes.parquet" in str(err.value) and "load again" in str(err.value)
    # the bad copy left the cache: once the server serves the right bytes, the same call works
    hub.corrupt.clear()
    assert_same_dataset(load_from_hub("org/corrupt", endpoint=hub.endpoint), kbench.load(str(mini)))


def test_cached_file_altered_later_is_rejected(hub, mini):
    publish(mini, "org/altered", token=TOKEN, endpoint=hub.endpoint)
    ds = load_from_hub("org/altered", endpoint=hub.endpoint)
    card = (Path(ds.path).parent / "README.md").resolve()
    card.write_text(card.read_text() + "tampered\n")
    with pytest.raises(DataIntegrityError, match="README.md"):
        load_from_hub("org/altered", endpoint=hub.endpoint)


def test_repo_that_is_not_kbench_dataset(hub):
    api = huggingface_hub.HfApi(endpoint=hub.endpoint, token=TOKEN)
    api.create_repo("org/plain", repo_type="dataset")
    api.upload_file(path_or_fileobj=b"---\nlicense: mit\n---\n# plain\n", path_in_repo="README.md",
                    repo_id="org/plain", repo_type="dataset")
    with pytest.raises(KbenchInputError, match="not a kbench dataset"):
        load_from_hub("org/plain", endpoint=hub.endpoint)
    with pytest.raises(KbenchInputError, match="no such dataset repo"):
        load_from_hub("org/missing", endpoint=hub.endpoint)
    with pytest.raises(KbenchInputError, match="invalid Hub repo id"):
        load_from_hub("not a repo", endpoint=hub.endpoint)


def test_missing_token(hub, mini, capsys):
    with pytest.raises(KbenchInputError) as err:
        publish(mini, "org/x", endpoint=hub.endpoint)
    msg = str(err.value)
    assert "no Hugging Face token" in msg and "hf auth login" in msg and "huggingface-cli login" in msg
    assert "HF_TOKEN" in msg
    assert hub.requests == []  # failed before contacting the Hub
    assert cli_main(["publish", str(mini), "--repo-id", "org/x", "--endpoint", hub.endpoint]) == 2
    err_out = capsys.readouterr().err
    assert err_out.startswith("kbench: error: no Hugging Face token") and "Traceback" not in err_out


def test_server_error_mid_upload(hub, mini, hub_env):
    before = folder_digest(mini)
    hub.fail_commit = 500
    with pytest.raises(HubError) as err:
        publish(mini, "org/flaky", token=TOKEN, endpoint=hub.endpoint)
    msg = str(err.value)
    assert "HTTP 500" in msg and "simulated failure while committing" in msg  # the client's error, shown
    assert f"Retry with `kbench publish {mini} --repo-id org/flaky`" in msg
    assert isinstance(err.value, KbenchError) and err.value.exit_code == 1
    # nothing half-done: no commit beyond the initial one, no temp folder, no cache, user files intact
    assert list(hub_files(hub, "org/flaky")) == [".gitattributes"]
    assert list(Path(tempfile.gettempdir()).iterdir()) == []
    assert not (hub_env / "kbench-cache").exists()
    assert folder_digest(mini) == before
    # the advised retry works
    publish(mini, "org/flaky", token=TOKEN, endpoint=hub.endpoint)
    assert_same_dataset(load_from_hub("org/flaky", endpoint=hub.endpoint), kbench.load(str(mini)))


def test_bad_token_is_input_error(hub, mini):
    with pytest.raises(KbenchInputError, match="refused the token.*HTTP 401"):
        publish(mini, "org/new", token="hf_wrong", endpoint=hub.endpoint)
    publish(mini, "org/exists", token=TOKEN, endpoint=hub.endpoint)
    with pytest.raises(KbenchInputError, match="refused the token.*HTTP 401") as err:
        publish(mini, "org/exists", token="hf_wrong", endpoint=hub.endpoint)
    assert "hf auth login" in str(err.value)
    assert len(hub.repos["org/exists"].commits) == 2


# -- CLI ----------------------------------------------------------------------------
def test_cli_dry_run_lists_exactly_what_is_uploaded(hub, mini, monkeypatch, capsys):
    assert cli_main(["publish", str(mini), "--repo-id", "org/cli", "--dry-run", "--endpoint", hub.endpoint]) == 0
    out = capsys.readouterr().out
    assert hub.requests == []  # a dry run contacts nobody (and needs no token)
    assert "dry run: nothing uploaded" in out and "no Hugging Face token found" in out
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert cli_main(["publish", str(mini), "--repo-id", "org/cli", "--endpoint", hub.endpoint]) == 0
    done = capsys.readouterr().out
    sha = hub.repos["org/cli"].refs["main"]
    assert f"commit {sha}" in done and f'kbench.load("hf://org/cli", revision="{sha}")' in done
    uploaded = {p: d for p, d in hub_files(hub, "org/cli").items() if p != ".gitattributes"}
    for path, data in uploaded.items():  # every uploaded file, with its exact size and sha256, was listed
        line = next(line for line in out.splitlines() if line.strip().startswith(path + " "))
        assert f"{len(data):,} bytes" in line and hashlib.sha256(data).hexdigest() in line
    assert f"{len(uploaded)} files, {sum(map(len, uploaded.values())):,} bytes" in out
    assert f"kbench {kbench.__version__}" in out  # the commit message


def test_cli_publish_errors(capsys):
    assert cli_main(["publish", "mi300x", "--repo-id", "no-slash", "--dry-run"]) == 2
    assert "invalid Hub repo id 'no-slash'" in capsys.readouterr().err
    assert cli_main(["publish", "mi3000x", "--repo-id", "org/x", "--dry-run"]) == 2
    assert "unknown dataset 'mi3000x'" in capsys.readouterr().err

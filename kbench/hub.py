"""Publishing kbench datasets to the Hugging Face Hub and loading them back.

>>> from kbench.hub import publish, load_from_hub               # doctest: +SKIP
>>> publish("mi100", "ORG/kbench-mi100", dry_run=True)           # doctest: +SKIP
>>> ds = kbench.load("hf://ORG/kbench-mi100", revision="<sha>")  # doctest: +SKIP

A published dataset repo holds::

    README.md              data card with YAML front matter: configs, dataset_info, license
    kbench_manifest.json   hub format, schema and dataset version, sha256 + size of every other file
    data/manifest.json     the kbench dataset manifest (the same file as an embedded dataset folder)
    data/<table>.parquet   problems, runtimes, kernels, splits (+ heuristics, ... where present)
    parts/<split>/<part>/<table>.parquet   the rows of each standard split's train/validation/test

The card's configs give ``datasets`` the standard splits as Hugging Face splits, so that no
test problem is reachable through a split named ``train``:

* ``<table>`` (every table with a ``problem_id`` column): ``train``, ``validation`` and
  ``test`` are the parts of the ``random`` split; ``whole_table`` is the whole table;
* ``<table>-<split>`` for each other standard split (``runtimes-networks``): its three parts;
* a table without ``problem_id`` (``kernels``): ``whole_table`` only.

``kbench.load("hf://ORG/REPO")`` downloads ``data/`` alone and verifies every file against
``kbench_manifest.json`` before reading it. Downloads go to the standard Hugging Face cache
(``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``), shared with
``datasets.load_dataset``; ``KBENCH_CACHE`` set moves them to ``$KBENCH_CACHE/hub``. They load
offline from there with ``HF_HUB_OFFLINE=1``. ``huggingface_hub`` is needed (``pip install 'kbench[hub]'``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kbench.core.errors import KbenchError, KbenchInputError
from kbench.core.output_files import check_output_folder, printable_path, write_failure
from kbench.core.version import __version__
from kbench.data.cards import render_card
from kbench.data.dataset import Dataset, load, read_dataset_folder

# the download half (and the names both halves share) lives in kbench.data.hub_download
from kbench.data.hub_download import (  # noqa: F401
    DATA_DIR,
    HUB_FORMAT,
    KBENCH_MANIFEST,
    LOGIN_HELP,
    PARTS_DIR,
    READ_LOGIN_HELP,
    REPO_TYPE,
    HubError,
    _endpoint,
    _env_true,
    _hf,
    _hub_failure,
    _network_errors,
    _offline,
    check_repo_id,
    download_from_hub,
    hub_cache_dir,
    kbench_cache_dir,
)
from kbench.sources.dataset_files import SCHEMA_VERSION, TABLE_ORDER, sha256_file, split_sizes, write_table

_TABLE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
#: kbench's part names -> the Hugging Face split names
HF_PARTS = {"train": "train", "valid": "validation", "test": "test"}
#: the Hugging Face split holding a whole table, train and test problems alike (not "all": `datasets`
#: reserves that name for the union of every split)
WHOLE_SPLIT = "whole_table"
#: the standard split whose parts are the plain ``<table>`` config's train/validation/test
PRIMARY_SPLIT = "random"

def _hf_dtype(t) -> str | None:
    """The ``datasets`` dtype name of a primitive arrow type (None: not described)."""
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t):
        return str(t)  # int8 ... uint64
    if pa.types.is_floating(t):
        return {16: "float16", 32: "float32", 64: "float64"}[t.bit_width]
    if pa.types.is_large_string(t):
        return "large_string"
    if pa.types.is_string(t):
        return "string"
    if pa.types.is_large_binary(t):
        return "large_binary"
    if pa.types.is_binary(t):
        return "binary"
    if pa.types.is_date32(t) or pa.types.is_date64(t):
        return str(t)
    if pa.types.is_timestamp(t):
        return f"timestamp[{t.unit}]" if t.tz is None else f"timestamp[{t.unit}, tz={t.tz}]"
    return None


def _parquet_features(path: Path) -> list[dict] | None:
    """The ``datasets`` features of a parquet file (None: a type the card does not describe)."""
    features = []
    for f in pq.ParquetFile(path).schema_arrow:
        dtype = _hf_dtype(f.type)
        if dtype is None:  # a nested/unusual type: let `datasets` infer the features itself
            return None
        features.append({"name": f.name, "dtype": dtype})
    return features


def _split_entry(name: str, path: Path) -> dict:
    meta = pq.ParquetFile(path).metadata
    num_bytes = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    return {"name": name, "num_bytes": int(num_bytes), "num_examples": int(meta.num_rows)}


def _dataset_info_entry(config: dict, root: Path) -> dict:
    """One ``dataset_info`` entry of the card YAML (features, split sizes) from a config's parquet files."""
    files = [(d["split"], root / d["path"]) for d in config["data_files"]]
    features = _parquet_features(files[0][1])
    entry = {"config_name": config["config_name"]}
    if features is not None:
        entry["features"] = features
    splits = [_split_entry(split, path) for split, path in files]
    entry.update({
        "splits": splits,
        "download_size": int(sum(path.stat().st_size for _, path in files)),
        "dataset_size": int(sum(s["num_bytes"] for s in splits)),
    })
    return entry


def write_split_parts(ds, tables: list[str], data: Path, out: Path) -> list[dict]:
    """Write each standard split's parts of every problem-keyed table and return the card's configs.

    ``data`` holds the whole tables (``<table>.parquet``); the parts are their rows filtered by
    ``problem_id``, read from those files so that every split of a config has one schema. Paths
    in the configs are relative to ``out`` (the repository root). An empty part is left out.
    """
    assignment = ds.tables["splits"]
    split_names = [c for c in assignment.columns if c != "problem_id"]
    ids = {s: {p: pa.array(assignment.loc[assignment[s] == p, "problem_id"].astype(str).to_numpy(),
                           type=pa.string())
               for p in HF_PARTS} for s in split_names}
    configs = []
    for t in tables:
        whole = data / f"{t}.parquet"
        whole_rel = whole.relative_to(out).as_posix()
        arrow = pq.read_table(whole)
        if "problem_id" not in arrow.column_names:
            configs.append({"config_name": t, "data_files": [{"split": WHOLE_SPLIT, "path": whole_rel}]})
            continue
        keys = arrow.column("problem_id").cast(pa.string())
        per_split = {}
        for s in split_names:
            files = []
            for part, hf_part in HF_PARTS.items():
                rows = arrow.filter(pc.is_in(keys, value_set=ids[s][part]))
                if rows.num_rows == 0:
                    continue
                rel = f"{PARTS_DIR}/{s}/{hf_part}/{t}.parquet"
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(rows, out / rel, compression="zstd", compression_level=9, row_group_size=1 << 20)
                files.append({"split": hf_part, "path": rel})
            per_split[s] = files
        primary = per_split.pop(PRIMARY_SPLIT, [])
        configs.append({"config_name": t, "data_files": primary + [{"split": WHOLE_SPLIT, "path": whole_rel}]})
        configs += [{"config_name": f"{t}-{s}", "data_files": files} for s, files in per_split.items() if files]
    if configs:
        configs[0]["default"] = True
    return configs


def _resolve_dataset(dataset):
    if isinstance(dataset, Dataset):
        return dataset
    return load(str(dataset))


def _same_frame(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    return a.shape == b.shape and list(a.columns) == list(b.columns) and (a.dtypes == b.dtypes).all() \
        and a.reset_index(drop=True).equals(b.reset_index(drop=True))


def _pristine_tables(ds) -> set[str]:
    """Tables of ``ds`` still held exactly by the parquet files of its folder (those are copied verbatim)."""
    if ds.path is None or not (Path(ds.path) / "manifest.json").is_file():
        return set()
    try:
        disk = read_dataset_folder(Path(ds.path), ds.name, verify=True)
    except KbenchError:
        return set()
    return {t for t, frame in ds.tables.items() if t in disk.tables and _same_frame(disk.tables[t], frame)}


def _hub_section(repo_id: str | None, configs: list[dict]) -> str:
    repo = repo_id or "ORG/REPO"
    names = [c["config_name"] for c in configs]
    splits = {c["config_name"]: [d["split"] for d in c["data_files"]] for c in configs}
    example = "runtimes" if "runtimes" in names else names[0]
    lines = ["## Loading from the Hugging Face Hub", "```python", "import kbench",
             f'ds = kbench.load("hf://{repo}")  # checked against kbench_manifest.json, cached; revision= pins a commit',
             'parts = ds.split("random")       # {"train": ids, "valid": ids, "test": ids}', "", "import datasets"]
    if "train" in splits[example]:
        lines += [f'train = datasets.load_dataset("{repo}", "{example}", split="train")       '
                  f'# the train part of split {PRIMARY_SPLIT}',
                  f'valid = datasets.load_dataset("{repo}", "{example}", split="validation")',
                  f'test = datasets.load_dataset("{repo}", "{example}", split="test")']
    other = next((n for n in names if n.startswith(f"{example}-")), None)
    if other:
        lines.append(f'net_train = datasets.load_dataset("{repo}", "{other}", split="train")  '
                     f"# split {other.split('-', 1)[1]}")
    lines += [f'everything = datasets.load_dataset("{repo}", "{example}", split="{WHOLE_SPLIT}")    '
              "# every problem, test ones included", "```", ""]
    split_names = sorted({n.split("-", 1)[1] for n in names if "-" in n})
    lines.append(
        "Configs: " + ", ".join(f"`{n}`" for n in names) + ". In a table's own config, `train`, `validation` "
        f"and `test` are the parts of kbench's `{PRIMARY_SPLIT}` split and `{WHOLE_SPLIT}` is the whole table, "
        "test problems included: never train on it (and `split=\"all\"`, `datasets`' union of every split, "
        f"holds each row twice). "
        + (f"`<table>-<split>` configs hold the parts of the other standard splits ({', '.join(split_names)}). "
           if split_names else "")
        + f"A table without `problem_id` has only `{WHOLE_SPLIT}`. "
        f"Whole tables are under `{DATA_DIR}/`, the parts under `{PARTS_DIR}/<split>/<part>/`; "
        f"`{DATA_DIR}/manifest.json` is the kbench dataset manifest; `{KBENCH_MANIFEST}` records the sha256 "
        "of every file in this repository.")
    return "\n".join(lines + [""])


def _hub_readme(ds, tables: list[str], configs: list[dict], root: Path, repo_id: str | None) -> str:
    try:
        import yaml
    except ModuleNotFoundError as exc:  # comes with huggingface_hub
        raise HubError("building the Hub card needs PyYAML: pip install 'kbench[hub]'") from exc
    card = render_card(ds, data_prefix=f"{DATA_DIR}/")
    if not card.startswith("---\n") or "\n---\n" not in card[4:]:
        raise KbenchError("internal: the data card has no YAML front matter")  # render_card always writes one
    end = card.index("\n---\n", 3)
    front, body = card[4:end], card[end + len("\n---\n"):]
    meta = yaml.safe_load(front) or {}
    declared = [c["config_name"] for c in meta.get("configs", [])]
    if declared != tables:
        raise KbenchError(f"internal: card configs {declared} differ from the tables {tables}")
    meta["configs"] = configs
    meta["dataset_info"] = [_dataset_info_entry(c, root) for c in configs]
    front = yaml.safe_dump(meta, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1000)
    section = _hub_section(repo_id, configs)
    if "\n## Citation" in body:
        head, tail = body.split("\n## Citation", 1)
        body = head.rstrip("\n") + "\n\n" + section + "\n## Citation" + tail
    else:
        body = body.rstrip("\n") + "\n\n" + section
    return "---\n" + front + "---\n" + body


def build_hub_folder(dataset, out_dir, repo_id: str | None = None) -> dict:
    """Write the Hub folder of ``dataset`` (a :class:`Dataset`, name, alias or folder) into ``out_dir``.

    ``out_dir`` must not exist or be empty (nothing of the user's is overwritten); it is
    written in a temporary sibling and moved into place at the end. Returns the kbench
    manifest (``kbench_manifest.json``).
    """
    ds = _resolve_dataset(dataset)
    out_dir = Path(out_dir)
    if out_dir.is_symlink():  # the folder is replaced by a rename: a link would be replaced, not followed
        raise KbenchInputError(f"{printable_path(out_dir)}: is a symbolic link; give the folder itself.")
    # the dataset's own folder (a packaged dataset above all) is never written into, --dry-run or not
    check_output_folder(out_dir, [ds.path] if ds.path is not None else [], "--out")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise KbenchInputError(f"{out_dir}: exists and is not an empty folder; choose a new output folder.")
    try:
        return _write_hub_folder(ds, out_dir, repo_id)
    except OSError as exc:  # a read-only folder, a full disk, a name too long: nothing is left behind
        raise write_failure(out_dir, exc, "the Hub folder") from None


def _write_hub_folder(ds, out_dir: Path, repo_id: str | None) -> dict:
    tables = [t for t in TABLE_ORDER if t in ds.tables] + sorted(set(ds.tables) - set(TABLE_ORDER))
    bad = [t for t in tables if not _TABLE_NAME.fullmatch(t)]
    if bad:
        raise KbenchInputError(f"table names {bad} cannot be Hub configs: use lower-case letters, digits, '_'.")
    for core in ("problems", "splits"):
        if core not in ds.tables:
            raise KbenchInputError(f"dataset {ds.name!r} has no {core!r} table; only complete kbench datasets "
                                   "can be published.")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        data = tmp / DATA_DIR
        data.mkdir()
        files, rewritten = {}, False
        pristine = _pristine_tables(ds)
        for t in tables:
            fname = f"{t}.parquet"
            if t in pristine:
                shutil.copyfile(Path(ds.path) / fname, data / fname)
            else:
                write_table(ds.tables[t], data / fname)
                rewritten = True
            files[fname] = {"sha256": sha256_file(data / fname), "bytes": (data / fname).stat().st_size,
                            "rows": int(len(ds.tables[t]))}
        manifest = {k: v for k, v in ds.manifest.items() if k not in ("files", "checksum")}
        manifest.setdefault("kbench_schema", SCHEMA_VERSION)
        manifest.setdefault("name", ds.name)
        if rewritten and "splits" in ds.tables:
            manifest["splits"] = split_sizes(ds.tables["splits"])
        manifest["files"] = files
        manifest["checksum"] = hashlib.sha256(
            "".join(f"{k}:{v['sha256']}" for k, v in sorted(files.items())).encode()).hexdigest()
        (data / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")

        view = Dataset(ds.name, {t: ds.tables[t] for t in tables}, manifest, data)
        configs = write_split_parts(view, tables, data, tmp)
        (tmp / "README.md").write_text(_hub_readme(view, tables, configs, tmp, repo_id))

        parts = sorted({d["path"] for c in configs for d in c["data_files"] if d["path"].startswith(PARTS_DIR)})
        hub_files = {}
        for rel in ["README.md", f"{DATA_DIR}/manifest.json"] + [f"{DATA_DIR}/{t}.parquet" for t in tables] + parts:
            entry = {"sha256": sha256_file(tmp / rel), "bytes": (tmp / rel).stat().st_size}
            if rel.endswith(".parquet"):
                entry["rows"] = pq.ParquetFile(tmp / rel).metadata.num_rows
            hub_files[rel] = entry
        kmanifest = {
            "kbench_hub_format": HUB_FORMAT,
            "kbench_schema": manifest["kbench_schema"],
            "name": ds.name,
            "version": manifest.get("version", "unknown"),
            "checksum": manifest["checksum"],
            "published_with_kbench": __version__,
            "tables": {t: f"{DATA_DIR}/{t}.parquet" for t in tables},
            "hf_configs": {c["config_name"]: {d["split"]: d["path"] for d in c["data_files"]} for c in configs},
            "files": hub_files,
        }
        (tmp / KBENCH_MANIFEST).write_text(json.dumps(kmanifest, indent=2) + "\n")
        tmp.chmod(0o755)
        if out_dir.exists():
            out_dir.rmdir()  # empty, checked above
        os.replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return kmanifest


# -- publish ----------------------------------------------------------------------
@dataclass
class PublishResult:
    repo_id: str
    revision: str
    files: dict = field(default_factory=dict)  # path in repo -> {"sha256", "bytes"[, "rows"]}
    commit_message: str = ""
    dry_run: bool = False
    commit: str | None = None
    commit_url: str | None = None


def _commit_message(ds_name: str, version: str) -> str:
    return f"Publish kbench dataset {ds_name} {version} (kbench {__version__})"


def _print_plan(res: PublishResult, private: bool, endpoint: str | None, has_token: bool) -> None:
    total = sum(f["bytes"] for f in res.files.values())
    print(f"dry run: nothing uploaded. `kbench publish` would upload in one commit to "
          f"{endpoint or 'https://huggingface.co'}/datasets/{res.repo_id} (revision {res.revision}, "
          f"{'private' if private else 'public'} if created):")
    print(f"  commit message: {res.commit_message}")
    width = max(len(p) for p in res.files)
    for path, meta in res.files.items():
        rows = f"  {meta['rows']:>10,} rows" if "rows" in meta else " " * 17
        print(f"  {path:<{width}}  {meta['bytes']:>12,} bytes{rows}  sha256 {meta['sha256']}")
    print(f"  {len(res.files)} files, {total:,} bytes")
    if not has_token:
        print(f"  note: no Hugging Face token found; to publish, {LOGIN_HELP}.")


def publish(name, repo_id: str, private: bool = False, revision: str = "main", dry_run: bool = False,
            token: str | None = None, endpoint: str | None = None, out_dir=None) -> PublishResult:
    """Publish dataset ``name`` (name, alias, folder or :class:`Dataset`) to the dataset repo ``repo_id``.

    Creates the repo if needed and uploads README.md, kbench_manifest.json, data/ and parts/ in
    one commit on ``revision`` (a branch; created from main if missing). The folder is built in a
    temporary directory that is removed afterwards, whatever happens, or in ``out_dir`` (a new or
    empty folder), which is kept. ``dry_run`` prints exactly what would be uploaded and contacts nobody.
    """
    repo_id = check_repo_id(repo_id)
    revision = str(revision or "main")
    ds = _resolve_dataset(name)
    hf = _hf()
    endpoint = _endpoint(endpoint)
    token = token or hf.get_token()
    if not dry_run and not token:
        raise KbenchInputError(f"no Hugging Face token found, so {repo_id} cannot be published: "
                               f"{LOGIN_HELP}. (`--dry-run` shows what would be uploaded without one.)")
    if not dry_run and _offline():
        raise KbenchInputError("HF_HUB_OFFLINE is set: publishing needs the network. Unset it and retry.")
    with tempfile.TemporaryDirectory(prefix="kbench-publish-") as tmpdir:
        folder = Path(out_dir) if out_dir is not None else Path(tmpdir) / "hub"
        kmanifest = build_hub_folder(ds, folder, repo_id=repo_id)
        files = {KBENCH_MANIFEST: {"sha256": sha256_file(folder / KBENCH_MANIFEST),
                                   "bytes": (folder / KBENCH_MANIFEST).stat().st_size},
                 **kmanifest["files"]}
        res = PublishResult(repo_id, revision, files, _commit_message(ds.name, kmanifest["version"]), dry_run)
        if dry_run:
            _print_plan(res, private, endpoint, has_token=bool(token))
            return res
        what = str(name) if isinstance(name, (str, Path)) else ds.name  # what the user typed
        cli = f"kbench publish {what} --repo-id {repo_id}"
        cli += f" --revision {revision}" if revision != "main" else ""
        retry = (f"Nothing was changed locally, and a Hub commit is all-or-nothing, so {repo_id} holds either "
                 f"the whole dataset or none of this upload. Retry with `{cli}`.")
        api = hf.HfApi(endpoint=endpoint, token=token, library_name="kbench", library_version=__version__)
        import huggingface_hub.errors as hf_errors
        uri_error = getattr(hf_errors, "HfUriError", ())  # huggingface_hub >= 2
        net_errors = _network_errors()
        try:
            try:
                api.create_repo(repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True)
            except uri_error:
                # Creation was refused (401/403) but the repo exists: huggingface_hub's exist_ok fallback then
                # fails to build the URL of a non-default endpoint. Go on: the commit reports any permission issue.
                pass
            if revision != "main":
                api.create_branch(repo_id, branch=revision, repo_type=REPO_TYPE, exist_ok=True)
        except net_errors as exc:
            raise _hub_failure(exc, f"creating the dataset repo {repo_id} failed", retry) from exc
        ops = [hf.CommitOperationAdd(path_in_repo=p, path_or_fileobj=str(folder / p)) for p in files]
        try:
            info = api.create_commit(
                repo_id, ops, commit_message=res.commit_message, repo_type=REPO_TYPE, revision=revision,
                commit_description=(f"kbench dataset {ds.name} version {kmanifest['version']}, checksum "
                                    f"{kmanifest['checksum']}, hub format {HUB_FORMAT}. Files and sha256 in "
                                    f"{KBENCH_MANIFEST}."))
        except net_errors as exc:
            raise _hub_failure(exc, f"uploading {ds.name} to {repo_id} failed", retry) from exc
        except ValueError as exc:  # the Hub rejected the README metadata
            raise HubError(f"uploading {ds.name} to {repo_id} failed: {exc}\n{retry}") from exc
    res.commit = info.oid
    res.commit_url = info.commit_url
    return res


# -- load -------------------------------------------------------------------------
def load_from_hub(repo_id: str, revision: str | None = None, *, token: str | None = None,
                  endpoint: str | None = None):
    """Download (once) and load a kbench dataset published on the Hub; returns a :class:`Dataset`.

    ``revision`` is a branch, tag or commit sha (default: main). Every file is checked against
    the repo's ``kbench_manifest.json`` (:func:`kbench.data.hub_download.download_from_hub`).
    """
    folder, name = download_from_hub(repo_id, revision, token=token, endpoint=endpoint)
    return read_dataset_folder(folder, name, verify=False)


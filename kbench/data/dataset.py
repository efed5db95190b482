"""Loading datasets: ``kbench.load`` and the :class:`Dataset` object.

>>> import kbench
>>> ds = kbench.load("mi100")
>>> ds.problems.columns[:3].tolist()
['problem_id', 'direction', 'dtype']
>>> sorted(ds.split("random"))
['test', 'train', 'valid']
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from kbench.core.errors import DataIntegrityError, KbenchInputError, read_json_object, suggest
from kbench.core.identifiers import confined_path, identifier_problem
from kbench.data.hub_download import download_from_hub
from kbench.data.registry import DATASETS, resolve_name, variant_name, variants_of
from kbench.sources.dataset_files import PACKAGE_DATA, dataset_checksum, sha256_file

CORE_TABLES = ("problems", "runtimes", "kernels", "splits")
#: String columns read as pandas categoricals (categories in sorted order, so sorting and grouping
#: give the order plain strings would): a few thousand distinct values repeated over up to millions
#: of rows, about 2 to 15 times smaller in memory and faster to read. ``problem_id`` is one where it
#: repeats (one row per problem and kernel); in ``problems`` and ``splits`` it is unique and stays a
#: string. Every column of ``splits`` but ``problem_id`` is a split.
CATEGORICAL = {
    "problems": ["direction", "dtype", "cast", "layout", "layout_x", "layout_w", "layout_y",
                 "output_size_status", "kind", "sources", "key_source", "role", "schemas", "network"],
    "runtimes": ["problem_id", "kernel", "algorithm", "timing", "numeric_notes", "schema"],
    "heuristics": ["problem_id", "heuristic", "kernel"],
    "repeats": ["problem_id", "kernel"],
    "targets": ["problem_id", "solver"],
    "references": ["reference", "algorithm"],
}


def categorical_columns(table: str, columns: list[str]) -> list[str]:
    """The columns of ``table`` (among ``columns``) that :func:`read_table` reads as categoricals."""
    if table == "splits":
        return [c for c in columns if c != "problem_id"]
    return [c for c in CATEGORICAL.get(table, []) if c in columns]


def read_table(path: Path, table: str | None = None) -> pd.DataFrame:
    """One parquet table as a DataFrame, its :func:`categorical_columns` as sorted categoricals."""
    table = table or path.name.removesuffix(".parquet")
    cats = categorical_columns(table, pq.read_schema(path).names)
    df = pq.read_table(path, read_dictionary=cats or None).to_pandas()
    for c in cats:
        if isinstance(df[c].dtype, pd.CategoricalDtype):
            order = df[c].cat.categories
            if not order.is_monotonic_increasing:
                df[c] = df[c].cat.reorder_categories(order.sort_values())
    return df


_UNREAD = object()


class LazyTables(dict):
    """A dataset folder's tables by name, each read from its (verified) parquet file on first use.

    A command that reads some tables only (``kbench evaluate --no-reference`` has no use for the
    ``heuristics`` table, a third of mi100's read time) pays for those only. Every file was
    hashed against the manifest and its parquet footer read when the folder was opened, so a
    table that is read later is the data the checksum names. It is a ``dict``: setting a table,
    ``items()``, ``values()`` and ``get()`` behave as on a plain one (reading what they touch).
    """

    def __init__(self, paths: dict[str, Path], repair: str = ""):
        super().__init__((name, _UNREAD) for name in paths)
        self._paths, self._repair = dict(paths), repair

    def __getitem__(self, name: str) -> pd.DataFrame:
        value = super().__getitem__(name)
        if value is _UNREAD:
            path = self._paths[name]
            try:
                value = read_table(path, name)
            except Exception as exc:  # pyarrow raises several types for a broken file
                raise DataIntegrityError(f"{path}: cannot be read as parquet ({exc}). {self._repair}") from exc
            super().__setitem__(name, value)
        return value

    def get(self, name, default=None):
        return self[name] if name in self else default

    def items(self):
        return [(name, self[name]) for name in self]

    def values(self):
        return [self[name] for name in self]

    def read(self) -> set[str]:
        """The names of the tables read so far."""
        return {name for name, value in super().items() if value is not _UNREAD}


class Dataset:
    """A kernel-selection dataset: problems, measured runtimes, kernels, standard splits.

    Attributes
    ----------
    problems : DataFrame, one row per problem (a convolution in one direction)
    runtimes : DataFrame, long table ``problem_id, kernel, time_ms, workspace_bytes, algorithm, rank``
    kernels : DataFrame, the kernel vocabulary
    tables : dict of every table in the dataset (``heuristics``, ``references`` ... where present)
    info : dict, the manifest (device, source, license, censoring rule, version, checksums)
    """

    def __init__(self, name: str, tables: dict[str, pd.DataFrame], manifest: dict, path: Path | None = None):
        self.name = name
        self.tables = tables
        self.manifest = manifest
        self.path = path

    # -- tables -----------------------------------------------------------------
    @property
    def problems(self) -> pd.DataFrame:
        return self.tables["problems"]

    @property
    def runtimes(self) -> pd.DataFrame | None:
        """Measured times (None for tuning datasets, which record only the optimum)."""
        return self.tables.get("runtimes")

    @property
    def kernels(self) -> pd.DataFrame | None:
        return self.tables.get("kernels")

    @property
    def targets(self) -> pd.DataFrame | None:
        """Tuning datasets: the optimal parameter tuple per (problem, solver)."""
        return self.tables.get("targets")

    @property
    def task(self) -> str:
        return self.manifest.get("task", "kernel-selection")

    @property
    def heuristics(self) -> pd.DataFrame | None:
        return self.tables.get("heuristics")

    @property
    def repeats(self) -> pd.DataFrame | None:
        """Test-retest measurements ``problem_id, kernel, run_id, time_ms`` of a sample of problems
        (run 0 = the measurement ``runtimes`` comes from), where the dataset has them, else None.
        Statistics: :mod:`kbench.sources.repeatability`."""
        return self.tables.get("repeats")

    @property
    def info(self) -> dict:
        return self.manifest

    @property
    def version(self) -> str:
        return self.manifest.get("version", "unknown")

    @property
    def checksum(self) -> str:
        return self.manifest.get("checksum", "")

    @property
    def censored(self) -> pd.Series:
        """Per-problem censoring flag, indexed by ``problem_id``."""
        if "censored" not in self.problems:
            return pd.Series(False, index=self.problems["problem_id"])
        return self.problems.set_index("problem_id")["censored"]

    # -- splits -----------------------------------------------------------------
    @property
    def split_names(self) -> list[str]:
        return [c for c in self.tables["splits"].columns if c != "problem_id"]

    def split(self, name: str = "random") -> dict[str, np.ndarray]:
        """``{"train": ids, "valid": ids, "test": ids}`` for a standard split."""
        splits = self.tables["splits"]
        if name not in self.split_names:
            raise KbenchInputError(
                f"dataset {self.name!r} has no split {name!r}; its splits are "
                f"{', '.join(self.split_names)}.{suggest(name, self.split_names)}")
        col = splits[name].to_numpy()
        ids = splits["problem_id"].to_numpy()
        return {part: ids[col == part] for part in ("train", "valid", "test")}

    # -- derived views ----------------------------------------------------------
    def subset(self, problem_ids) -> Dataset:
        """A dataset restricted to ``problem_ids`` (every table filtered by id)."""
        keep = pd.Index(problem_ids)
        tables = {}
        for key, table in self.tables.items():
            tables[key] = table[table["problem_id"].isin(keep)].reset_index(drop=True) \
                if "problem_id" in table else table
        return Dataset(self.name, tables, self.manifest, self.path)

    def align(self, other: Dataset | str) -> tuple[Dataset, Dataset]:
        """The problems and kernels two devices share: train on one GPU, test on the other.

        >>> a, b = kbench.load("mi100").align("mi250x")   # doctest: +SKIP
        """
        other = load(other) if isinstance(other, str) else other
        shared_ids = np.intersect1d(self.problems["problem_id"].to_numpy(dtype=str),
                                    other.problems["problem_id"].to_numpy(dtype=str))
        shared_kernels = set(self.kernels["kernel"]) & set(other.kernels["kernel"])
        out = []
        for ds in (self, other):
            sub = ds.subset(shared_ids)
            sub.tables["runtimes"] = sub.runtimes[sub.runtimes["kernel"].isin(shared_kernels)].reset_index(drop=True)
            sub.tables["kernels"] = ds.kernels[ds.kernels["kernel"].isin(shared_kernels)].reset_index(drop=True)
            out.append(sub)
        return out[0], out[1]

    @cached_property
    def best(self) -> pd.DataFrame:
        """Per problem: the fastest kernel and its time (``problem_id, kernel, time_ms``)."""
        rt = self.runtimes
        idx = rt.groupby("problem_id", sort=False)["time_ms"].idxmin()
        return rt.loc[idx, ["problem_id", "kernel", "time_ms"]].reset_index(drop=True)

    def __repr__(self) -> str:
        if self.task == "tuning":
            what = f"{len(self.targets):,} tuned optima"
        else:
            what = f"{len(self.kernels)} kernels, {len(self.runtimes):,} runtimes"
        return (f"Dataset({self.name!r}: {len(self.problems):,} problems, {what}, "
                f"splits={self.split_names}, device={self.info.get('device')!r})")


def _dataset_dir(name: str) -> Path:
    return PACKAGE_DATA / name


def read_dataset_folder(path: Path, name: str | None = None, verify: bool = True) -> Dataset:
    """Load a dataset folder (parquet files + manifest.json), verifying checksums."""
    manifest_path = path / "manifest.json"
    repair = ("Reinstall kbench, or rebuild it with `kbench build-data "
              f"{name or path.name}` from the raw data.")
    if not manifest_path.exists():
        raise DataIntegrityError(f"{manifest_path}: manifest missing. {repair}")
    manifest = read_json_object(manifest_path, DataIntegrityError, f" {repair}")
    files = manifest.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(m, dict) and isinstance(m.get("sha256"), str)
                                              for m in files.values()):
        raise DataIntegrityError(f"{manifest_path}: 'files' must map each file to its sha256 and bytes. {repair}")
    # the checksum a record cites is recomputed from the file hashes (checked below when verifying), so an
    # edited file cannot keep the original checksum by editing the per-file hashes alone
    if dataset_checksum(files) != manifest.get("checksum"):
        raise DataIntegrityError(f"{manifest_path}: checksum {str(manifest.get('checksum'))[:16]}… is not what its "
                                 f"files' sha256 give ({dataset_checksum(files)[:16]}…): the manifest was edited. "
                                 f"{repair}")
    dataset_name = _manifest_name(manifest, manifest_path, name, repair)
    paths = {}
    for fname, meta in files.items():
        # a file list entry is a path read from a file: it must name a file of this folder (which may be a
        # link, as in a Hub snapshot: its content is what the sha256 checks)
        try:
            fpath = confined_path(path, fname, "file", str(manifest_path), links=False)
        except KbenchInputError as exc:
            raise DataIntegrityError(f"{exc} {repair}") from None
        if "/" in fname:
            raise DataIntegrityError(f"{manifest_path}: file {fname!r} lies in a subfolder; a dataset folder "
                                     f"lists its own files only. {repair}")
        if not isinstance(meta.get("bytes"), int):
            raise DataIntegrityError(f"{manifest_path}: file {fname!r} has no integer 'bytes'. {repair}")
        if not fpath.exists():
            raise DataIntegrityError(f"{fpath}: data file missing. {repair}")
        if verify:
            if fpath.stat().st_size != meta["bytes"]:
                raise DataIntegrityError(
                    f"{fpath}: size {fpath.stat().st_size} bytes, manifest says {meta['bytes']} "
                    f"(truncated or replaced). {repair}")
            if sha256_file(fpath) != meta["sha256"]:
                raise DataIntegrityError(f"{fpath}: sha256 does not match the manifest (corrupt). {repair}")
        try:
            pq.read_schema(fpath)  # the footer: a file that is no parquet is refused when the folder opens
        except Exception as exc:  # pyarrow raises several types for a broken file
            raise DataIntegrityError(f"{fpath}: cannot be read as parquet ({exc}). {repair}") from exc
        paths[fname.removesuffix(".parquet")] = fpath
    tables = LazyTables(paths, repair)
    missing = [t for t in ("problems", "splits") if t not in tables]
    if missing:
        raise DataIntegrityError(f"{path}: tables {missing} missing from the manifest. {repair}")
    return Dataset(dataset_name, tables, manifest, path)


def _manifest_name(manifest: dict, manifest_path: Path, name: str | None, repair: str) -> str:
    """The dataset's name: the manifest's ``name`` (else ``name``, else the folder's), which must be an
    identifier (it becomes a path: ``results/<name>/...``) and agree with the registered ``name``.

    The checksum covers the files only, so the manifest's ``name`` is not trusted as written: it is
    refused unless it is an identifier, and a registered or published dataset's manifest must carry
    the name it was loaded by (a ``name`` edited to ``../escaped`` or to another dataset's is refused).
    """
    found = manifest.get("name", name or manifest_path.parent.name)
    problem = identifier_problem(found)
    if problem is not None:
        raise DataIntegrityError(f"{manifest_path}: the dataset name {str(found)[:80]!r} {problem}; the name "
                                 f"becomes a folder name. {repair}")
    if name is not None and found != name:
        raise DataIntegrityError(f"{manifest_path}: the manifest names the dataset {found!r}, but it was loaded as "
                                 f"{name!r}: the manifest was edited or the folder holds another dataset. {repair}")
    return found


def load(name: str = "mi100", *, variant: str | None = None, revision: str | None = None,
         verify: bool = True) -> Dataset:
    """Load a dataset by name or alias (``"mi100"``, ``"gfx90878"``), a folder, or ``hf://ORG/REPO``.

    Embedded datasets load offline from the package. ``hf://`` datasets are
    downloaded once with ``huggingface_hub`` and cached (``revision`` pins a commit).
    ``variant``: the candidate set of a collected NVIDIA dataset (docs/variants.md): ``"pytorch"``
    is what PyTorch's cuDNN path may run with its default flags; ``load("h200", variant="pytorch")``
    is the dataset ``h200-pytorch``, with the same problem ids and splits as ``h200``.
    """
    name = str(name)
    if variant not in (None, "default"):
        base = resolve_name(name)
        if base is None or variant_name(base, variant) not in DATASETS:
            offered = {n: variants_of(n) for n in DATASETS if len(variants_of(n)) > 1}
            raise KbenchInputError(
                f"variant={variant!r}: {name!r} has no such variant. Variants: "
                + "; ".join(f"{n}: {', '.join(v)}" for n, v in offered.items()) + ".")
        name = variant_name(base, variant)
    if name.startswith("hf://"):
        folder, hub_name = download_from_hub(name[len("hf://"):], revision=revision)
        return read_dataset_folder(folder, hub_name)  # hashed again: the checksum is recomputed from these
    canonical = resolve_name(name)
    if canonical is None:
        if Path(name).is_dir() and (Path(name) / "manifest.json").exists():
            return read_dataset_folder(Path(name), verify=verify)
        if Path(name).is_dir() and any(Path(name).glob("*.parquet")):
            # a dataset folder that lost its manifest: say so, not "unknown dataset"
            raise DataIntegrityError(
                f"{name}: dataset folder without manifest.json (it lists every file with its sha256, so "
                "nothing can be checked or loaded without it). Copy the whole folder again, or rebuild "
                "it with `kbench build-data`.")
        known = sorted(DATASETS)
        aliases = [a for s in DATASETS.values() for a in s.aliases]
        raise KbenchInputError(
            f"unknown dataset {name!r}. Available: {', '.join(known)} "
            f"(aliases: {', '.join(aliases)}).{suggest(name, known + aliases)}")
    path = _dataset_dir(canonical)
    if not (path / "manifest.json").exists():
        raise DataIntegrityError(
            f"dataset {canonical!r} is registered but its files are not in this installation ({path}). "
            f"Build it with `kbench build-data {canonical}` or reinstall kbench.")
    return read_dataset_folder(path, canonical, verify=verify)


def datasets_markdown() -> str:
    """The README's dataset table, from the shipped manifests (``list_datasets``)."""
    df = list_datasets()

    def num(v):
        return "" if pd.isna(v) else f"{int(v):,}"
    lines = ["| name | aliases | device | task | problems | kernels | runtimes | targets | censoring | license |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples(index=False):
        lines.append(f"| {r.name} | {r.aliases or ''} | {r.device} | {r.task} | {num(r.problems)} | {num(r.kernels)} | "
                     f"{num(r.runtimes)} | {num(r.targets)} | {r.censoring} | {r.license} |")
    return "\n".join(lines)


def list_datasets() -> pd.DataFrame:
    """One row per registered dataset: name, device, #problems, #kernels, task, license."""
    rows = []
    for spec in DATASETS.values():
        manifest_path = _dataset_dir(spec.name) / "manifest.json"
        m = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        files = m.get("files", {})
        rows.append({
            "name": spec.name, "aliases": ",".join(spec.aliases), "device": spec.device,
            "vendor": spec.vendor, "task": spec.task,
            "problems": files.get("problems.parquet", {}).get("rows"),
            "targets": files.get("targets.parquet", {}).get("rows"),
            "kernels": files.get("kernels.parquet", {}).get("rows"),
            "runtimes": files.get("runtimes.parquet", {}).get("rows"),
            "censoring": m.get("censoring", {}).get("rule"), "license": spec.license,
            "version": m.get("version"), "available": bool(m),
        })
    return pd.DataFrame(rows)

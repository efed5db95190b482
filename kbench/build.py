"""Writing datasets: parquet tables plus a manifest with checksums.

``write_dataset`` is the one place that writes a kbench dataset folder; the
converters (``kbench.sources.*``, ``kbench.collect``) hand it their tables.
``build_miopen_dataset`` is the find-db converter behind ``kbench build-data``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kbench import __version__
from kbench.errors import KbenchInputError
from kbench.registry import DATASETS, DatasetSpec

SCHEMA_VERSION = 1
DATASET_VERSION = "1.0.0"
PACKAGE_DATA = Path(__file__).parent / "datasets"
TABLE_ORDER = ("problems", "runtimes", "kernels", "splits", "heuristics", "references", "targets")
CENSORING_RULES = {
    "finddb-top4": (
        "MIOpen's find-db export keeps only the 4 fastest valid solvers per problem. "
        "A problem with 4 listed solvers is censored: any solver not listed is slower than "
        "the 4th listed one or not applicable. A problem with fewer than 4 lists every "
        "solver that ran (complete)."
    ),
    "complete": "Every candidate was timed: lists are complete, an unlisted kernel is not applicable.",
    "complete-layers-sampled-random": "see kbench.sources.cnnopt.CENSORING_TEXT",
    "tuning-optimum": ("Only the winning parameter tuple per (problem, solver) is recorded by MIOpen's "
                       "exhaustive tuning (perf-db); there are no runtimes and no ranking of the others."),
}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_table(df: pd.DataFrame, path: Path) -> None:
    table = pa.Table.from_pandas(df.reset_index(drop=True), preserve_index=False)
    pq.write_table(table, path, compression="zstd", compression_level=9, row_group_size=1 << 20)


def write_dataset(out_dir: str | Path, tables: dict[str, pd.DataFrame], info: dict) -> dict:
    """Write ``tables`` as parquet files and ``manifest.json`` into ``out_dir``.

    Written to a temporary sibling folder first and moved into place at the
    end, so an interrupted build never leaves a half-written dataset.
    Returns the manifest.
    """
    out_dir = Path(out_dir)
    if "problems" not in tables:
        raise KbenchInputError("write_dataset: a dataset needs at least a 'problems' table.")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        files = {}
        order = [t for t in TABLE_ORDER if t in tables] + sorted(set(tables) - set(TABLE_ORDER))
        for name in order:
            path = tmp / f"{name}.parquet"
            write_table(tables[name], path)
            files[path.name] = {"sha256": sha256_file(path), "bytes": path.stat().st_size,
                                "rows": int(len(tables[name]))}
        manifest = {
            "kbench_schema": SCHEMA_VERSION,
            **info,
            "built_with_kbench": __version__,
            "files": files,
            "checksum": hashlib.sha256(
                "".join(f"{k}:{v['sha256']}" for k, v in sorted(files.items())).encode()).hexdigest(),
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.chmod(0o755)
        os.replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def split_sizes(splits: pd.DataFrame) -> dict:
    return {col: {p: int((splits[col] == p).sum()) for p in ("train", "valid", "test")}
            for col in splits.columns if col != "problem_id"}


def spec_info(spec: DatasetSpec, censoring: str, report: dict, splits: pd.DataFrame) -> dict:
    return {
        "name": spec.name, "aliases": list(spec.aliases), "version": DATASET_VERSION,
        "device": spec.device, "arch": spec.arch, "vendor": spec.vendor, "library": spec.library,
        "task": spec.task, "license": spec.license, "source": spec.source,
        "citation": spec.citation, "censoring": {"rule": censoring, "text": CENSORING_RULES[censoring]},
        "default_split": spec.default_split, "cleaning": report, "splits": split_sizes(splits),
    }


def build_dataset(name: str, raw_root: str | Path, out_root: str | Path = PACKAGE_DATA) -> dict:
    """Build any registered dataset from its raw file into ``out_root/<name>``; returns the manifest."""
    spec = DATASETS[name]
    if spec.task == "tuning":
        return build_tuning_dataset(name, raw_root, out_root)
    if spec.collected:
        from kbench.collect.package import package
        repo = Path(__file__).resolve().parents[1]
        out_dir = Path(out_root) / name
        # The collector's card needs the raw measurements (noise, runs, validation), so it is
        # rendered here and shipped beside the tables as card.md.
        return package([repo / spec.collected], name, out_dir, mituna=Path(raw_root) / "mituna",
                       card=out_dir / "card.md")
    if spec.task == "tile-selection":
        from kbench.sources.cnnopt import write_tiles_dataset
        return write_tiles_dataset(name.removesuffix("-tiles"), Path(out_root) / name, raw_root)
    return build_miopen_dataset(name, raw_root, out_root)


def build_tuning_dataset(name: str, raw_root: str | Path, out_root: str | Path = PACKAGE_DATA) -> dict:
    """Convert one MIOpen perf-db (tuned parameters) into ``out_root/<name>``."""
    from kbench.tuning.dataset import convert_perfdb

    spec = DATASETS[name]
    path = Path(raw_root) / spec.raw_file
    if not path.exists():
        raise KbenchInputError(f"{path}: raw perf-db for {name!r} not found; pass --raw pointing "
                               "at the shared data folder (the one holding miopen/ and mituna/).")
    tables, report = convert_perfdb(path, mituna_dir=Path(raw_root) / "mituna")
    return write_dataset(Path(out_root) / name, tables,
                         spec_info(spec, "tuning-optimum", report, tables["splits"]))


def build_miopen_dataset(name: str, raw_root: str | Path, out_root: str | Path = PACKAGE_DATA) -> dict:
    """Convert one MIOpen find-db into ``out_root/<name>``; returns the manifest."""
    from kbench.sources.miopen import convert_finddb
    from kbench.sources.miopen_rules import rules_heuristics
    from kbench.sources.mituna import read_network_layers
    from kbench.splits import assign_networks_split, assign_random_split, network_geometry_match

    spec = DATASETS[name]
    raw_root = Path(raw_root)
    path = raw_root / spec.raw_file
    if not path.exists():
        raise KbenchInputError(f"{path}: raw find-db for {name!r} not found; pass --raw pointing "
                               "at the shared data folder (the one holding miopen/ and mituna/).")
    tables, report = convert_finddb(path)
    problems = tables["problems"]
    layers = read_network_layers(raw_root / "mituna")
    splits = pd.DataFrame({
        "problem_id": problems["problem_id"],
        "random": assign_random_split(problems),
        "networks": assign_networks_split(problems, layers),
    })
    conv_layers = layers[layers["mode"] == "conv"]
    report["network_layers"] = {
        "driver_lines": int(len(layers)),
        "transposed_lines_ignored": int((layers["mode"] != "conv").sum()),
        "distinct_geometries_batch_ignored": int(
            conv_layers.drop_duplicates(["c", "k", "groups", "x_h", "x_w", "fil_h", "fil_w", "pad_h",
                                         "pad_w", "stride_h", "stride_w", "dil_h", "dil_w"]).shape[0]),
        "problems_matching_a_layer": int(network_geometry_match(problems, layers).sum()),
    }
    tables["splits"] = splits
    if spec.task == "kernel-selection":
        # the reference heuristic for speed-up, as data: scoring reads it and runs no baseline
        tables["heuristics"] = rules_heuristics(problems, tables["runtimes"], tables["kernels"])
    return write_dataset(Path(out_root) / name, tables, spec_info(spec, "finddb-top4", report, splits))

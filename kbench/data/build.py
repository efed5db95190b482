"""Building the packaged datasets from their raw files (``kbench build-data``).

``build_dataset`` dispatches on the dataset's kind: MIOpen find-db (``build_miopen_dataset``),
perf-db (``build_tuning_dataset``), the PACT tile artifact and the cuDNN collector's records.
The folder format itself (``write_dataset``) is in :mod:`kbench.sources.dataset_files`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kbench.collect.label_retiming.apply import label_files
from kbench.collect.measure.cudnn.autotune import record_files
from kbench.collect.packaging.package import package
from kbench.core.errors import KbenchInputError
from kbench.data.registry import DATASETS, DatasetSpec
from kbench.sources.cnnopt import write_tiles_dataset

# the folder format lives in kbench.sources.dataset_files; re-exported for build's callers
from kbench.sources.dataset_files import (  # noqa: F401
    DATASET_VERSION,
    PACKAGE_DATA,
    REPO_ROOT,
    SCHEMA_VERSION,
    TABLE_ORDER,
    sha256_file,
    split_sizes,
    write_dataset,
    write_table,
)
from kbench.sources.miopen import convert_finddb
from kbench.sources.miopen_rules import rules_heuristics
from kbench.sources.mituna import read_network_layers
from kbench.sources.splits import (
    assign_networks_split,
    assign_random_split,
    assign_shapes_split,
    network_geometry_match,
)
from kbench.sources.tuning_dataset import convert_perfdb

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


def spec_info(spec: DatasetSpec, censoring: str, report: dict, splits: pd.DataFrame) -> dict:
    return {
        "name": spec.name, "aliases": list(spec.aliases), "version": spec.version or DATASET_VERSION,
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
        out_dir = Path(out_root) / name
        # The collector's card needs the raw measurements (noise, runs, validation), so it is
        # rendered here and shipped beside the tables as card.md.
        # The raw folder's label verifications (labels/*.jsonl.gz), test-retest
        # re-measurements (repeats/<run>/) and PyTorch's autotune choices (autotune/, once it holds
        # records: before that it holds only the problems file a GPU call probes) are part of the
        # dataset: applied on every build.
        raw = REPO_ROOT / spec.collected
        autotune = raw / "autotune"
        repeats = sorted(p for p in (raw / "repeats").glob("*") if p.is_dir())
        align = None
        if spec.align_with:
            other = Path(out_root) / spec.align_with / "runtimes.parquet"
            if not other.exists():
                raise KbenchInputError(f"{other}: not found; build {spec.align_with} before {name} "
                                       f"(its card checks the alignment with {spec.align_with}).")
            align = (spec.align_with, pd.read_parquet(other, columns=["problem_id", "kernel", "time_ms"]))
        return package([raw], name, out_dir, mituna=Path(raw_root) / "mituna", card=out_dir / "card.md",
                       variant=spec.variant,
                       repeats=repeats or None, labels=label_files(raw) or None, version=spec.version, align=align,
                       through_run=spec.collected_through,
                       retimed=[REPO_ROOT / r for r in spec.retimed] or None,
                       autotune=autotune if record_files(autotune) else None)
    if spec.task == "tile-selection":
        return write_tiles_dataset(name.removesuffix("-tiles"), Path(out_root) / name, raw_root)
    return build_miopen_dataset(name, raw_root, out_root)


def build_tuning_dataset(name: str, raw_root: str | Path, out_root: str | Path = PACKAGE_DATA) -> dict:
    """Convert one MIOpen perf-db (tuned parameters) into ``out_root/<name>``."""

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
        "shapes": assign_shapes_split(problems),
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

"""The dataset folder format: parquet tables plus ``manifest.json`` with checksums.

``write_dataset`` is the one place that writes a kbench dataset folder; the converters
(``kbench.sources.*``, ``kbench.collect.packaging.package``) and ``kbench.data.build`` hand it their tables,
and the loader (``kbench.data.dataset``) and the Hub code read what it wrote. It sits below them
all and imports nothing of kbench but the errors and the version.
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

from kbench.core.errors import KbenchInputError
from kbench.core.version import __version__

SCHEMA_VERSION = 1
DATASET_VERSION = "1.0.0"
PACKAGE_DATA = Path(__file__).parents[1] / "datasets"
#: The checkout holding the package (raw/, data_cards/, ../shared/ beside it); in an installed wheel
#: only PACKAGE_DATA exists, and the builders that read raw data need a checkout.
REPO_ROOT = Path(__file__).resolve().parents[2]
TABLE_ORDER = ("problems", "runtimes", "kernels", "splits", "heuristics", "autotune", "references", "targets")


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
            "checksum": dataset_checksum(files),
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


def dataset_checksum(files: dict) -> str:
    """The dataset checksum: sha256 over every file's name and sha256, in name order (``files`` as in a manifest)."""
    return hashlib.sha256("".join(f"{k}:{v['sha256']}" for k, v in sorted(files.items())).encode()).hexdigest()


def split_sizes(splits: pd.DataFrame) -> dict:
    return {col: {p: int((splits[col] == p).sum()) for p in ("train", "valid", "test")}
            for col in splits.columns if col != "problem_id"}

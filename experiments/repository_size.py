"""What the tracked tree holds, by kind, and what the raw-table encoding saves on the committed raw tables.

Sums the sizes of the files ``git ls-files`` lists (those present in the checkout) by kind. Then copies
committed raw parquet tables to a temporary folder and writes each copy again in the encoding kbench
now writes raw tables in (``kbench.collect.raw_store.writer.PARQUET_ENCODING``: zstd level 19, dictionaries on
the text columns only), checking that it reads back equal (schema and metadata included): two files
in detail (sizes, write times of the old and the new encoding), and every committed raw table summed
by kind. The committed files themselves are never rewritten (docs/collect_scale_out.md says why).
docs/architecture.md ("Repository size") quotes the result.

    python experiments/repository_size.py [--tables raw/h100/plans-0028.parquet ...] [--no-all]
        # -> experiments/results/repository_size.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from kbench.collect.raw_store.writer import PARQUET_ENCODING, text_columns, write_raw_table

ROOT = Path(__file__).resolve().parents[1]

#: (kind, test on the path), first match wins; the order of docs/architecture.md's table
KINDS = [
    ("leaderboard predictions", lambda p: p.startswith("leaderboard/") and "preds" in p.rsplit("/", 1)[-1]),
    ("leaderboard site", lambda p: p.startswith("leaderboard/site/")),
    ("leaderboard records", lambda p: p.startswith("leaderboard/")),
    ("packaged datasets", lambda p: p.startswith("kbench/datasets/")),
    ("raw/h100", lambda p: p.startswith("raw/h100/")),
    ("raw/h200", lambda p: p.startswith("raw/h200/")),
    ("raw/*-pytorch-strides", lambda p: p.startswith("raw/")),
    ("bench/results", lambda p: p.startswith("bench/results/")),
    ("experiments/results", lambda p: p.startswith("experiments/results/")),
    ("tools/results", lambda p: p.startswith("tools/results/")),
    ("code, tests, docs, data cards", lambda p: True),
]


def tracked_sizes() -> dict[str, int]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    sizes = dict.fromkeys((k for k, _ in KINDS), 0)
    for rel in filter(None, listed.decode().split("\0")):
        path = ROOT / rel
        if path.is_file():
            sizes[next(k for k, test in KINDS if test(rel))] += path.stat().st_size
    return sizes


def problem_directions() -> dict[str, int]:
    """Distinct problem-directions (``key``) in the committed problems tables of each raw folder."""
    listed = subprocess.run(["git", "ls-files", "-z", "raw/"], cwd=ROOT, capture_output=True, check=True).stdout
    keys: dict[str, set] = {}
    for rel in filter(None, listed.decode().split("\0")):
        if Path(rel).name.startswith("problems-") and rel.endswith(".parquet"):
            keys.setdefault(str(Path(rel).parent), set()).update(pq.read_table(ROOT / rel, columns=["key"])["key"].to_pylist())
    return {folder: len(k) for folder, k in sorted(keys.items())}


def _encoded(src: Path, tmp: Path) -> dict:
    """``src`` copied into ``tmp`` and written again there in the raw-table encoding: sizes, read-back check."""
    copy = tmp / src.name
    shutil.copyfile(src, copy)
    table = pq.read_table(copy)
    start = time.perf_counter()
    write_raw_table(table, tmp / f"encoded-{src.name}")
    seconds = time.perf_counter() - start
    encoded = tmp / f"encoded-{src.name}"
    back = pq.read_table(encoded)
    equal = back.equals(table, check_metadata=True) and back.schema.metadata == table.schema.metadata
    out = {"rows": table.num_rows, "bytes": copy.stat().st_size, "encoded_bytes": encoded.stat().st_size,
           "reads_back_equal": bool(equal), "write_seconds": seconds}
    start = time.perf_counter()
    pq.write_table(table, tmp / f"old-{src.name}", compression="zstd")  # the encoding before (pandas' default)
    out["old_encoding_write_seconds"] = time.perf_counter() - start
    for name in (copy, encoded, tmp / f"old-{src.name}"):
        name.unlink()
    return out


def detail(rel: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        got = _encoded(ROOT / rel, Path(tmp))
    return {"file": rel, **got, "write_seconds": round(got["write_seconds"], 3),
            "old_encoding_write_seconds": round(got["old_encoding_write_seconds"], 3),
            "saved_share": round(1 - got["encoded_bytes"] / got["bytes"], 3),
            "dictionary_columns": text_columns(pq.read_schema(ROOT / rel))}


def all_raw_tables() -> dict:
    """Every committed raw table re-encoded (in a temporary folder), summed by kind (plans, problems)."""
    listed = subprocess.run(["git", "ls-files", "-z", "raw/"], cwd=ROOT, capture_output=True, check=True).stdout
    files = sorted(p for p in filter(None, listed.decode().split("\0")) if p.endswith(".parquet"))
    by_kind: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rel in files:
            got = _encoded(ROOT / rel, Path(tmp))
            kind = by_kind.setdefault(Path(rel).name.split("-", 1)[0], {
                "files": 0, "bytes": 0, "encoded_bytes": 0, "all_read_back_equal": True, "write_seconds": 0.0})
            kind["files"] += 1
            kind["bytes"] += got["bytes"]
            kind["encoded_bytes"] += got["encoded_bytes"]
            kind["all_read_back_equal"] &= got["reads_back_equal"]
            kind["write_seconds"] += got["write_seconds"]
    total = {k: sum(v[k] for v in by_kind.values()) for k in ("files", "bytes", "encoded_bytes")}
    for v in by_kind.values():
        v["write_seconds"] = round(v["write_seconds"], 1)
        v["saved_share"] = round(1 - v["encoded_bytes"] / v["bytes"], 3)
    return {"by_kind": by_kind, **total, "all_read_back_equal": all(v["all_read_back_equal"] for v in by_kind.values()),
            # re-encoding the committed files: the checkout shrinks by the difference, while history keeps
            # every old blob and gains the new ones (zstd output does not deflate further in git's packs)
            "checkout_saving_bytes": total["bytes"] - total["encoded_bytes"],
            "history_growth_bytes": total["encoded_bytes"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", nargs="+", default=["raw/h100/plans-0028.parquet", "raw/h100/problems-0028.parquet"],
                    help="committed raw tables to re-encode and report one by one")
    ap.add_argument("--no-all", action="store_true", help="skip re-encoding every committed raw table (minutes)")
    args = ap.parse_args(argv)
    sizes = tracked_sizes()
    out = {"command": "python experiments/repository_size.py", "bytes_by_kind": sizes,
           "total_bytes": sum(sizes.values()), "raw_problem_directions": problem_directions(), "raw_encoding": PARQUET_ENCODING | {"dictionary": "text columns"},
           "raw_tables": [detail(rel) for rel in args.tables]}
    if not args.no_all:
        out["all_raw_tables"] = all_raw_tables()
    path = ROOT / "experiments" / "results" / "repository_size.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

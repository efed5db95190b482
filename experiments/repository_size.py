"""What the tracked tree holds, by kind, and what lossless recompression of the raw plan tables saves.

Sums the sizes of the files ``git ls-files`` lists (those present in the checkout) by kind, and writes one
raw plan table again with zstd level 19 and dictionary encoding for its non-float columns only, checking
that it reads back equal. docs/architecture.md ("Repository size") quotes the result.

    python experiments/repository_size.py [--plans raw/h100/plans-0028.parquet]
        # -> experiments/results/repository_size.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]

#: (kind, test on the path), first match wins; the order of docs/architecture.md's table
KINDS = [
    ("leaderboard predictions", lambda p: p.startswith("leaderboard/") and "preds" in p.rsplit("/", 1)[-1]),
    ("leaderboard site", lambda p: p.startswith("leaderboard/site/")),
    ("leaderboard records", lambda p: p.startswith("leaderboard/")),
    ("packaged datasets", lambda p: p.startswith("kbench/datasets/")),
    ("raw/h100", lambda p: p.startswith("raw/h100/")),
    ("raw/h200", lambda p: p.startswith("raw/h200/")),
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


def recompressed(plans: Path) -> dict:
    table = pq.read_table(plans)
    floats = [f.name for f in table.schema if pa.types.is_floating(f.type)]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plans.parquet"
        pq.write_table(table, out, compression="zstd", compression_level=19,
                       use_dictionary=[c for c in table.column_names if c not in floats])
        assert pq.read_table(out).equals(table), "re-encoding must be lossless"
        size = out.stat().st_size
    return {"file": plans.relative_to(ROOT).as_posix(), "bytes": plans.stat().st_size, "zstd19_bytes": size,
            "saved_share": round(1 - size / plans.stat().st_size, 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plans", default="raw/h100/plans-0028.parquet", help="raw plan table to re-encode")
    args = ap.parse_args(argv)
    sizes = tracked_sizes()
    out = {"command": "python experiments/repository_size.py", "bytes_by_kind": sizes,
           "total_bytes": sum(sizes.values()), "recompressed_plans": recompressed(ROOT / args.plans)}
    path = ROOT / "experiments" / "results" / "repository_size.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

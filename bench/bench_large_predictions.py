"""Time and peak memory of `kbench evaluate` on a 200 MB predictions file (generated in /tmp, never committed).

    python bench/bench_large_predictions.py [--mb 200] [--out bench/results/large_predictions.json]

The file is the long form (problem_id,kernel,score) over every kernel of mi100's random/train part,
cut at the first problem boundary past --mb megabytes, scored with --allow-partial in a fresh
process; wall time and the peak resident memory (ru_maxrss of the child) are recorded with the
load average. Also estimates the largest legitimate predictions file per dataset (the long form
over every kernel of the biggest part), the figure the 2 GiB input limit is set against.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def largest_legitimate() -> dict:
    """Bytes of a long-form file over every kernel of each dataset's largest split part (an estimate
    from the mean id and kernel-name lengths)."""
    import kbench
    out = {}
    for name in ("mi100", "mi210", "h100"):
        ds = kbench.load(name)
        split = ds.split_names[0]
        parts = ds.split(split)
        part = max(parts, key=lambda p: len(parts[p]))
        id_len = ds.problems["problem_id"].str.len().mean()
        kernel_len = ds.kernels["kernel"].str.len().mean()
        rows = len(parts[part]) * len(ds.kernels)
        out[name] = {"split": split, "part": part, "rows": int(rows),
                     "bytes_estimate": int(rows * (id_len + kernel_len + 8))}  # 8: two commas, score, newline
    return out


def make_file(path: Path, megabytes: int) -> dict:
    import numpy as np
    import pandas as pd

    import kbench
    ds = kbench.load("mi100")
    ids = np.asarray(ds.split("random")["train"])
    kernels = ds.kernels["kernel"].to_numpy()
    rng = np.random.default_rng(0)
    target = megabytes * 1_000_000
    written = problems = 0
    with open(path, "w") as fh:
        fh.write("problem_id,kernel,score\n")
        for start in range(0, len(ids), 2000):
            chunk = ids[start:start + 2000]
            frame = pd.DataFrame({"problem_id": np.repeat(chunk, len(kernels)),
                                  "kernel": np.tile(kernels, len(chunk)),
                                  "score": rng.random(len(chunk) * len(kernels)).round(6)})
            text = frame.to_csv(index=False, header=False)
            fh.write(text)
            written += len(text)
            problems += len(chunk)
            if written >= target:
                break
    return {"bytes": path.stat().st_size, "problems": problems, "rows": problems * len(kernels)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "large_predictions.json"))
    args = parser.parse_args()
    path = Path("/tmp") / f"kbench-large-preds-{args.mb}mb.csv"
    info = make_file(path, args.mb)
    cmd = [sys.executable, "-c", "import sys; from kbench.cli import main; sys.exit(main(sys.argv[1:]))", "evaluate", str(path), "--dataset", "mi100", "--split", "random",
           "--part", "train", "--allow-partial", "--no-reference", "--quiet", "--json", "/tmp/kbench-large.json"]
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # Linux: KiB, the largest child
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return proc.returncode
    scored = json.loads(Path("/tmp/kbench-large.json").read_text())["counts"]["scored"]
    result = {"what": "kbench evaluate on a long-form predictions file (mi100 random/train, every kernel)",
              "file": info, "scored_problems": scored, "wall_s": round(wall, 2),
              "peak_rss_mib": round(peak_kib / 1024, 1), "command": " ".join(cmd),
              "load_average_before": [round(x, 2) for x in load_before],
              "load_average_after": [round(x, 2) for x in os.getloadavg()],
              "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}",
              "largest_legitimate": largest_legitimate()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    path.unlink()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

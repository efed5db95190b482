"""Time scoring the full mi100 test part: the Python API call and the whole CLI command; write JSON.

    python bench/bench_evaluate.py [--dataset mi100] [--repeats 5] [--out bench/results/evaluate.json]

The predictions rank every kernel of the vocabulary for every problem (the
longest rankings a model can submit), in a random order with a fixed seed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import machine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="mi100")
    ap.add_argument("--split", default="random")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "evaluate.json"))
    args = ap.parse_args()

    import kbench
    from kbench.scoring.evaluate import Evaluator
    ds = kbench.load(args.dataset)
    t = time.perf_counter()
    ev = Evaluator(ds, split=args.split, reference=None)
    init_s = time.perf_counter() - t
    rng = np.random.default_rng(0)
    vocab = ev.table.kernels
    preds = pd.DataFrame({"problem_id": ev.table.problem_ids,
                          "ranking": [";".join(rng.permutation(vocab)) for _ in ev.table.problem_ids]})
    api = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        ev(preds)
        api.append(time.perf_counter() - t)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "preds.csv"
        preds.to_csv(path, index=False)
        cli = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "kbench.cli", "evaluate", str(path), "--dataset", args.dataset,
                            "--split", args.split, "--no-reference", "--quiet", "--json", str(Path(tmp) / "r.json")],
                           check=True)
            cli.append(time.perf_counter() - t)

    result = {"benchmark": "evaluate", "dataset": args.dataset, "split": args.split, "part": "test",
              "problems": int(len(preds)), "kernels_per_ranking": int(len(vocab)),
              "evaluator_init_s": init_s, "api_call_s": api, "api_call_median_s": statistics.median(api),
              "cli_command_s": cli, "cli_command_median_s": statistics.median(cli), "machine": machine()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

"""Issue 19 trial: is more h100 data the lever for ``xgboost-plans-safe``?

    python experiments/h100_data_size_trial.py --seeds 0 1 2

``raw/h100`` holds more runs than the shipped h100 1.1.0 (``collected_through`` in kbench/data/registry.py).
This trial packages *every* run into a provisional dataset in a temporary folder (never shipped), takes
its ``random`` split, and fits ``xgboost-plans-safe`` twice per seed on the same valid part:

* ``1.1.0 problems``: only the train problems that h100 1.1.0 also holds (the first 15 runs);
* ``all problems``: the whole train part.

The valid part is the same for both, so the difference is what the extra training problems buy.
Scored on valid only; no test part is read. Result: ``experiments/results/h100_data_size_trial.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "experiments" / "results" / "h100_data_size_trial.json"
SHARED = ROOT.parent / "shared" / "data"


def provisional_h100(folder: Path):
    """Every run of raw/h100 packaged as a dataset (labels applied as kbench build-data does)."""
    from kbench.collect.label_retiming.apply import label_files
    from kbench.collect.packaging.package import package
    from kbench.data.dataset import read_dataset_folder
    raw = ROOT / "raw" / "h100"
    package([raw], "h100", folder / "h100", mituna=SHARED / "mituna", labels=label_files(raw) or None,
            version="provisional")
    return read_dataset_folder(folder / "h100", "h100")


def fit_score(ds, train, valid, seed: int) -> dict:
    from kbench.scoring.evaluate import Evaluator
    from kbench_baselines import get_baseline
    t0 = time.perf_counter()
    model = get_baseline("xgboost-plans-safe")
    model.progress = False
    model.fit(ds, train, valid, seed=seed)
    res = Evaluator(ds, split="random", part="valid")(model.predict(ds, valid))
    o = res.metrics["overall"]
    return {"train_problems": int(len(train)), "speedup_geomean": o["speedup_geomean"], "top1": o["top1"],
            "geomean_slowdown": o["geomean_slowdown"], "fit_and_score_s": round(time.perf_counter() - t0, 1)}


def main(seeds: list[int]) -> None:
    import kbench
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    shipped = set(kbench.load("h100").problems["problem_id"].astype(str))
    with tempfile.TemporaryDirectory() as tmp:
        ds = provisional_h100(Path(tmp))
        parts = ds.split("random")
        train_all, valid = parts["train"], parts["valid"]
        train_old = train_all[[str(p) in shipped for p in train_all]]
        runs = []
        for seed in seeds:
            for label, train in (("1.1.0 problems", train_old), ("all problems", train_all)):
                r = fit_score(ds, train, valid, seed)
                runs.append({"seed": seed, "train": label, **r})
                print(json.dumps(runs[-1]), flush=True)
        doc = {"question": __doc__.splitlines()[0], "dataset_problems": int(len(ds.problems)),
               "shipped_problems": len(shipped), "valid_problems": int(len(valid)), "runs": runs,
               "command": "python experiments/h100_data_size_trial.py --seeds " + " ".join(map(str, seeds)),
               "seconds": round(time.perf_counter() - t0, 1), "loadavg_start": round(load0, 2)}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    main(ap.parse_args().seeds)

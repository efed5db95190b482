"""Issue 45 item 1 (NVIDIA): one cuDNN-plans model over h100 and h200, with the device as descriptors.

For a variant (``pytorch``: h100-pytorch and h200-pytorch; ``default``: h100 and h200), three fits of
the same recipe (``--model``, default ``xgboost-plans-compact``; seed 0; early stopping on valid):

* **own**: trained on the device's own ``random`` train part (the board's setting);
* **pooled**: trained on both devices' train parts (early stopping on both valid parts);
* **leave-one-out**: the other device's own model, scored on this device: zero-shot, no label of it seen.

The splits are a hash of the convolution geometry, the same on both GPUs, so no test geometry of one
device is in the other's train part. Problem ids are kept apart by a device prefix. Every row of the
pooled data carries the device descriptors the collector recorded for the GPU (``raw/<gpu>/env.jsonl``,
the data card's "GPU" row): SM count, L2 bytes, memory bytes and the maximum SM and memory clocks, never
a device id, so a GPU the model never saw can be scored. Each model is scored by kbench's Evaluator on the
device's own valid and test parts (geomean slowdown; speed-up over the dataset's reference, cuDNN mode A).

    python experiments/nvidia_pooled_trial.py [--variant pytorch] [--model xgboost-plans-compact]
    # -> experiments/results/nvidia_pooled_trial_<variant>.json
    python experiments/nvidia_pooled_trial.py --tables
    # -> docs/pooled.md's tables of the registered baselines' board rows, read from the leaderboard entries
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pooled_amd_trial import board_entry  # noqa: E402  (experiments/, the script's own folder)

import kbench  # noqa: E402
from kbench.scoring.evaluate import Evaluator  # noqa: E402
from kbench_baselines import get_baseline  # noqa: E402
from tools.report import update_doc_block  # noqa: E402

DEVICES = ("h100", "h200")
BOARD_DATASETS = ("h100-pytorch", "h200-pytorch", "h100", "h200")
BOARD_METHODS = {"xgboost-plans-safe": "xgboost-plans-safe (own GPU)", "xgboost-plans-pooled": "xgboost-plans-pooled",
                 "xgboost-plans-pooled-lodo": "xgboost-plans-pooled-lodo (GPU left out)"}
TABLES_START, TABLES_END = "<!-- pooled-nvidia:start -->", "<!-- pooled-nvidia:end -->"
DESCRIPTORS = {"sm_count": "sm_count", "l2_bytes": "l2_bytes", "gpu_memory_bytes": "gpu_memory_bytes",
               "clock_max_sm_mhz": "smi_clocks_max_sm", "clock_max_mem_mhz": "smi_clocks_max_mem"}
SEP = "|"


def descriptors(gpu: str) -> dict[str, float]:
    """The device descriptors of the collector's last recorded run on this GPU."""
    lines = (ROOT / "raw" / gpu / "env.jsonl").read_text().splitlines()
    env = json.loads(lines[-1])
    env = env.get("env", env)
    return {name: float(env[key]) for name, key in DESCRIPTORS.items()}


def pooled(datasets: dict, devices: dict) -> SimpleNamespace:
    """One dataset-like object over several devices: ids ``<device>|<problem id>``, device columns added."""
    def tag(frame: pd.DataFrame, gpu: str) -> pd.DataFrame:
        return frame.assign(problem_id=gpu + SEP + frame["problem_id"].astype(str))
    problems = pd.concat([tag(ds.problems, g).assign(**devices[g]) for g, ds in datasets.items()], ignore_index=True)
    first = next(iter(datasets.values()))
    return SimpleNamespace(name="+".join(datasets), info=first.info, problems=problems,
                           heuristics=pd.concat([tag(ds.heuristics, g) for g, ds in datasets.items()], ignore_index=True),
                           runtimes=pd.concat([tag(ds.runtimes, g) for g, ds in datasets.items()], ignore_index=True))


def with_device_columns(model):
    """The model, its row features extended with the device columns of each row's problem."""
    base = model._matrix

    def matrix(dataset, problems, rows):
        model.columns = [c for c in model.columns if c not in DESCRIPTORS]  # the recipe's own columns
        x = base(dataset, problems, rows)
        model.columns = model.columns + list(DESCRIPTORS)
        return np.hstack([x, problems[list(DESCRIPTORS)].to_numpy(np.float32)[rows["pos"].to_numpy()]])
    model._matrix = matrix
    return model


def score(model, data, gpu: str, ds, part: str) -> dict:
    ids = [gpu + SEP + p for p in ds.split("random")[part]]
    preds = model.predict(data, ids)
    preds["problem_id"] = preds["problem_id"].str.split(SEP, n=1).str[1]
    o = Evaluator(ds, "random", part=part)(preds).overall
    return {"geomean_slowdown": o["geomean_slowdown"], "speedup_geomean": o["speedup_geomean"], "top1": o["top1"]}


def _entry_cell(rec: dict | None) -> str:
    """'geomean slowdown ± std / speed-up over mode B (seeds)' of a leaderboard entry, or '–'."""
    if rec is None:
        return "–"
    seeds = rec["seeds"]
    over_b = rec["metrics"]["overall"]["references"]["cudnn_mode_b"]["speedup_geomean"]
    return (f"{seeds['mean']['geomean_slowdown']:.4f} ± {seeds['std']['geomean_slowdown']:.4f} / "
            f"{over_b:.3f}x ({len(seeds['seeds'])})")


def board_tables() -> str:
    """Markdown tables of the pooled baselines' rows on the NVIDIA boards, beside the per-GPU best recipe
    and cuDNN's two heuristics (numbers only from the leaderboard entries)."""
    out = []
    for split in ("random", "networks"):
        out += [f"#### cuDNN plans, split `{split}`, test part (geomean slowdown ± std over seeds / speed-up "
                "over cuDNN mode B, TensorFlow's default; seeds in brackets; the two cuDNN columns are the "
                "heuristics' own geomean slowdown)", "",
                "| dataset | " + " | ".join(BOARD_METHODS.values()) + " | cuDNN mode A | cuDNN mode B |",
                "|---|" + "---|" * (len(BOARD_METHODS) + 2)]
        for name in BOARD_DATASETS:
            recs = {m: board_entry(name, split, m) for m in BOARD_METHODS}
            refs = next((r["metrics"]["overall"]["references"] for r in recs.values() if r), None)
            ref_cells = [f"{refs[k]['best_of_1']:.4f}" if refs else "–" for k in ("cudnn_mode_a", "cudnn_mode_b")]
            out.append(f"| {name} | " + " | ".join([_entry_cell(r) for r in recs.values()] + ref_cells) + " |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", default="pytorch", choices=("pytorch", "default"))
    ap.add_argument("--model", default="xgboost-plans-compact")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tables", action="store_true", help="write docs/pooled.md's board tables and exit")
    a = ap.parse_args()
    if a.tables:
        update_doc_block(ROOT / "docs" / "pooled.md", TABLES_START, TABLES_END, board_tables() + "\n")
        return 0
    names = {g: (f"{g}-pytorch" if a.variant == "pytorch" else g) for g in DEVICES}
    datasets = {g: kbench.load(n) for g, n in names.items()}
    devices = {g: descriptors(g) for g in DEVICES}
    data = pooled(datasets, devices)
    part_ids = {g: {p: [g + SEP + i for i in ds.split("random")[p]] for p in ("train", "valid")}
                for g, ds in datasets.items()}
    models, fit_s = {}, {}
    for key, gpus in [("own-h100", ["h100"]), ("own-h200", ["h200"]), ("pooled", list(DEVICES))]:
        t0 = time.perf_counter()
        model = with_device_columns(get_baseline(a.model))
        models[key] = model.fit(data, sum((part_ids[g]["train"] for g in gpus), []),
                                sum((part_ids[g]["valid"] for g in gpus), []), seed=a.seed)
        fit_s[key] = round(time.perf_counter() - t0, 1)
        print(f"fitted {key} in {fit_s[key]} s", flush=True)
    rows = {}
    for g, ds in datasets.items():
        other = next(d for d in DEVICES if d != g)
        for row, key in (("own", f"own-{g}"), ("pooled", "pooled"), ("leave-one-out", f"own-{other}")):
            rows[f"{names[g]}/{row}"] = {part: score(models[key], data, g, ds, part) for part in ("valid", "test")}
            r = rows[f"{names[g]}/{row}"]
            print(f"{names[g]} {row}: valid {r['valid']['geomean_slowdown']:.4f}, test {r['test']['geomean_slowdown']:.4f} "
                  f"({r['test']['speedup_geomean']:.4f}x over mode A)", flush=True)
    out = ROOT / f"experiments/results/nvidia_pooled_trial_{a.variant}.json"
    out.write_text(json.dumps({"variant": a.variant, "model": a.model, "seed": a.seed, "devices": devices,
                               "fit_s": fit_s, "rows": rows}, indent=1) + "\n")
    print(f"-> {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

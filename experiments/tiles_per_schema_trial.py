"""Valid-only trial (issue 5): one forest per kernel schema (the paper's setup) vs one joint forest.

    python experiments/tiles_per_schema_trial.py       # writes experiments/results/tiles_per_schema_trial.json

The PACT 2022 artifact trains a separate random forest per kernel schema (``RS3_buildML``,
``S3_buildML``, ``St2_buildML``: one training file each); ``hybrid-rf`` trains one forest on every
schema with a schema one-hot. Both are fitted here on the ``networks`` train part with the
hyper-parameters ``hybrid-rf`` selects on valid for the seed (same target, leaf size, 100 trees,
same random state), and scored on the ``valid`` part only: the mean over valid problems of
LoP@1/5/10/30, overall and per schema. A valid problem lists one schema, so this measures the
ranking inside a schema; the test layers are never read. A schema with no training rows (none on
either GPU) would have no per-schema forest.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import kbench  # noqa: E402
from kbench.scoring.metrics import build_scoring_table  # noqa: E402
from kbench_baselines import get_baseline  # noqa: E402
from kbench_baselines.hybrid_rf import SELECT_LOP_AT, TreeEnsemble, gpu_spec_of, problem_flops, selection_score  # noqa: E402

DATASETS = ("v100-tiles", "rtx2080ti-tiles")
SEEDS = (0, 1, 2, 3, 4)
OUT = ROOT / "experiments" / "results" / "tiles_per_schema_trial.json"


def trial(name: str, seed: int) -> dict:
    ds = kbench.load(name)
    sp = ds.split("networks")
    t0 = time.perf_counter()
    model = get_baseline("hybrid-rf").fit(ds, sp["train"], sp["valid"], seed=seed)
    joint_s = time.perf_counter() - t0
    cfg = model.fit_info["chosen"]
    spec = gpu_spec_of(ds)
    ptr, rtr, Xtr, _ = model._tile_part(ds, sp["train"], spec, with_time=True)
    y = model._targets(rtr["time_ms"].to_numpy(dtype=np.float64), problem_flops(ptr)[rtr["pos"].to_numpy()],
                       rtr["pos"].to_numpy())[cfg["target"]]
    pva, rva, Xva, _ = model._tile_part(ds, sp["valid"], spec, with_time=False)
    table = build_scoring_table(pva, ds.runtimes, ds.kernels, ds.problems)
    vk = pd.Index(table.kernels).get_indexer(rva["kernel"])
    keep = vk >= 0
    vp, vk, rv, Xv = rva["pos"].to_numpy()[keep], vk[keep], rva[keep].reset_index(drop=True), Xva[keep]
    joint = model.forest.predict(Xv)
    per = np.full(len(rv), np.nan)
    t0 = time.perf_counter()
    sch_tr, sch_va = rtr["schema"].astype(str).to_numpy(), rv["schema"].astype(str).to_numpy()
    for s in np.unique(sch_va):
        m = sch_tr == s
        rf = model._forest(model.cfg["n_trees"], cfg, seed).fit(Xtr[m], y[m])
        per[sch_va == s] = TreeEnsemble.from_sklearn(rf).predict(Xv[sch_va == s])
    per_s = time.perf_counter() - t0
    out = {"seed": seed, "chosen": cfg, "joint_fit_s": joint_s, "per_schema_fit_s": per_s,
           "train_rows": {s: int((sch_tr == s).sum()) for s in np.unique(sch_tr)},
           "valid_problems": {s: int(len(np.unique(vp[sch_va == s]))) for s in np.unique(sch_va)}}
    for label, score in (("joint", joint), ("per_schema", per)):
        out[label] = {"all": selection_score(table, vp, vk, score)}
        for s in np.unique(sch_va):
            m = sch_va == s
            sub = np.unique(vp[m])
            tsub = build_scoring_table(pva.iloc[sub].reset_index(drop=True), ds.runtimes, ds.kernels, ds.problems)
            remap = np.full(len(pva), -1)
            remap[sub] = np.arange(len(sub))
            kk = pd.Index(tsub.kernels).get_indexer(rv["kernel"][m])
            out[label][s] = selection_score(tsub, remap[vp[m]], kk, score[m])
    return out


def main() -> None:
    res = {"note": __doc__.split("\n\n")[1], "datasets": {}}
    for name in DATASETS:
        runs = []
        for seed in SEEDS:
            r = trial(name, seed)
            runs.append(r)
            print(name, seed, {k: round(r[k]["all"]["criterion"], 5) for k in ("joint", "per_schema")}, flush=True)
        summ = {}
        for label in ("joint", "per_schema"):
            for part in runs[0][label]:
                for n in SELECT_LOP_AT:
                    v = [r[label][part][f"lop_at_{n}"] for r in runs]
                    summ.setdefault(label, {}).setdefault(part, {})[f"lop_at_{n}"] = {
                        "mean": float(np.mean(v)), "std": float(np.std(v, ddof=1))}
        res["datasets"][name] = {"seeds": runs, "summary": summ}
    OUT.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

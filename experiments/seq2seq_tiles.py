"""seq2seq + constrained beam search as a kernel selector on v100-tiles (issue 7).

A tile configuration is the sequence ``schema, tile_k, tile_h, tile_w,
warp_k, warp_h, warp_w, block_k, block_h, block_w, c_split``; the beam
search only extends prefixes of configurations measured for the problem.
Scored with the kernel-selection Evaluator (top-1, LoP) on the split's test
part. Writes ``results/seq2seq-tiles/<split>/seed-<k>/{result.json,preds.csv.gz}``
(git-ignored: the leaderboard's entry layout for selection datasets wants a
``meta.json`` and >= 5 seeds, see kbench.leaderboard).

    python experiments/seq2seq_tiles.py [--split networks] [--seed 0] [--beam-width 10]
    python experiments/seq2seq_tiles.py --compare single-best,xgboost,ml-rf   # reference selectors
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="v100-tiles")
    ap.add_argument("--split", default="networks")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--beam-width", type=int, default=10)
    ap.add_argument("--max-epochs", type=int, default=None)
    ap.add_argument("--out", default=str(ROOT / "results" / "seq2seq-tiles"))
    ap.add_argument("--compare", default="",
                    help="comma-separated selection baselines to fit (same seed) and score on the same test part")
    a = ap.parse_args(argv)
    if a.compare:
        return compare(a)

    import kbench
    from kbench.leaderboard.store import atomic_write_bytes, atomic_write_text, predictions_csv_gz
    from kbench.scoring.evaluate import Evaluator
    from kbench_baselines.seq2seq import Seq2SeqTiles

    ds = kbench.load(a.dataset)
    sp = ds.split(a.split)
    params = {"beam_width": a.beam_width}
    if a.max_epochs:
        params["max_epochs"] = a.max_epochs
    model = Seq2SeqTiles(**params)
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(ds, sp["train"], sp["valid"], seed=a.seed)
    fit_wall, fit_cpu = time.perf_counter() - t0, time.process_time() - c0
    folder = Path(a.out) / a.split / f"seed-{a.seed}"
    folder.mkdir(parents=True, exist_ok=True)
    model.save(folder / "model")
    out = {}
    for part in ("valid", "test"):
        preds = model.predict(ds, sp[part])
        ev = Evaluator(ds, split=a.split, part=part)
        rec = ev(preds, method="seq2seq-tiles")
        out[part] = rec
        o = rec.metrics["overall"]
        print(f"{part}: n={rec.counts.scored} top1 {o['top1']:.4f} lop_mean {o['lop_mean']:.4f} "
              f"lop_median {o['lop_median']:.4f} geomean_slowdown {o['geomean_slowdown']:.4f} "
              f"lop_at_10 {o['lop_at_10']:.4f}", flush=True)
        if part == "test":
            gz = predictions_csv_gz(preds)
            atomic_write_bytes(folder / "preds.csv.gz", gz)
    rec = out["test"]
    rec.predictions.path = "preds.csv.gz"
    rec.extra = {"seed": a.seed, "fit_time_s": fit_wall, "fit_cpu_s": fit_cpu,
                 "fit_info": {k: v for k, v in model.fit_info.items() if k != "history"},
                 "valid": out["valid"].metrics["overall"], "beam_width": a.beam_width}
    atomic_write_text(folder / "result.json", rec.model_dump_json(indent=2) + "\n")
    print(json.dumps({"fit_wall_s": fit_wall, "fit_cpu_s": fit_cpu, "best_epoch": model.fit_info["best_epoch"],
                      "epochs_run": model.fit_info["epochs_run"]}))


def compare(a):
    import kbench
    from kbench.scoring.evaluate import Evaluator
    from kbench_baselines import get_baseline

    ds = kbench.load(a.dataset)
    sp = ds.split(a.split)
    ev = Evaluator(ds, split=a.split, part="test")
    for name in a.compare.split(","):
        t0 = time.perf_counter()
        model = get_baseline(name).fit(ds, sp["train"], sp["valid"], seed=a.seed)
        o = ev(model.predict(ds, sp["test"]), method=name).metrics["overall"]
        print(f"{name}: n={o['n']} top1 {o['top1']:.4f} lop_mean {o['lop_mean']:.4f} lop_median "
              f"{o['lop_median']:.4f} geomean_slowdown {o['geomean_slowdown']:.4f} lop_at_10 {o['lop_at_10']:.4f} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()

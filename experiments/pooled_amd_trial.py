"""Pooled AMD model: the mi100 push (chosen on valid), the learning curve, the tables of the boards' rows.

    python experiments/pooled_amd_trial.py push     # valid only: xgboost, xgboost-pooled, their blends
    python experiments/pooled_amd_trial.py final    # the choice made on valid, scored once on test
    python experiments/pooled_amd_trial.py curve    # mi100 learning curve, 5/10/30/100 % of train, 3 seeds
    python experiments/pooled_amd_trial.py devices  # the pooled model on every AMD GPU's test part
    python experiments/pooled_amd_trial.py tables   # the tables of docs/pooled.md, from the JSON files and
                                                    # the leaderboard entries (pooled, leave-one-device-out)

Each but ``tables`` writes ``experiments/results/pooled_amd_<mode>.json``. Pooled fits are cached (``$KBENCH_CACHE``,
see ``baselines/pooled.py``), so a seed trained by ``kbench run --baselines xgboost-pooled`` is reused.

``push``: both models are fitted on mi100 random's train part (the pooled one on every AMD GPU's
train part) and scored on mi100's valid part; the blend's score is w * p_pooled + (1 - w) * p_xgboost
over the class kernels, w chosen on valid by geomean slowdown (then top-1). ``final`` reads the
chosen setting from ``pooled_amd_push.json`` and scores it on test, the only time test is read.

``curve``: the same fraction of every GPU's train part (the pooled model's rows scale together),
drawn per seed; valid parts kept whole for early stopping; scored on mi100's test part.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from learning_curve import train_share  # noqa: E402  (experiments/, the script's own folder)

import kbench  # noqa: E402
from kbench.leaderboard.store import entry_dir  # noqa: E402
from kbench.scoring.evaluate import Evaluator  # noqa: E402
from kbench_baselines import get_baseline  # noqa: E402
from kbench_baselines.base import predictions_frame, problems_of, rank_by_scores  # noqa: E402
from tools.report import update_doc_block  # noqa: E402

RESULTS = ROOT / "experiments" / "results"
AMD = ("mi100", "mi50", "mi210", "mi250x", "mi300x", "gfx1030")
KEYS = ("top1", "geomean_slowdown", "within5", "speedup_geomean")
WEIGHTS = (0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 1.0)


def _metrics(result) -> dict:
    o = result.metrics["overall"] if hasattr(result, "metrics") else result
    return {k: float(o[k]) for k in KEYS}


def _write(name: str, payload: dict) -> None:
    payload = {"machine": {"cpu_count": os.cpu_count(), "loadavg_1min": os.getloadavg()[0]}, **payload}
    (RESULTS / f"pooled_amd_{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote experiments/results/pooled_amd_{name}.json")


def _blend(ds, problems, xgb_model, pooled_model, w: float) -> pd.DataFrame:
    """Rankings from w * p_pooled + (1 - w) * p_xgboost (kernels no booster scores keep the prior order)."""
    sx, sp = xgb_model.scores(ds, problems), pooled_model.scores(ds, problems)
    px, pp = np.where(sx >= 2.0, sx - 2.0, 0.0), np.where(sp >= 2.0, sp - 2.0, 0.0)
    scored = (sx >= 2.0) | (sp >= 2.0)
    prior = np.where(sx >= 2.0, 1.0, sx) / 2.0  # in (0, 1): the prior order as a tie-break
    score = np.where(scored, 2.0 + w * pp + (1 - w) * px, prior)
    allowed = xgb_model.space.allowed(problems)
    return predictions_frame(problems["problem_id"], rank_by_scores(score, xgb_model.space.names, allowed))


def _fit_pair(ds, parts, seed: int):
    t0 = time.perf_counter()
    xg = get_baseline("xgboost").fit(ds, parts["train"], parts["valid"], seed=seed)
    t1 = time.perf_counter()
    po = get_baseline("xgboost-pooled").fit(ds, parts["train"], parts["valid"], seed=seed)
    t2 = time.perf_counter()
    return xg, po, {"xgboost_fit_s": round(t1 - t0, 1), "pooled_fit_s": round(t2 - t1, 1),
                    "pooled_fit_info": po.fit_info}


def push(seeds) -> None:
    ds = kbench.load("mi100")
    parts = ds.split("random")
    ev = Evaluator(ds, "random", part="valid", reference="default")
    pv = problems_of(ds, parts["valid"])
    rows, fits = [], []
    for seed in seeds:
        xg, po, info = _fit_pair(ds, parts, seed)
        fits.append({"seed": seed, **info})
        for w in WEIGHTS:
            rows.append({"seed": seed, "w_pooled": w, **_metrics(ev(_blend(ds, pv, xg, po, w)))})
            print(json.dumps(rows[-1]), flush=True)
    table = pd.DataFrame(rows).groupby("w_pooled")[list(KEYS)].mean().reset_index()
    best = table.sort_values(["geomean_slowdown", "top1"], ascending=[True, False]).iloc[0]
    _write("push", {"dataset": "mi100", "split": "random", "part": "valid", "seeds": list(seeds),
                    "weights": list(WEIGHTS), "rows": rows, "mean_by_weight": table.to_dict("records"),
                    "chosen": {"w_pooled": float(best["w_pooled"]), **{k: float(best[k]) for k in KEYS}},
                    "fits": fits,
                    "note": "w_pooled 1 is xgboost-pooled alone, 0 the per-device xgboost; chosen by valid "
                            "geomean slowdown, then top-1"})


def final(seeds, splits=("random", "networks")) -> None:
    chosen = json.loads((RESULTS / "pooled_amd_push.json").read_text())["chosen"]["w_pooled"]
    ds = kbench.load("mi100")
    out = {}
    for split in splits:
        parts = ds.split(split)
        ev = Evaluator(ds, split, part="test", reference="default")
        pt = problems_of(ds, parts["test"])
        per_seed = []
        for seed in seeds:
            xg, po, _ = _fit_pair(ds, parts, seed)
            per_seed.append({"seed": seed, **_metrics(ev(_blend(ds, pt, xg, po, chosen)))})
            print(split, json.dumps(per_seed[-1]), flush=True)
        out[split] = {"per_seed": per_seed, "mean": pd.DataFrame(per_seed)[list(KEYS)].mean().to_dict()}
    _write("final", {"dataset": "mi100", "part": "test", "w_pooled": chosen, "seeds": list(seeds), **out,
                     "aim": {"top1": 0.91, "geomean_slowdown": 1.012}})


def curve(seeds, fractions=(0.05, 0.1, 0.3, 1.0), model: str = "xgboost-pooled") -> None:
    ds = kbench.load("mi100")
    parts = ds.split("random")
    ev = Evaluator(ds, "random", part="test", reference="default")
    train = pd.Index(parts["train"])
    rows = []
    for fraction in fractions:
        for seed in seeds:
            ids = train_share(train, fraction, seed)
            t0 = time.perf_counter()
            m = get_baseline(model).fit(ds, ids, parts["valid"], seed=seed)
            fit_s = time.perf_counter() - t0
            rows.append({"fraction": fraction, "seed": seed, "mi100_train_problems": int(len(ids)),
                         "train_rows": m.fit_info.get("train_rows"), "fit_s": round(fit_s, 1),
                         **_metrics(ev(m.predict(ds, parts["test"])))})
            print(json.dumps(rows[-1]), flush=True)
    table = pd.DataFrame(rows).groupby("fraction")[["top1", "geomean_slowdown"]].agg(["mean", "std"])
    table.columns = [f"{a}_{b}" for a, b in table.columns]
    _write(f"curve{'' if model == 'xgboost-pooled' else '_' + model}",
           {"dataset": "mi100", "split": "random", "part": "test", "model": model, "seeds": list(seeds),
            "rows": rows, "summary": table.reset_index().to_dict("records")})


def board_entry(name: str, split: str, method: str) -> dict | None:
    """The leaderboard entry's record, or None where the board has none (docs/pooled.md's NVIDIA tables,
    experiments/nvidia_pooled_trial.py, read it too)."""
    path = entry_dir(ROOT / "leaderboard", name, split, method) / "result.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _board(name: str, split: str, method: str) -> dict | None:
    """The leaderboard entry's mean figures (for the old -> new comparison), or None."""
    rec = board_entry(name, split, method)
    if rec is None:
        return None
    return {"seeds": len(rec["seeds"]["seeds"]), **{k: float(rec["metrics"]["overall"][k]) for k in KEYS}}


def devices(seeds, names=AMD, splits=("random",)) -> None:
    rows = []
    for split in splits:
        for name in names:
            ds = kbench.load(name)
            parts = ds.split(split)
            evs = {p: Evaluator(ds, split, part=p, reference="default") for p in ("valid", "test")}
            for seed in seeds:
                t0 = time.perf_counter()
                m = get_baseline("xgboost-pooled").fit(ds, parts["train"], parts["valid"], seed=seed)
                # a model loaded from the pooled cache: the seconds its training took, not the load
                fit_s = m.fit_info.get("cached_training_time_s", time.perf_counter() - t0)
                row = {"device": name, "split": split, "seed": seed, "fit_s": round(fit_s, 1),
                       "fit_info": m.fit_info}
                for p, ev in evs.items():
                    row[p] = _metrics(ev(m.predict(ds, parts[p])))
                row["board_xgboost"] = _board(name, split, "xgboost")
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "fit_info"}), flush=True)
                _write("devices", {"seeds": list(seeds), "rows": rows,
                                   "note": "valid and test of each device's own split; board_xgboost is the "
                                           "per-device xgboost entry of the leaderboard (5 seeds)"})


def _read(name: str) -> dict | None:
    path = RESULTS / f"pooled_amd_{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _fmt(m: dict | None) -> str:
    return "–" if not m else f"{100 * m['top1']:.2f}% / {m['geomean_slowdown']:.4f}"


def _board_cell(name: str, split: str, method: str) -> str:
    """'top-1 ± std / geomean slowdown (seeds)' of a leaderboard entry, or '–' if it has none."""
    rec = board_entry(name, split, method)
    if rec is None:
        return "–"
    seeds = rec["seeds"]
    mean, std, n = seeds["mean"], seeds["std"], len(seeds["seeds"])
    spread = n > 1 and std["top1"] > 0  # deterministic methods (rules, nearest-neighbour) have none
    return (f"{100 * mean['top1']:.2f}% ± {100 * std['top1']:.2f} / {mean['geomean_slowdown']:.4f}"
            if spread else _fmt(mean)) + f" ({n})"


def tables() -> str:
    """Markdown tables of every result file present (numbers only from the JSON files and the boards)."""
    out = []
    board_methods = ("xgboost", "xgboost-pooled", "xgboost-pooled-lodo", "nearest-neighbour", "rules")
    for split in ("random", "networks"):
        out += [f"#### Pooled AMD model, split `{split}`, test part (top-1 ± std over seeds / geomean "
                "slowdown, from the leaderboard entries; seeds in brackets)", "",
                "| device | xgboost (own GPU) | xgboost-pooled | xgboost-pooled-lodo (GPU left out) | "
                "nearest-neighbour | MIOpen rules |", "|---|---|---|---|---|---|"]
        for name in AMD:
            out.append(f"| {name} | " + " | ".join(_board_cell(name, split, m) for m in board_methods) + " |")
        out.append("")
    dev = _read("devices")
    push_r = _read("push")
    if push_r:
        out += ["#### mi100 push, valid part (mean over seeds " + ", ".join(map(str, push_r["seeds"])) + ")", "",
                "| w_pooled | top-1 | geomean slowdown | within 5% |", "|---|---|---|---|"]
        for r in push_r["mean_by_weight"]:
            out.append(f"| {r['w_pooled']:.1f} | {100 * r['top1']:.2f}% | {r['geomean_slowdown']:.4f} | "
                       f"{100 * r['within5']:.2f}% |")
        out += ["", f"Chosen on valid: w_pooled = {push_r['chosen']['w_pooled']:.1f}.", ""]
    fin = _read("final")
    if fin:
        out += ["#### mi100, the choice made on valid, test part (read once)", "",
                "| split | seeds | top-1 | geomean slowdown | speed-up over reference |", "|---|---|---|---|---|"]
        for split in ("random", "networks"):
            if split in fin:
                m = fin[split]["mean"]
                out.append(f"| {split} | {len(fin[split]['per_seed'])} | {100 * m['top1']:.2f}% | "
                           f"{m['geomean_slowdown']:.4f} | {m['speedup_geomean']:.4f} |")
        out.append("")
    for cur in (_read("curve_xgboost"), _read("curve")):
        if not cur:
            continue
        full = [r for r in (dev or {}).get("rows", []) if r["device"] == "mi100" and r["split"] == "random"
                and cur["model"] == "xgboost-pooled"]
        rows = cur["rows"] + [{"fraction": 1.0, "seed": r["seed"], "mi100_train_problems": r["fit_info"]["devices"]
                               ["mi100"][0], "train_rows": r["fit_info"].get("train_rows"), **r["test"]} for r in full
                              if not any(c["fraction"] == 1.0 for c in cur["rows"])]
        pooled_rows = cur["model"] == "xgboost-pooled"
        out += [f"#### Learning curve, mi100 `random` test, `{cur['model']}` (mean ± std over seeds)", "",
                "| share of train | mi100 train problems |" + (" pooled train rows |" if pooled_rows else "")
                + " seeds | top-1 | geomean slowdown |", "|---|---|" + ("---|" if pooled_rows else "") + "---|---|---|"]
        for fraction, g in pd.DataFrame(rows).groupby("fraction"):
            spread = len(g) > 1
            out.append(f"| {100 * fraction:g}% | {int(g['mi100_train_problems'].iloc[0]):,} | "
                       + (f"{int(g['train_rows'].iloc[0]):,} | " if pooled_rows else "")
                       + f"{len(g)} | {100 * g['top1'].mean():.2f}%"
                       + (f" ± {100 * g['top1'].std(ddof=1):.2f}" if spread else "") + " | "
                       + f"{g['geomean_slowdown'].mean():.4f}"
                       + (f" ± {g['geomean_slowdown'].std(ddof=1):.4f}" if spread else "") + " |")
        out.append("")
    comp = ROOT / "bench" / "results" / "compact_selector_mi100.json"
    if comp.is_file():
        c = json.loads(comp.read_text())
        b = c["best_entry"]
        out += ["#### Deployable selector, mi100 `random` test", "",
                "| model | size | p50 latency, batch 1, one core | top-1 | geomean slowdown | speed-up | kept gain |",
                "|---|---|---|---|---|---|---|",
                f"| {c['model']} via kbench.selector | {c['size_bytes'] / 1e6:.2f} MB | {c['latency_ms_p50']:.3f} ms | "
                f"{100 * c['top1']:.2f}% | {c['geomean_slowdown']:.4f} | {c['speedup_geomean']:.4f} | "
                f"{100 * c['kept_gain']:.1f}% |",
                f"| {b['method']} (best board entry) | {(b['model_size_bytes'] or 0) / 1e6:.2f} MB | "
                f"{b['inference_latency_ms'] or float('nan'):.3f} ms (runner, pandas features) | {100 * b['top1']:.2f}% | "
                f"{b['geomean_slowdown']:.4f} | {b['speedup_geomean']:.4f} | 100% |", ""]
    return "\n".join(out)


def write_tables(doc: Path = ROOT / "docs" / "pooled.md") -> None:
    update_doc_block(doc, "<!-- pooled:start -->", "<!-- pooled:end -->", tables() + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("push", "final", "curve", "devices", "tables"))
    ap.add_argument("--splits", nargs="+", default=["random"])
    ap.add_argument("--seeds", nargs="+", type=int, default=None)
    ap.add_argument("--devices", nargs="+", default=list(AMD))
    ap.add_argument("--fractions", nargs="+", type=float, default=[0.05, 0.1, 0.3, 1.0])
    ap.add_argument("--model", default="xgboost-pooled")
    a = ap.parse_args()
    if a.mode == "push":
        push(a.seeds or [0])
    elif a.mode == "final":
        final(a.seeds or [0], tuple(a.splits))
    elif a.mode == "curve":
        curve(a.seeds or [0, 1, 2], tuple(a.fractions), a.model)
    elif a.mode == "tables":
        write_tables()
    else:
        devices(a.seeds or [0], a.devices, tuple(a.splits))


if __name__ == "__main__":
    main()

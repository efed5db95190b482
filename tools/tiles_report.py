"""The tile-size report: LoP@n per benchmark layer, speed-up over cuDNN, from the records.

Every number comes from the leaderboard records (``result.json``: 5-seed means and
standard deviations, training time) and the seed-0 predictions next to them
(``preds.csv.gz``), re-scored here with the kbench scorer::

    python tools/tiles_report.py                       # print the Markdown report
    python tools/tiles_report.py --out tools/results/tiles_report.md
    python tools/tiles_report.py publish               # copy finished runs from results/ into leaderboard/

How the records are made (each takes minutes of CPU; a re-run resumes)::

    kbench run --dataset v100-tiles --split networks --baselines hybrid-rf ml-rf analytical --seeds 0 1 2 3 4
    kbench run --dataset rtx2080ti-tiles --split networks --baselines hybrid-rf ml-rf analytical --seeds 0 1 2 3 4
    kbench run --dataset mi100 --split random --baselines hybrid-rf --seeds 0 1 2 3 4
    python tools/tiles_report.py publish

``publish`` writes ``leaderboard/<dataset>/<split>/<method>/{result.json, meta.json,
preds.csv.gz}`` with :func:`kbench.leaderboard.store.write_entry` after the
leaderboard's own record checks; it does not rebuild the leaderboard site
(``kbench leaderboard build`` does that).

The tile baselines rank with ``cross_schema="interleave"`` (each kernel schema's candidates in
predicted order, the schemas taking turns; ``baselines/hybrid_rf.py``); the side-by-side table of
both orderings comes from ``experiments/results/tiles_cross_schema.json``
(``python experiments/tiles_cross_schema.py``).

Per layer: LoP@n = (best time among the first n candidates of the ranking - best
time of the layer) / best time of the layer; "layers at 0" counts the layers whose
LoP@n is exactly 0 (the layer's fastest configuration is among the first n). The
speed-up over cuDNN is t_cuDNN / t_chosen with t_cuDNN the layer's
``cudnn8.2_best_no_fft_winograd`` reference (best cuDNN 8.2 legacy algorithm without
FFT and Winograd) and t_chosen the time of the first configuration of the ranking
(top-1), or of the best of the first 30 (as when the top 30 are benchmarked).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TILE_DATASETS = ("v100-tiles", "rtx2080ti-tiles")
TILE_METHODS = ("hybrid-rf", "ml-rf", "analytical")
SPLIT = "networks"
REFERENCE = "cudnn8.2_best_no_fft_winograd"
LOP_AT = (1, 5, 10, 30)
EXTRA_ENTRIES = (("mi100", "random", "hybrid-rf"),)
CROSS_SCHEMA_JSON = ROOT / "bench" / "results" / "tiles_cross_schema.json"


def layer_scores(dataset, preds: pd.DataFrame, split: str = SPLIT) -> pd.DataFrame:
    """Per test problem: network, layer, LoP@n, chosen configuration and times, speed-up over cuDNN."""
    from kbench.scoring.evaluate import Evaluator
    ev = Evaluator(dataset, split, "test", reference=None)
    ch = ev.choices(preds)
    tb = ev.table.t_best
    p = dataset.problems.set_index("problem_id").loc[ev.table.problem_ids]
    out = pd.DataFrame({"problem_id": ev.table.problem_ids,
                        "network": p["network"].to_numpy() if "network" in p else "",
                        "layer": p["layer"].to_numpy() if "layer" in p else ev.table.problem_ids})
    for n in LOP_AT:
        out[f"lop@{n}"] = (ch.best_at[n] - tb) / tb
    out["choice"] = np.where(ch.choice_kernel >= 0, ev.table.kernels[np.maximum(ch.choice_kernel, 0)], "")
    out["t_choice_ms"], out["t_best_ms"], out["t_best30_ms"] = ch.t_choice, tb, ch.best_at[30]
    out["best"] = ev.table.kernels[np.nanargmin(ev.table.times, axis=1)]
    blocks = _n_blocks(dataset, out)
    out["blocks_choice"], out["blocks_best"] = blocks["choice"], blocks["best"]
    refs = dataset.tables.get("references")
    if refs is not None:
        r = refs[refs["reference"] == REFERENCE].set_index("problem_id")["time_ms"]
        out["t_cudnn_ms"] = out["problem_id"].map(r).to_numpy(dtype=np.float64)
        out["speedup_top1"] = out["t_cudnn_ms"] / out["t_choice_ms"]
        out["speedup_best30"] = out["t_cudnn_ms"] / out["t_best30_ms"]
        out["speedup_oracle"] = out["t_cudnn_ms"] / out["t_best_ms"]
    return out.sort_values(["network", "layer"], key=_layer_key).reset_index(drop=True)


def schema_scores(dataset, preds: pd.DataFrame, split: str = SPLIT) -> pd.DataFrame:
    """LoP@n of each layer's ranking restricted to one kernel schema, against that schema's fastest.

    One row per (layer, schema the layer lists): the setting of a per-schema evaluation, where
    the candidates are the configurations of one kernel only.
    """
    from kbench.scoring.evaluate import Evaluator
    ev = Evaluator(dataset, split, "test", reference=None)
    prob, kern, _ = ev.ranked_rows(preds)
    t = ev.table.times[prob, kern]
    ok = ~np.isnan(t)  # listed configurations only (the others are skipped by the scorer too)
    prob, kern, t = prob[ok], kern[ok], t[ok]
    schema = np.array([k.split("_", 1)[0] for k in ev.table.kernels], dtype=object)[kern]
    d = pd.DataFrame({"p": prob, "schema": schema, "t": t})
    d["pos"] = d.groupby(["p", "schema"], sort=False).cumcount()
    g = d.groupby(["p", "schema"], sort=True)
    best = g["t"].min()
    out = pd.DataFrame({f"lop@{n}": (d[d["pos"] < n].groupby(["p", "schema"])["t"].min() - best) / best
                        for n in LOP_AT}).reset_index()
    layers = dataset.problems.set_index("problem_id").loc[ev.table.problem_ids, "layer"].to_numpy()
    out.insert(0, "layer", layers[out["p"].to_numpy()])
    return out.drop(columns="p")


def _n_blocks(dataset, out: pd.DataFrame) -> dict[str, np.ndarray]:
    """Thread blocks launched (analytic kernel model) by the chosen and by the fastest configuration."""
    from kbench.sources.cnnopt_features import TILE_COLUMNS, tile_features
    from kbench_baselines.hybrid_rf import gpu_spec_of
    k = dataset.kernels.assign(kernel=lambda d: d["kernel"].astype(str)).set_index("kernel")[TILE_COLUMNS]
    res = {}
    for col in ("choice", "best"):
        rows = k.loc[out[col].to_numpy()].reset_index()
        rows["problem_id"] = out["problem_id"].to_numpy()
        res[col] = tile_features(rows, dataset.problems, gpu_spec_of(dataset))["n_blocks"].to_numpy()
    return res


def _layer_key(s: pd.Series) -> pd.Series:
    if s.name == "layer":  # res2 before res10
        num = s.str.extract(r"(\d+)$")[0].fillna(-1).astype(int)
        return s.str.replace(r"\d+$", "", regex=True) + num.map("{:04d}".format)
    return s


def _entry(root: Path, dataset: str, split: str, method: str):
    """(record, seed-0 predictions) of one entry; a ``kbench run`` results folder works too."""
    folder = root / dataset / split / method
    if not (folder / "result.json").exists():
        return None, None
    rec = json.loads((folder / "result.json").read_text())
    preds = folder / "preds.csv.gz"
    if not preds.exists():
        preds = folder / ((rec.get("predictions") or {}).get("path") or "preds.csv.gz")
    if not preds.exists():
        return None, None
    from kbench.scoring.evaluate import read_predictions
    return rec, read_predictions(preds)[0]


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def _mean_std(record: dict, key: str) -> str:
    seeds = record.get("seeds") or {}
    m, s = (seeds.get("mean") or {}).get(key), (seeds.get("std") or {}).get(key)
    if m is None:
        m = record["metrics"]["overall"].get(key)
    if m is None:
        return "-"
    return f"{100 * m:.2f} ± {100 * s:.2f}" if s is not None else f"{100 * m:.2f}"


def geomean(x) -> float:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(np.exp(np.log(x).mean())) if len(x) else float("nan")


def cross_schema_section(name: str, recs: dict, path: Path = CROSS_SCHEMA_JSON) -> list[str]:
    """Both cross-schema orderings (``interleave``: the entries; ``plain``) from ``experiments/tiles_cross_schema.py``."""
    if not path.exists():
        return []
    data = (json.loads(path.read_text()).get("datasets") or {}).get(name) or {}
    if not data:
        return []
    lines = [f"### {name}: ordering across kernel schemas, interleaved (the entries above) vs plain", "",
             "The same fitted models (5 seeds; `analytical` is deterministic), their scores ranked two ways: "
             "`interleave` (each schema's candidates in predicted order, the schemas taking turns, the one "
             "holding the predicted-best candidate first; the paper's top-N/2-per-schema protocol) and "
             "`plain` (predicted score across schemas). From `python experiments/tiles_cross_schema.py`; "
             "5-seed mean ± std, LoP in %.", "",
             "| method | ordering | valid LoP@30 | test LoP@1 | test LoP@5 | test LoP@10 | test LoP@30 "
             "| layers at 0 @30 (seed 0) |", "|---|---|---|---|---|---|---|---|"]
    equal, same = [], []
    for method, d in data.items():
        summ = d["summary"]
        for order in ("interleave", "plain"):
            ms = lambda part, n: summ[part][order][f"lop_at_{n}"]  # noqa: E731, B023 (used within this iteration)
            cell = lambda part, n: f"{100 * ms(part, n)['mean']:.2f} ± {100 * ms(part, n)['std']:.2f}"  # noqa: E731, B023
            lay = d["seeds"][0]["test_layers"][order]
            zeros = sum(v["lop@30"] == 0 for v in lay.values())
            lines.append(f"| {method} | {order} | {cell('valid', 30)} | "
                         + " | ".join(cell("test", n) for n in LOP_AT) + f" | {zeros} of {len(lay)} |")
        rec = recs.get(method)
        if rec is not None:
            got = [summ["test"]["interleave"][f"lop_at_{n}"]["mean"] for n in LOP_AT]
            want = [((rec.get("seeds") or {}).get("mean") or rec["metrics"]["overall"])[f"lop_at_{n}"] for n in LOP_AT]
            equal.append(f"{method} {'yes' if np.allclose(got, want, rtol=0, atol=1e-12) else 'NO'}")
        same.append(f"{method} {'yes' if summ['valid']['identical_all_seeds'] else 'no'}")
    lines += ["", "Checks: `interleave` test means equal the leaderboard records' 5-seed means: "
              + ", ".join(equal) + ". Valid rankings identical under both orderings in every seed (every valid "
              "problem lists one schema, so valid cannot choose between them): " + ", ".join(same) + ".", ""]
    return lines


def report(root: Path) -> str:
    import kbench
    lines = ["# Tile-size selection: hybrid-rf, ml-rf, analytical", "",
             "Generated by `python tools/tiles_report.py` from the records under `leaderboard/`; "
             "per-layer numbers re-score the seed-0 predictions (`preds.csv.gz`), the 5-seed "
             "columns are the records' seed means ± unbiased std. LoP in %.", "",
             "The three models rank a layer's configurations with `cross_schema=\"interleave\"`: each kernel "
             "schema's configurations in predicted order, the schemas taking turns, the schema of the "
             "predicted-best configuration first, so the top N holds N/2 of each schema of a two-schema layer "
             "(the paper's top-N/2-per-schema evaluation). The random-size training problems list one schema "
             "each (data cards, \"Kernel schemas per problem\"), so the models have no data on how one schema "
             "ranks against another; the `plain` ranking by predicted score is shown next to it per dataset.", ""]
    for name in TILE_DATASETS:
        ds = kbench.load(name)
        per, recs = {}, {}
        for method in TILE_METHODS:
            rec, preds = _entry(root, name, SPLIT, method)
            if rec is not None:
                per[method], recs[method] = layer_scores(ds, preds), rec
        if not per:
            lines += [f"## {name}", "", "(no records yet)", ""]
            continue
        lines += [f"## {name} ({ds.info.get('device')}), split `{SPLIT}`, test = {len(next(iter(per.values())))} "
                  "benchmark layers", ""]
        # summary
        lines += ["| method | LoP@1 | LoP@5 | LoP@10 | LoP@30 | layers at 0 (@1/@5/@10/@30) "
                  "| 5-seed LoP@1 | 5-seed LoP@5 | 5-seed LoP@10 | 5-seed LoP@30 | speed-up vs cuDNN top-1 "
                  "(best of 30) | fit s / seed |",
                  "|---|" + "---|" * 11]
        for method, t in per.items():
            rec = recs[method]
            zeros = "/".join(str(int((t[f"lop@{n}"] == 0).sum())) for n in LOP_AT)
            fit = (rec.get("extra") or {}).get("fit_time_s")
            sp = (f"{geomean(t['speedup_top1']):.2f}x ({geomean(t['speedup_best30']):.2f}x)"
                  if "speedup_top1" in t else "-")
            fit_s = f"{fit:.1f}" if fit is not None else "-"
            lines.append(f"| {method} | " + " | ".join(_pct(t[f'lop@{n}'].mean()) for n in LOP_AT)
                         + f" | {zeros} | " + " | ".join(_mean_std(rec, f"lop_at_{n}") for n in LOP_AT)
                         + f" | {sp} | {fit_s} |")
        if "speedup_oracle" in t:
            lines += ["", f"Oracle (fastest configuration) speed-up over cuDNN: geometric mean "
                          f"{geomean(t['speedup_oracle']):.2f}x. Speed-ups are geometric means over the layers.", ""]
        # per layer
        head = "| network | layer | " + " | ".join(
            f"{m} @{n}" for m in per for n in LOP_AT) + " | " + " | ".join(f"{m} ×cuDNN" for m in per) + " |"
        lines += [f"### {name}: LoP@n (%) per layer, seed 0; speed-up of the top-1 choice over cuDNN", "",
                  head, "|---|---|" + "---|" * (len(per) * (len(LOP_AT) + 1))]
        base = next(iter(per.values()))
        for i in range(len(base)):
            row = [base.loc[i, "network"], base.loc[i, "layer"]]
            row += [_pct(per[m].loc[i, f"lop@{n}"]) for m in per for n in LOP_AT]
            row += [f"{per[m].loc[i, 'speedup_top1']:.2f}" if "speedup_top1" in per[m] else "-" for m in per]
            lines.append("| " + " | ".join(map(str, row)) + " |")
        avg = ["**average**", ""] + [_pct(per[m][f"lop@{n}"].mean()) for m in per for n in LOP_AT] + [
            f"{geomean(per[m]['speedup_top1']):.2f} (geomean)" if "speedup_top1" in per[m] else "-" for m in per]
        zero = ["**layers at 0**", ""] + [str(int((per[m][f"lop@{n}"] == 0).sum())) for m in per for n in LOP_AT] + [
            f"{int((per[m]['speedup_top1'] > 1).sum())} faster" if "speedup_top1" in per[m] else "-" for m in per]
        lines += ["| " + " | ".join(avg) + " |", "| " + " | ".join(zero) + " |", ""]
        lines += cross_schema_section(name, recs)
        sch = {m: schema_scores(ds, _entry(root, name, SPLIT, m)[1]) for m in per}
        lines += [f"### {name}: LoP@n (%) within one kernel schema (ranking restricted to the schema's "
                  "configurations, against the schema's fastest), mean over layers, seed 0", "",
                  "| method | schema | layers | " + " | ".join(f"LoP@{n}" for n in LOP_AT)
                  + " | layers at 0 (@1/@5/@10/@30) |", "|---|---|---|" + "---|" * (len(LOP_AT) + 1)]
        for m, tab in sch.items():
            for sc, g in tab.groupby("schema"):
                lines.append(f"| {m} | {sc} | {len(g)} | " + " | ".join(_pct(g[f'lop@{n}'].mean()) for n in LOP_AT)
                             + " | " + "/".join(str(int((g[f'lop@{n}'] == 0).sum())) for n in LOP_AT) + " |")
        lines.append("")
        sm = (ds.info.get("gpu_spec") or {}).get("sm_count")
        lines += [f"Thread blocks launched by the top-1 choice (median over layers; analytic kernel model) vs "
                  f"the fastest configuration ({np.median(base['blocks_best']):.0f}); the GPU has {sm} SMs: "
                  + ", ".join(f"{m} {np.median(per[m]['blocks_choice']):.0f}" for m in per) + ".", ""]
    for name, split, method in EXTRA_ENTRIES:
        rec, _ = _entry(root, name, split, method)
        if rec is None:
            continue
        o = rec["metrics"]["overall"]
        fit = (rec.get("extra") or {}).get("fit_time_s")
        fit_s = f"{fit:.1f}" if fit is not None else "-"
        lines += [f"## {method} on {name}, split `{split}` (test, {rec['counts']['scored']} problems)", "",
                  "| top-1 | LoP@1 (mean LoP) | LoP@5 | geomean slowdown | within 5% | fit s / seed |",
                  "|---|---|---|---|---|---|",
                  f"| {_mean_std(rec, 'top1')} | {_mean_std(rec, 'lop_at_1')} | {_mean_std(rec, 'lop_at_5')} "
                  f"| {o['geomean_slowdown']:.4f} | {_mean_std(rec, 'within5')} | {fit_s} |", "",
                  "top-1, LoP and within-5% in % (5-seed mean ± std); LoP is a lower bound where choices are "
                  f"censored (share censored {100 * o['share_censored']:.2f}%).", ""]
    return "\n".join(lines)


def publish(results: Path, root: Path) -> list[Path]:
    """Copy finished (all-seeds) runs of the report's entries from ``results`` into ``root``."""
    from kbench.leaderboard.schema import parse_meta, record_problems
    from kbench.leaderboard.store import write_entry
    from kbench.scoring.records import EvaluationResult
    wanted = [(d, SPLIT, m) for d in TILE_DATASETS for m in TILE_METHODS] + list(EXTRA_ENTRIES)
    written = []
    for d, split, m in wanted:
        folder = results / d / split / m
        if not (folder / "result.json").exists() or not (folder / "meta.json").exists():
            print(f"skip {d}/{split}/{m}: no finished run in {folder}")
            continue
        rec = EvaluationResult.model_validate_json((folder / "result.json").read_text())
        meta = parse_meta(folder / "meta.json")
        issues = record_problems(rec, meta)
        if issues:
            raise SystemExit(f"{folder}: cannot go on the leaderboard:\n  - " + "\n  - ".join(issues))
        written.append(write_entry(root, rec, meta, (folder / rec.predictions.path).read_bytes()))
        print(f"wrote {written[-1]}")
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", nargs="?", default="report", choices=("report", "publish"))
    ap.add_argument("--leaderboard", default=str(ROOT / "leaderboard"))
    ap.add_argument("--results", default=str(ROOT / "results"))
    ap.add_argument("--out", help="write the report here as well as printing it")
    a = ap.parse_args(argv)
    if a.command == "publish":
        publish(Path(a.results), Path(a.leaderboard))
        return 0
    text = report(Path(a.leaderboard))
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

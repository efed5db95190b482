"""Time the same cuDNN plans with both tensor-stride conventions in one process, and compare.

The collector hands cuDNN the strides PyTorch's descriptors carry (``pytorch``); runs before that
used the ``legacy`` strides, which differ for NHWC tensors with a size-1 dimension
(:mod:`kbench.collect.measure.strides`). This diagnostic measures what the difference does to the
timings, class by class, with the collector's own protocol (every plan, precise re-timing and the
verification pass), both conventions in one process on one GPU, the conventions taking turns at
going first::

    python tools/collect/stride_forms.py select --dataset h100 --per-class 8 --controls 6 --out .gpu/strides/problems.json
    python tools/collect/stride_forms.py run --problems .gpu/strides/problems.json --out OUT --time-budget 480   # GPU
    python tools/collect/stride_forms.py compare --dataset h100 --runs OUT --out experiments/results/stride_forms_h100.json

``select`` takes its problem-directions from a packaged NVIDIA dataset, so ``compare`` can set both
forms beside the shipped table: a sample of each class of :func:`kbench.collect.measure.strides.size_one_class`
(direction and the tensors whose strides differ) and controls whose strides agree (NHWC without
a differing tensor, and NCHW). ``run`` writes two raw folders, ``OUT/pytorch`` and ``OUT/legacy``, as
it goes (a re-run resumes). ``compare`` joins the plans' packaged times (every correct plan, the
``tf32`` candidate set) on (problem, plan).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

FORMS = ("pytorch", "legacy")
#: plans faster than this are left out of the agreement statistics (launch-bound, noisy)
MIN_MS = 0.05
#: a (problem, plan) pair whose two times differ by more than this factor is counted as far apart
FAR_RATIO = 1.5


def select(dataset: str, corpus: str | None, per_class: int, controls: int, seed: int) -> list[dict]:
    import kbench
    from kbench.collect.measure.cudnn import load_problems
    from kbench.collect.measure.strides import size_one_class
    ds = kbench.load(dataset)
    probs = ds.problems
    cls = size_one_class(probs)
    cls = cls.where(cls != "-", "control:" + probs["layout"].astype(str).str[:4] + ":" + probs["direction"])
    rng = np.random.default_rng(seed)
    picked = []
    for name, idx in cls.groupby(cls).groups.items():
        want = controls if name.startswith("control:") else per_class
        idx = np.asarray(idx)
        picked.append(pd.Series(name, index=rng.choice(idx, size=min(want, len(idx)), replace=False)))
    chosen = pd.concat(picked)
    corpus = corpus or f"raw/{dataset}/corpus.csv.gz"
    rows = load_problems(corpus)
    rows = rows[rows["key"].isin(probs.loc[chosen.index, "problem_id"])]
    klass = dict(zip(probs.loc[chosen.index, "problem_id"], chosen.to_numpy()))
    rows = rows.assign(size_one_class=rows["key"].map(klass)).drop_duplicates("key")
    # interleave the classes so that a run cut short still covers each of them
    rows = rows.assign(_i=rows.groupby("size_one_class").cumcount()).sort_values(["_i", "size_one_class"])
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
            for r in rows.drop(columns="_i").to_dict("records")]


def retime_list(dataset: str, corpus: str | None) -> pd.DataFrame:
    """The dataset's problem-directions whose strides differ between the conventions, as a problems
    file for ``kbench collect cudnn`` (one row per problem-direction, wgrad first, then corpus order)."""
    import kbench
    from kbench.collect.measure.cudnn import GEOMETRY, load_problems
    from kbench.collect.measure.strides import strides_differ
    probs = kbench.load(dataset).problems
    affected = set(probs.loc[strides_differ(probs)["any"], "problem_id"])
    rows = load_problems(corpus or f"raw/{dataset}/corpus.csv.gz")
    rows = rows[rows["key"].isin(affected)]
    rows = rows.assign(_w=rows["direction"].ne("W")).sort_values(["_w", "order"], kind="stable")
    cols = ["order", "kind", "direction", "dtype", "layout", *GEOMETRY, "sources"]
    return rows[cols].reset_index(drop=True)


def run(problems_path: str, out: str, time_budget_s: float) -> int:
    from kbench.collect.measure.cudnn import CudnnCollector, FatalCudaError, Options
    from kbench.collect.raw_store.writer import RawWriter
    t0 = time.monotonic()
    problems = json.loads(Path(problems_path).read_text())
    writers = {f: RawWriter(Path(out) / f, batch_size=5, max_batch_seconds=20.0) for f in FORMS}
    done = {f: writers[f].resume_state()[0] for f in FORMS}
    # PyTorch's choice is the same whatever strides kbench passes: leave it out of both
    cols = {f: CudnnCollector(Options(tensor_strides=f, torch_choice=False)) for f in FORMS}
    for f in FORMS:
        writers[f].write_env("start", cols[f].env())
    cols[FORMS[0]].warm_up()
    measured = 0
    rc = 0
    try:
        for i, p in enumerate(problems):
            if time.monotonic() - t0 > time_budget_s:
                break
            for f in (FORMS if i % 2 == 0 else FORMS[::-1]):
                if p["key"] in done[f]:
                    continue
                writers[f].start(p["key"])
                rec, plans = cols[f].measure(p)
                rec["size_one_class"] = p.get("size_one_class", "")
                writers[f].add(rec, plans)
                measured += 1
            print(f"{i + 1}/{len(problems)} {p['key']} {p.get('size_one_class', '')} "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
    except FatalCudaError as exc:
        print(f"fatal CUDA error, a re-run resumes: {exc}", file=sys.stderr)
        rc = 3
    for f in FORMS:
        writers[f].flush()
        if rc == 0:
            writers[f].write_env("end", cols[f].env())
        writers[f].close()
    print(json.dumps({"measured": measured, "seconds": round(time.monotonic() - t0, 1)}))
    return rc


def _form_times(raw: Path, variant: str = "tf32") -> tuple[pd.DataFrame, pd.DataFrame]:
    from kbench.collect.packaging.package import candidate_runtimes, load_raw
    problems, plans, _ = load_raw(raw)
    rt = candidate_runtimes(problems, plans, variant)
    return problems, rt[["key", "plan", "time_ms"]]


def _agreement(ratio: pd.Series) -> dict:
    """Statistics of per-pair ratios (a / b)."""
    if not len(ratio):
        return {"pairs": 0}
    lr = np.log(ratio.to_numpy(float))
    return {"pairs": int(len(lr)), "geomean_ratio": round(float(np.exp(lr.mean())), 4),
            "median_abs_log_ratio": round(float(np.median(np.abs(lr))), 4),
            "over_far_ratio": int((np.abs(lr) > np.log(FAR_RATIO)).sum()),
            "max_ratio": round(float(np.exp(lr.max())), 3), "min_ratio": round(float(np.exp(lr.min())), 3)}


def compare(dataset: str, runs: str) -> dict:
    import kbench
    from kbench.collect.measure.strides import size_one_class
    forms = {f: _form_times(Path(runs) / f) for f in FORMS}
    probs = forms["pytorch"][0]
    # the class from the geometry (the name recorded at selection may be of an older naming)
    klass = size_one_class(probs).set_axis(probs["key"])
    control = klass.eq("-")
    klass[control] = "control:" + probs["layout"].str[:4].to_numpy()[control.to_numpy()] + ":" + \
        probs["direction"].to_numpy()[control.to_numpy()]
    pairs = forms["legacy"][1].merge(forms["pytorch"][1], on=["key", "plan"], suffixes=("_legacy", "_pytorch"))
    table = kbench.load(dataset).runtimes[["problem_id", "kernel", "time_ms"]].rename(
        columns={"problem_id": "key", "kernel": "plan", "time_ms": "time_ms_table"})
    pairs = pairs.merge(table, on=["key", "plan"], how="left")
    pairs["size_one_class"] = pairs["key"].map(klass).fillna("")
    timed = pairs[pairs[["time_ms_legacy", "time_ms_pytorch"]].min(axis=1) >= MIN_MS]
    with_table = timed[timed["time_ms_table"].notna()]
    best = {f: forms[f][1].sort_values("time_ms").drop_duplicates("key").set_index("key") for f in FORMS}
    winners = best["legacy"].join(best["pytorch"], lsuffix="_legacy", rsuffix="_pytorch", how="inner")
    winners["size_one_class"] = winners.index.map(klass)
    out = {"dataset": dataset, "min_ms": MIN_MS, "far_ratio": FAR_RATIO,
           "problems": {f: int(len(best[f])) for f in FORMS},
           "legacy_over_pytorch": {}, "table_over_legacy": _agreement(with_table["time_ms_table"]
                                                                      / with_table["time_ms_legacy"]),
           "table_over_pytorch": _agreement(with_table["time_ms_table"] / with_table["time_ms_pytorch"]),
           "winners": {}, "far_pairs": []}
    for name, g in timed.groupby("size_one_class"):
        out["legacy_over_pytorch"][name] = _agreement(g["time_ms_legacy"] / g["time_ms_pytorch"])
    out["legacy_over_pytorch"]["all affected"] = _agreement(
        timed.loc[~timed["size_one_class"].str.startswith("control"), "time_ms_legacy"]
        / timed.loc[~timed["size_one_class"].str.startswith("control"), "time_ms_pytorch"])
    for name, g in winners.groupby("size_one_class"):
        lr = np.log(g["time_ms_legacy"] / g["time_ms_pytorch"])
        out["winners"][name] = {"problems": int(len(g)),
                                "winner_changed": int((g["plan_legacy"] != g["plan_pytorch"]).sum()),
                                "best_time_geomean_ratio": round(float(np.exp(lr.mean())), 4),
                                "best_time_max_ratio": round(float(np.exp(lr.max())), 3)}
    far = timed[np.abs(np.log(timed["time_ms_legacy"] / timed["time_ms_pytorch"])) > np.log(FAR_RATIO)]
    out["far_pairs"] = (far.sort_values("time_ms_legacy", ascending=False)
                        .head(40)[["key", "plan", "size_one_class", "time_ms_legacy", "time_ms_pytorch",
                                   "time_ms_table"]].round(4).to_dict("records"))
    return out


def compare_retimed(dataset: str, raw: str, table: str | None = None) -> dict:
    """A table measured with legacy strides (``table``: a dataset folder, e.g. an earlier version taken
    from its git tag; default the shipped ``dataset``) against a re-timing with PyTorch's strides (the
    default candidate set in both): per class, the plans' agreement, how many winners changed and
    the best time's ratio."""
    import kbench
    from kbench.collect.measure.strides import size_one_class
    ds = kbench.load(table or dataset)
    problems, new = _form_times(Path(raw), variant="default")
    table = ds.runtimes[["problem_id", "kernel", "time_ms"]].rename(
        columns={"problem_id": "key", "kernel": "plan", "time_ms": "time_ms_table"})
    keys = set(problems.loc[problems["status"] == "ok", "key"])
    table = table[table["key"].isin(keys)]
    klass = size_one_class(ds.problems).set_axis(ds.problems["problem_id"])
    pairs = table.merge(new, on=["key", "plan"])
    pairs["size_one_class"] = pairs["key"].map(klass)
    timed = pairs[pairs[["time_ms_table", "time_ms"]].min(axis=1) >= MIN_MS]
    best_t = table.sort_values("time_ms_table").drop_duplicates("key").set_index("key")
    best_n = new[new["key"].isin(best_t.index)].sort_values("time_ms").drop_duplicates("key").set_index("key")
    w = best_t.join(best_n, lsuffix="_table", rsuffix="_new", how="inner")
    w["size_one_class"] = w.index.map(klass)
    # plans cuDNN offered only with PyTorch's strides: not in the table's candidate set of the problem
    offered = pd.MultiIndex.from_frame(table[["key", "plan"]])
    w["new_plan_wins"] = ~pd.MultiIndex.from_arrays([w.index, w["plan_new"]]).isin(offered)
    out = {"dataset": dataset, "table_version": ds.version, "raw": raw, "problem_directions": int(len(w)), "min_ms": MIN_MS,
           "plans_table_over_new": {}, "winners": {}}
    for name, g in [("all", timed), *timed.groupby("size_one_class")]:
        out["plans_table_over_new"][name] = _agreement(g["time_ms_table"] / g["time_ms"])
    for name, g in [("all", w), *w.groupby("size_one_class")]:
        lr = np.log(g["time_ms_table"] / g["time_ms"])
        out["winners"][name] = {"problems": int(len(g)), "winner_changed": int((g["plan_table"] != g["plan_new"]).sum()),
                                "best_time_geomean_table_over_new": round(float(np.exp(lr.mean())), 4),
                                "best_time_max_table_over_new": round(float(np.exp(lr.max())), 3),
                                "best_faster_by_over_10pct": int((lr > np.log(1.1)).sum()),
                                "best_is_a_plan_the_table_lacks": int(g["new_plan_wins"].sum())}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("select", help="a stratified sample of a dataset's problem-directions")
    s.add_argument("--dataset", required=True)
    s.add_argument("--corpus", default=None, help="the collector's corpus (default raw/DATASET/corpus.csv.gz)")
    s.add_argument("--per-class", type=int, default=8)
    s.add_argument("--controls", type=int, default=6)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", required=True)
    r = sub.add_parser("run", help="measure the sample in both conventions (GPU)")
    r.add_argument("--problems", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--time-budget", type=float, default=480.0)
    t = sub.add_parser("retime-list", help="the dataset's problem-directions the conventions tell apart")
    t.add_argument("--dataset", required=True)
    t.add_argument("--corpus", default=None)
    t.add_argument("--out", required=True, help="a problems CSV (.csv or .csv.gz) for kbench collect cudnn")
    q = sub.add_parser("retimed", help="the shipped table against a re-timing with PyTorch's strides")
    q.add_argument("--dataset", required=True)
    q.add_argument("--raw", required=True)
    q.add_argument("--table", default=None, help="the legacy-strides table: a dataset folder, e.g. the previous "
                   "version from git (git archive TAG kbench/datasets/DATASET | tar x -C DIR); default the shipped one")
    q.add_argument("--out", required=True)
    c = sub.add_parser("compare", help="the two forms and the table, class by class")
    c.add_argument("--dataset", required=True)
    c.add_argument("--runs", required=True)
    c.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "select":
        rows = select(a.dataset, a.corpus, a.per_class, a.controls, a.seed)
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(rows))
        print(f"{len(rows)} problem-directions -> {a.out}")
        print(pd.Series([r["size_one_class"] for r in rows]).value_counts().to_string())
        return 0
    if a.cmd == "retime-list":
        rows = retime_list(a.dataset, a.corpus)
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        rows.to_csv(a.out, index=False)
        print(f"{len(rows)} problem-directions -> {a.out}")
        print(rows["direction"].value_counts().to_string())
        return 0
    if a.cmd == "retimed":
        res = compare_retimed(a.dataset, a.raw, a.table)
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
        print(json.dumps(res, indent=1))
        return 0
    if a.cmd == "run":
        return run(a.problems, a.out, a.time_budget)
    res = compare(a.dataset, a.runs)
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: res[k] for k in ("problems", "legacy_over_pytorch", "table_over_legacy",
                                          "table_over_pytorch")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

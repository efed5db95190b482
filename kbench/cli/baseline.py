"""``kbench baseline list`` and ``kbench baseline run``.

``run`` trains a registered baseline on the split's train part, lets it select
on valid (never test), predicts test, scores it with the Evaluator (speed-up
over the dataset's reference heuristic) for every seed, and writes::

    OUT/<dataset>/<split>/<method>/result.json      all seeds: mean, per-seed scores, unbiased std
    OUT/<dataset>/<split>/<method>/preds.csv        test predictions of the first seed
    OUT/<dataset>/<split>/<method>/preds.csv.gz     the same, gzip-compressed (deterministic bytes)
    OUT/<dataset>/<split>/<method>/meta.json        submission metadata (training time, latency ...)
    OUT/<dataset>/<split>/<method>/seed-<k>/        per seed: result.json, preds.csv.gz

The per-seed work (fit, predict, score, timing, resuming a finished seed,
reusing one fit for every seed of a deterministic baseline) is
:func:`kbench.leaderboard.runner.run_method`, the same code ``kbench run``
uses, so both commands give identical records. ``params.json`` in the method
folder records the ``--param`` values; finished seeds made with other values
are never reused (the command stops and says so).
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pandas as pd

from kbench.cli.console import (
    _console,
    add_json_option,
    check_json_target,
    emit_json,
    json_to_stdout,
    print_frame,
    progress_disabled,
)
from kbench.core.errors import BaselineFailed, KbenchInputError, suggest
from kbench.data.dataset import load
from kbench.leaderboard.runner import checked_seeds, method_dir, run_method
from kbench.leaderboard.schema import parse_meta, record_problems
from kbench.leaderboard.store import write_entry
from kbench.scoring.evaluate import Evaluator
from kbench.sources.splits import SPLIT_HELP

SUMMARY_METRICS = [("top1", "top-1"), ("within5", "≤5%"), ("lop_mean", "LoP mean"), ("lop_at_5", "LoP@5"),
                   ("geomean_slowdown", "slowdown×"), ("speedup_geomean", "speed-up×"),
                   ("speedup_total", "total×"), ("share_censored", "censored")]


def _registry():
    # the baselines load when a command needs them: an optional install whose import runs every baseline
    # module (`kbench --help` imports this module)
    try:
        from kbench_baselines.base import BASELINES, UNAVAILABLE, discover
    except ImportError as exc:
        raise KbenchInputError(f"the baselines package cannot be imported ({exc}); install kbench with its "
                               "baselines: pip install -e '.[baselines]'") from exc
    discover()
    return BASELINES, UNAVAILABLE


def _parse_params(pairs: list[str] | None) -> dict:
    params = {}
    for item in pairs or []:
        if "=" not in item:
            raise KbenchInputError(f"--param {item!r}: write KEY=VALUE, e.g. --param max_depth=10")
        key, value = item.split("=", 1)
        try:
            params[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            params[key.strip()] = value
    return params


def _with_params(cls: type, params: dict) -> type:
    """A subclass of ``cls`` whose no-argument constructor uses ``params`` (not registered)."""
    if not params:
        return cls
    try:
        cls(**params)
    except TypeError as exc:
        raise KbenchInputError(f"baseline {cls.name!r} does not take these parameters: {exc}") from exc

    def __init__(self, **kw):
        cls.__init__(self, **{**params, **kw})
    return type(cls.__name__, (cls,), {"__init__": __init__, "__module__": cls.__module__})


# ----------------------------------------------------------------------------- list
def cmd_list(args) -> int:
    from kbench_baselines.base import registered_datasets  # the baselines load on use (see _registry)
    reg, unavailable = _registry()
    metas = registered_datasets()
    rows = []
    for name in sorted(reg):
        cls = reg[name]
        supported = []
        for meta in metas:
            try:
                if cls().supports(meta):
                    supported.append(meta.name)
            except Exception:  # a baseline that needs the tables to decide: say so, do not fail
                supported.append(f"{meta.name}?")
        rows.append({"baseline": name, "datasets": ", ".join(supported) or "-",
                     "seeded": "yes" if getattr(cls, "stochastic", False) else "no",
                     "in kbench run": "yes" if getattr(cls, "benchmark", True) else "no",
                     "description": (getattr(cls, "description", "") or "").strip().split("\n")[0]})
    if args.json:
        emit_json(args.json, {"baselines": rows, "unavailable": unavailable})
        return 0
    print_frame(pd.DataFrame(rows), title="kbench baselines (datasets: which registered datasets each supports)")
    for mod, err in unavailable.items():
        _console().print(f"[yellow]module kbench_baselines.{mod} cannot be imported:[/yellow] {err}")
    return 0


# ----------------------------------------------------------------------------- run
def _fmt(v, std=None) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return ""
    s = f"{v:.4f}" if isinstance(v, float) else str(v)
    return s + (f" ± {std:.4f}" if isinstance(std, float) else "")


def metrics_table(record) -> pd.DataFrame:
    """Overall (mean ± std over seeds) and per direction (mean over seeds)."""
    std = record.seeds.std if record.seeds else {}
    rows = []
    groups = [("all", record.metrics["overall"], std)] + [
        (f"dir {k}", v, {}) for k, v in record.metrics.get("by_direction", {}).items()]
    for label, m, sd in groups:
        row = {"group": label, "n": int(m.get("n", 0) or 0)}
        for key, title in SUMMARY_METRICS:
            row[title] = _fmt(m.get(key), sd.get(key) if len(record.seeds.seeds if record.seeds else []) > 1 else None)
        rows.append(row)
    return pd.DataFrame(rows)


def seeds_table(record) -> pd.DataFrame:
    if not record.seeds:
        return pd.DataFrame()
    fit = record.extra.get("fit_time_s_per_seed") or [None] * len(record.seeds.seeds)
    rows = []
    for seed, scores, t in zip(record.seeds.seeds, record.seeds.per_seed, fit):
        rows.append({"seed": seed, **{title: _fmt(scores.get(key)) for key, title in SUMMARY_METRICS[:6]},
                     "fit s": _fmt(float(t)) if t is not None else ""})
    return pd.DataFrame(rows)


def cmd_run(args) -> int:
    from tqdm import tqdm
    reg, unavailable = _registry()
    name = args.name
    if name not in reg:
        known = sorted(reg)
        extra = f" (modules that failed to import: {', '.join(unavailable)})" if unavailable else ""
        raise KbenchInputError(f"unknown baseline {name!r}. Available: {', '.join(known)}{extra}."
                               f"{suggest(name, known)}")
    seeds = checked_seeds(args.seeds)
    ds = load(args.dataset)
    ids = ds.split(args.split)
    params = _parse_params(args.param)
    cls = _with_params(reg[name], params)
    if not cls().supports(ds):
        raise KbenchInputError(f"baseline {name!r} does not support dataset {ds.name!r} (task "
                               f"{ds.info.get('task')!r}, library {ds.info.get('library')!r}); "
                               "`kbench baseline list` shows what each baseline supports.")
    out = Path(args.out)
    folder = method_dir(out, ds.name, args.split, name)
    _check_params_marker(folder, params)
    check_json_target(args.json)
    progress = not args.no_progress
    evaluators = {"test": Evaluator(ds, split=args.split, part="test", reference="default")}
    if len(ids["valid"]):
        evaluators["valid"] = Evaluator(ds, split=args.split, part="valid", reference="default")
    logs: list[str] = []
    with tqdm(total=len(seeds), unit="seed", desc=f"{name} on {ds.name}/{args.split}",
              disable=progress_disabled(progress), dynamic_ncols=True, file=sys.stderr) as bar:
        outcome = run_method(name, cls, ds, args.split, ids, evaluators, seeds, out,
                             bar=None if bar.disable else bar, log=logs.append)
    if outcome.error:
        raise BaselineFailed(outcome.failure(ds.name, args.split))
    record = outcome.record
    (folder / "params.json").write_text(json.dumps(params, sort_keys=True) + "\n")
    first = folder / f"seed-{seeds[0]}" / "preds.csv.gz"
    shutil.copyfile(first, folder / "preds.csv.gz")
    if not args.no_csv:
        with gzip.open(first, "rb") as src, open(folder / "preds.csv", "wb") as dst:
            shutil.copyfileobj(src, dst)
    if args.leaderboard:
        _publish(record, folder, Path(args.leaderboard))
    if args.json:
        emit_json(args.json, record.model_dump(mode="json"))
        if json_to_stdout(args):
            return 0

    console = _console()
    o = record.metrics["overall"]
    console.print(f"[bold]{name}[/bold] on {ds.name} split {args.split} (test part, {int(o.get('n') or 0):,} problems), "
                  f"seeds {seeds}; speed-up over {record.reference or 'no reference'}")
    print_frame(metrics_table(record), title="test metrics (all: mean ± std over seeds; per direction: mean)")
    if len(seeds) > 1:
        print_frame(seeds_table(record), title="per seed")
    ex = record.extra
    console.print(f"fit {_fmt(ex.get('fit_time_s'))} s (mean per seed), predict "
                  f"{_fmt(ex.get('predict_ms_per_problem'))} ms/problem, batch-1 latency "
                  f"{_fmt(ex.get('latency_ms_cpu_batch1'))} ms; {ex.get('hardware', '')}")
    console.print(f"wrote {folder}/result.json, preds.csv.gz" + ("" if args.no_csv else ", preds.csv")
                  + (f"; leaderboard entry under {args.leaderboard}" if args.leaderboard else ""))
    return 0


def _check_params_marker(folder: Path, params: dict) -> None:
    """Finished seeds in ``folder`` are reused (as ``kbench run`` does): only if made with the same parameters."""
    marker = folder / "params.json"
    done = list(folder.glob("seed-*/result.json"))
    if not done:
        return
    before = json.loads(marker.read_text()) if marker.exists() else {}
    if before != json.loads(json.dumps(params, sort_keys=True)):
        raise KbenchInputError(
            f"{folder} already holds results made with parameters {before or 'none'}, not "
            f"{params or 'none'}; finished seeds there would be reused. Use another --out or remove that folder.")


def _publish(record, folder: Path, root: Path) -> None:
    """Add the run to the leaderboard folder (result.json, meta.json, preds.csv.gz)."""
    meta = parse_meta(folder / "meta.json")
    issues = record_problems(record, meta)
    if issues:
        raise KbenchInputError(f"{folder}: cannot go on the leaderboard:\n  - " + "\n  - ".join(issues))
    write_entry(root, record, meta, (folder / "preds.csv.gz").read_bytes())


def register_cli(sub) -> None:
    bp = sub.add_parser("baseline", help="list or run the baselines",
                        description="List the registered baselines, or train, predict and score one.")
    bsub = bp.add_subparsers(dest="baseline_command", metavar="ACTION")
    bp.set_defaults(func=lambda args: (bp.print_help(), 0)[1])

    p = bsub.add_parser("list", help="the baselines and the datasets each supports")
    add_json_option(p, "the list")
    p.set_defaults(func=cmd_list)

    p = bsub.add_parser("run", help="train on train, select on valid, score test; write records",
                        description="Train NAME on the split's train part (model selection on valid only), "
                        "predict and score the test part for every seed, write preds.csv, preds.csv.gz and "
                        "the result record (per-seed scores, mean and unbiased std), print the metrics.")
    p.add_argument("name", help="baseline name (kbench baseline list)")
    p.add_argument("--dataset", "-d", default="mi100", help="dataset name or alias (default mi100)")
    p.add_argument("--split", "-s", default="random", help=SPLIT_HELP % "random")
    p.add_argument("--seeds", nargs="+", type=int, default=[0], help="seeds (default 0)")
    p.add_argument("--out", default="results", help="output root (default results/): "
                   "OUT/<dataset>/<split>/<method>/")
    p.add_argument("--param", nargs="+", metavar="KEY=VALUE",
                   help="constructor parameters, values as JSON (e.g. --param max_depth=10)")
    p.add_argument("--no-csv", action="store_true", help="write only the compressed preds.csv.gz")
    p.add_argument("--leaderboard", nargs="?", const="leaderboard", default=None, metavar="ROOT",
                   help="also write the entry under ROOT/<dataset>/<split>/<method>/ (default leaderboard/)")
    add_json_option(p, "the result record (all seeds)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (there is one on stderr only when it is a terminal)")
    p.set_defaults(func=cmd_run)

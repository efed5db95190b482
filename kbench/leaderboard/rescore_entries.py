"""``kbench leaderboard rescore``: re-score leaderboard entries from their predictions with the current Evaluator.

    kbench leaderboard rescore DATASET [DATASET ...] [--results results] [--leaderboard leaderboard]

For each entry ``leaderboard/<dataset>/<split>/<method>/`` whose per-seed predictions are in
``results/<dataset>/<split>/<method>/seed-<k>/preds.csv.gz`` (as ``kbench run`` writes them),
every seed is scored again and the record re-aggregated; the entry's metadata, extra figures and
seed-0 predictions file stay as they are. Used when a scoring rule changes (e.g. the reference
heuristic of a dataset), so no model has to be retrained.

    kbench leaderboard rescore --check [--leaderboard leaderboard] [--dump scores.json]

re-scores the committed predictions file of every entry (any dataset, kernel selection and
tuning) and compares each metric with the record's figures for that file's seed; it writes
nothing (``--dump`` saves every re-scored metric, to compare two kbench versions). It prints
the number of entries checked and the largest absolute difference, and exits 1 on a mismatch.

    kbench leaderboard rescore --relabel DATASET [--methods M ...] [--leaderboard leaderboard]

re-scores entries recorded on an earlier version of DATASET (new labels, same problems) from
their committed predictions file, the seed-0 predictions: the record keeps that one seed (the
other seeds' predictions are not stored), its ``extra.relabel`` names the earlier dataset and
seeds, and the old and new seed-0 figures are printed side by side. For entries whose models
are too costly to train again at once; re-run them with ``kbench run`` to get every seed back.

    kbench leaderboard rescore --store-seeds [--extra-root DIR]

rewrites every entry's single-seed ``preds.csv.gz`` as ``preds.parquet`` (the store's format,
every seed where they are known: a deterministic method's seeds share one file), after
re-scoring the record from it, and updates the record's ``predictions`` path and sha256.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kbench.errors import KbenchInputError
from kbench.evaluate import Evaluator
from kbench.leaderboard.store import PREDS_FILE, read_seed_predictions, record_json
from kbench.records import EvaluationResult, aggregate_seeds


def rescore(entry: Path, results: Path) -> EvaluationResult:
    old = EvaluationResult.model_validate_json((entry / "result.json").read_text())
    seeds = old.seeds.seeds if old.seeds else [0]
    ev = Evaluator(old.dataset.name, split=old.split, part=old.part)
    per_seed = []
    for seed in seeds:
        folder = results / old.dataset.name / old.split / old.method / f"seed-{seed}"
        record = ev(pd.read_csv(folder / "preds.csv.gz"), method=old.method)
        seed_old = folder / "result.json"
        if seed_old.exists():
            record.extra = EvaluationResult.model_validate_json(seed_old.read_text()).extra
        per_seed.append(record)
    new = aggregate_seeds(per_seed, seeds)
    new.predictions, new.extra, new.date = old.predictions, old.extra, old.date
    (entry / "result.json").write_text(record_json(new))
    return new


def relabel(root: Path, dataset: str, methods: list[str] | None) -> int:
    """Re-score the committed seed-0 predictions of entries recorded on another version of ``dataset``."""
    from kbench.dataset import load
    from kbench.evaluate import read_predictions
    ds = load(dataset)
    results = sorted(Path(root, ds.name).glob("*/*/result.json"))
    unknown = sorted(set(methods or ()) - {r.parent.name for r in results})
    if unknown:
        raise KbenchInputError(f"--methods: no {ds.name} entry named {', '.join(unknown)} under {root}; "
                               f"its entries are {', '.join(sorted({r.parent.name for r in results}))}.")
    done, evaluators = 0, {}
    for result in results:
        old = EvaluationResult.model_validate_json(result.read_text())
        if old.dataset.checksum == ds.checksum or (methods and old.method not in methods):
            continue
        key = (old.split, old.part)
        if key not in evaluators:
            evaluators[key] = Evaluator(ds, split=old.split, part=old.part)
        stored = read_seed_predictions(result.parent / PREDS_FILE)
        frame = stored[min(stored)]
        new = evaluators[key](frame, method=old.method, allow_partial=old.counts.coverage < 1)
        seed0 = old.seeds.seeds[0] if old.seeds else 0
        new = aggregate_seeds([new], [seed0])
        before = old.seeds.per_seed[0] if old.seeds else old.overall
        new.predictions, new.date = old.predictions, old.date
        new.extra = {**(old.extra or {}), "relabel": {
            "from_dataset": old.dataset.model_dump(mode="json"), "seeds_before": old.seeds.seeds if old.seeds else [0],
            "seed0_before": {k: before.get(k) for k in ("top1", "speedup_geomean", "geomean_slowdown", "lop_mean")},
            "note": f"re-scored from the committed seed-{seed0} predictions (models trained on "
                    f"{old.dataset.name} {old.dataset.version}) on {ds.name} {ds.version}; the other seeds' "
                    "predictions are not stored: re-run the entry with kbench run to get them back"}}
        result.write_text(record_json(new))
        meta_path = result.parent / "meta.json"  # the entry's metadata names the dataset it is scored on
        meta = json.loads(meta_path.read_text())
        meta["dataset"] = new.dataset.model_dump(mode="json")
        meta_path.write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
        after = new.overall
        print(f"{result.parent.relative_to(root)}: seed {seed0} "
              + ", ".join(f"{k} {before.get(k):.4f} -> {after.get(k):.4f}" for k in
                          ("top1", "speedup_geomean", "geomean_slowdown") if before.get(k) is not None))
        done += 1
    print(f"{done} entries re-scored on {ds.name} {ds.version}")
    return 0


def _numbers(d: dict) -> dict:
    return {k: v for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def check(roots: list[Path], dump: Path | None) -> int:
    """Re-score every entry's predictions file; compare with the record's per-seed figures."""
    from kbench.evaluate import evaluate_tuning, read_predictions
    from kbench.leaderboard.schema import parse_record
    from kbench.records import TuningResult
    checked, worst, failed, dumped, evaluators = 0, 0.0, [], {}, {}
    for root in roots:
        for result in sorted(root.glob("*/*/*/result.json")):
            record = parse_record(result)
            preds = result.parent / PREDS_FILE
            if not preds.exists():
                continue
            stored = read_seed_predictions(preds)
            frame = stored[min(stored)]
            if isinstance(record, TuningResult):
                new = evaluate_tuning(record.dataset.name, frame, solver=record.solver, split=record.split,
                                      part=record.part, method=record.method)
            else:
                key = (record.dataset.name, record.split, record.part, record.reference is None)
                if key not in evaluators:
                    evaluators[key] = Evaluator(record.dataset.name, split=record.split, part=record.part,
                                                reference=None if record.reference is None else "default")
                ev = evaluators[key]
                if ev.reference_name != record.reference:
                    failed.append(f"{result}: reference {ev.reference_name!r}, record {record.reference!r}")
                new = ev(frame, method=record.method, allow_partial=record.counts.coverage < 1)
            claimed = record.seeds.per_seed[0] if record.seeds else record.overall
            got = new.overall
            diffs = [abs(float(v) - float(got[k])) for k, v in _numbers(claimed).items() if k in got
                     and got[k] is not None and v == v]
            missing = [k for k in _numbers(claimed) if got.get(k) is None]
            if missing:
                failed.append(f"{result}: {missing} not re-scored")
            worst = max([worst] + diffs)
            checked += 1
            dumped[str(result.relative_to(root.parent))] = new.model_dump(
                mode="json", exclude={"dataset", "predictions", "date", "kbench_version", "environment"})
    print(f"{checked} entries re-scored from their predictions files; largest absolute difference "
          f"from the records' figures: {worst:.3g}")
    if dump:
        dump.write_text(json.dumps(dumped, indent=1, sort_keys=True) + "\n")
    for line in failed:
        print(line)
    return 1 if failed else 0


def store_seeds(roots: list[Path]) -> int:
    """Rewrite every entry's ``preds.csv.gz`` (the first seed's predictions) as ``preds.parquet``.

    A deterministic method's seeds share one set of predictions (``kbench run`` copies the first
    seed's file to the others; its record says ``extra.stochastic: false``), so its file is stored
    for every seed and the whole record is re-scored; another entry stores its first seed only and
    stays a one-seed entry until it is re-run. Each converted entry is re-scored before it is written.
    """
    from kbench.leaderboard.rescore import Rescorer
    from kbench.leaderboard.schema import parse_record
    from kbench.leaderboard.store import PREDS_FILE, seed_predictions_parquet
    from kbench.output_files import atomic_write_bytes, atomic_write_text
    from kbench.prediction_files import read_predictions, sha256_bytes
    rescorer, converted, before, after, complete = Rescorer(), 0, 0, 0, 0
    for root in roots:
        for result in sorted(root.glob("*/*/*/result.json")):
            record, old = parse_record(result), result.parent / "preds.csv.gz"
            if not old.exists():
                continue
            frame, digest = read_predictions(old)
            if record.predictions.sha256 != digest:
                raise KbenchInputError(f"{old}: sha256 {digest[:12]}… is not the record's; left as it is.")
            seeds = record.seeds.seeds if record.seeds else [0]
            deterministic = (record.extra or {}).get("stochastic") is False and record.seeds is not None
            frames = {seed: frame for seed in seeds} if deterministic else {seeds[0]: frame}
            done = rescorer.verify(record, frames, str(result.parent))
            data = seed_predictions_parquet(frames)
            record.predictions.path, record.predictions.sha256 = PREDS_FILE, sha256_bytes(data)
            atomic_write_bytes(result.parent / PREDS_FILE, data)
            atomic_write_text(result, record_json(record))
            before, after = before + old.stat().st_size, after + len(data)
            old.unlink()
            converted += 1
            complete += done.complete
    print(f"{converted} entries stored as {PREDS_FILE} ({complete} with every seed): {before:,} -> {after:,} bytes")
    return 0


def run(args) -> int:
    """Run ``kbench leaderboard rescore`` with parsed arguments; the exit code."""
    if args.relabel:
        return relabel(Path(args.leaderboard), args.relabel, args.methods)
    if args.store_seeds:
        return store_seeds([Path(args.leaderboard)] + [Path(r) for r in args.extra_root])
    if args.check:
        return check([Path(args.leaderboard)] + [Path(r) for r in args.extra_root], args.dump)
    for ds in args.datasets:
        for entry in sorted(Path(args.leaderboard, ds).glob("*/*")):
            if (entry / "result.json").exists():
                new = rescore(entry, Path(args.results))
                o = new.metrics["overall"]
                print(f"{entry}: reference {new.reference}, speed-up {o.get('speedup_geomean')}, "
                      f"LoP@30 {o.get('lop_at_30'):.4f}")
    return 0


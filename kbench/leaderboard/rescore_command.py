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
their committed predictions, every stored seed: the record's ``extra.relabel`` names the earlier
dataset and its figures, and the old and new figures are printed side by side. The models stay
those trained on the earlier labels; re-run the entry with ``kbench run`` to train them again.

    kbench leaderboard rescore --stored [DATASET ...] [--leaderboard leaderboard]

re-scores every entry (of the DATASETs named, else all) from its committed ``preds.parquet`` with the
current Evaluator and rewrites its record: the one command that brings the stored records up to a
new scoring (new metrics, a new record schema version). An entry storing every seed's predictions
is re-aggregated whole; an entry storing only its first seed (one-seed, ‡) keeps its stored figures
and gains the new ones from the seeds it stores (its per-seed rows of the other seeds stay as they
were). The record's predictions reference, extra figures, date, kbench version and environment (the
software that made the predictions) stay as they are.

    kbench leaderboard rescore --store-seeds [--extra-root DIR]

rewrites every entry's single-seed ``preds.csv.gz`` as ``preds.parquet`` (the store's format,
every seed where they are known: a deterministic method's seeds share one file), after
re-scoring the record from it, and updates the record's ``predictions`` path and sha256.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench.core.output_files import atomic_write_bytes, atomic_write_text
from kbench.data.dataset import load
from kbench.leaderboard.rescorer import Rescorer
from kbench.leaderboard.schema import parse_record
from kbench.leaderboard.store import (
    PREDS_FILE,
    frame_digest,
    read_entries,
    read_seed_predictions,
    record_json,
    seed_predictions_parquet,
)
from kbench.scoring.evaluate import Evaluator, evaluate_tuning
from kbench.scoring.prediction_files import read_predictions, sha256_bytes
from kbench.scoring.records import RECORD_SCHEMA_VERSION, EvaluationResult, TuningResult, _mean_std, aggregate_seeds


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
        seeds = sorted(stored)
        new = aggregate_seeds([evaluators[key](stored[seed], method=old.method, allow_partial=old.counts.coverage < 1)
                               for seed in seeds], seeds)
        before = old.overall
        new.predictions, new.date = old.predictions, old.date
        # the valid-part figures were scored on the earlier labels and their predictions are not stored:
        # they leave the record rather than stand beside test figures of other labels
        new.extra = {**{k: v for k, v in (old.extra or {}).items() if k != "valid"}, "relabel": {
            "from_dataset": old.dataset.model_dump(mode="json"), "seeds_before": old.seeds.seeds if old.seeds else [0],
            "before": {k: before.get(k) for k in ("top1", "speedup_geomean", "geomean_slowdown", "lop_mean")},
            "note": f"re-scored from the committed predictions of seeds {', '.join(map(str, seeds))} (models "
                    f"trained on {old.dataset.name} {old.dataset.version}) on {ds.name} {ds.version}; re-run the "
                    "entry with kbench run to train on the new labels"}}
        result.write_text(record_json(new))
        meta_path = result.parent / "meta.json"  # the entry's metadata names the dataset it is scored on
        meta = json.loads(meta_path.read_text())
        meta["dataset"] = new.dataset.model_dump(mode="json")
        meta_path.write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
        after = new.overall
        print(f"{result.parent.relative_to(root)}: {len(seeds)} seeds "
              + ", ".join(f"{k} {before.get(k):.4f} -> {after.get(k):.4f}" for k in
                          ("top1", "speedup_geomean", "geomean_slowdown") if before.get(k) is not None))
        done += 1
    print(f"{done} entries re-scored on {ds.name} {ds.version}")
    return 0


def _numbers(d: dict) -> dict:
    return {k: v for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def check(roots: list[Path], dump: Path | None) -> int:
    """Re-score every entry's predictions file; compare with the record's per-seed figures."""
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


def _added(old, new):
    """``old`` with every key of ``new`` that ``old`` lacks, at any depth (old values are kept)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return old
    out = dict(old)
    for key, value in new.items():
        out[key] = _added(old[key], value) if key in old else value
    return out


def rescored_record(record, seed_frames: dict[int, pd.DataFrame], rescorer, source: str):
    """The record re-scored from its stored seeds' predictions (see ``--stored`` above)."""
    seeds = list(record.seeds.seeds) if record.seeds else [min(seed_frames)]
    scored, by_digest = {}, {}
    for seed in seeds:
        if seed in seed_frames:
            digest = frame_digest(seed_frames[seed])
            if digest not in by_digest:  # a deterministic method's seeds share one set of predictions
                by_digest[digest] = rescorer.score(record, seed_frames[seed], f"{source} (seed {seed})")
            scored[seed] = by_digest[digest]
    if not scored:
        raise KbenchInputError(f"{source}: no stored predictions of the record's seeds {seeds}; nothing to re-score.")
    if len(scored) == len(seeds):
        new = aggregate_seeds([scored[s] for s in seeds], seeds) if record.seeds else scored[seeds[0]]
    else:  # a one-seed entry: its stored figures stay, the new ones come from the stored seeds
        agg = aggregate_seeds([scored[s] for s in sorted(scored)], sorted(scored))
        new = record.model_copy(deep=True)
        new.schema_version = RECORD_SCHEMA_VERSION
        new.metrics = _added(record.metrics, agg.metrics)
        per_seed = [dict(p) for p in record.seeds.per_seed]
        for i, seed in enumerate(seeds):
            if seed in scored:
                per_seed[i] = _added(per_seed[i], _numbers_or_none(scored[seed].overall))
        for key in per_seed[seeds.index(min(scored))]:
            if key not in new.seeds.mean:
                new.seeds.mean[key], new.seeds.std[key] = _mean_std([p.get(key) for p in per_seed])
        new.seeds.per_seed = per_seed
    new.predictions, new.extra, new.date = record.predictions, record.extra, record.date
    # the software that trained the model and wrote the predictions, not the one re-scoring them
    new.kbench_version, new.method, new.environment = record.kbench_version, record.method, record.environment
    return new


def _numbers_or_none(d: dict) -> dict:
    return {k: v for k, v in d.items() if isinstance(v, (int, float)) or v is None}


def rescore_stored(root: Path, datasets: list[str]) -> int:
    """Re-score every entry of ``datasets`` (all when empty) from its stored predictions; rewrite its record."""
    rescorer, done = Rescorer(), 0
    groups = read_entries(root)
    unknown = sorted(set(datasets) - {d for d, _ in groups})
    if unknown:
        raise KbenchInputError(f"no entries of {', '.join(unknown)} under {root}; its datasets are "
                               f"{', '.join(sorted({d for d, _ in groups}))}.")
    for (dataset, split), entries in groups.items():
        if datasets and dataset not in datasets:
            continue
        for entry in entries:
            rel = f"{dataset}/{split}/{entry.folder.name}"
            new = rescored_record(entry.record, entry.seed_preds(), rescorer, rel)
            atomic_write_text(entry.folder / "result.json", record_json(new))
            done += 1
        print(f"{dataset}/{split}: {len(entries)} entries re-scored from their stored predictions")
    print(f"{done} entries re-scored; rebuild the site with `kbench leaderboard build`")
    return 0


def run(args) -> int:
    """Run ``kbench leaderboard rescore`` with parsed arguments; the exit code."""
    if args.stored:
        return rescore_stored(Path(args.leaderboard), args.datasets)
    if args.relabel is not None and not str(args.relabel).strip():  # never silently a plain re-score
        raise KbenchInputError("--relabel: an empty dataset name; give the dataset whose labels were corrected "
                               "(e.g. --relabel h100).")
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


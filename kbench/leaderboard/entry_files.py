"""The files a submission is made of, written for the user: ``kbench record aggregate`` lays the
``kbench evaluate --json`` records of several seeds out as ``kbench run`` does, and ``kbench submit
--init-meta`` writes a ``meta.json`` template.

An aggregated entry folder (what ``kbench submit result.json --meta meta.json`` reads)::

    result.json               every seed's record joined (kbench.scoring.records.aggregate_seeds)
    seed-<k>/result.json      seed k's record, its predictions.path pointing at the file beside it
    seed-<k>/preds.csv.gz     seed k's predictions, byte for byte (gzipped first when given plain)
"""

from __future__ import annotations

import datetime
import gzip
import json
from pathlib import Path

from kbench.core.errors import KbenchInputError
from kbench.core.output_files import atomic_write_bytes, atomic_write_text, check_output, check_output_folder
from kbench.core.version import __version__
from kbench.leaderboard.schema import PLACEHOLDER, SubmissionMeta, parse_record, placeholders
from kbench.leaderboard.store import read_seed_predictions
from kbench.leaderboard.submit import SEED_PREDS
from kbench.scoring.prediction_files import max_predictions_bytes, read_input_bytes, sha256_bytes
from kbench.scoring.records import aggregate_seeds

GZIP_MAGIC = b"\x1f\x8b"


def _predictions_file(record_path: Path, record) -> Path:
    """The predictions file a record was scored from: its ``predictions.path`` as given to ``kbench evaluate``
    (relative to the working folder), else relative to the record's folder."""
    given = record.predictions.path
    if not given:
        raise KbenchInputError(f"{record_path}: the record names no predictions file (predictions.path); "
                               "score it with `kbench evaluate PREDS --json RECORD`.")
    for candidate in (Path(given), record_path.parent / given):
        if candidate.is_file():
            return candidate
    raise KbenchInputError(f"{record_path}: its predictions file {given!r} is not found (looked in the working "
                           f"folder and in {record_path.parent}); run from where it was scored, or move it beside "
                           "the record.")


def aggregate_records(record_paths: list[str | Path], out: str | Path, seeds: list[int] | None = None,
                      method: str | None = None) -> Path:
    """Join the one-seed records of ``record_paths`` (seed ``seeds[i]``, default 0, 1, ...) into an entry
    folder ``out``; returns the path of its ``result.json``. Refuses records of different datasets,
    splits, parts, methods or kbench versions, a predictions file that is not the one a record was scored
    from (sha256), and an ``out`` that holds an input."""
    paths = [Path(p) for p in record_paths]
    if not paths:
        raise KbenchInputError("give the kbench evaluate --json record of every seed")
    seeds = list(range(len(paths))) if seeds is None else list(seeds)
    if len(seeds) != len(paths):
        raise KbenchInputError(f"--seeds lists {len(seeds)} seed(s) for {len(paths)} record(s); give one per record")
    if len(set(seeds)) != len(seeds):
        raise KbenchInputError(f"--seeds {seeds} repeats a seed")
    records = [parse_record(p) for p in paths]
    kinds = {type(r).__name__ for r in records}
    if len(kinds) > 1:
        raise KbenchInputError(f"the records mix kinds ({', '.join(sorted(kinds))})")
    already = [str(p) for p, r in zip(paths, records) if r.seeds and len(r.seeds.seeds) > 1]
    if already:
        raise KbenchInputError(f"{', '.join(already)}: already an all-seeds record; give one record per seed")
    for what in ("dataset", "split", "part", "kbench_version"):
        values = {json.dumps(getattr(r, what).model_dump() if what == "dataset" else getattr(r, what))
                  for r in records}
        if len(values) > 1:
            raise KbenchInputError(f"the records differ in {what} ({'; '.join(sorted(values))}): one entry is one "
                                   "method on one dataset, split and part, scored by one kbench version")
    names = {r.method for r in records if r.method}
    if method is None and len(names) > 1:
        raise KbenchInputError(f"the records name different methods ({', '.join(sorted(names))}); give --method")
    method = method or (names.pop() if names else None)
    if not method:
        raise KbenchInputError("the records name no method; give --method NAME (kbench evaluate --method NAME "
                               "stores it)")
    preds = [_predictions_file(p, r) for p, r in zip(paths, records)]
    out = check_output_folder(out, inputs=[*paths, *preds], option="--out")
    seed_records = []
    for seed, path, record, pred in zip(seeds, paths, records, preds):
        data = read_input_bytes(pred, max_predictions_bytes())
        if record.predictions.sha256 and sha256_bytes(data) != record.predictions.sha256:
            raise KbenchInputError(f"{pred}: sha256 {sha256_bytes(data)[:16]}… is not {path}'s predictions.sha256 "
                                   f"{record.predictions.sha256[:16]}…: not the file that record was scored from")
        stored = data if data[:2] == GZIP_MAGIC else gzip.compress(data, mtime=0)
        target = out / SEED_PREDS.format(seed=seed)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, stored)
        one = record.model_copy(deep=True)
        one.method = method
        one.predictions.path, one.predictions.sha256 = target.name, sha256_bytes(stored)
        atomic_write_text(target.parent / "result.json", one.model_dump_json(indent=2) + "\n")
        seed_records.append(one)
    joined = aggregate_seeds(seed_records, seeds)
    joined.predictions.path = SEED_PREDS.format(seed=seeds[0])
    atomic_write_text(out / "result.json", joined.model_dump_json(indent=2) + "\n")
    return out / "result.json"


def predictions_csv(parquet: str | Path, out: str | Path, seed: int | None = None) -> tuple[int, int]:
    """One seed's predictions from a leaderboard ``preds.parquet`` (a ``seed`` column, list-valued
    ``ranking``) as the CSV ``kbench evaluate`` reads (``problem_id,ranking`` with ';'-joined kernels;
    gzipped when ``out`` ends in .gz). ``seed`` defaults to the first stored one. Returns (seed, rows)."""
    parquet = Path(parquet)
    seeds = read_seed_predictions(parquet)
    if not seeds:
        raise KbenchInputError(f"{parquet}: stores no predictions")
    seed = min(seeds) if seed is None else seed
    if seed not in seeds:
        raise KbenchInputError(f"{parquet}: no seed {seed}; it stores seeds {sorted(seeds)}")
    out = check_output(out, inputs=[parquet], option="--out")
    data = seeds[seed].to_csv(index=False, lineterminator="\n").encode("utf-8")
    atomic_write_bytes(out, gzip.compress(data, mtime=0) if out.name.endswith(".gz") else data)
    return seed, len(seeds[seed])


def meta_template(record_path: str | Path | None = None) -> dict:
    """A ``meta.json`` with every field of the submission schema: taken from the record where it says
    (method, dataset, split, kbench version), today's date, the optional fields' defaults, and elsewhere
    a ``FILL IN:`` placeholder that says what goes there (its description in the schema)."""
    fields = SubmissionMeta.model_fields
    doc: dict = {}
    for name, info in fields.items():
        # an optional field keeps its default (display_name null: the method's name is shown)
        doc[name] = PLACEHOLDER + (info.description or name.replace("_", " ")) if info.is_required() else info.default
    doc["description"] = PLACEHOLDER + "one line: what the method is"
    doc["kbench_version"] = __version__
    doc["date"] = datetime.date.today().isoformat()
    doc["external_data"] = PLACEHOLDER + "true or false: " + fields["external_data"].description
    doc["dataset"] = {"name": PLACEHOLDER + "dataset name", "version": PLACEHOLDER + "dataset version",
                      "checksum": PLACEHOLDER + "the dataset's manifest checksum (kbench info NAME)"}
    if record_path is not None:
        record = parse_record(Path(record_path))
        doc.update(method=record.method or doc["method"], dataset=record.dataset.model_dump(),
                   split=record.split, kbench_version=record.kbench_version)
    return doc


def write_meta_template(path: str | Path, record_path: str | Path | None = None) -> list[str]:
    """Write :func:`meta_template` to ``path`` (never over an existing file); returns the fields to fill in."""
    path = Path(path)
    if path.exists():
        raise KbenchInputError(f"{path} exists; give another path for the template (it is never overwritten)")
    doc = meta_template(record_path)
    atomic_write_text(path, json.dumps(doc, indent=2) + "\n")
    return placeholders(doc)

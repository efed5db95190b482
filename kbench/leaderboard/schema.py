"""JSON Schemas of the leaderboard files, and the validator of a leaderboard folder.

Three schemas ship in ``kbench/schemas/`` (regenerate with ``kbench leaderboard schema --write``):

* ``result.schema.json``: the result record of kernel selection, ``EvaluationResult.model_json_schema()``;
* ``tuning-result.schema.json``: the result record of a tuning-parameter dataset
  (``record_type`` ``kbench.tuning-evaluation``), ``TuningResult.model_json_schema()``;
* ``submission.schema.json``: the submission metadata, ``SubmissionMeta.model_json_schema()``.

:func:`validate_tree` checks every file under a leaderboard folder: the layout,
both schemas, and the consistency between a record, its metadata, its
predictions file and the installed dataset.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kbench.core.errors import KbenchInputError, read_json_object
from kbench.core.identifiers import IDENTIFIER_PATTERN, identifier_problem
from kbench.leaderboard.datasets import load_dataset
from kbench.leaderboard.gpu_names import gpu_problem
from kbench.leaderboard.policy import MIN_SEEDS, RELABEL_KEY, ROLES
from kbench.scoring.prediction_files import sha256_bytes
from kbench.scoring.records import RECORD_SCHEMA_VERSION, DatasetRef, EvaluationResult, TuningResult, VerificationRecord

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"
SCHEMA_FILES = {"result": "result.schema.json", "tuning-result": "tuning-result.schema.json",
                "submission": "submission.schema.json"}
#: record types and the (schema key, model) that validates each
RECORD_TYPES = {"kbench.evaluation": ("result", EvaluationResult),
                "kbench.tuning-evaluation": ("tuning-result", TuningResult)}
META_SCHEMA_VERSION = 1
METHOD_PATTERN = IDENTIFIER_PATTERN  # a method id is a folder name: kbench.core.identifiers' rule
URL_PATTERN = r"^https?://[^\s]+$"
# code: a URL, or a path inside the kbench repository (baselines/xgboost.py)
CODE_PATTERN = r"^(https?://[^\s]+|[A-Za-z0-9_][A-Za-z0-9_./-]*)$"
DATE_PATTERN = r"^\d{4}-\d{2}-\d{2}$"
#: the mark of a meta.json template value still to fill in (``kbench submit --init-meta``)
PLACEHOLDER = "FILL IN: "


class SubmissionMeta(BaseModel):
    """Who made an entry, how to reproduce it, how big and how fast it is (``meta.json``)."""

    model_config = ConfigDict(extra="forbid", title="kbench leaderboard submission")
    record_type: Literal["kbench.submission"] = "kbench.submission"
    schema_version: int = META_SCHEMA_VERSION
    method: str = Field(pattern=METHOD_PATTERN,
                        description="method id: lower-case letters, digits, '.', '_', '+', '-' (the folder name)")
    display_name: str | None = Field(None, description="name shown on the leaderboard (default: method)")
    description: str = Field("", description="one line")
    role: Literal[ROLES] = Field("entry", description="entry (ranked), floor or ceiling (reference rows)")
    paper: str | None = Field(..., pattern=URL_PATTERN, description="paper URL, or null")
    code: str | None = Field(..., pattern=CODE_PATTERN,
                             description="code URL, or a path in the kbench repository, or null")
    contact: str = Field(min_length=1, description="e-mail address, GitHub handle or team name")
    command: str = Field(min_length=1, description="the one command that reproduces the result")
    n_parameters: int | None = Field(..., ge=0, description="number of learned parameters, or null")
    model_size_bytes: int | None = Field(..., ge=0, description="size of the saved model in bytes, or null")
    training_hardware: str = Field(min_length=1, description="where it was trained (CPU/GPU model, cores)")
    training_time_s: float | None = Field(..., ge=0, description="training time per seed, seconds")
    inference_latency_ms: float | None = Field(
        ..., ge=0, description="inference latency per decision on CPU, batch 1 (one problem), milliseconds")
    inference_hardware: str | None = Field(None, description="the CPU the latency was measured on")
    external_data: bool = Field(description="trained with data outside the kbench dataset's train part")
    training_set: str | None = Field(
        None, description="how much of the train part it was trained on, when not all of it "
                          "(e.g. '12 × 8,192 sampled problems'); shown on the board")
    kbench_version: str = Field(min_length=1)
    dataset: DatasetRef
    split: str = Field(min_length=1)
    date: str | None = Field(None, pattern=DATE_PATTERN, description="submission date, YYYY-MM-DD")


# ----------------------------------------------------------------------------- schemas
def generated_schemas() -> dict[str, dict]:
    """The schemas as the models define them now."""
    return {"result": EvaluationResult.model_json_schema(), "tuning-result": TuningResult.model_json_schema(),
            "submission": SubmissionMeta.model_json_schema()}


def schema_text(schema: dict) -> str:
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schemas(folder: Path = SCHEMA_DIR) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for key, schema in generated_schemas().items():
        path = folder / SCHEMA_FILES[key]
        path.write_text(schema_text(schema), encoding="utf-8")
        out.append(path)
    return out


def shipped_schema(key: str) -> dict:
    path = SCHEMA_DIR / SCHEMA_FILES[key]
    if not path.exists():  # a source checkout before `kbench leaderboard schema --write`
        return generated_schemas()[key]
    return json.loads(path.read_text(encoding="utf-8"))


def _schema_errors(doc, key: str) -> list[str]:
    """JSON Schema errors (jsonschema when installed; pydantic checks the same model either way)."""
    try:
        import jsonschema
    except ImportError:
        return []
    validator = jsonschema.Draft202012Validator(shipped_schema(key))
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    missing: dict[str, list[str]] = {}
    other = []
    for e in errors:
        where = '/'.join(map(str, e.absolute_path)) or '(top level)'
        if e.validator == "required" and isinstance(e.instance, dict):
            missing.setdefault(where, []).extend(f for f in e.validator_value
                                                 if f not in e.instance and f not in missing.get(where, []))
        else:
            other.append(f"{where}: {e.message}")
    return _missing_lines(missing) + other


def _missing_lines(missing: dict[str, list[str]]) -> list[str]:
    """One line per object naming every required field it lacks (not one line each, cut at ten)."""
    return [f"{where}: missing required field(s) {', '.join(fields)}" for where, fields in missing.items()]


def _pydantic_errors(exc: ValidationError) -> list[str]:
    missing: dict[str, list[str]] = {}
    other = []
    for e in exc.errors():
        if e["type"] == "missing" and e["loc"]:
            missing.setdefault("/".join(map(str, e["loc"][:-1])) or "(top level)", []).append(str(e["loc"][-1]))
        else:
            other.append(f"{'/'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}")
    return _missing_lines(missing) + other


def placeholders(doc, prefix: str = "") -> list[str]:
    """The fields of a meta.json document that still hold a template placeholder (:data:`PLACEHOLDER`)."""
    out = []
    for key, value in (doc.items() if isinstance(doc, dict) else ()):
        if isinstance(value, dict):
            out += placeholders(value, f"{prefix}{key}/")
        elif isinstance(value, str) and value.startswith(PLACEHOLDER):
            out.append(f"{prefix}{key}")
    return out


def parse_record(path: Path, doc: dict | None = None) -> EvaluationResult | TuningResult:
    """Read and validate a result record (kernel selection or tuning); one KbenchInputError lists what is wrong."""
    doc = read_json_object(path) if doc is None else doc
    record_type = doc.get("record_type", "kbench.evaluation")
    if record_type not in RECORD_TYPES:
        hint = " (this looks like a meta.json: pass it with --meta)" if record_type == "kbench.submission" else ""
        raise KbenchInputError(f"{path}: not a kbench result record (record_type {record_type!r}; expected one of "
                               f"{sorted(RECORD_TYPES)}){hint}.")
    key, model = RECORD_TYPES[record_type]
    version = doc.get("schema_version", 1)
    if isinstance(version, int) and not isinstance(version, bool) and version > RECORD_SCHEMA_VERSION:
        raise KbenchInputError(f"{path}: schema_version {version} was written by a newer kbench (this one reads "
                               f"result records up to schema_version {RECORD_SCHEMA_VERSION}); upgrade kbench.")
    errors = _schema_errors(doc, key)
    try:
        record = model.model_validate(doc)
    except ValidationError as exc:
        errors = errors or _pydantic_errors(exc)
        record = None
    if errors:
        raise KbenchInputError(f"{path}: does not match the result record schema "
                               f"(kbench/schemas/{SCHEMA_FILES[key]}):\n  - " + "\n  - ".join(errors))
    return record


def parse_verification(path: Path):
    """Read and validate a GPU re-timing record (``verification.json`` beside an entry's result,
    written by ``kbench verify-on-gpu``); one KbenchInputError names the file and what is wrong."""
    doc = read_json_object(path)
    try:
        record = VerificationRecord.model_validate(doc)
    except ValidationError as exc:
        raise KbenchInputError(f"{path}: not a valid GPU verification record (kbench.records.VerificationRecord; "
                               "re-write it with 'kbench verify-on-gpu --out DIR --score-only'):\n  - "
                               + "\n  - ".join(_pydantic_errors(exc))) from None
    impossible = figure_problems(record)  # NaN, negative: refused before anything renders them
    if impossible:
        raise KbenchInputError(f"{path}: " + "; ".join(impossible))
    return record


def parse_meta(path: Path, doc: dict | None = None) -> SubmissionMeta:
    """Read and validate a submission metadata file."""
    doc = read_json_object(path) if doc is None else doc
    left = placeholders(doc)
    if left:
        raise KbenchInputError(f"{path}: still holds the template's placeholder ({PLACEHOLDER!r}) in "
                               f"{', '.join(left)}; fill them in (each placeholder says what goes there).")
    errors = _schema_errors(doc, "submission")
    try:
        meta = SubmissionMeta.model_validate(doc)
    except ValidationError as exc:
        errors = errors or _pydantic_errors(exc)
        meta = None
    if errors:
        raise KbenchInputError(f"{path}: does not match the submission schema "
                               f"(kbench/schemas/{SCHEMA_FILES['submission']}):\n  - " + "\n  - ".join(errors))
    return meta


# ----------------------------------------------------------------------------- consistency
def record_problems(record: EvaluationResult | TuningResult, meta: SubmissionMeta | None = None,
                    min_seeds: int = MIN_SEEDS) -> list[str]:
    """Rule and consistency problems of one record (and its metadata); empty when fine."""
    out = []
    if record.part != "test":
        out.append(f"the record scores part {record.part!r}; leaderboard entries score 'test'")
    if isinstance(record, TuningResult):
        if record.metrics.get("n_missing"):
            out.append(f"{record.metrics['n_missing']} test problem(s) without a prediction: every test "
                       "problem must be predicted")
    elif record.counts.coverage < 1.0:
        out.append(f"coverage {record.counts.coverage:.2%}: every test problem must be predicted")
    if not record.method or not re.match(METHOD_PATTERN, record.method):
        out.append(f"method {record.method!r} is missing or not a valid id ({METHOD_PATTERN})")
    seeds = record.seeds
    n_seeds = len(seeds.seeds) if seeds else 1
    relabel = (record.extra or {}).get(RELABEL_KEY) if isinstance(record, EvaluationResult) else None
    if relabel is not None:  # rule 7: re-scored on corrected labels from the stored seed's predictions
        before = relabel.get("seeds_before") if isinstance(relabel, dict) else None
        from_ds = relabel.get("from_dataset") if isinstance(relabel, dict) else None
        if not isinstance(before, list) or len(before) < min_seeds:
            out.append(f"extra.{RELABEL_KEY}.seeds_before must list the {min_seeds}+ seeds the entry had before "
                       "it was re-scored on corrected labels")
        elif not isinstance(from_ds, dict) or from_ds.get("name") != record.dataset.name or \
                from_ds.get("checksum") == record.dataset.checksum:
            out.append(f"extra.{RELABEL_KEY}.from_dataset must name an earlier version of {record.dataset.name}")
        elif n_seeds < 1 or (seeds and seeds.seeds[0] != before[0]):
            out.append(f"an entry re-scored on corrected labels keeps its first seed ({before[0]})")
    elif n_seeds < min_seeds:
        out.append(f"{n_seeds} seed(s); the rules ask for at least {min_seeds} "
                   "(aggregate them with kbench.records.aggregate_seeds)")
    if seeds and len(seeds.per_seed) != len(seeds.seeds):
        out.append(f"seeds lists {len(seeds.seeds)} seeds but per_seed has {len(seeds.per_seed)} entries")
    if seeds and len(set(seeds.seeds)) != len(seeds.seeds):
        out.append(f"repeated seeds {seeds.seeds}")
    if seeds and len(seeds.per_seed) == len(seeds.seeds):
        out += seed_inconsistencies(record)
    if meta is not None:
        if meta.method != record.method:
            out.append(f"meta.json method {meta.method!r} differs from the record's {record.method!r}")
        if meta.dataset != record.dataset:
            out.append(f"meta.json dataset {meta.dataset.model_dump()} differs from the record's "
                       f"{record.dataset.model_dump()}")
        if meta.split != record.split:
            out.append(f"meta.json split {meta.split!r} differs from the record's {record.split!r}")
        if meta.kbench_version != record.kbench_version:
            out.append(f"meta.json kbench_version {meta.kbench_version!r} differs from the record's "
                       f"{record.kbench_version!r}")
    return out


def dataset_problems(record: EvaluationResult | TuningResult) -> list[str]:
    """The record's dataset must be the installed one (same version and checksum)."""
    try:
        ds = load_dataset(record.dataset.name)
    except KbenchInputError as exc:
        return [f"dataset {record.dataset.name!r} cannot be loaded: {exc}"]
    out = []
    if record.dataset.version != ds.version:
        out.append(f"dataset {ds.name} version {record.dataset.version!r} in the record, "
                   f"{ds.version!r} installed")
    if record.dataset.checksum != ds.checksum:
        out.append(f"dataset {ds.name} checksum {record.dataset.checksum[:12]}… in the record, "
                   f"{ds.checksum[:12]}… installed: the record was scored on other data")
    if record.split not in ds.split_names:
        out.append(f"dataset {ds.name} has no split {record.split!r} ({', '.join(ds.split_names)})")
    return out


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def seed_inconsistencies(record: EvaluationResult | TuningResult) -> list[str]:
    """The seed summary must be what its per-seed scores give: mean, unbiased std, overall metrics."""
    s = record.seeds
    out = []
    overall = record.overall if isinstance(record.metrics, dict) else {}
    for key, mean in s.mean.items():
        vals = [p.get(key) for p in s.per_seed]
        vals = [v for v in vals if isinstance(v, (int, float)) and not math.isnan(v)]
        want_mean = statistics.fmean(vals) if vals else None
        want_std = statistics.stdev(vals) if len(vals) > 1 else None
        if not _close(mean, want_mean):
            out.append(f"seeds.mean.{key} = {mean} but the per-seed scores average {want_mean}")
        if not _close(s.std.get(key), want_std):
            out.append(f"seeds.std.{key} = {s.std.get(key)} but the per-seed scores give {want_std} (ddof=1)")
        if key in overall and not _close(overall.get(key), mean):
            out.append(f"metrics.overall.{key} = {overall.get(key)} but seeds.mean.{key} = {mean}")
    return out[:8]


# ----------------------------------------------------------------------------- the tree
#: an entry's stored predictions: every stored seed's test predictions (kbench.leaderboard.store)
PREDS_FILE = "preds.parquet"
ENTRY_FILES = {"result.json", "meta.json", PREDS_FILE, "verification.json"}
GENERATED = {"README.md", "site"}
#: the transfer track's records (their own layout, read by kbench.leaderboard.transfer)
OWN_LAYOUT = {"transfer"}


def verification_problems(path: Path, record, dataset: str, split: str, method: str,
                          first_seed_sha256: str | None = None) -> list[str]:
    """What is wrong with an entry's GPU re-timing record (``verification.json``), if anything."""
    try:
        v = parse_verification(path)
    except KbenchInputError as exc:
        return [str(exc).split("\n")[0].replace(str(path.parent) + "/", "")]
    out = []
    if (v.dataset.name, v.split, v.part) != (dataset, split, "test"):
        out.append(f"verification.json is for {v.dataset.name}/{v.split}/{v.part}, not {dataset}/{split}/test")
    if v.method not in (None, method):
        out.append(f"verification.json method {v.method!r} is not the folder's {method!r}")
    if v.dataset.checksum != record.dataset.checksum:
        out.append("verification.json was made on another version of the dataset than result.json")
    # a re-timing on another GPU model measures other hardware: no confirmation of this board's figures
    wrong_gpu = gpu_problem(dataset, v.device)
    if wrong_gpu:
        out.append(wrong_gpu)
    # a re-run entry gets new predictions: the old re-timing then measured choices the entry no longer makes.
    # It timed the first seed's predictions as a CSV (gzip, as kbench.leaderboard.store.predictions_csv_gz
    # writes them): ``first_seed_sha256`` is that file's sha256, computed by the caller that reads them.
    timed = v.predictions.sha256
    if not timed:
        out.append("verification.json names no predictions.sha256: which predictions it timed cannot be checked "
                   "(score it again with kbench verify-on-gpu --score-only)")
    if first_seed_sha256 and timed and first_seed_sha256 != timed:
        out.append(f"verification.json re-timed other predictions (sha256 {timed[:12]}…) than the entry's first "
                   f"seed ({first_seed_sha256[:12]}…): run kbench verify-on-gpu on them again, or remove it")
    return out


#: figures of a re-timing that may be negative (a share of the headroom closed: a choice slower than the
#: reference closes a negative share)
SIGNED_FIGURES = frozenset({"headroom_closed"})


def figure_problems(v) -> list[str]:
    """Figures of a re-timing record that no timing can give: not finite, negative, or more problems
    measured than planned."""
    out = []

    def walk(value, where):
        if isinstance(value, dict):
            for k, item in value.items():
                walk(item, f"{where}.{k}" if where else str(k))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk(item, f"{where}[{i}]")
        elif isinstance(value, float) and not math.isfinite(value):
            out.append(f"verification.json {where} is {value}: every figure must be a finite number")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0 \
                and where.rsplit(".", 1)[-1] not in SIGNED_FIGURES:
            out.append(f"verification.json {where} is {value}: no timing gives a negative figure")

    walk({"measured": v.measured.model_dump(), "table": v.table.model_dump(),
          "live": v.live.model_dump() if v.live is not None else None,
          "problems_planned": v.problems_planned, "problems_measured": v.problems_measured}, "")
    if v.problems_measured > v.problems_planned:
        out.append(f"verification.json measured {v.problems_measured:,} problems of the {v.problems_planned:,} "
                   "planned")
    return out[:8]


def validate_tree(root: Path, check_data: bool = True) -> dict:
    """Validate every file under a leaderboard folder; raises one KbenchInputError listing all problems.

    Returns ``{"entries": n, "files": n}`` when everything is valid.
    """
    root = Path(root)
    if not root.is_dir():
        raise KbenchInputError(f"{root}: leaderboard folder not found.")
    problems: list[str] = []
    entries = files = 0
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in GENERATED | OWN_LAYOUT or rel.parts[0].startswith("."):
            continue  # generated by `kbench leaderboard build` (checked with `build --check`)
        if path.is_dir():
            if len(rel.parts) > 3:
                problems.append(f"{rel}: unexpected folder (layout: <dataset>/<split>/<method>/)")
            continue
        files += 1
        if len(rel.parts) != 4 or rel.name not in ENTRY_FILES:
            problems.append(f"{rel}: unexpected file (layout: <dataset>/<split>/<method>/"
                            f"{{{', '.join(sorted(ENTRY_FILES))}}})")
    for folder in sorted(p for p in root.glob("*/*/*") if p.is_dir()):
        rel = folder.relative_to(root)
        if rel.parts[0] in GENERATED | OWN_LAYOUT or rel.parts[0].startswith("."):
            continue
        dataset, split, method = rel.parts
        entries += 1
        bad_names = [f"the {what} folder {name[:80]!r} {problem}" for what, name in zip(("dataset", "split", "method"),
                                                                                      rel.parts)
                     if (problem := identifier_problem(name)) is not None]
        if bad_names:  # a folder name becomes a page name (site/<dataset>.html): identifiers only
            problems += [f"{rel}: {b}" for b in bad_names]
            continue
        missing = [f for f in ("result.json", "meta.json") if not (folder / f).exists()]
        if missing:
            problems.append(f"{rel}: missing {', '.join(missing)}")
            continue
        try:
            record = parse_record(folder / "result.json")
            meta = parse_meta(folder / "meta.json")
        except KbenchInputError as exc:
            problems.append(str(exc).replace(str(root) + "/", ""))
            continue
        where = []
        if record.dataset.name != dataset:
            where.append(f"record dataset {record.dataset.name!r} is not the folder's {dataset!r}")
        if record.split != split:
            where.append(f"record split {record.split!r} is not the folder's {split!r}")
        if record.method != method:
            where.append(f"record method {record.method!r} is not the folder's {method!r}")
        where += record_problems(record, meta)
        preds = folder / PREDS_FILE
        if not preds.exists():
            where.append(f"no {PREDS_FILE}: every entry stores its predictions, so that its figures can be "
                         "re-scored (submit it again with its predictions)")
        else:
            digest = sha256_bytes(preds.read_bytes())
            if record.predictions.sha256 != digest:
                where.append(f"{PREDS_FILE} sha256 {digest[:12]}… does not match the record's "
                             f"{(record.predictions.sha256 or 'none')[:12]}…")
            if record.predictions.path != PREDS_FILE:
                where.append(f"predictions.path is {record.predictions.path!r}, not the entry's {PREDS_FILE!r}")
        if (folder / "verification.json").exists():
            where += verification_problems(folder / "verification.json", record, dataset, split, method)
        if check_data:
            where += dataset_problems(record)
        problems += [f"{rel}: {w}" for w in where]
    if problems:
        raise KbenchInputError(f"leaderboard {root} is invalid ({len(problems)} problem(s)):\n  - "
                               + "\n  - ".join(problems))
    return {"entries": entries, "files": files}

"""``kbench run``: train and score every baseline that applies to a dataset, for several seeds.

Every (baseline, seed) writes its records as soon as it is done::

    results/<dataset>/<split>/<method>/seed-<k>/preds.csv.gz   test predictions (deterministic gzip)
    results/<dataset>/<split>/<method>/seed-<k>/result.json    test record; extra: valid metrics, timings
    results/<dataset>/<split>/<method>/result.json             all seeds aggregated (aggregate_seeds)
    results/<dataset>/<split>/<method>/meta.json               submission metadata (SubmissionMeta)

A re-run skips every (method, seed) whose ``seed-<k>/result.json`` is finished
and matches the dataset (version and checksum), so an interrupted run resumes
where it stopped. ``jobs`` > 1 (``kbench run --jobs N``, by default one per core) fits the
(baseline, seed) pairs in that many forked worker processes, each capped at its share of the
cores' library threads (``runner_pool``); every seed's predictions are those of ``jobs=1``.
Baselines come from the registry in ``kbench_baselines.base``
(``BASELINES``, filled by ``discover()``), so a baseline added later is run
without any change here.
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError, suggest
from kbench.core.identifiers import path_under
from kbench.core.version import __version__
from kbench.leaderboard.policy import DEFAULT_ROLES, MIN_SEEDS, PRIMARY_LOWER_IS_BETTER, PRIMARY_METRIC
from kbench.leaderboard.runner_pool import can_fork, checked_jobs, limit_worker_threads, machine_cores, pool_tasks
from kbench.leaderboard.schema import SubmissionMeta, parse_meta, record_problems
from kbench.leaderboard.store import (
    atomic_write_bytes,
    atomic_write_text,
    lean_predictions,
    load_dataset,
    predictions_csv_gz,
    record_json,
    seed_predictions_parquet,
    write_entry,
)
from kbench.scoring.environment import code_path, cpu_description, environment, method_modules
from kbench.scoring.evaluate import Evaluator, sha256_bytes
from kbench.scoring.prediction_files import read_predictions
from kbench.scoring.records import EvaluationResult, SeedSummary, _mean_std, aggregate_seeds

DEFAULT_SEEDS = (0, 1, 2, 3, 4)
DEFAULT_DATASET = "mi100"
DEFAULT_SPLIT = "random"
LATENCY_CALLS = 20          # single-problem predict calls timed per fitted model
LATENCY_BUDGET_S = 10.0     # stop timing earlier than that if a call is slow
SEED_DIR = "seed-{seed}"
#: a seed folder's training state while its fit runs (``Baseline.fit_checkpoint``); removed once the seed is written
FIT_CHECKPOINT = "fit-state.safetensors"


# ----------------------------------------------------------------------------- registry
def registry() -> dict[str, type]:
    """The baseline registry (``kbench_baselines.base.BASELINES`` after ``discover()``)."""
    # imported on use: the baselines are an optional install, importing them runs every baseline
    # module, and `kbench --help` imports this module
    try:
        from kbench_baselines import base
    except ImportError as exc:
        raise KbenchInputError(f"the baselines package cannot be imported ({exc}); install kbench with "
                               "its baselines (pip install -e '.[baselines]').") from exc
    base.discover()
    return base.BASELINES


def unavailable_modules() -> dict[str, str]:
    try:  # imported on use, as in registry()
        from kbench_baselines import base
        return dict(base.UNAVAILABLE)
    except ImportError:
        return {}


def select_baselines(dataset, names: list[str] | None) -> tuple[list[str], dict[str, str]]:
    """(baselines to run, {skipped name: reason}). Named baselines must exist and support the dataset."""
    reg = registry()
    skipped: dict[str, str] = {}
    if names:
        chosen = []
        for name in names:
            if name not in reg:
                known = sorted(reg)
                raise KbenchInputError(f"unknown baseline {name!r}. Available: {', '.join(known) or 'none'}."
                                       f"{suggest(name, known)}")
            if not reg[name]().supports(dataset):
                raise KbenchInputError(f"baseline {name!r} does not support dataset {dataset.name!r} "
                                       f"(task {dataset.info.get('task')!r}); `kbench baseline list` shows "
                                       "what each baseline supports.")
            if name not in chosen:
                chosen.append(name)
        return chosen, skipped
    chosen = []
    for name in sorted(reg):
        cls = reg[name]
        if not getattr(cls, "benchmark", True):
            skipped[name] = "not part of the default benchmark set"
            continue
        try:
            ok = cls().supports(dataset)
        except Exception as exc:  # a broken supports() must not stop the run
            skipped[name] = f"supports() failed: {type(exc).__name__}: {exc}"
            continue
        if ok:
            chosen.append(name)
        else:
            skipped[name] = f"does not support {dataset.name}"
    for mod, err in unavailable_modules().items():
        skipped[f"kbench_baselines.{mod}"] = f"module cannot be imported: {err}"
    return chosen, skipped


# ----------------------------------------------------------------------------- measurements
def machine_description() -> str:
    """The CPU this process runs on, as the OS reports it."""
    return cpu_description()


def count_parameters(model) -> int | None:
    """Learned parameters: the model's own count when it gives one, else the size of its saved arrays."""
    n = getattr(model, "n_parameters", None)
    if callable(n):
        n = n()
    if n is None:
        n = (getattr(model, "fit_info", None) or {}).get("n_parameters")
    if n is None and hasattr(model, "get_state"):
        try:
            _, arrays = model.get_state()
            n = int(sum(np.asarray(a).size for a in arrays.values())) if arrays else None
        except Exception:
            n = None
    return None if n is None else int(n)


def model_size_bytes(model) -> int | None:
    """Bytes of the folder ``model.save`` writes, or None if it cannot be saved."""
    if not hasattr(model, "save"):
        return None
    with tempfile.TemporaryDirectory(prefix="kbench-size-") as tmp:
        try:
            model.save(Path(tmp) / "model")
        except Exception:
            return None
        return int(sum(p.stat().st_size for p in Path(tmp).rglob("*") if p.is_file()))


def cpu_latency_ms(model, dataset, ids: np.ndarray) -> float | None:
    """Median wall time of one decision on CPU at batch 1, over up to LATENCY_CALLS test problems.

    Each call is ``predict(one_problem_dataset, [id])``: the dataset handed to the model holds
    that problem alone (``Dataset.subset``, built outside the timing), so the time is the
    model's own work for one problem, not a look-up in the whole dataset's tables.
    """
    if len(ids) == 0:
        return None
    picks = ids[np.linspace(0, len(ids) - 1, num=min(LATENCY_CALLS, len(ids))).astype(int)]
    subset = getattr(dataset, "subset", None)
    one = (lambda pid: subset([pid])) if callable(subset) else (lambda pid: dataset)
    model.predict(one(picks[0]), picks[:1])  # warm-up (lazy caches, imports)
    times, start = [], time.perf_counter()
    for pid in picks:
        ds1, batch = one(pid), np.asarray([pid], dtype=object)
        t0 = time.perf_counter()
        model.predict(ds1, batch)
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > LATENCY_BUDGET_S and len(times) >= 3:
            break
    return 1000.0 * statistics.median(times)


# ----------------------------------------------------------------------------- one method
@dataclass
class MethodOutcome:
    method: str
    ran: list[int] = field(default_factory=list)       # seeds computed in this run
    resumed: list[int] = field(default_factory=list)   # seeds found finished
    record: EvaluationResult | None = None            # aggregated
    error: str | None = None                          # "seed 3: ValueError: ..." when the method raised
    traceback: Path | None = None                     # where the traceback was written

    def failure(self, dataset: str, split: str) -> str:
        """One line naming the method, what it failed on and where the traceback is."""
        where = f"; traceback in {self.traceback}" if self.traceback else ""
        return f"baseline {self.method!r} failed on {dataset}/{split}, {self.error}{where}"


@dataclass
class RunReport:
    dataset: str
    split: str
    out: Path
    seeds: list[int]
    outcomes: list[MethodOutcome] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    leaderboard: Path | None = None

    @property
    def failed(self) -> list[MethodOutcome]:
        return [o for o in self.outcomes if o.error]


def method_dir(out: Path, dataset: str, split: str, method: str) -> Path:
    """``out/<dataset>/<split>/<method>``: each name an identifier, the path under ``out``."""
    return path_under(out, ("dataset", dataset), ("split", split), ("method", method))


def finished_seed(folder: Path, dataset, split: str, method: str) -> EvaluationResult | None:
    """The seed's record if it is complete and was made on this dataset, else None."""
    path = folder / "result.json"
    if not path.exists() or not (folder / "preds.csv.gz").exists():
        return None
    try:
        record = EvaluationResult.model_validate_json(path.read_text(encoding="utf-8"))
    except Exception:
        return None
    ok = (record.method == method and record.split == split and record.part == "test"
          and record.dataset.name == dataset.name and record.dataset.checksum == dataset.checksum
          and record.dataset.version == dataset.version)
    return record if ok else None


class _Step:
    """Progress-bar status text for the current step."""

    def __init__(self, bar, method: str, seed: int):
        self.bar, self.prefix = bar, f"{method} seed {seed}"

    def __call__(self, what: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"{self.prefix}: {what}", refresh=True)


def _score_seed(model, dataset, ids, evaluators, method: str, seed: int, fit_time: float, step,
                latency: bool) -> tuple[EvaluationResult, bytes]:
    """Predict test and valid, score both; returns (test record with extra, test preds gz)."""
    step("predict test")
    t0 = time.perf_counter()
    preds = model.predict(dataset, ids["test"])
    predict_s = time.perf_counter() - t0
    # stored lean (each ranking's first 30 applicable candidates): scores exactly as the full one
    gz = predictions_csv_gz(lean_predictions(evaluators["test"], preds))
    step("score")
    record = evaluators["test"](preds, method=method, predictions_path="preds.csv.gz",
                                predictions_sha256=sha256_bytes(gz))
    extra = {"seed": seed, "fit_time_s": fit_time, "predict_time_s": predict_s,
             "predict_ms_per_problem": 1000.0 * predict_s / max(len(ids["test"]), 1),
             "hardware": machine_description()}
    if "valid" in evaluators and len(ids["valid"]):
        step("predict valid")
        vrec = evaluators["valid"](model.predict(dataset, ids["valid"]), method=method)
        extra["valid"] = vrec.metrics["overall"]
    if latency:
        step("time batch-1 latency")
        extra["latency_ms_cpu_batch1"] = cpu_latency_ms(model, dataset, np.asarray(ids["test"], dtype=object))
    extra["n_parameters"] = count_parameters(model)
    step("model size")
    extra["model_size_bytes"] = model_size_bytes(model)
    record.extra = extra
    return record, gz


def _reseed(record: EvaluationResult, seed: int) -> EvaluationResult:
    out = record.model_copy(deep=True)
    out.extra = {**out.extra, "seed": seed, "copied_from_seed": record.extra.get("seed")}
    return out


def _write_seed(folder: Path, record: EvaluationResult, gz: bytes) -> None:
    atomic_write_bytes(folder / "preds.csv.gz", gz)
    atomic_write_text(folder / "result.json", record_json(record))  # written last: marks the seed done


def fit_and_score_seed(name: str, cls: type, dataset, ids: dict, evaluators: dict, seed: int, seed_dir: Path,
                       step, latency: bool) -> tuple[EvaluationResult, bytes]:
    """Fit ``cls`` on train with ``seed``, score test and valid; returns (test record, test preds gz).

    The one place a (method, seed) is computed, in this process (``--jobs 1``) or in a worker.
    """
    model = cls()
    # a fit that trains epoch by epoch writes its state here and resumes from it
    model.fit_checkpoint = seed_dir / FIT_CHECKPOINT
    step("fit")
    t0 = time.perf_counter()
    model.fit(dataset, ids["train"], ids["valid"], seed=seed)
    fit_time = time.perf_counter() - t0
    info = getattr(model, "fit_info", None) or {}
    cached = info.get("cached_training_time_s")  # a fit loaded from the model's own cache
    if cached is not None:
        fit_time = float(cached)  # the training it took, not the load
    resumed_at = info.get("resumed_at_epochs") or []
    if resumed_at:  # the training of every run that worked on this seed, not this run's share
        fit_time = float(info["fit_time_s"])
    rec, gz = _score_seed(model, dataset, ids, evaluators, name, seed, fit_time, step, latency=latency)
    if cached is not None:
        rec.extra["fit_from_cache"] = True
    if resumed_at:
        rec.extra["fit_resumed_at_epochs"] = list(resumed_at)
    rec.environment = environment(method_modules(cls))
    return rec, gz


def finish_seed(seed_dir: Path, rec: EvaluationResult, gz: bytes) -> None:
    _write_seed(seed_dir, rec, gz)
    (seed_dir / FIT_CHECKPOINT).unlink(missing_ok=True)  # the seed is done: its training state is not kept


def copy_deterministic_seed(folder: Path, records: dict, seed: int, step) -> tuple[EvaluationResult, bytes]:
    """A deterministic baseline gives every seed the same predictions: reuse a finished seed's."""
    src_seed = next(iter(records))
    step(f"deterministic: same as seed {src_seed}")
    gz = (folder / SEED_DIR.format(seed=src_seed) / "preds.csv.gz").read_bytes()
    return _reseed(records[src_seed], seed), gz


def finished_records(folder: Path, dataset, split: str, name: str, seeds: list[int], outcome: MethodOutcome,
                      bar) -> dict[int, EvaluationResult]:
    records: dict[int, EvaluationResult] = {}
    for seed in seeds:
        rec = finished_seed(folder / SEED_DIR.format(seed=seed), dataset, split, name)
        if rec is not None:
            records[seed] = rec
            outcome.resumed.append(seed)
            if bar is not None:
                bar.update(1)
    return records


def record_failure(outcome: MethodOutcome, folder: Path, name: str, dataset, split: str, seed, error: str,
                    trace: str, log) -> None:
    outcome.error = f"seed {seed}: {error}"
    log_path = folder / "error.log"
    try:
        atomic_write_text(log_path, f"{name} on {dataset.name}/{split}, seed {seed}\n{trace}")
        outcome.traceback = log_path
    except KbenchInputError:  # an unwritable results folder: the one-line message still names the error
        pass
    log(f"kbench run: {outcome.failure(dataset.name, split)}")


def run_method(name: str, cls: type, dataset, split: str, ids: dict, evaluators: dict, seeds: list[int],
               out: Path, bar=None, log=print) -> MethodOutcome:
    outcome = MethodOutcome(name)
    folder = method_dir(out, dataset.name, split, name)
    records = finished_records(folder, dataset, split, name, seeds, outcome, bar)
    stochastic = getattr(cls, "stochastic", True)
    measured = False  # batch-1 latency is timed once per method and run (it does not depend on the seed)
    seed = None
    try:
        for seed in seeds:
            if seed in records:
                continue
            step = _Step(bar, name, seed)
            seed_dir = folder / SEED_DIR.format(seed=seed)
            if not stochastic and records:
                rec, gz = copy_deterministic_seed(folder, records, seed, step)
            else:
                rec, gz = fit_and_score_seed(name, cls, dataset, ids, evaluators, seed, seed_dir, step,
                                             latency=not measured)
                measured = True
            finish_seed(seed_dir, rec, gz)
            records[seed] = rec
            outcome.ran.append(seed)
            if bar is not None:
                bar.update(1)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        record_failure(outcome, folder, name, dataset, split, seed, f"{type(exc).__name__}: {exc}",
                        traceback.format_exc(), log)
        if bar is not None:
            bar.update(len(seeds) - len(records))
        return outcome
    outcome.record = aggregate_method(folder, name, cls, [records[s] for s in seeds], seeds, dataset, split)
    (folder / "error.log").unlink(missing_ok=True)  # an earlier failure's traceback: every seed is done now
    return outcome


def _mean(values):
    vals = [v for v in values if isinstance(v, (int, float))]
    return statistics.fmean(vals) if vals else None


def aggregate_method(folder: Path, name: str, cls: type, records: list[EvaluationResult], seeds: list[int],
                     dataset, split: str) -> EvaluationResult:
    """Write the all-seeds record and the metadata of one method; returns the record."""
    agg = aggregate_seeds(records, seeds)
    agg.predictions.path = f"{SEED_DIR.format(seed=seeds[0])}/preds.csv.gz"
    valid = [r.extra.get("valid") for r in records]
    extra: dict = {"seeds": list(seeds), "stochastic": bool(getattr(cls, "stochastic", True)),
                   "fit_time_s": _mean([r.extra.get("fit_time_s") for r in records]),
                   "fit_time_s_per_seed": [r.extra.get("fit_time_s") for r in records],
                   "predict_ms_per_problem": _mean([r.extra.get("predict_ms_per_problem") for r in records]),
                   "latency_ms_cpu_batch1": _median([r.extra.get("latency_ms_cpu_batch1") for r in records]),
                   "n_parameters": records[0].extra.get("n_parameters"),
                   "model_size_bytes": records[0].extra.get("model_size_bytes"),
                   "hardware": records[0].extra.get("hardware") or machine_description()}
    if getattr(cls, "machine_dependent", None):  # shown in the board's note (kbench.leaderboard.reproduction)
        extra["machine_dependent"] = str(cls.machine_dependent)
    if all(isinstance(v, dict) for v in valid):
        per_seed = [{k: x for k, x in v.items() if isinstance(x, (int, float)) or x is None} for v in valid]
        mean, std = {}, {}
        for k in per_seed[0]:
            mean[k], std[k] = _mean_std([p.get(k) for p in per_seed])
        extra["valid"] = SeedSummary(seeds=list(seeds), per_seed=per_seed, mean=mean, std=std).model_dump()
    agg.extra = extra
    role = getattr(cls, "leaderboard_role", None) or DEFAULT_ROLES.get(name) or (
        "ceiling" if getattr(cls, "uses_test_labels", False) else "entry")
    paper = getattr(cls, "paper", None)
    module = getattr(cls, "wrapped", None) or cls
    code = getattr(cls, "code", None) or code_path(module.__module__)
    meta = SubmissionMeta(
        method=name, display_name=getattr(cls, "display_name", None),
        description=(getattr(cls, "description", "") or "").strip().split("\n")[0],
        role=role, paper=paper if isinstance(paper, str) and paper.startswith("http") else None,
        code=code, contact=getattr(cls, "contact", None) or "kbench maintainers",
        command=(f"kbench run --dataset {dataset.name} --split {split} --baselines {name} "
                 f"--seeds {' '.join(map(str, seeds))}"),
        n_parameters=extra["n_parameters"], model_size_bytes=extra["model_size_bytes"],
        training_hardware=extra["hardware"], training_time_s=extra["fit_time_s"],
        inference_latency_ms=extra["latency_ms_cpu_batch1"], inference_hardware=extra["hardware"],
        external_data=bool(getattr(cls, "external_data", False)),
        training_set=training_set_of(cls, len(dataset.split(split)["train"])),
        kbench_version=__version__, dataset=agg.dataset, split=split, date=agg.date)
    atomic_write_text(folder / "meta.json", meta.model_dump_json(indent=2) + "\n")
    atomic_write_text(folder / "result.json", record_json(agg))
    return agg


def training_set_of(cls: type, n_train: int) -> str | None:
    """What a baseline trains on when it is not the whole train part of ``n_train`` problems (shown on the
    board): its ``training_set`` attribute, else, for a fit that draws its rows per epoch
    (``rows_per_epoch`` and ``max_epochs`` in its DEFAULTS), "<epochs> × <rows> sampled problems of <n>"."""
    given = getattr(cls, "training_set", None)
    if given:
        return str(given)
    defaults = getattr(cls, "DEFAULTS", None) or {}
    rows, epochs = defaults.get("rows_per_epoch"), defaults.get("max_epochs")
    if rows and epochs and int(rows) < n_train:
        return f"{int(epochs)} × {int(rows):,} sampled problems of {n_train:,}"
    return None


def _median(values):
    vals = [v for v in values if isinstance(v, (int, float))]
    return statistics.median(vals) if vals else None


# ----------------------------------------------------------------------------- (method, seed) pairs in parallel
#: what the workers compute with: set in the parent just before the pool forks, so that every worker
#: inherits the loaded dataset, its split, its evaluators and the registry (nothing is re-loaded or pickled)
_POOL_STATE: dict = {}


def _pool_seed(name: str, seed: int, latency: bool):
    """One (method, seed) in a worker: fit, score, write its seed folder. Returns (name, seed, record,
    error, traceback text); a method's exception is returned, not raised, so that the parent reports it."""
    state = _POOL_STATE
    folder = method_dir(state["out"], state["dataset"].name, state["split"], name)
    seed_dir = folder / SEED_DIR.format(seed=seed)
    try:
        rec, gz = fit_and_score_seed(name, state["registry"][name], state["dataset"], state["ids"],
                                     state["evaluators"], seed, seed_dir, lambda what: None, latency)
        finish_seed(seed_dir, rec, gz)
    except Exception as exc:
        return name, seed, None, f"{type(exc).__name__}: {exc}", traceback.format_exc()
    return name, seed, rec, None, None


def board_fit_seconds(root: Path, dataset: str, split: str, methods: list[str]) -> dict[str, float]:
    """Each method's training time per seed as its board entry records it (``meta.json``), where there is one:
    the order in which ``--jobs`` starts the fits, never a figure of this run."""
    out = {}
    for name in methods:
        path = method_dir(root, dataset, split, name) / "meta.json"
        try:
            seconds = parse_meta(path).training_time_s if path.exists() else None
        except KbenchInputError:  # a broken entry only loses its place in the order
            seconds = None
        if seconds is not None:
            out[name] = float(seconds)
    return out


def run_methods_in_pool(chosen: list[str], reg: dict, dataset, split: str, ids: dict, evaluators: dict,
                        seeds: list[int], out: Path, jobs: int, progress: bool, log,
                        fit_seconds: dict[str, float] | None = None) -> list[MethodOutcome]:
    """Every (method, seed) of ``chosen`` in ``jobs`` forked worker processes; the same records as
    :func:`run_method` one method after the other, each seed written by its worker as soon as it is done."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm import tqdm
    outcomes = {name: MethodOutcome(name) for name in chosen}
    folders = {name: method_dir(out, dataset.name, split, name) for name in chosen}
    records = {name: finished_records(folders[name], dataset, split, name, seeds, outcomes[name], None)
               for name in chosen}
    tasks = pool_tasks({name: reg[name] for name in chosen}, records, seeds, fit_seconds)
    workers = max(1, min(jobs, len(tasks)))
    threads = max(1, machine_cores() // workers)
    resumed = sum(len(r) for r in records.values())
    if tasks:
        log(f"kbench run: {len(tasks)} fits in {workers} worker processes, {threads} library thread(s) each")
    _POOL_STATE.update(dataset=dataset, ids=ids, evaluators=evaluators, registry=reg, split=split, out=out)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                               initializer=limit_worker_threads, initargs=(threads,)) if tasks else None
    try:
        # submitted before the progress bar starts its display thread: the workers fork from one thread
        futures = {pool.submit(_pool_seed, *task): task for task in tasks} if pool else {}
        with tqdm(total=len(chosen) * len(seeds), initial=resumed, unit="run", desc=f"kbench run {dataset.name}/{split}",
                  disable=None if progress else True, dynamic_ncols=True, file=sys.stderr) as bar:
            for future in as_completed(futures):
                name, seed, _ = futures[future]
                if future.cancelled():
                    continue
                try:
                    name, seed, rec, error, trace = future.result()
                except Exception as exc:  # the worker died (killed, out of memory): the pool is broken
                    rec, error, trace = None, f"{type(exc).__name__}: {exc}", traceback.format_exc()
                if error is None:
                    records[name][seed] = rec
                    outcomes[name].ran.append(seed)
                    bar.update(1)
                    bar.set_postfix_str(f"{name} seed {seed} done", refresh=True)
                elif outcomes[name].error is None:  # a method's first failure stops its other seeds
                    record_failure(outcomes[name], folders[name], name, dataset, split, seed, error, trace, log)
                    for other, (other_name, _, _) in futures.items():
                        if other_name == name:
                            other.cancel()
            for name in chosen:
                outcome, done = outcomes[name], records[name]
                if outcome.error is None:
                    _complete_deterministic(name, reg[name], folders[name], done, seeds, outcome, bar)
                outcome.ran.sort(key=seeds.index)
                if outcome.error is not None:
                    bar.update(len(seeds) - len(done))
                    continue
                outcome.record = aggregate_method(folders[name], name, reg[name], [done[s] for s in seeds], seeds,
                                                  dataset, split)
                (folders[name] / "error.log").unlink(missing_ok=True)
    except KeyboardInterrupt:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        _POOL_STATE.clear()
    return [outcomes[name] for name in chosen]


def _complete_deterministic(name: str, cls: type, folder: Path, records: dict, seeds: list[int],
                            outcome: MethodOutcome, bar) -> None:
    """A deterministic method's unfinished seeds, copied from its finished one (as :func:`run_method` does)."""
    if getattr(cls, "stochastic", True) or not records:
        return
    for seed in seeds:
        if seed in records:
            continue
        rec, gz = copy_deterministic_seed(folder, records, seed, lambda what: None)
        finish_seed(folder / SEED_DIR.format(seed=seed), rec, gz)
        records[seed] = rec
        outcome.ran.append(seed)
        if bar is not None:
            bar.update(1)


# ----------------------------------------------------------------------------- the whole run
#: the largest seed numpy's generators take as one word (every baseline seeds one)
MAX_SEED = 2 ** 32 - 1


def checked_seeds(seeds) -> list[int]:
    """``seeds`` de-duplicated, in order: whole numbers from 0 to :data:`MAX_SEED`, else an input error
    (a negative seed is the input's fault, not a baseline failure)."""
    seeds = list(dict.fromkeys(int(s) for s in seeds))
    if not seeds:
        raise KbenchInputError("--seeds needs at least one seed.")
    bad = [s for s in seeds if not 0 <= s <= MAX_SEED]
    if bad:
        raise KbenchInputError(f"--seeds: {', '.join(map(str, bad[:5]))} is not a seed; give whole numbers from 0 "
                               f"to {MAX_SEED:,}.")
    return seeds


def run_benchmark(dataset: str = DEFAULT_DATASET, split: str = DEFAULT_SPLIT, baselines: list[str] | None = None,
                  seeds=DEFAULT_SEEDS, out: str | Path = "results", update_leaderboard: bool = False,
                  leaderboard_root: str | Path = "leaderboard", progress: bool = True, log=None,
                  jobs: int | None = 1) -> RunReport:
    """Fit and score every (baseline, seed); ``jobs`` worker processes run them side by side (None: one
    per core; 1: one after the other in this process). Every fit's predictions are the same for any
    ``jobs``: each seed is fitted alone, from the same data, with the same seed."""
    from tqdm import tqdm
    seeds = checked_seeds(seeds)
    jobs = checked_jobs(jobs)
    if update_leaderboard and len(seeds) < MIN_SEEDS:
        raise KbenchInputError(f"--update-leaderboard needs at least {MIN_SEEDS} seeds (the leaderboard rules); "
                               f"got {len(seeds)}: {seeds}.")
    log = log or (lambda msg: tqdm.write(msg))  # above the progress bar (stderr, on a terminal only)
    t_start = time.perf_counter()
    ds = load_dataset(dataset)
    ids = ds.split(split)  # raises a clear error for an unknown split
    chosen, skipped = select_baselines(ds, baselines)
    report = RunReport(ds.name, split, Path(out), seeds, skipped=skipped)
    if not chosen:
        raise KbenchInputError(f"no baseline in the registry supports dataset {ds.name!r}"
                               + (f" (skipped: {', '.join(sorted(skipped))})" if skipped else "") + ".")
    log(f"kbench run: {ds.name} split {split}: {', '.join(chosen)} x seeds {seeds} -> {out}")
    for name, why in skipped.items():
        log(f"  skipped {name}: {why}")
    evaluators = {"test": Evaluator(ds, split=split, part="test", reference="default")}
    if len(ids["valid"]):
        evaluators["valid"] = Evaluator(ds, split=split, part="valid", reference="default")
    reg = registry()
    if jobs > 1 and not can_fork():
        log(f"kbench run: --jobs {jobs} needs the 'fork' start method, which this OS lacks: running in one process")
        jobs = 1
    if jobs > 1:
        report.outcomes = run_methods_in_pool(chosen, reg, ds, split, ids, evaluators, seeds, Path(out), jobs,
                                              progress, log, board_fit_seconds(Path(leaderboard_root), ds.name,
                                                                               split, chosen))
    else:
        with tqdm(total=len(chosen) * len(seeds), unit="run", desc=f"kbench run {ds.name}/{split}",
                  disable=None if progress else True, dynamic_ncols=True, file=sys.stderr) as bar:
            for name in chosen:
                report.outcomes.append(run_method(name, reg[name], ds, split, ids, evaluators, seeds, Path(out),
                                                  bar=None if bar.disable else bar, log=log))
    if update_leaderboard:
        report.leaderboard = publish(report, Path(leaderboard_root))
    report.seconds = time.perf_counter() - t_start
    return report


def publish(report: RunReport, root: Path) -> Path:
    """Copy the finished methods of a run into the leaderboard folder and rebuild the site."""
    from kbench.leaderboard.site import build  # loads only to publish: `kbench --help` imports this module
    for o in report.outcomes:
        if o.record is None:
            continue
        folder = method_dir(report.out, report.dataset, report.split, o.method)
        meta = parse_meta(folder / "meta.json")
        issues = record_problems(o.record, meta)
        if issues:
            raise KbenchInputError(f"{folder}: cannot go on the leaderboard:\n  - " + "\n  - ".join(issues))
        seeds = o.record.seeds.seeds if o.record.seeds else [0]
        frames = {seed: read_predictions(folder / SEED_DIR.format(seed=seed) / "preds.csv.gz")[0] for seed in seeds}
        write_entry(root, o.record, meta, seed_predictions_parquet(frames))
    build(root)
    return root


def results_frame(records: list[tuple[EvaluationResult, str]]) -> pd.DataFrame:
    """A terminal leaderboard of aggregated records: (record, role) pairs."""
    rows = []
    for rec, role in records:
        o = rec.metrics["overall"]
        sd = rec.seeds.std if rec.seeds else {}
        # a deterministic method's seeds are copies of one fit: one result, no spread to show
        deterministic = (rec.extra or {}).get("stochastic") is False
        rows.append({"method": rec.method, "role": role, "n seeds": len(rec.seeds.seeds) if rec.seeds else 1,
                     "deterministic": deterministic, PRIMARY_METRIC: o.get(PRIMARY_METRIC),
                     "± std": None if deterministic else sd.get(PRIMARY_METRIC),
                     "top-1": o.get("top1"), "within 5%": o.get("within5"), "mean LoP": o.get("lop_mean"),
                     "LoP@5": o.get("lop_at_5"), "speed-up": o.get("speedup_geomean"),
                     "fit s": rec.extra.get("fit_time_s"), "latency ms": rec.extra.get("latency_ms_cpu_batch1")})
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df["_ref"] = df["role"] != "entry"
    df = df.sort_values(["_ref", PRIMARY_METRIC], ascending=[True, PRIMARY_LOWER_IS_BETTER], kind="stable")
    df.insert(0, "rank", [str(i + 1) if not r else "ref" for i, r in enumerate(df["_ref"])])
    return df.drop(columns="_ref").reset_index(drop=True)


def report_records(report: RunReport) -> list[tuple[EvaluationResult, str]]:
    out = []
    for o in report.outcomes:
        if o.record is None:
            continue
        meta_path = method_dir(report.out, report.dataset, report.split, o.method) / "meta.json"
        role = json.loads(meta_path.read_text()).get("role", "entry") if meta_path.exists() else "entry"
        out.append((o.record, role))
    return out

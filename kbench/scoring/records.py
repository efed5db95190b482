"""Typed, versioned result records: what `kbench evaluate --json` writes and the leaderboard reads.

A record is a pydantic model; ``EvaluationResult.model_json_schema()`` is the
JSON Schema (shipped as ``kbench/schemas/result.schema.json``).
"""

from __future__ import annotations

import math
import statistics
from datetime import date

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from kbench.scoring.environment import Environment

#: 3: records carry ``environment`` (Python, packages, code commit, OS, CPU) where the run recorded it. 2: kernel-selection
#: metrics add best-of-K, ranking quality, ``references`` (the comparison with each reference
#: heuristic) in every group and ``networks`` (network end-to-end time). Records of schema 1 and 2,
#: without them, are still read
RECORD_SCHEMA_VERSION = 3


class DatasetRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    version: str
    checksum: str = Field(description="sha256 over the dataset's file checksums (manifest 'checksum')")


class PredictionsRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = None
    sha256: str | None = Field(None, description="sha256 of the predictions file as given")
    rows: int


class Counts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    problems_in_part: int
    predicted: int = Field(description="problems of the part present in the predictions")
    scored: int
    coverage: float
    choices_exact: int
    choices_censored: int = Field(description="choice outside a censored list: time is a lower bound")
    failures: int = Field(description="no applicable kernel in the ranking")


class SeedSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seeds: list[int]
    per_seed: list[dict[str, float | None]]
    mean: dict[str, float | None]
    std: dict[str, float | None] = Field(description="unbiased (ddof=1) standard deviation over seeds")


class _ScoredRecord(BaseModel):
    """Fields every scored record shares: who scored what, on which data, when."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int = RECORD_SCHEMA_VERSION
    kbench_version: str
    method: str | None = None
    dataset: DatasetRef
    split: str
    part: str
    predictions: PredictionsRef
    date: str = Field(default_factory=lambda: date.today().isoformat())
    seeds: SeedSummary | None = None
    extra: dict = Field(default_factory=dict, description="method-specific figures (train time, latency)")
    environment: Environment | None = Field(
        None, description="the software that made the record: Python, package versions, git commit, OS, CPU "
                          "(null or absent in records of schema_version 1, made before it was recorded)")

    @model_serializer(mode="wrap")
    def _omit_unrecorded_environment(self, handler):
        # a record made before the field existed has no such key: written again, it stays the same file
        data = handler(self)
        if isinstance(data, dict) and data.get("environment", 0) is None:
            data.pop("environment")
        return data


class TransferRef(BaseModel):
    """A transfer-track record: trained on ``source``, scored on the record's dataset (the target)."""

    model_config = ConfigDict(extra="forbid")
    source: DatasetRef
    k: int | None = Field(description="measured target problems the method used (the k-shot budget); "
                                      "null for the in-domain ceiling trained on the full target train part")
    shots_seed: int | None = Field(None, description="seed of the k-shot draw (null for k = 0)")


class EvaluationResult(_ScoredRecord):
    """Every metric of one scored predictions file, overall and per direction / data type."""

    record_type: str = "kbench.evaluation"
    transfer: TransferRef | None = Field(None, description="set on transfer-track records (docs/transfer.md)")
    reference: str | None = Field(None, description="heuristic that speed-ups are measured against")
    counts: Counts
    metrics: dict = Field(description=(
        "{'overall': {...}, 'by_direction': {F: {...}}, 'by_dtype': {...}}; each group holds the scalar "
        "metrics (top-k, LoP, geomean_slowdown, best_of_K and best_of_K_oracle for K = 1, 3, 5, 10, "
        "kendall_tau, ndcg_at_10, speedup_*) and 'references': {heuristic: {best_of_K of its own order, "
        "headroom_closed, improved, unchanged, regressed, slowdown_p95, slowdown_worst, regressed_geomean}}; "
        "on the networks split also 'networks': network end-to-end time per network and over networks "
        "(schema version 2; version-1 records have neither)"))
    bounds: dict[str, str] = Field(default_factory=dict,
                                   description="metrics that are bounds because of censoring, and which way")

    @property
    def overall(self) -> dict:
        return self.metrics["overall"]


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.fmean(vals) if vals else None


def _mean_std(values: list[float | None]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return None, None
    mean = statistics.fmean(vals)
    return mean, (statistics.stdev(vals) if len(vals) > 1 else None)


def aggregate_seeds(results: list, seeds: list[int]):
    """One record for several seeds (EvaluationResult or TuningResult): every metric is the mean
    over seeds, with per-seed scores and the unbiased (ddof=1) standard deviation kept in ``seeds``."""
    if not results:
        raise ValueError("aggregate_seeds needs at least one result")
    base = results[0].model_copy(deep=True)
    per_seed = [{k: v for k, v in r.overall.items() if isinstance(v, (int, float)) or v is None}
                for r in results]
    keys = list(per_seed[0])
    mean, std = {}, {}
    for k in keys:
        mean[k], std[k] = _mean_std([p.get(k) for p in per_seed])

    def avg_tree(trees):
        if isinstance(trees[0], dict):
            return {k: avg_tree([t.get(k) for t in trees]) for k in trees[0]}
        # the metrics tree keeps means only (the standard deviations are the overall figures', above)
        return _mean(trees) if isinstance(trees[0], (int, float)) or trees[0] is None else trees[0]

    base.metrics = avg_tree([r.metrics for r in results])
    base.seeds = SeedSummary(seeds=list(seeds), per_seed=per_seed, mean=mean, std=std)
    return base


class TuningResult(_ScoredRecord):
    """Scores of predicted tuning-parameter tuples on a tuning dataset (seq2seq paper metrics)."""

    record_type: str = "kbench.tuning-evaluation"
    solver: str
    metrics: dict = Field(description="average_accuracy, perfect_prediction, valid_share, parameter_accuracy, counts")

    @property
    def overall(self) -> dict:
        """The scalar metrics (the same role as an EvaluationResult's ``metrics['overall']``)."""
        return {k: v for k, v in self.metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


#: 2: ``live`` (references decided on the GPU, with bootstrap intervals, and timing agreement); a
#: record without it is written as schema 1, as before
VERIFICATION_SCHEMA_VERSION = 2


class SpeedupFigures(BaseModel):
    """Speed-ups of one group of problems, all geometric means over problems (t in ms)."""

    model_config = ConfigDict(extra="forbid")
    problems: int
    speedup_geomean: float = Field(description="geomean of t_mode_a / t_choice")
    speedup_total: float = Field(description="sum(t_mode_a) / sum(t_choice)")
    oracle_speedup_geomean: float = Field(description="geomean of t_mode_a / t_oracle: the oracle's margin")
    slowdown_vs_oracle_geomean: float = Field(description="geomean of t_choice / t_oracle")
    choice_is_mode_a: float = Field(description="share of problems whose chosen plan is mode A's plan")


class VerificationFigures(BaseModel):
    model_config = ConfigDict(extra="forbid")
    overall: SpeedupFigures
    by_direction: dict[str, SpeedupFigures]
    by_dtype: dict[str, SpeedupFigures]


class LiveReference(BaseModel):
    """The choice's measured speed-up over one reference, every plan timed in the same run."""

    model_config = ConfigDict(extra="forbid")
    problems: int
    speedup_geomean: float = Field(description="geomean over problems of t_reference / t_choice")
    speedup_ci95: tuple[float, float] = Field(description="bootstrap percentile interval over problems")
    oracle_speedup_geomean: float = Field(description="geomean of t_reference / t_oracle: the headroom")
    headroom_closed: float | None = Field(description="log(speed-up) / log(oracle speed-up); None without headroom")
    choice_faster_share: float = Field(description="share of problems where the choice is > 5% faster")
    choice_slower_share: float = Field(description="share of problems where the choice is > 5% slower")
    same_plan_as_table_mode_a: float | None = Field(
        None, description="live cuDNN modes: share of problems whose pick is the table's mode-A plan")
    first_call_cost_ms: float | None = Field(
        None, description="pytorch_autotune: PyTorch's tuning time over its problems, the sum of each problem's "
                          "first call less its second (host clock)")
    first_call_cost_median_ms: float | None = Field(
        None, description="pytorch_autotune: the median over its problems of the first call less the second")

    @model_serializer(mode="wrap")
    def _omit_unrecorded_first_call(self, handler):
        # only pytorch_autotune has a first call: the other references' records stay as they were written
        data = handler(self)
        if isinstance(data, dict):
            for key in ("first_call_cost_ms", "first_call_cost_median_ms"):
                if data.get(key, 0) is None:
                    data.pop(key)
        return data


class TimingAgreement(BaseModel):
    """How the run's times of the table's plans agree with the table (plans of at least ``min_ms``)."""

    model_config = ConfigDict(extra="forbid")
    timing: str = Field(description="graph (the run's protocol) or eager (launches from Python, no graph)")
    min_ms: float
    plans: int = Field(description="(problem, plan) pairs compared")
    median_abs_log_ratio: float | None
    over_1_5x: int = Field(description="pairs more than 1.5x apart")


class LiveFigures(BaseModel):
    """The choice against references decided on the GPU (``kbench verify-on-gpu --live-references``)."""

    model_config = ConfigDict(extra="forbid")
    variant: str = Field(description="candidate set whose filter the live references used (docs/variants.md)")
    resamples: int = Field(description="bootstrap resamples over problems (seed 0)")
    problems: int = Field(description="problems with every unit timed")
    references: dict[str, LiveReference] = Field(
        description="table_mode_a (the table's mode-A plan, timed here), live_mode_a, live_mode_b, pytorch_op; "
                    "pytorch_autotune (PyTorch's op with benchmark = True, timed with the choice and the oracle "
                    "in a pass of its own) where the plan asked for it")
    strongest_reference: str = Field(description="the reference the choice gains least over (pytorch_autotune "
                                                 "only where its pass timed every problem of the others)")
    by_direction: dict[str, dict[str, float]] = Field(
        description="direction -> reference -> speed-up geomean")
    agreement: list[TimingAgreement]


class TimedTopFigures(BaseModel):
    """The timed selector of a re-timing planned with ``--timed-top K``: in each pass, per problem, the
    fastest of the entry's first K listed plans in the pass's first round is its choice; every unit is
    then measured on the other rounds only (the choosing round is never the measuring one)."""

    model_config = ConfigDict(extra="forbid")
    k: int = Field(description="candidates timed per problem: the first K listed plans of the entry's ranking")
    candidates_mean: float = Field(description="mean distinct candidates per measured problem (fewer where "
                                               "fewer plans are listed)")
    changed_share: float = Field(description="share of measured problems where the main pass's timed choice is "
                                             "not the entry's first choice")
    measured: VerificationFigures = Field(description="the timed choice against the table's mode-A plan, on the GPU")
    table: VerificationFigures = Field(description="the dataset's times of the same plans")
    live: LiveFigures | None = Field(None, description="against the live references (the autotune pass chooses "
                                                       "in its own process: autotune_pass_choice)")
    autotune_pass_choice: str | None = Field(
        None, description="how the autotune pass chose: first_call (the selector's own first call, each candidate "
                          "built and timed once as PyTorch's benchmark = True times its own; every round measures) "
                          "or first_round (the pass's first round chose, the others measure)")
    call_cost_ms: float | None = Field(
        None, description="first_call: the selector's first calls over the problems timed whole (host clock: plan "
                          "list, builds, one warm-up and one timed execution per candidate), summed")
    call_cost_median_ms: float | None = Field(None, description="first_call: the median of those calls")

    @model_serializer(mode="wrap")
    def _omit_unrecorded_call(self, handler):
        # records scored before the autotune pass's choice was named stay as they were written
        data = handler(self)
        if isinstance(data, dict):
            for key in ("autotune_pass_choice", "call_cost_ms", "call_cost_median_ms"):
                if key in data and data[key] is None:
                    data.pop(key)
        return data


class VerificationRecord(BaseModel):
    """A GPU re-timing of one predictions file's chosen plans against cuDNN mode A and the oracle
    (``kbench verify-on-gpu``): measured figures next to the table-derived ones, same problems."""

    model_config = ConfigDict(extra="forbid")
    record_type: str = "kbench.gpu-verification"
    schema_version: int = VERIFICATION_SCHEMA_VERSION
    kbench_version: str
    method: str | None = None
    dataset: DatasetRef
    split: str
    part: str
    predictions: PredictionsRef
    date: str = Field(default_factory=lambda: date.today().isoformat())
    reference: str = Field("cudnn_mode_a", description="heuristic whose first plan the speed-ups are against")
    protocol: dict = Field(description="seed, rounds, replays per timing, timing method")
    device: dict = Field(default_factory=dict, description="GPU, driver, library versions of the timing run")
    problems_planned: int
    problems_measured: int
    problems_failed: dict[str, str] = Field(default_factory=dict, description="problem id -> error")
    problems_without_reference: list[str] = Field(
        default_factory=list, description="problems of the part left out: the reference proposed no plan for them, "
                                          "so the board's speed-up leaves them out too")
    device_time_s: float | None = Field(None, description="GPU wall time of the timing run(s)")
    measured: VerificationFigures = Field(description="from the GPU re-timing")
    table: VerificationFigures = Field(description="from the dataset's runtimes, the same problems")
    live: LiveFigures | None = Field(None, description="references decided on the GPU (schema 2)")
    timed_top: TimedTopFigures | None = Field(
        None, description="the entry's first K plans timed on the GPU and the fastest kept (--timed-top K)")
    inputs: dict[str, str] | None = Field(
        None, description="sha256 of the raw inputs it was scored from (plan.json, raw.jsonl, uncompressed): "
                          "kbench leaderboard validate scores them again and refuses other files")

    @model_serializer(mode="wrap")
    def _omit_empty_left_out(self, handler):
        # records written before these fields existed have no such keys: empty ones are left out (and
        # make_record writes a record without live references as schema 1), so that scoring them again
        # from their committed timings gives the same file
        data = handler(self)
        if isinstance(data, dict):
            if not data.get("problems_without_reference"):
                data.pop("problems_without_reference", None)
            if data.get("live") is None:
                data.pop("live", None)
            if data.get("timed_top") is None:
                data.pop("timed_top", None)
            if data.get("inputs") is None:
                data.pop("inputs", None)
        return data

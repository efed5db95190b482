"""A plan cache: one cuDNN plan per traced problem, for ``kbench.torch.use_plans`` (``kbench model tune`` writes it).

The file is JSON (:data:`PLAN_CACHE_FORMAT`): a ``header`` saying where the plans hold (the GPU model as
``torch.cuda.get_device_name`` names it and its compute capability, the cuDNN backend and frontend and
torch versions), how they were chosen (``filled_by``: ``oracle``, the fastest plan measured, or
``selector:NAME``, a selector's first choice without timing; ``source``: ``dataset:NAME@VERSION``,
``timing`` or ``live``, cuDNN's lists asked on the GPU) and the trace they were chosen for; then ``plans``, one entry per problem id (the MIOpen-style
key of the trace's ``problems.csv``) naming the plan as cuDNN's frontend does
(``get_plan_name_at_index``, e.g. ``eng67_k2=5_k13=0``: the engine id and its knobs), and ``missing``, the
traced problems left out and why.

A plan is only the fastest (or a good choice) on the GPU and library versions it was measured with:
:func:`check_environment` refuses a cache made for another GPU model or another cuDNN, frontend or
torch version. :func:`load_plan_cache` turns any malformed file into one :class:`KbenchInputError`
naming the file and the field.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kbench.core.errors import KbenchInputError
from kbench.core.output_files import atomic_write_text, check_output, printable_path
from kbench.core.version import __version__

PLAN_CACHE_FORMAT = "kbench-plan-cache-1"
#: the environment fields a cache must match, with the words a refusal uses for each
CHECKED_FIELDS = {"gpu": "GPU model", "cudnn_backend": "cuDNN (backend) version",
                  "cudnn_frontend": "cuDNN frontend version", "torch": "torch version"}
RETUNE_HINT = "re-run `kbench model tune` on this machine to make a cache for it"
#: a plan name of cuDNN's frontend: the engine, then its knobs (``_k<knob type>=<value>``)
_PLAN_NAME = re.compile(r"^eng(\d+)((?:_k\d+=-?\d+)*)$")
_KNOB = re.compile(r"_k(\d+)=(-?\d+)")
_FILLED_BY = re.compile(r"^(oracle|selector:.+)$")


def plan_engine_and_knobs(name: str) -> tuple[int | None, dict[str, int]]:
    """(engine id, {``k<knob type>``: value}) read from a frontend plan name; (None, {}) for another form."""
    m = _PLAN_NAME.match(str(name))
    if m is None:
        return None, {}
    return int(m.group(1)), {f"k{k}": int(v) for k, v in _KNOB.findall(m.group(2))}


class TraceRef(BaseModel):
    """The trace a cache was made for (its ``trace.json``)."""

    model_config = ConfigDict(extra="allow")
    model: str
    input_shape: list[int]
    dtype: str
    autocast: str | None = None
    memory_format: str
    mode: str


class PlanCacheHeader(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpu: str = Field(description="torch.cuda.get_device_name, e.g. 'NVIDIA H200'")
    compute_capability: str = Field(description="major.minor, e.g. '9.0'")
    cudnn_backend: str = Field(description="cudnn.backend_version_string(), e.g. '9.19.0'")
    cudnn_frontend: str = Field(description="cudnn.__version__, e.g. '1.32.0'")
    torch: str = Field(description="torch.__version__ of the timing (or the dataset's collection)")
    filled_by: str = Field(description="'oracle' (fastest measured plan) or 'selector:NAME' (zero-shot)")
    source: str = Field(description="'dataset:NAME@VERSION', 'timing' (kbench model tune --time) or 'live' "
                                    "(cuDNN's lists asked on the GPU: --selector NAME --live)")
    trace: TraceRef
    kbench: str = __version__
    created: str = Field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    notes: list[str] = Field(default_factory=list)

    @field_validator("filled_by")
    @classmethod
    def _filled_by_form(cls, value: str) -> str:
        if not _FILLED_BY.match(value):
            raise ValueError("expected 'oracle' or 'selector:NAME'")
        return value

    @property
    def kind(self) -> str:
        """``oracle`` or ``selector``: the bench's mode name ``cache:<kind>``."""
        return self.filled_by.split(":", 1)[0]


class PlanEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    plan: str = Field(description="the frontend's plan name, e.g. 'eng67_k2=5_k13=0'")
    engine_id: int | None = None
    knobs: dict[str, int] = Field(default_factory=dict, description="k<knob type> -> value, where known")
    direction: Literal["F", "B", "W"]
    layers: str = ""
    time_ms: float | None = Field(None, description="the plan's time where it was measured (oracle)")
    pytorch_plan: str | None = Field(None, description="the plan PyTorch's default path runs, where identified")
    pytorch_ms: float | None = None


class MissingProblem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    problem_id: str
    direction: str
    layers: str = ""
    multiplicity: int = 1
    reason: str


class PlanCache(BaseModel):
    """A plan cache file (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    format: Literal["kbench-plan-cache-1"] = PLAN_CACHE_FORMAT
    header: PlanCacheHeader
    plans: dict[str, PlanEntry]
    missing: list[MissingProblem] = Field(default_factory=list)

    def plan_for(self, problem_id: str) -> str | None:
        entry = self.plans.get(problem_id)
        return entry.plan if entry is not None else None


def _field_path(loc) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def load_plan_cache(path) -> PlanCache:
    """Read and check a plan cache file; anything wrong is one :class:`KbenchInputError` naming file and field."""
    path = Path(path)
    shown = printable_path(path)
    hint = " Make it again with `kbench model tune` (docs/model.md)."
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KbenchInputError(f"plan cache {shown}: file not found.{hint}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KbenchInputError(f"plan cache {shown}: cannot be read ({type(exc).__name__}: {exc}).{hint}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise KbenchInputError(f"plan cache {shown}: not valid JSON (line {exc.lineno}, column {exc.colno}: "
                               f"{exc.msg}); the file is corrupt or truncated.{hint}") from None
    if not isinstance(doc, dict):
        raise KbenchInputError(f"plan cache {shown}: expected a JSON object, found {type(doc).__name__}.{hint}")
    if doc.get("format") != PLAN_CACHE_FORMAT:
        raise KbenchInputError(f"plan cache {shown}: field format is {doc.get('format')!r}, expected "
                               f"{PLAN_CACHE_FORMAT!r}; this is not a plan cache of this kbench.{hint}")
    try:
        return PlanCache.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        kind = "missing" if first["type"] == "missing" else f"wrong: {first['msg']}"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise KbenchInputError(f"plan cache {shown}: field {_field_path(first['loc'])} is {kind}{more}.{hint}") \
            from None


def write_plan_cache(cache: PlanCache, path, inputs=()) -> Path:
    """Write ``cache`` to ``path`` atomically (never over one of ``inputs``)."""
    path = check_output(path, inputs, option="--out")
    atomic_write_text(path, cache.model_dump_json(indent=2) + "\n")
    return path


def current_environment() -> dict:
    """This process's GPU and library versions, as a cache header names them (needs CUDA and the frontend)."""
    import torch
    try:
        import cudnn
    except ImportError:
        cudnn = None
    if not torch.cuda.is_available():
        raise KbenchInputError("no CUDA GPU is visible to PyTorch; plan caches are for a GPU.")
    major, minor = torch.cuda.get_device_capability(0)
    return {"gpu": torch.cuda.get_device_name(0), "compute_capability": f"{major}.{minor}",
            "cudnn_backend": cudnn.backend_version_string() if cudnn is not None else None,
            "cudnn_frontend": getattr(cudnn, "__version__", None), "torch": torch.__version__}


def environment_mismatches(cache: PlanCache, env: dict) -> list[str]:
    """One sentence per field of :data:`CHECKED_FIELDS` where ``env`` differs from the cache's header."""
    out = []
    for key, words in CHECKED_FIELDS.items():
        made, here = getattr(cache.header, key), env.get(key)
        if str(made) != str(here):
            out.append(f"it was made for {words} {made!r}, this machine has {here!r}")
    return out


def check_environment(cache: PlanCache, env: dict, *, where: str = "the plan cache") -> None:
    """Refuse ``cache`` where ``env`` (:func:`current_environment`'s fields) has another GPU model or another
    cuDNN, frontend or torch version: the cached plans were chosen (or measured) for the cache's."""
    wrong = environment_mismatches(cache, env)
    if wrong:
        raise KbenchInputError(f"{where} does not fit this machine: {'; '.join(wrong)}. Its plans were chosen "
                               f"for the other; {RETUNE_HINT}.")


__all__ = ["CHECKED_FIELDS", "MissingProblem", "PLAN_CACHE_FORMAT", "PlanCache", "PlanCacheHeader", "PlanEntry",
           "TraceRef", "check_environment", "current_environment", "environment_mismatches", "load_plan_cache",
           "plan_engine_and_knobs", "write_plan_cache"]

"""``kbench collect cudnn``: measure every cuDNN engine configuration per problem.

For each problem (a 2D convolution in one direction, data type and layout) the
collector

1. builds the convolution as a cuDNN graph with the cuDNN frontend Python API
   (``conv_fprop`` / ``conv_dgrad`` / ``conv_wgrad``) and asks cuDNN for its
   execution plans with heuristic mode A, mode B and the fallback list, each
   on a graph of its own so that each list's order is recorded as cuDNN gave
   it; a fourth graph asks for all three and holds the union (distinct
   engine configurations, named like ``eng67_k2=5_k13=0``);
2. finds each plan's numerical notes (tensor cores, down-converted inputs,
   reduced-precision reduction, FFT, Winograd, non-determinism) with the
   frontend's note filters, or from what those filters said of the same engine
   before (:mod:`kbench.collect.notes_cache`, checked by a probe every
   :data:`~kbench.collect.notes_cache.CHECK_EVERY`-th problem; ``--no-notes-cache``
   probes every problem), and its behaviour notes;
3. builds every plan, runs it once on random data (never zeros) into an output
   poisoned with NaN, and compares it with PyTorch's convolution computed in
   float64 from the same inputs: ``rel_err = |out - ref|_2 / |ref|_2``. A plan
   over the data type's tolerance (:data:`TOLERANCE`) is flagged wrong and
   never counts as a winner. For FP32 data it also computes the error that
   TF32 rounding of the inputs alone causes (``e_tf32``) and calls a plan
   ``fp32`` precise when its error is under a tenth of that, else ``reduced``;
4. times each plan: a CUDA graph of ``k`` back-to-back executions is captured
   (``k`` chosen from a second, warm execution so one replay takes about
   :data:`COARSE_TARGET_MS`; the first execution, which may load the plan's
   kernels, is recorded as ``first_exec_ms`` and used for nothing else), replayed
   once to upload it and then timed replay by replay with CUDA events, one plan
   at a time, behind a spin kernel that keeps the GPU busy until the host has
   queued every timed launch; time per execution = replay time / ``k``. A
   replay shorter than half the target is recaptured with a larger ``k``
   (:func:`launch_bound_mask` finds such measurements in recorded data). Every
   plan gets a coarse time (median of :data:`COARSE_REPLAYS` replays, one replay
   for a plan whose warm execution was over :data:`FAR_BEHIND` times the fastest
   correct one so far);
   the plans within
   :data:`PRECISE_BAND` of the best, cuDNN's own choices and PyTorch's choice
   are then re-timed precisely (:data:`PRECISE_ROUNDS` rounds of
   :data:`PRECISE_REPLAYS` replays, the plans taking turns so that clock drift
   is shared), and the best plan once more at the end (``repeat_ms``, the noise
   check). Then the verification pass (:mod:`kbench.collect.label_retiming.front_runners`, ``--no-verify``
   skips it) re-times the front-runners in a fresh interleaved order, a third
   time where the two readings disagree, and stores ``first_ms``, ``verify_ms``,
   ``verify2_ms``, ``verified`` and the label time ``verified_ms`` per plan and
   the phase's seconds (``t_verify_s``) per problem. The L2 cache is not flushed: back-to-back executions on the same
   buffers, the way a layer runs inside a network step (stated in the card);
5. records what PyTorch runs for the same convolution with
   ``torch.backends.cudnn.benchmark = False``, by matching the kernels it
   launches (PyTorch profiler) against those of cuDNN's top plans;
6. records the GPU's clocks and temperature per problem, and the GPU name,
   driver, CUDA, cuDNN, frontend and PyTorch versions at start and end. It
   never changes clocks, power limits or any other card setting.

Steps 1 and 2 and the building of step 3 launch nothing on the GPU (the input
tensors are allocated but filled only afterwards, together with the float64
reference); everything from filling the inputs on is the problem's GPU part.
Ranks sharing a GPU (``--ranks-per-gpu``) hold the GPU's turn
(:mod:`kbench.collect.gpu_turn`) for the GPU part only; ``t_wait_s`` records a
problem's wait for it, which ``t_total_s`` leaves out.

Every failure (a plan that does not build, run, capture or compute the right
answer) is recorded with its error text and never stops the run. A CUDA error
that poisons the process ends it with exit code 3 after saving what was done;
the next run resumes (see :mod:`kbench.collect.writer`).
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.collect.environment import _Nvml, environment, host_cpu, nvidia_smi  # noqa: F401  (host_cpu: this module's API)
from kbench.collect.strides import STRIDE_CONVENTIONS, tensor_strides
from kbench.errors import KbenchInputError

DIRECTIONS = ("F", "B", "W")
DTYPES = ("FP16", "BF16", "FP32")
LAYOUTS = ("NCHW", "NHWC")
#: relative L2 error over which a plan's output is "wrong" (never a winner)
TOLERANCE = {"FP16": 1e-2, "BF16": 4e-2, "FP32": 1e-2}
#: FP32 plan counts as full-FP32 when its error is under this fraction of TF32 rounding's error
FP32_PRECISE_FRACTION = 0.1
COARSE_TARGET_MS = 0.5
MAX_INNER = 100
COARSE_REPLAYS = 3
#: a plan whose first run is this many times slower than the fastest correct plan so far
#: gets one timed replay instead of COARSE_REPLAYS: its rank far behind the best is not
#: in doubt, and a single k-execution replay of a slow plan is still within about 1%
FAR_BEHIND = 4.0
PRECISE_BAND = 0.3
#: the GPU spins this long (plus SPIN_PER_LAUNCH_US per queued launch) before timed work, so
#: that the host has queued every timed launch before the first start event is reached: the
#: events then time the GPU's work, never the host's launch latency (see launch_bound_mask)
SPIN_BASE_US = 50.0
SPIN_PER_LAUNCH_US = 40.0
#: a spin kernel's cycles per microsecond (a lower bound of the SM clock; a longer spin is harmless)
SPIN_CYCLES_PER_US = 1500
#: a replay-timed plan slower per execution than this many times its warm single execution was
#: timed with something else than its kernels (the host, a stall): it is captured and timed again
WARM_CONSISTENCY = 1.5
PRECISE_MAX_PLANS = 8
PRECISE_ROUNDS = 4
PRECISE_REPLAYS = 5
PRECISE_ROUND_MS = 50.0  # a plan's replays per precise round are capped to about this much GPU time
SLOW_PLAN_MS = 20.0  # a plan this slow on its first run is timed by single executions
PROBLEM_TIME_CAP_S = 25.0  # plans not run by then are recorded as such, the problem as truncated
WORKSPACE_CAP = 4 << 30
TORCH_PROFILE_TOP = 8
NOTE_NAMES = ("TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT",
              "WINOGRAD", "NONDETERMINISTIC")
REDUCED_NOTES = {"TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION"}
GEOMETRY = ["n", "c", "k", "groups", "x_h", "x_w", "fil_h", "fil_w", "pad_h", "pad_w",
            "stride_h", "stride_w", "dil_h", "dil_w"]
DEFAULTS = {"groups": 1, "pad_h": 0, "pad_w": 0, "stride_h": 1, "stride_w": 1, "dil_h": 1, "dil_w": 1}
ALIASES = {"h": "x_h", "w": "x_w", "r": "fil_h", "s": "fil_w", "g": "groups"}


class FatalCudaError(RuntimeError):
    """The CUDA context is unusable: end the process, the next run resumes."""


# ---------------------------------------------------------------------------- problems
def parse_list(value: str | None, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    if value is None:
        return allowed
    items = tuple(v.strip().upper() for v in str(value).split(",") if v.strip())
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise KbenchInputError(f"--{what}: {', '.join(bad) or 'nothing'} not understood; "
                               f"choose from {','.join(allowed)}")
    return items


def load_problems(path: str | Path, directions=DIRECTIONS, dtypes=None, layouts=None) -> pd.DataFrame:
    """Read a problems CSV (e.g. the corpus) into one row per problem-direction, with its key.

    Required columns: n, c, k, x_h, x_w, fil_h, fil_w (or h, w, r, s). Optional:
    groups, pad_*, stride_*, dil_* (defaults 1/0/1/1), dtype, layout (else
    every one of ``dtypes`` / ``layouts``), direction (else every one of
    ``directions``; with it, rows whose direction is not in ``directions`` are
    skipped), order, kind, sources.
    """
    path = Path(path)
    if not path.exists():
        raise KbenchInputError(f"{path}: problems file not found.")
    try:
        df = pd.read_csv(path)
    except Exception as exc:  # noqa: BLE001 - any parse failure is the user's file
        raise KbenchInputError(f"{path}: cannot read as CSV ({exc}).") from None
    df = df.rename(columns={k: v for k, v in ALIASES.items() if k in df and v not in df})
    missing = [c for c in ("n", "c", "k", "x_h", "x_w", "fil_h", "fil_w") if c not in df]
    if missing:
        raise KbenchInputError(f"{path}: missing column(s) {', '.join(missing)}; a problems file needs "
                               "n, c, k, x_h, x_w, fil_h, fil_w (optional groups, pad_*, stride_*, dil_*, "
                               "dtype, layout).")
    for col, default in DEFAULTS.items():
        if col not in df:
            df[col] = default
    geo = df[GEOMETRY].apply(pd.to_numeric, errors="coerce")
    bad = geo.isna().any(axis=1) | (geo[["n", "c", "k", "groups", "x_h", "x_w", "fil_h", "fil_w",
                                        "stride_h", "stride_w", "dil_h", "dil_w"]] < 1).any(axis=1)
    bad |= (geo[["pad_h", "pad_w"]] < 0).any(axis=1)
    bad |= (geo["c"] % geo["groups"] != 0) | (geo["k"] % geo["groups"] != 0)
    df[GEOMETRY] = geo.fillna(1).astype(np.int64)
    from kbench.problem import expected_output_size
    for s in ("h", "w"):
        df[f"y_{s}"] = expected_output_size(df[f"x_{s}"], df[f"fil_{s}"], df[f"pad_{s}"],
                                            df[f"stride_{s}"], df[f"dil_{s}"])
    bad |= (df["y_h"] < 1) | (df["y_w"] < 1)
    if bad.any():
        rows = ", ".join(str(i + 2) for i in np.flatnonzero(bad.to_numpy())[:5])
        raise KbenchInputError(f"{path}: {int(bad.sum())} row(s) are not valid convolutions (non-integer "
                               f"or non-positive sizes, channels not divisible by groups, or an empty "
                               f"output), e.g. line(s) {rows}.")
    df = _expand(df, "dtype", dtypes, DTYPES, path)
    df = _expand(df, "layout", layouts, LAYOUTS, path)
    if "order" not in df:
        df["order"] = np.arange(len(df))
    for col in ("kind", "sources"):
        if col not in df:
            df[col] = ""
    df = df.sort_values("order", kind="stable").reset_index(drop=True)
    if "direction" in df:  # a list of problem-directions (e.g. a test-retest sample): each row its own
        df["direction"] = df["direction"].astype(str).str.upper()
        bad = ~df["direction"].isin(DIRECTIONS)
        if bad.any():
            raise KbenchInputError(f"{path}: column direction has {sorted(df.loc[bad, 'direction'].unique())[:5]}; "
                                   f"allowed: {', '.join(DIRECTIONS)}")
        out = df[df["direction"].isin(directions)].reset_index(drop=True)
    else:
        out = df.loc[df.index.repeat(len(directions))].reset_index(drop=True)
        out["direction"] = list(directions) * len(df)
    out["key"] = problem_keys(out)
    out["kind"] = out["kind"].fillna("").astype(str)
    out["sources"] = out["sources"].fillna("").astype(str)
    return out.drop_duplicates("key").reset_index(drop=True)


def _expand(df, col, wanted, allowed, path):
    if col in df:
        df[col] = df[col].astype(str).str.upper()
        bad = ~df[col].isin(allowed)
        if bad.any():
            raise KbenchInputError(f"{path}: column {col} has {sorted(df.loc[bad, col].unique())[:5]}; "
                                   f"allowed: {', '.join(allowed)}")
        return df[df[col].isin(wanted)] if wanted else df
    values = wanted or allowed
    return df.merge(pd.DataFrame({col: list(values)}), how="cross")


def canonical(df: pd.DataFrame) -> pd.DataFrame:
    """Canonical problem columns (docs/data_model.md) for problem-direction rows."""
    out = pd.DataFrame(index=df.index)
    out["direction"] = df["direction"].astype(str)
    out["dtype"] = df["dtype"].astype(str)
    out["cast"] = ""
    lay = df["layout"].astype(str)
    out["layout_x"], out["layout_w"], out["layout_y"] = lay, lay, lay
    out["spatial_dims"] = np.int8(2)
    for col in ("n", "c", "k", "groups"):
        out[col] = df[col].astype(np.int64)
    for p in ("x", "y", "fil", "pad", "stride", "dil"):
        out[f"{p}_d"] = 0 if p == "pad" else 1
        out[f"{p}_h"] = df[f"{p}_h"].astype(np.int64)
        out[f"{p}_w"] = df[f"{p}_w"].astype(np.int64)
    out["bias"] = np.int8(0)
    return out


def problem_keys(df: pd.DataFrame) -> pd.Series:
    """MIOpen problem keys built from the true geometry (:func:`kbench.problem.to_miopen_key`)."""
    from kbench.problem import to_miopen_key
    can = canonical(df.reset_index(drop=True))
    return pd.Series(to_miopen_key(can).to_numpy(), index=df.index, dtype=str)


# ---------------------------------------------------------------------------- pure helpers
def timing_stats(per_exec_ms: list[float]) -> dict:
    """median, min, quartiles and count of per-execution times."""
    a = np.asarray([v for v in per_exec_ms if v is not None and np.isfinite(v)], dtype=float)
    if not len(a):
        return {"median": None, "min": None, "q1": None, "q3": None, "n": 0}
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {"median": float(med), "min": float(a.min()), "q1": float(q1), "q3": float(q3), "n": int(len(a))}


def inner_count(single_ms: float, target_ms: float = COARSE_TARGET_MS, cap: int = MAX_INNER) -> int:
    """Executions per captured graph so that one replay takes about ``target_ms``."""
    if not single_ms or not np.isfinite(single_ms) or single_ms <= 0:
        return 1
    return int(min(cap, max(1, math.ceil(target_ms / single_ms))))


def replays_per_round(replay_ms: float | None) -> int:
    """Replays of one precise round: PRECISE_REPLAYS, fewer for slow plans (>= 1)."""
    if not replay_ms or not np.isfinite(replay_ms) or replay_ms <= 0:
        return PRECISE_REPLAYS
    return int(max(1, min(PRECISE_REPLAYS, PRECISE_ROUND_MS // replay_ms)))


def spin_cycles(n_launches: int) -> int:
    """Cycles for the spin kernel that covers the host's queuing of ``n_launches`` timed launches."""
    return int((SPIN_BASE_US + SPIN_PER_LAUNCH_US * max(1, n_launches)) * SPIN_CYCLES_PER_US)


def kernel_cache_topology(p: dict) -> tuple:
    """The graphs that may share one cuDNN kernel cache: same operation (direction), data type, layout
    and grouped-or-not; the sizes, strides, pads and dilations may differ.

    cuDNN re-uses a cached kernel only "on future same-topology operation graphs" (frontend docs,
    Dynamic Shapes and Kernel Cache). One cache for every graph of a run crashed the collector on an
    H100: a segmentation fault on the run's seventh problem-direction (forward, BF16, NHWC), after
    the graphs of six others (forward, BF16, NCHW among them) had used the same cache. So each
    topology gets its own."""
    return (p["direction"], p["dtype"], p["layout"], int(p["groups"]) > 1)


def launch_bound_mask(plans: pd.DataFrame) -> pd.Series:
    """Plans whose coarse time came from graph replays too short to hide the host.

    A captured replay of ``inner_k`` executions must last at least half the coarse target
    (:data:`COARSE_TARGET_MS`) unless ``inner_k`` is already :data:`MAX_INNER`; a shorter replay
    means ``inner_k`` was chosen from a first execution that was slow for another reason
    (lazy loading of the plan's kernels, a graph's first upload), and the replay's events then
    time the host's launch latency as well as the kernel. Likewise a plan timed by single
    executions (meant for plans over :data:`SLOW_PLAN_MS`) whose time is under that. This is
    the check that finds the 5-19x outliers of the old protocol in recorded data.
    """
    method = plans["timing_method"].astype(str)
    k = pd.to_numeric(plans["inner_k"], errors="coerce")
    coarse = pd.to_numeric(plans["coarse_ms"], errors="coerce")
    short_replay = method.eq("graph") & (k < MAX_INNER) & (coarse * k < COARSE_TARGET_MS / 2)
    # "single" is for plans over SLOW_PLAN_MS: one under it was sent there by a slow first execution,
    # and a single launch of a short kernel is timed with the host's launch latency
    fast_single = method.eq("single") & (coarse < SLOW_PLAN_MS)
    return short_replay | fast_single


def inconsistent_with_warm(coarse_ms: float, warm_exec_ms: float) -> bool:
    """True when replays of k executions took longer per execution than ``WARM_CONSISTENCY`` times
    one spin-protected execution: back-to-back executions are never slower than one alone, so the
    replays timed something else (the run-to-run outlier study, data card: a k=1 replay that timed
    0.49 ms of host latency for a 26 us kernel)."""
    if coarse_ms is None or warm_exec_ms is None or not (warm_exec_ms > 0):
        return False
    return bool(coarse_ms > WARM_CONSISTENCY * warm_exec_ms)


def plan_priority(rec: dict) -> tuple:
    """Order in which plans are run: cuDNN's mode-A order, then mode B's, then the fallback list."""
    for i, tag in enumerate(("rank_a", "rank_b", "rank_fallback")):
        if rec.get(tag, -1) is not None and rec.get(tag, -1) >= 0:
            return (i, rec[tag])
    return (3, 0)


def classify_note_probe(message: str) -> bool | None:
    """Read a note probe's build error: True = the plan has the note, False = not, None = unclear.

    The probe graph keeps only plans WITH the note (``select_numeric_notes``)
    and bars every plan by a workspace limit of -1 bytes: a plan without the
    note fails as "deselected", one with it passes the note filter and fails on
    the workspace limit. Neither builds anything.
    """
    m = message.lower()
    if "deselecting execution plan" in m and "workspace" not in m:
        return False
    if "workspace" in m:
        return True
    return None


def default_set(plan: dict, dtype: str, notes_reliable: bool) -> bool:
    """Is a plan in the default candidate set of its data type?

    FP32: full-FP32 arithmetic only (calibrated error class ``fp32``, and no
    tensor-core / down-convert / reduced-precision note where notes are
    known); TF32 and down-converting plans form the opt-in ``tf32`` variant.
    FP16/BF16: every plan without a reduced-precision-reduction note.
    """
    notes = set(filter(None, (plan.get("numeric_notes") or "").split(";"))) if notes_reliable else set()
    if dtype == "FP32":
        if plan.get("precision") != "fp32":
            return False
        return not (notes & REDUCED_NOTES)
    return "REDUCED_PRECISION_REDUCTION" not in notes


def pytorch_default_mask(plans: pd.DataFrame) -> pd.Series:
    """Which plans of a plans table (its ``numeric_notes`` column) PyTorch's cuDNN path may run with its
    default flags.

    ``filterEngineConfigs`` (``aten/src/ATen/native/cudnn/Conv_v8.cpp``) drops every engine
    configuration with the DOWN_CONVERT_INPUTS note; with ``deterministic=True`` also the
    NONDETERMINISTIC ones, and for float32 data with ``allow_tf32=False`` the TENSOR_CORE ones.
    PyTorch's defaults (``torch.backends.cudnn.allow_tf32 = True``, ``deterministic = False``) leave
    the first rule alone, so TF32 and reduced-precision-reduction plans are in. A plan whose notes
    are unknown (None) is left out: nothing shows PyTorch would keep it.
    """
    notes = plans["numeric_notes"]
    down = notes.fillna("").astype(str).str.contains(r"(?:^|;)DOWN_CONVERT_INPUTS(?:;|$)", regex=True)
    return notes.notna() & ~down


def split_segments(kernel_names: list[str], marker: str = "spin_kernel") -> list[list[str]]:
    """Split a stream's kernel names (in time order) at marker kernels."""
    segs, cur = [], []
    for name in kernel_names:
        if marker in name:
            segs.append(cur)
            cur = []
        else:
            cur.append(name)
    segs.append(cur)
    return segs


def match_torch(torch_kernels: list[str], plan_kernels: dict[str, list[str]]) -> list[str]:
    """Plans whose kernel sequence equals the cuDNN kernels PyTorch launched.

    PyTorch may add its own kernels around cuDNN's (layout copies, fills);
    those are dropped first: only names that some plan also launched count.
    """
    known = {k for ks in plan_kernels.values() for k in ks}
    core = [k for k in torch_kernels if k in known]
    if not core:
        return []
    return [p for p, ks in plan_kernels.items() if ks == core]


# ---------------------------------------------------------------------------- the GPU part
@dataclass
class Options:
    notes: bool = True
    torch_choice: bool = True
    precise: bool = True
    verify: bool = True  # the verification pass (kbench.collect.label_retiming.front_runners; its module doc derives the defaults)
    verify_band: float = 0.03  # front-runners: within this fraction of the best ...
    verify_min_plans: int = 3  # ... and at least this many best plans per candidate set
    verify_disagree: float = 0.05  # |log(verify / first)| above which a third timing decides
    verify_max_passes: int = 3
    notes_cache: bool = True  # numerical notes from kbench.collect.notes_cache where every plan's engine is known
    # cuDNN's kernel cache: every graph becomes a dynamic-shape graph sharing the cache of its
    # topology (kernel_cache_topology), so a runtime-compiled kernel is compiled once per process
    # instead of once per problem. Off: dynamic shapes change the plans offered (on the H100 with
    # cuDNN 9.19, none for most backward problems; tools/collect/kernel_cache_check.py has the figures).
    kernel_cache: bool = False
    # the GPU's turn-lock file when ranks share the GPU (--ranks-per-gpu; kbench.collect.gpu_turn):
    # the GPU part of each problem runs holding it, the host-only part (lists, notes, builds) without
    gpu_turn: str | None = None
    seed: int = 0
    # the strides handed to cuDNN (kbench.collect.strides): "pytorch" as PyTorch's descriptors carry
    # them; "legacy" as runs before PyTorch's convention was adopted, kept to measure the difference
    tensor_strides: str = "pytorch"


@dataclass
class PlanState:
    index: int
    rec: dict
    graph: object = None  # captured CUDA graph
    k: int = 1
    times: list = field(default_factory=list)


class CudnnCollector:
    """Holds the GPU state (torch, cuDNN handle, stream) and measures one problem at a time."""

    def __init__(self, options: Options | None = None):
        import torch
        try:
            import cudnn  # nvidia-cudnn-frontend
        except ImportError as exc:
            raise KbenchInputError(
                f"timing cuDNN plans needs nvidia-cudnn-frontend and PyTorch with CUDA on an NVIDIA GPU ({exc}). "
                "Make plans on this machine (--plan-only where the command has it) and time them on the GPU "
                "machine: bash kbench/collect/run_on_device.sh (docs/collect_scale_out.md).") from None
        self.torch, self.cudnn = torch, cudnn
        self.opt = options or Options()
        if self.opt.tensor_strides not in STRIDE_CONVENTIONS:
            raise KbenchInputError(f"tensor strides {self.opt.tensor_strides!r}: expected one of "
                                   f"{', '.join(STRIDE_CONVENTIONS)}")
        if not torch.cuda.is_available():
            raise KbenchInputError("collect cudnn needs a CUDA GPU; none is visible to PyTorch.")
        torch.backends.cudnn.benchmark = False
        self.stream = torch.cuda.Stream()
        self.handle = cudnn.create_handle()
        cudnn.set_stream(handle=self.handle, stream=self.stream.cuda_stream)
        self.nvml = _Nvml()
        self.gen = torch.Generator(device="cuda")
        self.gen.manual_seed(self.opt.seed)
        self.workspace = torch.empty(1, dtype=torch.uint8, device="cuda")
        self.notes_reliable = None  # decided on the first problem (see _note_probe_check)
        from kbench.collect.notes_cache import NotesCache
        self.notes_cache = NotesCache() if self.opt.notes and self.opt.notes_cache else None
        self.kernel_caches: dict[tuple, object] = {}  # kernel_cache_topology -> cuDNN kernel cache
        from kbench.collect.gpu_turn import GpuTurn
        self.turn = GpuTurn(self.opt.gpu_turn)
        self.capture_s = 0.0  # seconds of CUDA-graph capture in the current problem (t_capture_s)
        cd = cudnn.data_type
        self.cdt = {"FP16": cd.HALF, "BF16": cd.BFLOAT16, "FP32": cd.FLOAT}
        self.tdt = {"FP16": torch.float16, "BF16": torch.bfloat16, "FP32": torch.float32}
        hm = cudnn.heur_mode
        self.modes = {"a": hm.A, "b": hm.B, "fallback": hm.FALLBACK}
        nn = cudnn.numerical_note
        self.notes = {n: getattr(nn, n) for n in NOTE_NAMES if hasattr(nn, n)}

    def env(self) -> dict:
        return {**environment(self.torch, self.cudnn), "tensor_strides": self.opt.tensor_strides}

    def warm_up(self, seconds: float = 2.0) -> None:
        """Keep the GPU busy for a moment so that the first problems do not meet idle clocks."""
        t = self.torch
        with self.turn.hold():
            a = t.randn(4096, 4096, device="cuda", dtype=t.float16, generator=self.gen)
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                for _ in range(20):
                    a = (a @ a).clamp_(-1, 1)
                t.cuda.synchronize()
            del a

    # -- tensors ------------------------------------------------------------------
    def _tensors(self, p):
        """Uninitialised x, w, y (and which of them is the output): allocation only, no GPU work, so
        that it may run while another rank holds the GPU's turn; :meth:`_fill_inputs` fills them."""
        t = self.torch
        cl = p["layout"] == "NHWC"
        dt = self.tdt[p["dtype"]]

        def empty(shape):
            # the strides PyTorch's cuDNN descriptors carry (kbench.collect.strides), or the legacy ones
            strides = tensor_strides(shape, "NHWC" if cl else "NCHW", self.opt.tensor_strides)
            return t.empty_strided(shape, strides, dtype=dt, device="cuda")
        x = empty((p["n"], p["c"], p["x_h"], p["x_w"]))
        w = empty((p["k"], p["c"] // p["groups"], p["fil_h"], p["fil_w"]))
        y = empty((p["n"], p["k"], p["y_h"], p["y_w"]))
        out = {"F": y, "B": x, "W": w}[p["direction"]]
        return x, w, y, out

    def _fill_inputs(self, p, x, w, y) -> None:
        """The direction's inputs from U(-1, 1) in float32, rounded to the data type, in the order x, w, y
        (the seeded generator's draws are those of every earlier h100 run)."""
        t = self.torch
        d = p["direction"]
        for v, is_input in ((x, d in "FW"), (w, d in "FB"), (y, d in "BW")):
            if is_input:
                v.copy_(t.empty(v.shape, dtype=t.float32, device="cuda").uniform_(-1, 1, generator=self.gen))

    def _reference(self, p, x, w, y):
        """float64 PyTorch result of the same convolution from the same inputs."""
        args = dict(stride=(p["stride_h"], p["stride_w"]), padding=(p["pad_h"], p["pad_w"]),
                    dilation=(p["dil_h"], p["dil_w"]), groups=p["groups"])
        return self._torch_conv(p, x.double().contiguous(), w.double().contiguous(),
                                y.double().contiguous(), args)

    def _torch_conv(self, p, x, w, y, args):
        t = self.torch
        d = p["direction"]
        if d == "F":
            return t.nn.functional.conv2d(x, w, None, **args)
        mask = [True, False, False] if d == "B" else [False, True, False]
        res = t.ops.aten.convolution_backward(y, x, w, None, list(args["stride"]), list(args["padding"]),
                                              list(args["dilation"]), False, [0, 0], args["groups"], mask)
        return res[0] if d == "B" else res[1]

    # -- graphs -----------------------------------------------------------------------
    def _graph(self, p, x, w, y):
        cudnn = self.cudnn
        # kernel_cache also turns on dynamic shapes (the frontend's pygraph does both)
        cache = {"kernel_cache": self._kernel_cache(p)} if self.opt.kernel_cache else {}
        g = cudnn.pygraph(io_data_type=self.cdt[p["dtype"]], intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=self.handle, **cache)
        kw = dict(padding=[p["pad_h"], p["pad_w"]], stride=[p["stride_h"], p["stride_w"]],
                  dilation=[p["dil_h"], p["dil_w"]], compute_data_type=cudnn.data_type.FLOAT)
        d = p["direction"]
        cdt = self.cdt[p["dtype"]]
        if d == "F":
            X = g.tensor(name="X", dim=list(x.size()), stride=list(x.stride()), data_type=cdt)
            W = g.tensor(name="W", dim=list(w.size()), stride=list(w.stride()), data_type=cdt)
            O = g.conv_fprop(image=X, weight=W, name="conv", **kw)
            O.set_output(True).set_dim(list(y.size())).set_stride(list(y.stride())).set_data_type(cdt)
            pack = {X: x, W: w, O: y}
        elif d == "B":
            DY = g.tensor(name="DY", dim=list(y.size()), stride=list(y.stride()), data_type=cdt)
            W = g.tensor(name="W", dim=list(w.size()), stride=list(w.stride()), data_type=cdt)
            O = g.conv_dgrad(loss=DY, filter=W, name="dgrad", **kw)
            O.set_output(True).set_dim(list(x.size())).set_stride(list(x.stride())).set_data_type(cdt)
            pack = {DY: y, W: w, O: x}
        else:
            X = g.tensor(name="X", dim=list(x.size()), stride=list(x.stride()), data_type=cdt)
            DY = g.tensor(name="DY", dim=list(y.size()), stride=list(y.stride()), data_type=cdt)
            O = g.conv_wgrad(image=X, loss=DY, name="wgrad", **kw)
            O.set_output(True).set_dim(list(w.size())).set_stride(list(w.stride())).set_data_type(cdt)
            pack = {X: x, DY: y, O: w}
        g.validate()
        g.build_operation_graph()
        return g, pack

    def _kernel_cache(self, p):
        topology = kernel_cache_topology(p)
        if topology not in self.kernel_caches:
            self.kernel_caches[topology] = self.cudnn.create_kernel_cache()
        return self.kernel_caches[topology]

    def _plan_list(self, p, x, w, y, modes, note=None):
        """(graph, pack, [plan names], error) for ``modes`` (list of heur_mode)."""
        try:
            g, pack = self._graph(p, x, w, y)
            if note is not None:
                g.select_numeric_notes([note])
                g.deselect_workspace_greater_than(-1)
            g.create_execution_plans(modes)
            names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
            return g, pack, names, ""
        except Exception as exc:  # noqa: BLE001
            return None, None, [], _err(exc)

    def _note_flags(self, p, x, w, y, names, all_modes) -> dict[str, set]:
        """{plan name: set of numerical notes}, from one filter-probe graph per note."""
        flags = {n: set() for n in names}
        unclear = 0
        for note_name, note in self.notes.items():
            g, _, pnames, err = self._plan_list(p, x, w, y, all_modes, note=note)
            if g is None:
                raise RuntimeError(f"note probe {note_name}: {err}")
            for i, name in enumerate(pnames):
                try:
                    g.build_plan_at_index(i)
                    has = True  # built despite the -1 byte limit: cannot happen unless the filter is off
                    unclear += 1
                except Exception as exc:  # noqa: BLE001
                    has = classify_note_probe(str(exc))
                    if has is None:
                        unclear += 1
                        continue
                if has and name in flags:
                    flags[name].add(note_name)
        if unclear:
            raise RuntimeError(f"note probe: {unclear} unclear answers")
        return flags

    # -- execution and timing -----------------------------------------------------------
    def _run(self, g, pack, index):
        g.execute_plan_at_index(pack, self.workspace, index=index, handle=self.handle)

    def _check_cuda(self):
        t = self.torch
        try:
            t.cuda.synchronize()
            v = t.ones(1, device="cuda").add_(1).item()
            if v != 2.0:
                raise FatalCudaError("CUDA sanity check computed a wrong value")
        except FatalCudaError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise FatalCudaError(f"CUDA context unusable: {_err(exc)}") from exc

    def _single_ms(self, g, pack, index) -> float:
        t = self.torch
        s, e = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
        with t.cuda.stream(self.stream):
            t.cuda._sleep(spin_cycles(1))  # the GPU waits here, not for the host's launch
            s.record()
            self._run(g, pack, index)
            e.record()
        e.synchronize()
        return s.elapsed_time(e)

    def _capture(self, g, pack, index, k):
        t = self.torch
        t0 = time.perf_counter()
        cg = t.cuda.CUDAGraph()
        with t.cuda.stream(self.stream):
            cg.capture_begin(capture_error_mode="thread_local")
            try:
                for _ in range(k):
                    self._run(g, pack, index)
            finally:
                cg.capture_end()
        self.capture_s += time.perf_counter() - t0
        return cg

    def _replays(self, ps: PlanState, n: int) -> list[float]:
        t = self.torch
        evs = [(t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)) for _ in range(n)]
        with t.cuda.stream(self.stream):
            t.cuda._sleep(spin_cycles(n))  # all n replays are queued before the first event runs
            for s, e in evs:
                s.record()
                ps.graph.replay()
                e.record()
        self.stream.synchronize()
        return [s.elapsed_time(e) / ps.k for s, e in evs]

    def _eager(self, g, pack, index, k, n) -> list[float]:
        """Fallback when capture fails: k back-to-back launches behind a spin kernel."""
        t = self.torch
        out = []
        for _ in range(n):
            s, e = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            with t.cuda.stream(self.stream):
                t.cuda._sleep(int(k * 100e-6 * 1.5e9))  # keeps the GPU busy while the host queues
                s.record()
                for _ in range(k):
                    self._run(g, pack, index)
                e.record()
            e.synchronize()
            out.append(s.elapsed_time(e) / k)
        return out

    # -- PyTorch's choice --------------------------------------------------------------
    def _torch_choice(self, p, x, w, y, g, pack, indices, names) -> dict:
        t = self.torch
        import tempfile
        args = dict(stride=(p["stride_h"], p["stride_w"]), padding=(p["pad_h"], p["pad_w"]),
                    dilation=(p["dil_h"], p["dil_w"]), groups=p["groups"])
        xx, ww, yy = x.clone(), w.clone(), y.clone()  # torch writes its own outputs; keep ours
        with t.cuda.stream(self.stream):
            self._torch_conv(p, xx, ww, yy, args)  # warm: torch builds its plan outside the profile
        self.stream.synchronize()
        acts = [t.profiler.ProfilerActivity.CUDA]
        with t.profiler.profile(activities=acts) as prof:
            with t.cuda.stream(self.stream):
                self._torch_conv(p, xx, ww, yy, args)
                t.cuda._sleep(100)
                for i in indices:
                    self._run(g, pack, i)
                    t.cuda._sleep(100)
            self.stream.synchronize()
        with tempfile.NamedTemporaryFile(suffix=".json") as fh:
            prof.export_chrome_trace(fh.name)
            trace = json.load(open(fh.name))
        evs = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]
        evs.sort(key=lambda e: e.get("ts", 0))
        segs = split_segments([e["name"] for e in evs])
        torch_k = segs[0] if segs else []
        plan_k = {names[i]: segs[j + 1] for j, i in enumerate(indices) if j + 1 < len(segs)}
        matched = match_torch(torch_k, plan_k)
        return {"torch_kernels": "|".join(torch_k)[:2000], "torch_plans": ";".join(matched),
                "torch_status": "matched" if matched else "unmatched", "plan_kernels": plan_k}

    # -- one problem ------------------------------------------------------------------
    def measure(self, p: dict) -> tuple[dict, list[dict]]:
        t = self.torch
        t0 = time.perf_counter()
        rec = {k: p[k] for k in ("key", "direction", "dtype", "layout", *GEOMETRY, "y_h", "y_w")}
        rec.update(kind=p.get("kind", ""), sources=p.get("sources", ""), order=int(p.get("order", -1)),
                   flop=2.0 * p["n"] * p["k"] * (p["c"] // p["groups"]) * p["fil_h"] * p["fil_w"]
                   * p["y_h"] * p["y_w"], status="ok", error="")
        rec.update({f"{k}_start": v for k, v in self.nvml.sample().items()})
        waited0 = self.turn.waited_s
        try:
            x, w, y, out = self._tensors(p)
        except Exception as exc:  # noqa: BLE001
            with self.turn.hold():
                self._check_cuda()
            rec.update(status="failed", error="setup: " + _err(exc))
            return rec, []
        # 1-2. the host-only part: cuDNN's lists, the notes, every plan built (no GPU work: while
        # ranks share the GPU, one does this while another holds the GPU's turn)
        host = self._host_part(p, rec, x, w, y)
        plans = host["plans"] if host is not None else []
        with self.turn.hold():  # from here on the GPU is used: ranks sharing it take turns
            t_setup = time.perf_counter()
            try:
                self._fill_inputs(p, x, w, y)
                ref = self._reference(p, x, w, y)
                ref_norm = float(ref.norm())
                e_tf32 = None
                if p["dtype"] == "FP32":
                    tx, tw, ty = (_tf32_round(t, v) for v in (x, w, y))
                    rt = self._reference(p, tx, tw, ty)
                    e_tf32 = float((rt - ref).norm()) / ref_norm if ref_norm > 0 else None
                    del rt, tx, tw, ty
                rec.update(ref_norm=ref_norm, e_tf32=e_tf32, t_setup_s=time.perf_counter() - t_setup)
            except Exception as exc:  # noqa: BLE001
                self._check_cuda()
                rec.update(status="failed", error="setup: " + _err(exc))
                host = None  # its graph goes while the turn is held
                return rec, []
            if host is not None:
                self._gpu_part(p, rec, x, w, y, out, ref, ref_norm, e_tf32, **host)
                del host  # the built plans' kernels are unloaded with the graph: GPU work as well
            rec.update({f"{k}_end": v for k, v in self.nvml.sample().items()})
            del x, w, y, out, ref
            if self.turn.shared:
                # hand the freed memory back to the GPU: a rank sharing it may need it for its next
                # problem (two problem-directions measured this way in November 2026 failed their
                # setup out of memory while the other rank's cache held 51 GiB)
                t.cuda.empty_cache()
        # seconds of work: the waits for the GPU's turn (ranks sharing a GPU) are t_wait_s
        rec["t_wait_s"] = self.turn.waited_s - waited0
        rec["t_total_s"] = time.perf_counter() - t0 - rec["t_wait_s"]
        return rec, [ps.rec for ps in plans]

    def _host_part(self, p, rec, x, w, y) -> dict | None:
        """Steps 1 and 2: cuDNN's lists, the numerical notes and every plan built (into ``rec``);
        the graph and its plans for :meth:`_gpu_part`, None when cuDNN offered no plan."""
        t_phase = time.perf_counter()
        # 1. cuDNN's lists, one graph per heuristic mode, then the union.
        all_modes = list(self.modes.values())
        g, pack, names = self._heuristic_lists(p, rec, x, w, y, all_modes)
        if g is None:
            return None
        ranks = {tag: {n: i for i, n in enumerate(rec[f"heur_{tag}"].split(";")) if n}
                 for tag in self.modes}
        rec["t_heur_s"] = time.perf_counter() - t_phase
        t_phase = time.perf_counter()
        # 2. notes
        flags = self._numeric_notes(p, rec, x, w, y, names, all_modes)
        rec["t_notes_s"] = time.perf_counter() - t_phase
        t_build = time.perf_counter()
        plans = [self._plan_state(g, i, name, flags, ranks) for i, name in enumerate(names)]
        rec["t_build_s"] = time.perf_counter() - t_build
        built = [ps for ps in plans if ps.rec["build_ok"]]
        rec["n_built"] = len(built)
        if self.notes_reliable is None and flags is not None:
            self.notes_reliable = True
        return {"g": g, "pack": pack, "plans": plans, "built": built, "names": names}

    def _gpu_part(self, p, rec, x, w, y, out, ref, ref_norm, e_tf32, g, pack, plans, built, names) -> None:
        """Steps 3 to 7: run, check and time the built plans (into ``rec`` and the plans' records)."""
        # 3. one workspace for all (captured graphs keep its address)
        self._ensure_workspace(built)
        # 4. run once, check, capture, coarse timing (the captures' share in t_capture_s)
        t_time = time.perf_counter()
        self.capture_s = 0.0
        valid = self._coarse_timing(p, rec, g, pack, built, out, ref, ref_norm, e_tf32)
        rec["t_coarse_s"] = time.perf_counter() - t_time
        rec["t_capture_s"] = self.capture_s
        t_phase = time.perf_counter()
        # 5. PyTorch's choice
        torch_plans = self._torch_plans(p, rec, x, w, y, g, pack, plans, valid, names)
        rec["t_torch_s"] = time.perf_counter() - t_phase
        t_phase = time.perf_counter()
        # 6. precise re-timing
        if self.opt.precise and valid:
            self._precise_retiming(p, rec, g, pack, valid, torch_plans)
        rec["t_precise_s"] = time.perf_counter() - t_phase
        t_phase = time.perf_counter()
        # 7. verification: the front-runners timed again in a fresh order (kbench.collect.label_retiming.front_runners)
        if self.opt.verify and valid:
            self._verify(p, rec, g, pack, valid)
        rec["t_verify_s"] = time.perf_counter() - t_phase
        rec["t_time_s"] = time.perf_counter() - t_time
        for ps in plans:
            ps.graph = None

    def _heuristic_lists(self, p, rec, x, w, y, all_modes):
        """cuDNN's plan list of each heuristic mode (into ``rec``), then the graph of their union:
        (graph, pack, plan names), graph None when there is no plan (``rec``'s status says why)."""
        for tag, mode in self.modes.items():
            _, _, names, err = self._plan_list(p, x, w, y, [mode])
            rec[f"heur_{tag}"] = ";".join(names)
            rec[f"heur_{tag}_error"] = err
        g, pack, names, err = self._plan_list(p, x, w, y, all_modes)
        rec["n_plans"] = len(names)
        if g is None or not names:
            rec.update(status="no_plans", error=err or "cuDNN proposed no plan")
            return None, None, []
        return g, pack, names

    def _numeric_notes(self, p, rec, x, w, y, names, all_modes) -> dict[str, set] | None:
        """{plan name: numerical notes}: from the notes cache when it knows every plan's engine, else (and
        on the cache's periodic checks) from the filter probes, which the cache then learns. Into ``rec``:
        ``notes_error``, ``notes_source`` (probe, cache, check or '') and ``notes_cache_diff`` (plans
        whose probed notes differ from the cache's, on a check)."""
        rec.update(notes_error="", notes_source="", notes_cache_diff=None)
        if not self.opt.notes or self.notes_reliable is False:
            return None
        cache = self.notes_cache
        cached, check = cache.lookup(p, names) if cache is not None else (None, False)
        # the first problem of a process is probed all the same: it decides notes_reliable for this process
        if cached is not None and not check and self.notes_reliable:
            rec["notes_source"] = "cache"
            return cached
        try:
            flags = self._note_flags(p, x, w, y, names, all_modes)
        except Exception as exc:  # noqa: BLE001
            rec["notes_error"] = _err(exc)
            return None
        rec["notes_source"] = "check" if cached is not None else "probe"
        if cache is not None:
            differ = cache.learn(p, flags)
            if cached is not None:
                rec["notes_cache_diff"] = differ
        return flags

    def _plan_state(self, g, i, name, flags, ranks) -> PlanState:
        """Plan ``i``'s record (engine, knobs, notes, ranks in cuDNN's lists), after building it."""
        r = {"plan": name, "engine_id": None, "knobs": "", "behavior_notes": "",
             "numeric_notes": None if flags is None else ";".join(sorted(flags.get(name, ()))),
             "rank_a": ranks["a"].get(name, -1), "rank_b": ranks["b"].get(name, -1),
             "rank_fallback": ranks["fallback"].get(name, -1), "build_ok": False, "build_error": "",
             "exec_ok": False, "exec_error": "", "correct": False, "rel_err": None, "precision": "",
             "workspace_bytes": None, "timing_method": "", "inner_k": None}
        try:
            eid, knobs = g.get_engine_and_knobs_at_index(i)
            r["engine_id"] = int(eid)
            r["knobs"] = json.dumps({str(getattr(k, "name", k)): int(v) for k, v in knobs.items()},
                                    sort_keys=True)
        except Exception as exc:  # noqa: BLE001
            r["knobs_error"] = _err(exc)
        try:
            bn = g.get_behavior_notes_for_plan_at_index(i)
            r["behavior_notes"] = ";".join(sorted(str(getattr(b, "name", b)) for b in bn))
        except Exception as exc:  # noqa: BLE001
            r["behavior_notes_error"] = _err(exc)
        tb = time.perf_counter()
        try:
            g.build_plan_at_index(i)
            r["build_ok"] = True
            r["workspace_bytes"] = int(g.get_workspace_size_plan_at_index(i))
        except Exception as exc:  # noqa: BLE001
            r["build_error"] = _err(exc)
        r["build_ms"] = 1e3 * (time.perf_counter() - tb)
        return PlanState(i, r)

    def _ensure_workspace(self, built) -> None:
        """Grow the shared workspace to the largest need of the built plans (those under the cap)."""
        t = self.torch
        ws_need = max([ps.rec["workspace_bytes"] for ps in built
                       if ps.rec["workspace_bytes"] <= WORKSPACE_CAP] + [1])
        if self.workspace.numel() < ws_need:
            self.workspace = None
            t.cuda.empty_cache()
            self.workspace = t.empty(ws_need, dtype=t.uint8, device="cuda")

    def _coarse_timing(self, p, rec, g, pack, built, out, ref, ref_norm, e_tf32) -> list[PlanState]:
        """Every built plan in cuDNN's order: run once, check, capture, coarse timing (into its record).

        Returns the plans with a coarse time and a correct answer."""
        t_problem = time.perf_counter()
        rec["truncated"] = False
        best_ok_ms = math.inf  # fastest warm execution of a correct plan so far
        for ps in sorted(built, key=lambda q: plan_priority(q.rec)):
            r = ps.rec
            if r["workspace_bytes"] > WORKSPACE_CAP:
                r["exec_error"] = f"workspace {r['workspace_bytes']} bytes over the {WORKSPACE_CAP} cap"
                continue
            if time.perf_counter() - t_problem > PROBLEM_TIME_CAP_S:
                r["exec_error"] = f"not run: the problem's {PROBLEM_TIME_CAP_S:.0f} s time cap was reached"
                rec["truncated"] = True
                continue
            if not self._first_run(p, g, pack, ps, out, ref, ref_norm, e_tf32):
                continue
            try:
                single = self._single_ms(g, pack, ps.index)
            except Exception as exc:  # noqa: BLE001
                r["exec_error"] = _err(exc)
                r["exec_ok"] = False
                self._check_cuda()
                continue
            r["warm_exec_ms"] = single
            n_coarse = 1 if single > FAR_BEHIND * best_ok_ms else COARSE_REPLAYS
            if r["correct"]:
                best_ok_ms = min(best_ok_ms, single)
            if single >= SLOW_PLAN_MS:
                # a slow plan: its warm execution is its time (host overhead < 0.1% here)
                ps.times = [single]
                r.update(timing_method="single", inner_k=1, coarse_ms=single, coarse_n=1)
                continue
            self._coarse_replays(g, pack, ps, single, n_coarse)
        timed = [ps for ps in built if ps.rec.get("coarse_ms") is not None]
        valid = [ps for ps in timed if ps.rec["correct"]]
        rec["n_valid"] = len(valid)
        return valid

    def _first_run(self, p, g, pack, ps, out, ref, ref_norm, e_tf32) -> bool:
        """Run the plan once into ``out`` poisoned with NaN and compare it with the float64 reference
        (rel_err, correct, precision and first_exec_ms into its record); False when it did not run."""
        t = self.torch
        r = ps.rec
        tol = TOLERANCE[p["dtype"]]
        try:
            out.fill_(float("nan"))
            s_ev, e_ev = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            with t.cuda.stream(self.stream):
                s_ev.record()
                self._run(g, pack, ps.index)
                e_ev.record()
            self.stream.synchronize()
            first_ms = s_ev.elapsed_time(e_ev)
            r["exec_ok"] = True
        except Exception as exc:  # noqa: BLE001
            r["exec_error"] = _err(exc)
            self._check_cuda()
            return False
        err = float((out.double() - ref).norm()) / ref_norm if ref_norm > 0 else float((out.double() - ref).norm())
        r["rel_err"] = err if math.isfinite(err) else None
        r["correct"] = bool(math.isfinite(err) and err <= tol)
        if p["dtype"] == "FP32":
            r["precision"] = ("fp32" if (e_tf32 and math.isfinite(err) and err < FP32_PRECISE_FRACTION * e_tf32)
                              else "reduced")
        # The first execution may load the plan's kernels (CUDA lazy loading) or wait for
        # the host: it is recorded, but every decision below uses a second execution.
        r["first_exec_ms"] = first_ms
        return True

    def _coarse_replays(self, g, pack, ps, single, n_coarse) -> None:
        """Coarse time of a plan from ``n_coarse`` replays of a captured graph of k executions (k from
        its warm execution ``single``), eager launches where capture fails; into ``ps`` and its record."""
        r = ps.rec
        try:
            ps.k = inner_count(single)
            ps.graph = self._capture(g, pack, ps.index, ps.k)
            r["timing_method"] = "graph"
            self._replays(ps, 1)  # the graph's first launch uploads it: never timed
            ps.times = self._replays(ps, n_coarse)
            replay_ms = timing_stats(ps.times)["median"] * ps.k
            if replay_ms < COARSE_TARGET_MS / 2 and ps.k < MAX_INNER:
                # a replay shorter than the host's launch cost is not a measurement
                # (launch_bound_mask): capture again with k from the replay and re-time
                ps.k = inner_count(replay_ms / ps.k)
                ps.graph = self._capture(g, pack, ps.index, ps.k)
                self._replays(ps, 1)
                ps.times = self._replays(ps, n_coarse)
                r["recaptured"] = True
            if inconsistent_with_warm(timing_stats(ps.times)["median"], single):
                ps.k = inner_count(single)
                ps.graph = self._capture(g, pack, ps.index, ps.k)
                self._replays(ps, 1)
                ps.times = self._replays(ps, n_coarse)
                r["retimed_inconsistent"] = True
        except Exception as exc:  # noqa: BLE001
            r["capture_error"] = _err(exc)
            ps.graph = None
            self._check_cuda()
            try:
                ps.times = self._eager(g, pack, ps.index, ps.k, n_coarse)
                r["timing_method"] = "eager"
            except Exception as exc2:  # noqa: BLE001
                r["exec_error"] = _err(exc2)
                r["exec_ok"] = False
                self._check_cuda()
                return
        r["inner_k"] = ps.k
        st = timing_stats(ps.times)
        r.update(coarse_ms=st["median"], coarse_n=st["n"] * ps.k)

    def _torch_plans(self, p, rec, x, w, y, g, pack, plans, valid, names) -> list[str]:
        """What PyTorch runs for the convolution (into ``rec``; its kernels into the plans' records):
        the names of the plans it matches."""
        by_name = {ps.rec["plan"]: ps for ps in plans}
        torch_plans: list[str] = []
        if self.opt.torch_choice:
            a_order = [n for n in rec["heur_a"].split(";") if n in by_name and by_name[n].rec["exec_ok"]
                       and (by_name[n].rec.get("coarse_ms") or 1e9) < SLOW_PLAN_MS]
            cand = a_order[:TORCH_PROFILE_TOP]
            if valid:
                best = min(valid, key=lambda q: q.rec["coarse_ms"]).rec["plan"]
                if best not in cand:
                    cand.append(best)
            try:
                tc = self._torch_choice(p, x, w, y, g, pack, [by_name[n].index for n in cand], names)
                for n, ks in tc.pop("plan_kernels").items():
                    by_name[n].rec["kernels"] = "|".join(ks)[:2000]
                rec.update(tc)
                torch_plans = [n for n in rec["torch_plans"].split(";") if n]
            except Exception as exc:  # noqa: BLE001
                rec.update(torch_status="error", torch_error=_err(exc))
                self._check_cuda()
        return torch_plans

    def _precise_retiming(self, p, rec, g, pack, valid, torch_plans) -> None:
        """Precise interleaved rounds over the candidates (:meth:`_precise_candidates`), then the best
        plan once more (``repeat_ms``, the noise check); into the plans' records and ``rec``."""
        chosen = self._precise_candidates(p, valid, rec, torch_plans)
        rounds = self._interleaved_rounds(g, pack, chosen)
        for ps in chosen:
            st = timing_stats(rounds[ps.index])
            ps.rec.update(precise_ms=st["median"], precise_min_ms=st["min"], precise_q1_ms=st["q1"],
                          precise_q3_ms=st["q3"], precise_n=st["n"] * ps.k)
        best = min(chosen, key=lambda q: q.rec["precise_ms"])
        n_rep = PRECISE_ROUNDS * replays_per_round(best.rec["coarse_ms"] * best.k)
        if best.graph is not None:
            reps = self._replays(best, n_rep)
        elif best.rec["timing_method"] == "single":
            reps = [self._single_ms(g, pack, best.index) for _ in range(n_rep)]
        else:
            reps = self._eager(g, pack, best.index, best.k, n_rep)
        best.rec["repeat_ms"] = timing_stats(reps)["median"]
        rec["n_precise"] = len(chosen)

    def _interleaved_rounds(self, g, pack, states) -> dict[int, list]:
        """PRECISE_ROUNDS rounds over ``states`` in the given order: {plan index: per-execution times}."""
        rounds: dict[int, list] = {ps.index: [] for ps in states}
        for _ in range(PRECISE_ROUNDS):
            for ps in states:
                n_rep = replays_per_round(ps.rec["coarse_ms"] * ps.k)
                if ps.graph is not None:
                    reps = self._replays(ps, n_rep)
                elif ps.rec["timing_method"] == "single":
                    reps = [self._single_ms(g, pack, ps.index) for _ in range(n_rep)]
                else:
                    reps = self._eager(g, pack, ps.index, ps.k, n_rep)
                rounds[ps.index] += reps
        return rounds

    def _verify(self, p, rec, g, pack, valid) -> None:
        """Re-time the front-runners (precise rounds, fresh order); label times into the plan records."""
        from kbench.collect.label_retiming import front_runners as V
        by_name = {ps.rec["plan"]: ps for ps in valid}
        first = {n: (ps.rec.get("precise_ms") or ps.rec["coarse_ms"]) for n, ps in by_name.items()}
        in_set = [n for n, ps in by_name.items() if default_set(ps.rec, p["dtype"], bool(self.notes_reliable))]

        def time_fn(order):
            states = [by_name[n] for n in order]
            try:
                rounds = self._interleaved_rounds(g, pack, states)
            except Exception as exc:  # noqa: BLE001 - recorded; the first times stay the labels
                rec["verify_error"] = _err(exc)
                self._check_cuda()
                return {}
            return {ps.rec["plan"]: timing_stats(rounds[ps.index])["median"] for ps in states}
        o = self.opt
        result = V.verify_problem(first, time_fn, candidate_sets=[list(by_name), in_set], band=o.verify_band,
                                  min_plans=o.verify_min_plans, threshold=o.verify_disagree,
                                  max_passes=o.verify_max_passes, seed=o.seed ^ zlib.crc32(p["key"].encode()))
        for name, fields in result.plan_records().items():
            by_name[name].rec.update(fields)
        rec.update(verify_passes=result.passes, verify_converged=result.converged,
                   n_verified=len(result.checks))

    def _precise_candidates(self, p, valid, rec, torch_plans):
        best = min(q.rec["coarse_ms"] for q in valid)
        near = sorted([q for q in valid if q.rec["coarse_ms"] <= (1 + PRECISE_BAND) * best],
                      key=lambda q: q.rec["coarse_ms"])[:PRECISE_MAX_PLANS]
        chosen = {q.index: q for q in near}
        by_name = {q.rec["plan"]: q for q in valid}
        in_set = [q for q in valid if default_set(q.rec, p["dtype"], bool(self.notes_reliable))]
        extra = []
        for tag in ("a", "b"):
            order = [n for n in rec.get(f"heur_{tag}", "").split(";") if n in by_name]
            if order:
                extra.append(by_name[order[0]])
            order_set = [n for n in order if by_name[n] in in_set]
            if order_set:
                extra.append(by_name[order_set[0]])
        if in_set:
            extra.append(min(in_set, key=lambda q: q.rec["coarse_ms"]))
        extra += [by_name[n] for n in torch_plans if n in by_name]
        for q in extra:
            chosen.setdefault(q.index, q)
        return list(chosen.values())


def _tf32_round(t, v):
    """Round float32 values to TF32 (10 mantissa bits), nearest, as float32."""
    v = v.contiguous().float()
    i = v.view(t.int32)
    r = (i + 0x1000) & ~0x1FFF
    return r.view(t.float32)


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip()}"[:800]


# ---------------------------------------------------------------------------- the run
def collect(problems: str | Path, out_dir: str | Path, directions=DIRECTIONS, dtypes=None, layouts=None,
            time_budget_s: float | None = None, limit: int | None = None, batch_size: int = 10,
            options: Options | None = None, progress: bool = True, shard=None, launch_info: dict | None = None,
            make_collector=None) -> dict:
    """Measure every pending problem-direction of ``problems`` into the raw folder ``out_dir``.

    With ``shard`` (a :class:`kbench.collect.shard.Shard`) only that shard's
    part, into ``out_dir/shard-K-of-N/`` (see :mod:`kbench.collect.shard`).
    ``make_collector(options)`` replaces :class:`CudnnCollector` (tests fake the GPU with it).
    """
    from kbench.collect.lock import FolderLock
    from kbench.collect.travel import MARKER, is_travel_copy
    if shard is None and is_travel_copy(out_dir):
        # new batches in its root would sit beside the copied tables that merge must not take again
        raise KbenchInputError(f"{out_dir}: a travelling copy ({MARKER}); collect into it with --shard K/N "
                               "(each shard writes its own folder, merged into the full raw folder), or "
                               "collect into the full raw folder.")
    # the time budget counts from here: loading the corpus and the earlier records (tens of seconds for
    # several ranks reading a 10,000-problem folder) and starting CUDA are part of it, so a launcher's
    # own time limit set a margin above the budget is not overrun by the start-up
    deadline = None if time_budget_s is None else time.monotonic() + time_budget_s
    lock = FolderLock(Path(out_dir) / shard.folder_name if shard is not None else out_dir).acquire()
    try:
        return _collect_locked(problems, out_dir, directions, dtypes, layouts, deadline, limit, batch_size,
                               options, progress, shard, launch_info or {}, make_collector or CudnnCollector,
                               lock.notes)
    finally:
        lock.release()


def _collect_locked(problems, out_dir, directions, dtypes, layouts, deadline, limit, batch_size, options,
                    progress, shard, launch_info, make_collector, notes) -> dict:
    from kbench.collect import shard as S
    from kbench.collect.writer import CRASH_LIMIT, RawWriter, quarantine_torn
    todo = load_problems(problems, directions, dtypes, layouts)
    root = Path(out_dir)
    if shard is not None:
        out_dir = root / shard.folder_name
    notes = notes + quarantine_torn(out_dir)
    for note in notes:
        print(f"kbench collect: {note}", file=sys.stderr)
    writer = RawWriter(out_dir, batch_size=batch_size, max_batch_seconds=20.0)
    done, unfinished = writer.resume_state()
    if shard is not None:
        assigned = S.plan_shard(todo, root, shard, limit)
        S.write_manifest(out_dir, shard, assigned, {"problems": str(problems), "directions": list(directions),
                                                    "limit": limit})
        todo, limit = assigned, None  # the limit was applied before the split
    if shard is not None or S.shard_folders(root):
        done |= S.base_done(root, None)  # done in any folder of the root (shards included): never redone
    crashed = [k for k, n in unfinished.items() if n >= CRASH_LIMIT]
    if crashed:  # recorded once, then skipped like done ones
        rows = todo[todo["key"].isin(crashed)]
        for _, row in rows.iterrows():
            rec = {k: _py(row[k]) for k in ("key", "direction", "dtype", "layout", *GEOMETRY, "y_h", "y_w")}
            rec.update(status="crashed", error=f"the process ended during this problem {unfinished[row['key']]} times")
            writer.add(rec, [])
        writer.flush()
        done |= set(crashed)
    pending = todo[~todo["key"].isin(done)]
    if limit is not None:
        pending = pending.head(limit)
    summary = {"total": int(len(todo)), "already_done": int(len(todo) - len(todo[~todo["key"].isin(done)])),
               "pending": int(len(pending)), "measured": 0, "run_id": writer.run_id}
    if shard is not None:
        summary.update(shard=str(shard), out=str(out_dir))
    if notes:
        summary["notes"] = notes
    if not len(pending):
        return summary
    seen = [root] if shard is None else [root, out_dir]  # earlier records: they seed the notes cache
    fatal = _measure_pending(pending, writer, summary, deadline, options, progress, shard, launch_info,
                             make_collector, seen)
    if fatal:
        summary["fatal"] = fatal
    return summary


def _measure_pending(pending, writer, summary, deadline, options, progress, shard, launch_info,
                     make_collector, seen=()) -> str | None:
    """Measure the pending problems in order until done, stopped by a signal, out of time or a fatal
    CUDA error; every record saved, the environment written at start and end, ``summary``'s counts
    and rate updated. ``seen``: raw folders whose records seed the collector's notes cache. Returns the
    fatal error's text (None when there was none)."""
    stop = {"flag": False}

    def _stop(signum, frame):  # finish the current problem, save, exit
        stop["flag"] = True
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    col = make_collector(options)
    summary["notes_cache_keys"] = seed_notes_cache(getattr(col, "notes_cache", None), seen)
    col.warm_up()
    writer.write_env("start", {**col.env(), **launch_info, **({"shard": str(shard)} if shard is not None else {}),
                               **({"kernel_cache": True} if getattr(options, "kernel_cache", False) else {})})
    t_start = time.monotonic()
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(pending), unit="pd", mininterval=5, dynamic_ncols=False, file=sys.stderr,
                   desc="collect cudnn", disable=None)  # a terminal only: no \r bars in log files
    fatal = None
    try:
        for _, row in pending.iterrows():
            if stop["flag"]:
                break
            if deadline is not None and time.monotonic() > deadline:
                break
            p = {k: _py(v) for k, v in row.items()}
            writer.start(p["key"])
            try:
                rec, plans = col.measure(p)
            except FatalCudaError as exc:
                fatal = str(exc)
                break
            writer.add(rec, plans)
            summary["measured"] += 1
            if bar is not None:
                bar.update(1)
    finally:
        writer.flush()
        if bar is not None:
            bar.close()
        elapsed = time.monotonic() - t_start
        summary["elapsed_s"] = elapsed
        summary["per_minute"] = 60.0 * summary["measured"] / elapsed if elapsed > 0 else 0.0
        try:
            end_env = col.env() if fatal is None else nvidia_smi()
        except Exception as exc:  # noqa: BLE001
            end_env = {"env_error": _err(exc)}
        writer.write_env("end", {**end_env, "measured": summary["measured"],
                                 "elapsed_s": elapsed, "fatal": fatal})
    return fatal


def seed_notes_cache(cache, folders) -> int | None:
    """Teach ``cache`` (a NotesCache, or None) the notes recorded in the raw ``folders``; the keys it knows."""
    if cache is None:
        return None
    from kbench.collect.writer import load_records
    for folder in folders:
        if not Path(folder).is_dir():
            continue
        problems = load_records(folder, "problems", ["key", "direction", "dtype", "layout"])
        plans = load_records(folder, "plans", ["key", "plan", "numeric_notes"])
        if len(problems) and len(plans) and "numeric_notes" in plans:
            cache.seed(problems, plans)
    return len(cache.known)


def _py(v):
    return v.item() if hasattr(v, "item") else v

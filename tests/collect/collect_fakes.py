"""Stand-ins for the GPU part of ``kbench collect cudnn`` (no CUDA here, none in CI).

:func:`kbench.collect.measure.cudnn.run.collect` takes ``make_collector``; these classes
have the methods it calls (``warm_up``, ``env``, ``measure``), so everything
around the GPU (sharding, journal, batches, lock, resume) runs for real.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd

from kbench.collect.measure.cudnn import GEOMETRY, FatalCudaError, geometry_of, spatial_dims
from kbench.collect.raw_store.writer import load_env, load_records

HERE = Path(__file__).resolve().parent
RAW_SAMPLE = HERE / "fixtures" / "raw_sample"


def write_problems_csv(path: Path, n_geometries: int, dtype: str = "FP16") -> Path:
    """A problems file of ``n_geometries`` distinct small convolutions (one data type and layout)."""
    rows = pd.DataFrame({"n": 1, "c": 8, "k": [8 * (i + 1) for i in range(n_geometries)], "x_h": 8, "x_w": 8,
                         "fil_h": 3, "fil_w": 3, "pad_h": 1, "pad_w": 1, "dtype": dtype, "layout": "NCHW"})
    rows.to_csv(path, index=False)
    return path


class SyntheticCollector:
    """Measures nothing: one made-up plan per problem-direction; logs the keys it was given."""

    def __init__(self, options=None, delay_s: float = 0.0, log: Path | None = None, fail_after: int | None = None,
                 env: dict | None = None):
        self.delay_s, self.log, self.fail_after = delay_s, log, fail_after
        self.extra_env = env or {}
        self.measured: list[str] = []

    def warm_up(self):
        pass

    def env(self) -> dict:
        return {"gpu": "FAKE GPU", "smi_driver_version": "0", "cudnn_backend": "0", "cudnn_frontend": "0",
                **self.extra_env}

    def measure(self, p: dict):
        if self.fail_after is not None and len(self.measured) >= self.fail_after:
            raise FatalCudaError("fake: the CUDA context is gone")
        if self.delay_s:
            time.sleep(self.delay_s)
        self.measured.append(p["key"])
        if self.log is not None:
            with open(self.log, "a") as fh:
                fh.write(p["key"] + "\n")
        rank = ("spatial_dims",) if spatial_dims(p) == 3 else ()  # a 3D problem's record says so
        rec = {k: p[k] for k in ("key", "direction", "dtype", "layout", *geometry_of(p), *rank)}
        rec.update(status="ok", error="", t_total_s=self.delay_s)
        return rec, [{"plan": "eng0", "coarse_ms": 1.0}]


class ReplayCollector:
    """Replays what the real H100 collector recorded for each problem-direction of a raw folder.

    ``env`` overrides fields of the recorded environment (e.g. another GPU model).
    """

    def __init__(self, options=None, raw: Path = RAW_SAMPLE, env: dict | None = None):
        problems = load_records(raw, "problems")
        plans = load_records(raw, "plans")
        self.records = {r["key"]: r for r in problems.to_dict("records")}
        self.plans = {k: g for k, g in plans.groupby("key")}
        start = load_env(raw)
        start = start[start["phase"] == "start"].iloc[0].to_dict()
        self._env = {**{k: v for k, v in start.items() if k not in ("run_id", "phase", "time")}, **(env or {})}

    def warm_up(self):
        pass

    def env(self) -> dict:
        return dict(self._env)

    def measure(self, p: dict):
        rec = {k: v for k, v in self.records[p["key"]].items()
               if k != "run_id" and not (isinstance(v, float) and pd.isna(v))}
        plans = [{k: v for k, v in r.items() if k not in ("key", "run_id")}
                 for r in self.plans[p["key"]].to_dict("records")]
        return json.loads(json.dumps(rec, default=str)), plans


def replay_problems_csv(path: Path, raw: Path = RAW_SAMPLE) -> Path:
    """The problems file (corpus rows: order, geometry, data type, layout) of a recorded raw folder."""
    problems = load_records(raw, "problems")
    rows = problems.drop_duplicates("order")[["order", "kind", "dtype", "layout", *GEOMETRY, "sources"]]
    rows.to_csv(path, index=False)
    return path


class SimulatedGpu:
    """A GPU whose clock moves only by the runs it is given: ``torch``'s CUDA events, streams, spin
    kernels and graph capture/replay, enough for :mod:`kbench.gpu_check.live`'s timing protocol. A
    run of a unit of ``ms`` milliseconds moves the clock by exactly ``ms``, so every timing the
    protocol reports can be computed by hand."""

    def __init__(self):
        import contextlib
        import types
        self.now = 0.0
        self.capturing = None  # the graph being captured: runs are recorded, not run
        self.empty_cache_calls = 0
        gpu = self

        class Event:
            def __init__(self, enable_timing=True):
                self.t = None

            def record(self):
                self.t = gpu.now

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return end.t - self.t

        class CUDAGraph:
            def capture_begin(self, capture_error_mode=None):
                self.runs = []
                gpu.capturing = self

            def capture_end(self):
                gpu.capturing = None

            def replay(self):
                for run in self.runs:
                    run()

        def empty_cache():
            gpu.empty_cache_calls += 1

        cudnn = types.SimpleNamespace(benchmark=True, deterministic=True, allow_tf32=True)
        self.torch = types.SimpleNamespace(
            uint8=None, backends=types.SimpleNamespace(cudnn=cudnn),
            empty=lambda n, **kw: types.SimpleNamespace(numel=lambda: n),
            cuda=types.SimpleNamespace(Event=Event, CUDAGraph=CUDAGraph, empty_cache=empty_cache,
                                       stream=lambda s: contextlib.nullcontext(), _sleep=lambda cycles: None))

    def launch(self, ms: float, on_run=None) -> None:
        """One run of ``ms``: now, or recorded into the graph being captured."""
        def run():
            self.now += ms
            if on_run is not None:
                on_run()
        if self.capturing is not None:
            self.capturing.runs.append(run)
        else:
            run()


class SimulatedCollector:
    """The parts of :class:`kbench.collect.measure.cudnn.collector.CudnnCollector` that ``kbench verify-on-gpu``
    uses, on a :class:`SimulatedGpu`.

    ``ms``: plan name (or ``"torch"`` for PyTorch's own convolution) -> milliseconds per run; with
    ``"torch_autotune"``, PyTorch's op under ``benchmark = True`` runs that long, after ``"tuning"`` ms more
    on its first call for a problem (PyTorch timing its candidates). ``table_plans``: the unfiltered list of
    every mode. ``live_lists``: mode ("a", "b") -> list of (plan name, numerical notes, builds) that cuDNN
    proposes for the mode followed by the fallback list; a plan with a deselected note fails its build as
    the frontend's filter makes it fail.
    """

    def __init__(self, ms: dict, table_plans: list[str], live_lists: dict | None = None):
        import types

        from kbench.collect.measure.cudnn import NOTE_NAMES
        from kbench.collect.measure.cudnn.timing import PlanTiming
        self.gpu = SimulatedGpu()
        self.torch = self.gpu.torch
        self.stream = types.SimpleNamespace(synchronize=lambda: None)
        self.workspace = self.torch.empty(1)
        self.modes = {"a": "A", "b": "B", "fallback": "FALLBACK"}
        self.notes = {n: n for n in NOTE_NAMES}
        self.ms, self.table_plans, self.live_lists = ms, table_plans, live_lists or {}
        self.tf32_at_torch_runs: list[bool] = []  # PyTorch's TF32 flag at each (captured or eager) call
        self.benchmark_at_torch_runs: list[bool] = []  # and its benchmark flag
        self.tuned: set = set()  # the problems PyTorch's autotune has tuned (its plan cache)
        self.capture_s = 0.0
        # the collector's own timing methods, on the simulated GPU
        for name in ("_replays", "_single_fn_ms", "_capture_fn"):
            setattr(self, name, types.MethodType(getattr(PlanTiming, name), self))

    def _tensors(self, p):
        return "x", "w", "y", "out"

    def _fill_inputs(self, p, x, w, y):
        pass

    def _run(self, g, pack, index):
        self.gpu.launch(self.ms[g.names[index]])

    def _torch_conv(self, p, x, w, y, args):
        self.tf32_at_torch_runs.append(self.torch.backends.cudnn.allow_tf32)
        benchmark = self.torch.backends.cudnn.benchmark
        self.benchmark_at_torch_runs.append(benchmark)
        if benchmark and "torch_autotune" in self.ms:
            if p.get("key") not in self.tuned:  # the first call tunes; its plan is cached for the next
                self.tuned.add(p.get("key"))
                self.gpu.launch(self.ms.get("tuning", 0.0))
            self.gpu.launch(self.ms["torch_autotune"])
        else:
            self.gpu.launch(self.ms["torch"])

    def _host_ms(self, call) -> float:
        """One call timed on the host clock (here: the simulated clock, which the host waits for)."""
        t0 = self.gpu.now
        call()
        return self.gpu.now - t0

    def warm_up(self):
        pass

    def env(self) -> dict:
        return {"gpu": "SIMULATED"}

    def _check_cuda(self):
        pass

    def _plan_list(self, p, x, w, y, modes):
        return _SimulatedGraph(self, [(n, (), True) for n in self.table_plans]), {}, list(self.table_plans), ""

    def _graph(self, p, x, w, y):
        return _SimulatedGraph(self, None), {}


class _SimulatedGraph:
    """A frontend graph of :class:`SimulatedCollector`: plan names by index, builds, note filters."""

    def __init__(self, col, plans):
        self.col, self.plans, self.deselected = col, plans, set()

    @property
    def names(self):
        return [name for name, _, _ in self.plans]

    def create_execution_plans(self, modes):
        tag = {v: k for k, v in self.col.modes.items()}[modes[0]]
        self.plans = list(self.col.live_lists[tag])

    def deselect_numeric_notes(self, notes):
        self.deselected |= set(notes)

    def get_execution_plan_count(self):
        return len(self.plans)

    def get_plan_name_at_index(self, i):
        return self.plans[i][0]

    def build_plan_at_index(self, i):
        name, notes, builds = self.plans[i]
        if self.deselected & set(notes):
            raise RuntimeError(f"[cudnn_frontend] Error: Deselecting execution plan {name} at position {i}")
        if not builds:
            raise RuntimeError(f"[cudnn_frontend] Error: {name} is not supported")

    def get_workspace_size_plan_at_index(self, i):
        return 64 * (i + 1)

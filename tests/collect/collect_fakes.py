"""Stand-ins for the GPU part of ``kbench collect cudnn`` (no CUDA here, none in CI).

:func:`kbench.collect.cudnn.run.collect` takes ``make_collector``; these classes
have the methods it calls (``warm_up``, ``env``, ``measure``), so everything
around the GPU (sharding, journal, batches, lock, resume) runs for real.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd

from kbench.collect.cudnn import GEOMETRY, FatalCudaError
from kbench.collect.writer import load_env, load_records

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
        rec = {k: p[k] for k in ("key", "direction", "dtype", "layout", *GEOMETRY)}
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

"""What PyTorch's own autotune runs: ``torch.backends.cudnn.benchmark = True``, one problem at a time.

The collector identifies PyTorch's choice with ``benchmark = False`` (:mod:`.pytorch_choice`). With
``benchmark = True`` PyTorch times cuDNN's first ``torch.backends.cudnn.benchmark_limit`` plans on the
problem's first call and keeps the fastest. Its plan cache is keyed by the convolution's parameters,
data type, memory format and pointer alignments, and **not** by the benchmark flag
(``ConvolutionParams`` in ``aten/src/ATen/native/cudnn/ConvShared.h``): a problem run once without
autotune is never tuned in that process again. So this probe runs in a process of its own, with
autotune on from the start, each problem's first call being its tuning call, as in a user's step:

1. the problem's tensors, with the collector's strides and seeded inputs;
2. its first call timed on the host (the tuning call: PyTorch builds and times its candidates), then
   a second call (the cached plan), their difference being the first call's cost;
3. the first :data:`AUTOTUNE_PROFILE_TOP` plans of PyTorch's candidate order (mode A's, then the
   fallback list's) built and profiled beside PyTorch's call, the plan whose kernels equal PyTorch's
   being its autotune choice (:func:`.pytorch_choice.match_torch`).

One JSON line per problem-direction, written as it goes (with ``probe_s``, the probe's wall time); a
re-run skips the keys already written in any records file of the folder (:func:`record_files`: the
folder's ``autotune*.jsonl`` and their ``.gz`` copies; with ``--retry-failed`` those whose probes all
failed are probed again, but not one that broke the CUDA context, recorded ``fatal``). With ``--shard K/N`` a process probes the keys
whose CRC-32 is K modulo N (a split that does not depend on what is done, so processes started at
different moments never overlap) into ``autotune-K-of-N.jsonl``, one GPU each::

    kbench collect autotune --problems raw/h200-3d/corpus.csv.gz --out DIR --limit 400 --time-budget 500
    kbench collect autotune --problems P --out DIR --shard 3/8        # one GPU of eight

The records of a dataset's problems go in its raw folder, ``raw/<dataset>/autotune/``, where
``kbench build-data`` reads them (:mod:`kbench.collect.packaging.autotune`).
"""

from __future__ import annotations

import gzip
import json
import os
import time
import zlib
from pathlib import Path

from kbench.collect.measure.cudnn.collector import CudnnCollector, Options
from kbench.collect.measure.cudnn.problems import DIRECTIONS, conv_args, load_problems
from kbench.collect.measure.cudnn.protocol import FatalCudaError, _err
from kbench.collect.raw_store.shard import Shard

#: plans profiled beside PyTorch's call: its candidates are cuDNN's first ``benchmark_limit`` (10 by
#: default) plans of the heuristic's and the fallback list's, and a plan that does not build is skipped
AUTOTUNE_PROFILE_TOP = 14
RECORDS = "autotune.jsonl"


class AutotuneProbe(CudnnCollector):
    """The collector's tensors and graphs, used to see what ``benchmark = True`` settles on."""

    def __init__(self, options: Options | None = None, benchmark_limit: int | None = None):
        super().__init__(options or Options(notes=False, precise=False, verify=False))
        self.torch.backends.cudnn.benchmark = True  # from the first call on, as a user's script sets it
        if benchmark_limit is not None:  # PyTorch's default is 10; 0 times every candidate
            self.torch.backends.cudnn.benchmark_limit = int(benchmark_limit)

    def env(self) -> dict:
        t = self.torch
        return {**super().env(), "torch_cudnn_benchmark": bool(t.backends.cudnn.benchmark),
                "torch_cudnn_benchmark_limit": int(getattr(t.backends.cudnn, "benchmark_limit", 10))}

    def probe(self, p: dict) -> dict:
        """One problem-direction: PyTorch's autotune choice, its kernels and its first call's cost."""
        t = self.torch
        t0 = time.perf_counter()
        rec = {k: p[k] for k in ("key", "direction", "dtype", "layout")}
        rec.update(status="ok", error="")
        try:
            x, w, y, _ = self._tensors(p)
            self._fill_inputs(p, x, w, y)
            # PyTorch's candidates are the heuristic's engine configs followed by the fallback list's
            # (Conv_v8.cpp, get_generator_sources); mode A alone proposes none for some problems
            g, pack, names, err = self._plan_list(p, x, w, y, [self.modes["a"], self.modes["fallback"]])
            if g is None or not names:
                raise RuntimeError(f"no mode A or fallback plan: {err or 'cuDNN proposed none'}")
            states = [self._plan_state(g, i, n, None, {"a": {}, "b": {}, "fallback": {}})
                      for i, n in enumerate(names[:AUTOTUNE_PROFILE_TOP])]
            built = [ps for ps in states if ps.rec["build_ok"]]
            self._ensure_workspace(built)
            xx, ww, yy = x.clone(), w.clone(), y.clone()
            args = conv_args(p)
            first_ms, again_ms = (self._host_ms(lambda: self._torch_conv(p, xx, ww, yy, args)) for _ in range(2))
            choice = self._torch_choice(p, x, w, y, g, pack, [ps.index for ps in built], names)
            choice.pop("plan_kernels")
            rec.update(torch_autotune_plans=choice["torch_plans"], torch_autotune_kernels=choice["torch_kernels"],
                       torch_autotune_status=choice["torch_status"], first_call_ms=first_ms, second_call_ms=again_ms,
                       first_call_cost_ms=max(first_ms - again_ms, 0.0), candidates=";".join(names),
                       candidate_lists="a+fallback",
                       n_profiled=len(built))
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            self._check_cuda()
            rec.update(status="failed", error=_err(exc))
        finally:
            try:
                t.cuda.empty_cache()
            except Exception as exc:  # noqa: BLE001 - an illegal access surfaces here: the context is gone
                raise FatalCudaError(f"CUDA context unusable: {_err(exc)}") from exc
        rec["probe_s"] = round(time.perf_counter() - t0, 4)
        return rec

    def _host_ms(self, call) -> float:
        """One call on the collector's stream, from the host's start to the GPU's end (ms)."""
        t = self.torch
        self.stream.synchronize()
        t0 = time.perf_counter()
        with t.cuda.stream(self.stream):
            call()
        self.stream.synchronize()
        return 1e3 * (time.perf_counter() - t0)


def record_files(folder) -> list[Path]:
    """A folder's records files: ``autotune*.jsonl`` (one per process: :data:`RECORDS`, or one per shard)
    and their gzipped copies (``.jsonl.gz``, as a raw folder keeps them), sorted by name."""
    folder = Path(folder)
    return sorted([*folder.glob("autotune*.jsonl"), *folder.glob("autotune*.jsonl.gz")])


def read_lines(path: Path) -> list[tuple[int, dict]]:
    """(line number, record) of a records file, plain or gzipped; a torn line (a stopped run's last one)
    or any line that is no JSON object is left out."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    out = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append((number, rec))
    return out


def done_keys(path: Path, ok_only: bool = False) -> set[str]:
    """Keys already written to a records file, or to any records file of a folder (:func:`record_files`);
    with ``ok_only`` only those with an ``ok`` record or a ``fatal`` one (a failed probe is then pending
    again, but not one whose problem broke the CUDA context: it would end the process again)."""
    path = Path(path)
    files = record_files(path) if path.is_dir() else [path] if path.exists() else []
    return {rec["key"] for f in files for _, rec in read_lines(f)
            if isinstance(rec.get("key"), str) and (not ok_only or rec.get("status") == "ok" or rec.get("fatal"))}


def in_shard(keys, shard: Shard | None):
    """Whether each key is in ``shard``: its CRC-32 modulo the shard count is the shard's index."""
    if shard is None:
        return [True] * len(keys)
    return [zlib.crc32(str(k).encode()) % shard.count == shard.index for k in keys]


def probe_autotune(problems, out_dir, directions=DIRECTIONS, dtypes=None, layouts=None, limit: int | None = None,
                   time_budget_s: float | None = None, make_probe=AutotuneProbe, shard: Shard | None = None,
                   benchmark_limit: int | None = None, retry_failed: bool = False) -> dict:
    """Probe the pending problem-directions of ``problems`` (those of ``shard``) into ``out_dir``'s
    records file: :data:`RECORDS`, or ``autotune-K-of-N.jsonl`` for shard K of N. ``benchmark_limit``:
    PyTorch's ``torch.backends.cudnn.benchmark_limit`` for the run (default: PyTorch's own, 10; 0: every
    candidate), recorded in ``env.jsonl``; one folder holds one setting. ``retry_failed``: probe again the
    problem-directions whose only records failed (the new record is appended; packaging keeps it)."""
    deadline = None if time_budget_s is None else time.monotonic() + time_budget_s
    todo = load_problems(problems, directions, dtypes, layouts)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / (RECORDS if shard is None else f"autotune-{shard.index}-of-{shard.count}.jsonl")
    todo = todo[in_shard(todo["key"], shard)]
    pending = todo[~todo["key"].isin(done_keys(out, ok_only=retry_failed))]
    if limit is not None:
        pending = pending.head(limit)
    summary = {"total": int(len(todo)), "pending": int(len(pending)), "measured": 0}
    if not len(pending):
        return summary
    probe = make_probe() if benchmark_limit is None else make_probe(benchmark_limit=benchmark_limit)
    with (out / "env.jsonl").open("a", encoding="utf-8") as env:
        env.write(json.dumps({"phase": "start", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "shard": None if shard is None else str(shard), **probe.env()}) + "\n")
    with path.open("a", encoding="utf-8") as fh:
        for row in pending.to_dict("records"):
            if deadline is not None and time.monotonic() > deadline:
                break
            try:
                rec = probe.probe({k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()})
            except FatalCudaError as exc:
                # recorded as failed, so that the restarted process (the device script restarts on exit
                # code 3) goes on with the next problem instead of breaking its context again
                fh.write(json.dumps({k: row[k] for k in ("key", "direction", "dtype", "layout")} |
                                    {"status": "failed", "error": f"fatal: {exc}"[:2000], "fatal": True}) + "\n")
                fh.flush()
                summary["fatal"] = str(exc)
                break
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            summary["measured"] += 1
    return summary

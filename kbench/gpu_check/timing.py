"""The GPU part of ``kbench verify-on-gpu``: time a run plan's plans, writing raw rows as it goes.

It reuses :class:`kbench.collect.measure.cudnn.collector.CudnnCollector` for everything that
touches the GPU: the input tensors (``_tensors``, PyTorch's strides; filled by
``_fill_inputs``), the cuDNN graph of the problem with every heuristic mode
(``_plan_list``, so plan names are the dataset's kernel names), replay timing with
CUDA events (``_replays``). Every plan, and with live references PyTorch's own
convolution too, is one timing unit of :mod:`kbench.gpu_check.live`, timed by the
collector's rule (k back-to-back runs in a CUDA graph; single runs for slow units).
Only the order differs from the collector: the plan's interleaved rounds
(:mod:`kbench.gpu_check.plan`), each timing being the median of ``replays`` replays.

Raw rows go to ``raw.jsonl`` in the run folder, one JSON object per line,
flushed after every problem: ``{"kind": "time", problem_id, plan, round, slot,
ms, k, method}``, with live references also ``{"kind": "eager", problem_id, plan,
ms, k}`` per unit, and, when a problem is finished, ``{"kind": "problem",
problem_id, status, error, seconds}`` (with live references ``live``: {reference:
unit}). A re-run skips every problem that has a ``problem`` line (resumable); a
``{"kind": "run", ...}`` line records the environment and the run's wall time. A plan whose live block
has ``autotune`` then runs the autotune pass in a new process (:mod:`kbench.gpu_check.autotune_pass`,
into ``raw_autotune.jsonl``), once the main pass has finished every problem.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from kbench.collect.measure import cudnn as cudnn_collector
from kbench.gpu_check import live as live_timing
from kbench.gpu_check.plan import interleave, problem_rng

RAW_NAME = "raw.jsonl"


def done_problems(raw_path: Path) -> set[str]:
    """Problem ids that a previous run finished (ok or failed)."""
    if not raw_path.exists():
        return set()
    out = set()
    for line in raw_path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a kill: the problem is re-timed
            continue
        if row.get("kind") == "problem":
            out.add(row["problem_id"])
    return out


def _time_problem(col, item: dict, replays: int, seed: int = 0, live: dict | None = None) -> tuple[list[dict], dict]:
    """(time rows, fields of the problem's line) of one problem in its interleaved order (raises on a
    failure). With ``live`` (the plan's live block) the live references join the rounds, every unit
    is also timed eagerly, and the fields name each live reference's unit."""
    p = item["problem"]
    x, w, y, g, pack, index = live_timing.problem_plans(col, p, item["plans"])
    units: dict[str, live_timing.Unit] = {}
    try:
        for name in item["plans"]:
            g.build_plan_at_index(index[name])
            units[name] = live_timing.plan_unit(col, g, pack, index[name], name)
        order, fields = item["order"], {}
        if live is not None:
            fields["live"] = live_timing.live_units(col, p, x, w, y, live, units)
            order = interleave(list(units), len(item["order"]), problem_rng(seed, item["problem_id"]))
        need = max([1] + [u.workspace_bytes for u in units.values()])
        if col.workspace.numel() < need:  # before any capture: the graphs keep the workspace's address
            col.workspace = None
            col.torch.cuda.empty_cache()
            col.workspace = col.torch.empty(need, dtype=col.torch.uint8, device="cuda")
        for unit in units.values():
            live_timing.prepare(col, unit)
        rows = []
        for r, round_units in enumerate(order):
            for slot, name in enumerate(round_units):
                unit = units[name]
                rows.append({"kind": "time", "problem_id": item["problem_id"], "plan": name, "round": r, "slot": slot,
                             "ms": live_timing.time_unit(col, unit, replays), "k": unit.k, "method": unit.method})
        if live is not None:
            rows += [{"kind": "eager", "problem_id": item["problem_id"], "plan": name,
                      "ms": live_timing.eager_ms(col, unit, replays), "k": unit.k} for name, unit in units.items()]
        return rows, fields
    finally:
        live_timing.release(col, units, pytorch_op=live is not None)


def run_resumable(problems: list[dict], out_dir: str | Path, make_collector, work, time_budget_s: float | None = None,
                  progress_every: int = 50, label: str = "verify", raw_name: str = RAW_NAME) -> dict:
    """Run ``work(col, item) -> (rows, fields)`` on every problem of ``problems`` that has no
    ``problem`` line in ``OUT/<raw_name>`` (``raw.jsonl``) yet, appending as it goes (resumable).

    ``rows`` are written before the problem's line, ``fields`` join that line. A problem whose
    ``work`` raises is recorded as failed and the run goes on, unless the CUDA context is gone
    (:class:`kbench.collect.measure.cudnn.protocol.FatalCudaError`, raised for the caller to restart and resume).
    Shared by ``kbench verify-on-gpu`` and ``kbench collect verify-labels``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    raw_path = out_dir / raw_name
    done = done_problems(raw_path)
    todo = [item for item in problems if item["problem_id"] not in done]
    col = make_collector()
    t0 = time.perf_counter()
    col.warm_up()
    n_ok = n_failed = 0
    with raw_path.open("a") as fh:
        fh.write(json.dumps({"kind": "run", "start": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                             "env": col.env(), "todo": len(todo), "done_before": len(done)}) + "\n")
        for n, item in enumerate(todo):
            if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
                break
            ts = time.perf_counter()
            try:
                (rows, fields), status, error = work(col, item), "ok", ""
                n_ok += 1
            except cudnn_collector.FatalCudaError:
                raise
            except Exception as exc:  # noqa: BLE001 - one problem's failure is recorded, the run goes on
                col._check_cuda()
                rows, fields, status, error = [], {}, "failed", cudnn_collector._err(exc)
                n_failed += 1
            for row in rows:
                fh.write(json.dumps(row) + "\n")
            fh.write(json.dumps({"kind": "problem", "problem_id": item["problem_id"], "status": status,
                                 "error": error, "seconds": round(time.perf_counter() - ts, 4), **fields}) + "\n")
            fh.flush()
            if progress_every and (n + 1) % progress_every == 0:
                print(f"{label}: {n + 1}/{len(todo)} problems, {time.perf_counter() - t0:.0f} s", flush=True)
        wall = time.perf_counter() - t0
        fh.write(json.dumps({"kind": "run_end", "seconds": round(wall, 2), "ok": n_ok, "failed": n_failed}) + "\n")
    return {"ok": n_ok, "failed": n_failed, "left": len(todo) - n_ok - n_failed, "seconds": round(wall, 1)}


def run_timing(plan: dict, out_dir: str | Path, time_budget_s: float | None = None,
               progress_every: int = 50, make_collector=None, launch=None) -> dict:
    """Time every unfinished problem of ``plan`` on this machine's GPU; append to ``raw.jsonl``. With the
    autotune pass in the plan, then run it in a process of its own (``launch``:
    :func:`launch_autotune_pass`) with what is left of the budget; its summary is
    ``autotune`` (``skipped`` where the main pass has problems left: a later run resumes both)."""
    t0 = time.perf_counter()
    summary = run_resumable(
        plan["problems"], out_dir,
        make_collector or (lambda: cudnn_collector.CudnnCollector(
            cudnn_collector.Options(notes=False, torch_choice=False, precise=False, seed=plan["seed"]))),
        lambda col, item: _time_problem(col, item, plan["replays"], plan["seed"], plan.get("live")),
        time_budget_s, progress_every)
    if (plan.get("live") or {}).get("autotune"):
        left = None if time_budget_s is None else time_budget_s - (time.perf_counter() - t0)
        if summary["left"] or (left is not None and left <= 0):
            summary["autotune"] = {"skipped": "the main pass has problems left or no time is left: run again"}
        else:
            _release_gpu_memory()
            summary["autotune"] = (launch or launch_autotune_pass)(Path(out_dir), left)
    return summary


def launch_autotune_pass(out_dir, time_budget_s: float | None = None) -> dict:
    """Run the autotune pass in a new process (``python -m kbench.gpu_check.autotune_pass``) and return its
    summary; a fatal CUDA error there (exit 3) is raised here, so that the caller restarts and resumes."""
    cmd = [sys.executable, "-m", "kbench.gpu_check.autotune_pass", "--out", str(out_dir)]
    if time_budget_s is not None:
        cmd += ["--time-budget", f"{max(time_budget_s, 0.0):.0f}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    sys.stderr.write(done.stderr[-4000:])
    if done.returncode == 3:
        raise cudnn_collector.FatalCudaError("the autotune pass lost its CUDA context (exit 3): run again to resume")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    summary = json.loads(lines[-1]) if lines else {}
    return summary if done.returncode == 0 else {**summary, "rc": done.returncode,
                                                 "error": (done.stderr.strip().splitlines() or [""])[-1][:300]}


def _release_gpu_memory() -> None:
    """Give this process's cached GPU memory back before the autotune pass starts: PyTorch's autotune drops
    every candidate whose workspace exceeds the device's free memory (docs/autotune.md), and memory this
    process keeps cached is not free to the other."""
    import gc
    torch = sys.modules.get("torch")
    gc.collect()
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()

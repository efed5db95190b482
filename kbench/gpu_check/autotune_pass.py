"""PyTorch's real autotune as a live reference of ``kbench verify-on-gpu --live-references``: a pass of its own.

PyTorch's cuDNN plan cache is keyed by the convolution's parameters, data type, memory format and
pointer alignments, not by ``torch.backends.cudnn.benchmark`` (``CacheKeyWrapper`` in
``aten/src/ATen/native/cudnn/Conv_v8.cpp``; docs/autotune.md): the main pass, which runs PyTorch's op
with ``benchmark = False``, leaves every problem's plan cached, and its process would never tune that
problem. So the timing step starts this pass in a new process
(:func:`kbench.gpu_check.timing.launch_autotune_pass`), with ``benchmark = True`` from its start, as
``kbench collect autotune`` does (:mod:`kbench.collect.measure.cudnn.autotune`).
For each problem of the plan, in the plan's order:

1. the tensors (PyTorch's strides, seeded inputs) and the variant's TF32 flag
   (:func:`kbench.gpu_check.plan.live_filter`), ``deterministic`` off;
2. PyTorch's op called once on the host clock (the tuning call: PyTorch builds and times its
   candidates) and once more (its cached plan): ``first_call_ms`` and ``second_call_ms``;
3. the op (unit :data:`~kbench.gpu_check.plan.PYTORCH_AUTOTUNE_UNIT`), the choice's plan and the oracle's
   (and a timed selector's candidates, :mod:`kbench.gpu_check.plan`), each prepared and timed by the main pass's protocol (:mod:`kbench.gpu_check.live`) in the plan's
   number of interleaved rounds (:func:`kbench.gpu_check.plan.interleave`, the problem's seeded order):
   the choice and the real autotune are compared within one process, like with like.

With a timed selector (the plan's ``candidates``), step 3 is preceded by the selector's own first call
(:func:`timed_top_call`), timed on the host clock as PyTorch's tuning call is: a fresh plan list,
each candidate built, run once to warm up and once between CUDA events, as ``benchmark = True`` times
its candidates (docs/autotune.md). The problem's line keeps the call's host time and each candidate's
single time; the score takes the fastest as the selector's choice in this pass
(:func:`kbench.gpu_check.score.call_choice`), so every round measures.

Rows go to ``RUN_DIR/raw_autotune.jsonl`` as the main pass writes ``raw.jsonl``
(:func:`kbench.gpu_check.timing.run_resumable`; the problem's line adds ``autotune``, the two host-clock
calls); a re-run resumes::

    python -m kbench.gpu_check.autotune_pass --out RUN_DIR [--time-budget S]
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

from kbench.collect.measure import cudnn as cudnn_collector
from kbench.collect.measure.cudnn.problems import conv_args
from kbench.gpu_check import live as live_timing
from kbench.gpu_check.plan import PYTORCH_AUTOTUNE_UNIT, RAW_AUTOTUNE, interleave, problem_rng


def autotune_collector(seed: int = 0):
    """The collector of the pass: :class:`kbench.collect.measure.cudnn.autotune.AutotuneProbe` (``benchmark``
    on from its creation, before PyTorch's op ever runs) with verify-on-gpu's options."""
    from kbench.collect.measure.cudnn.autotune import AutotuneProbe

    return AutotuneProbe(
        cudnn_collector.Options(notes=False, torch_choice=False, precise=False, verify=False, seed=seed)
    )


def timed_top_call(col, p: dict, x, w, y, candidates: list[str]) -> dict:
    """The timed selector's first call for a new shape, as PyTorch's ``benchmark = True`` makes its own:
    cuDNN's plan list made afresh, each candidate built, run once (warm-up), the device synchronised, then
    run once between two CUDA events on the collector's stream. ``{"ms": the whole call on the host clock,
    "times": {candidate: its one timed execution (ms)}}``; the choice, the fastest, is left to the score."""
    t = col.torch
    times: dict[str, float] = {}

    def call():
        g, pack, names, err = col._plan_list(p, x, w, y, list(col.modes.values()))
        if g is None:
            raise RuntimeError(f"graph: {err}")
        index = {n: i for i, n in enumerate(names)}
        for name in candidates:
            g.build_plan_at_index(index[name])
            col._run(g, pack, index[name])  # warm-up
            col.stream.synchronize()
            start, end = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            start.record()
            col._run(g, pack, index[name])
            end.record()
            end.synchronize()
            times[name] = float(start.elapsed_time(end))

    return {"ms": col._host_ms(call), "times": times}


def time_problem(col, item: dict, replays: int, seed: int, live: dict) -> tuple[list[dict], dict]:
    """(time rows, fields of the problem's line) of one problem: PyTorch's op with ``benchmark = True``, its
    first two calls on the host clock, then it, the choice and the oracle in interleaved rounds."""
    p = item["problem"]
    # a timed selector's candidates too (kbench.gpu_check.plan, timed_top): it chooses in this process
    plans = list(dict.fromkeys([item["roles"]["choice"], item["roles"]["oracle"], *item.get("candidates", [])]))
    x, w, y, g, pack, index = live_timing.problem_plans(col, p, plans)
    t = col.torch
    t.backends.cudnn.benchmark = True
    t.backends.cudnn.deterministic = False
    t.backends.cudnn.allow_tf32 = bool(live["filters"][p["dtype"]]["allow_tf32"])
    units: dict[str, live_timing.Unit] = {}
    try:
        for name in plans:
            g.build_plan_at_index(index[name])
            units[name] = live_timing.plan_unit(col, g, pack, index[name], name)
        op = live_timing.Unit(PYTORCH_AUTOTUNE_UNIT, partial(col._torch_conv, p, x, w, y, conv_args(p)))
        first_ms, second_ms = (col._host_ms(op.run) for _ in range(2))  # the tuning call, then the cached plan
        units[PYTORCH_AUTOTUNE_UNIT] = op
        need = max([1] + [u.workspace_bytes for u in units.values()])
        if col.workspace.numel() < need:  # before any capture: the graphs keep the workspace's address
            col.workspace = None
            t.cuda.empty_cache()
            col.workspace = t.empty(need, dtype=t.uint8, device="cuda")
        line: dict = {"autotune": {"first_call_ms": first_ms, "second_call_ms": second_ms}}
        if item.get("candidates"):  # after the workspace is sized: the call's plans are the units' plans
            line["timed_top_call"] = timed_top_call(col, p, x, w, y, list(dict.fromkeys(item["candidates"])))
        for unit in units.values():
            live_timing.prepare(col, unit)
        rows = []
        for r, round_units in enumerate(
            interleave(list(units), len(item["order"]), problem_rng(seed, item["problem_id"]))
        ):
            for slot, name in enumerate(round_units):
                unit = units[name]
                rows.append(
                    {
                        "kind": "time",
                        "problem_id": item["problem_id"],
                        "plan": name,
                        "round": r,
                        "slot": slot,
                        "ms": live_timing.time_unit(col, unit, replays),
                        "k": unit.k,
                        "method": unit.method,
                    }
                )
        return rows, line
    finally:
        live_timing.release(col, units, pytorch_op=True)


def run_pass(
    plan: dict, out_dir, time_budget_s: float | None = None, make_collector=None, progress_every: int = 50
) -> dict:
    """Time every problem of ``plan`` that ``out_dir/raw_autotune.jsonl`` has not finished (resumable)."""
    from kbench.gpu_check.timing import run_resumable

    make = make_collector or (lambda: autotune_collector(plan["seed"]))
    return run_resumable(
        plan["problems"],
        out_dir,
        make,
        lambda col, item: time_problem(col, item, plan["replays"], plan["seed"], plan["live"]),
        time_budget_s,
        progress_every,
        label="autotune pass",
        raw_name=RAW_AUTOTUNE,
    )


def main(argv=None) -> int:
    """``python -m kbench.gpu_check.autotune_pass --out RUN_DIR``: the pass on RUN_DIR/plan.json."""
    import argparse

    from kbench.core.errors import KbenchError, KbenchInputError, read_json_object

    p = argparse.ArgumentParser(prog="python -m kbench.gpu_check.autotune_pass", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run folder holding plan.json; raw_autotune.jsonl goes there")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS")
    args = p.parse_args(argv)
    try:
        plan_path = Path(args.out) / "plan.json"
        if not plan_path.exists():
            raise KbenchInputError(
                f"{plan_path}: no run plan; write one with 'kbench verify-on-gpu PREDS --out "
                f"{args.out} --plan-only --live-references'"
            )
        plan = read_json_object(plan_path)
        if not (plan.get("live") or {}).get("autotune"):
            raise KbenchInputError(
                f"{plan_path}: the plan has no autotune pass (its live block has no 'autotune'); "
                "plan it again with --live-references"
            )
        print(json.dumps(run_pass(plan, args.out, args.time_budget)))
        return 0
    except cudnn_collector.FatalCudaError as exc:
        print(f"kbench: fatal CUDA error: {exc}", file=sys.stderr)
        return 3
    except KbenchError as exc:
        print(f"kbench: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())

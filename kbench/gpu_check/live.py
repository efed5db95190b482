"""One problem on the GPU for ``kbench verify-on-gpu``: timing units, one protocol, live references.

A timing unit runs the problem's convolution once: a cuDNN plan at an index of a frontend
graph, or PyTorch's own convolution. Every unit of a problem is timed by the same protocol,
so a comparison never mixes two: :func:`prepare` runs it once (warm-up), then once more to
pick k as the collector does (:func:`kbench.collect.measure.cudnn.protocol.inner_count`), captures k
back-to-back runs in one CUDA graph and recaptures with a larger k when a replay is too short
to hide the host; :func:`time_unit` is then the median of ``replays`` replays behind a spin
kernel (ms per run). A unit whose warm-up takes over
:data:`~kbench.collect.measure.cudnn.protocol.SLOW_PLAN_MS` is timed by single runs instead.
:func:`eager_ms` times the same unit without a graph: k launches from Python behind a spin kernel,
as an eager PyTorch program launches them.

The live references (:data:`kbench.gpu_check.plan.LIVE_REFERENCES`) are decided here, on the
machine that times them (:func:`live_units`):

* ``live_mode_a`` / ``live_mode_b``: cuDNN's heuristic mode asked on a graph of its own, followed by
  cuDNN's fallback list as PyTorch's generator sources are, with the variant's numerical notes
  deselected (:func:`kbench.gpu_check.plan.live_filter`). The pick is the first plan that builds,
  as PyTorch (``benchmark = False``) runs the first plan of its filtered list that builds and runs.
  It runs from the graph it was picked on: a filtered list can hold knob settings that no
  unfiltered list of the same problem holds (``eng49_k0=33`` on an H100).
* ``pytorch_op``: ``F.conv2d`` / ``F.conv3d`` (forward) or ``aten.convolution_backward`` (dgrad, wgrad) on
  the same tensors (PyTorch's strides), with ``torch.backends.cudnn.allow_tf32`` as the variant says and
  ``benchmark`` and ``deterministic`` off. Its capture draws on a private memory pool of PyTorch's
  allocator, which :func:`release` hands back after the problem.
* ``pytorch_autotune``: the same op with ``benchmark = True``, in a pass of its own
  (:mod:`kbench.gpu_check.autotune_pass`), where the plan asks for it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from kbench.collect.measure import cudnn as cudnn_collector
from kbench.gpu_check.plan import PYTORCH_OP_UNIT


@dataclass
class Unit:
    """One timing unit: ``run()`` launches the convolution once on the collector's stream."""

    name: str
    run: Callable[[], object]
    workspace_bytes: int = 0
    k: int = 1
    graph: object = None  # the captured CUDA graph of k runs
    method: str = "graph"  # or "single" (slow units)


def problem_plans(col, p: dict, plans: list[str]):
    """(x, w, y, graph, variant pack, plan index by name) of problem ``p`` on this GPU: its tensors
    filled and cuDNN's plan list; raises where the graph fails or a plan of ``plans`` is not proposed."""
    x, w, y, _ = col._tensors(p)
    col._fill_inputs(p, x, w, y)
    g, pack, names, err = col._plan_list(p, x, w, y, list(col.modes.values()))
    if g is None:
        raise RuntimeError(f"graph: {err}")
    index = {n: i for i, n in enumerate(names)}
    missing = [n for n in plans if n not in index]
    if missing:
        raise RuntimeError(f"cuDNN did not propose {', '.join(missing)} on this machine")
    return x, w, y, g, pack, index


def plan_unit(col, g, pack, index: int, name: str) -> Unit:
    """The unit of a built plan of graph ``g``."""
    return Unit(name, partial(col._run, g, pack, index), int(g.get_workspace_size_plan_at_index(index)))


def single_ms(col, fn) -> float:
    """One run of ``fn`` timed with CUDA events behind a spin kernel (ms): the collector's own timer."""
    return col._single_fn_ms(fn)


def capture(col, fn, k: int):
    """A CUDA graph of ``k`` back-to-back runs of ``fn`` (the collector's capture), after the stream is idle."""
    col.stream.synchronize()
    return col._capture_fn(fn, k)


def _graph_replays(col, unit: Unit, n: int) -> list[float]:
    return col._replays(cudnn_collector.PlanState(0, {}, graph=unit.graph, k=unit.k), n)


def prepare(col, unit: Unit) -> None:
    """Warm-up run, k and capture: the collector's rule (:mod:`kbench.collect.measure.cudnn.timing`)."""
    single = single_ms(col, unit.run)
    if single >= cudnn_collector.SLOW_PLAN_MS:
        unit.method = "single"
        return
    single = single_ms(col, unit.run)
    unit.k = cudnn_collector.inner_count(single)
    unit.graph = capture(col, unit.run, unit.k)
    warm = _graph_replays(col, unit, 1)[0]
    if warm * unit.k < cudnn_collector.COARSE_TARGET_MS / 2 and unit.k < cudnn_collector.MAX_INNER:
        unit.k = cudnn_collector.inner_count(warm)
        unit.graph = capture(col, unit.run, unit.k)
        _graph_replays(col, unit, 1)
    unit.method = "graph"


def time_unit(col, unit: Unit, replays: int) -> float:
    """Median of ``replays`` timings of a prepared unit (ms per run)."""
    if unit.graph is not None:
        return statistics.median(_graph_replays(col, unit, replays))
    return statistics.median(single_ms(col, unit.run) for _ in range(replays))


def eager_ms(col, unit: Unit, replays: int) -> float:
    """Median over ``replays`` of k launches from Python (no graph) behind a spin kernel (ms per run)."""
    if unit.method == "single":
        return time_unit(col, unit, replays)
    t = col.torch
    out = []
    for _ in range(replays):
        s, e = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
        with t.cuda.stream(col.stream):
            t.cuda._sleep(cudnn_collector.spin_cycles(unit.k))  # keeps the GPU busy while the host queues the k launches
            s.record()
            for _ in range(unit.k):
                unit.run()
            e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) / unit.k)
    return statistics.median(out)


def live_pick(col, p: dict, x, w, y, mode: str, deselect: list[str]) -> tuple[Unit, str]:
    """(unit, plan name) of what cuDNN's ``mode`` ("a" or "b") picks with ``deselect``'s notes filtered."""
    g, pack = col._graph(p, x, w, y)
    notes = [col.notes[n] for n in deselect if n in col.notes]
    # the filter is set before and after the lists are made: the collector's note probes set theirs
    # before (and were seen to work), the frontend's C++ Graph filters the lists it already holds
    if notes:
        g.deselect_numeric_notes(notes)
    g.create_execution_plans([col.modes[mode], col.modes["fallback"]])
    if notes:
        g.deselect_numeric_notes(notes)
    errors = []
    for i in range(g.get_execution_plan_count()):
        try:
            g.build_plan_at_index(i)
        except Exception as exc:  # noqa: BLE001 - deselected or unsupported: PyTorch goes on to the next
            errors.append(cudnn_collector._err(exc))
            continue
        name = g.get_plan_name_at_index(i)
        return plan_unit(col, g, pack, i, name), name
    raise RuntimeError(f"live mode {mode.upper()}: none of {len(errors)} plans built with "
                       f"{', '.join(deselect) or 'no note'} deselected"
                       + (f" (first error: {errors[0]})" if errors else ""))


def pytorch_op_unit(col, p: dict, x, w, y) -> Unit:
    """PyTorch's own convolution of the problem as a unit (its flags are set by :func:`live_units`); a 3D
    problem's stride, padding and dilation have their depth first (:func:`~kbench.collect.measure.cudnn.conv_args`)."""
    return Unit(PYTORCH_OP_UNIT, partial(col._torch_conv, p, x, w, y, cudnn_collector.conv_args(p)))


def live_units(col, p: dict, x, w, y, live: dict, units: dict[str, Unit]) -> dict[str, str]:
    """Add the live references' units to ``units`` (by name; a live pick that is a table plan shares
    its unit); return {reference: unit name}. Sets PyTorch's flags for the problem (:func:`release`
    puts them back)."""
    rule = live["filters"][p["dtype"]]
    picks = {}
    for ref, mode in (("live_mode_a", "a"), ("live_mode_b", "b")):
        unit, name = live_pick(col, p, x, w, y, mode, rule["deselect"])
        units.setdefault(name, unit)
        picks[ref] = name
    t = col.torch
    t.backends.cudnn.benchmark = False
    t.backends.cudnn.deterministic = False
    t.backends.cudnn.allow_tf32 = bool(rule["allow_tf32"])
    units[PYTORCH_OP_UNIT] = pytorch_op_unit(col, p, x, w, y)
    picks["pytorch_op"] = PYTORCH_OP_UNIT
    return picks


def release(col, units: dict[str, Unit], pytorch_op: bool) -> None:
    """Drop the problem's graphs. With PyTorch's op among the units, also give the memory pools of
    the captures back to the GPU (each capture of PyTorch's op holds a private pool, and a run of
    thousands of problems ran out of memory without this: an H100, November 2026) and put PyTorch's
    TF32 flag back to its default."""
    for unit in units.values():
        unit.graph = None
    units.clear()
    if pytorch_op:
        t = col.torch
        t.backends.cudnn.allow_tf32 = True
        t.cuda.empty_cache()

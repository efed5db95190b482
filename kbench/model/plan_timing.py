"""Time every plan cuDNN offers for one traced problem, 2D or 3D, on the GPU (``kbench model tune --time``).

The collector (:mod:`kbench.collect.cudnn`) measures 2D problems with its full protocol; this is the
short form for the problems it does not take (3D): the problem's tensors with the strides PyTorch
hands cuDNN (:func:`kbench.model.use_plans.dense_strides`), inputs from U(-1, 1), the float64 PyTorch
result as the reference, every plan of modes A, B and fallback built, run once and checked against
the collector's tolerance per dtype (:data:`kbench.collect.cudnn.candidates.TOLERANCE`, relative L2
error), then timed: :data:`WARMUP` runs, then the median of :data:`REPEATS` runs each between CUDA
events. PyTorch's own op under default flags (``cudnn.benchmark = False``) is timed the same way.
"""

from __future__ import annotations

import statistics

from kbench.collect.cudnn.candidates import TOLERANCE
from kbench.model.plan_cache import plan_engine_and_knobs
from kbench.model.use_plans import build_graph, dense_strides, offered_plans

WARMUP = 3
REPEATS = 20
#: a plan slower than this on its first run is timed on that run alone
SLOW_MS = 50.0


def _event_ms(torch, fn, warmup: int = WARMUP, repeats: int = REPEATS) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def problem_shapes(row: dict) -> tuple[tuple, tuple, tuple, list, list, list]:
    """(x, w, y shapes, padding, stride, dilation) of a trace row, 5D for a 3D problem, 4D otherwise."""
    deep = int(row.get("spatial_dims", 2)) == 3
    sp = ("d", "h", "w") if deep else ("h", "w")
    n, c, k, g = (int(row[f]) for f in ("n", "c", "k", "groups"))
    x = (n, c, *(int(row[f"x_{s}"]) for s in sp))
    w = (k, c // g, *(int(row[f"fil_{s}"]) for s in sp))
    y = (n, k, *(int(row[f"y_{s}"]) for s in sp))
    return (x, w, y, [int(row[f"pad_{s}"]) for s in sp], [int(row[f"stride_{s}"]) for s in sp],
            [int(row[f"dil_{s}"]) for s in sp])


def time_problem(row: dict) -> dict:
    """The fastest correct plan of one traced problem-direction (``plan``, ``time_ms``, ``engine_id``, ``knobs``),
    PyTorch's time (``pytorch_ms``), counts, and ``error`` where no plan ran correctly."""
    import cudnn
    import torch
    x_shape, w_shape, y_shape, pad, stride, dil = problem_shapes(row)
    channels_last = str(row["layout"]) in ("NHWC", "NDHWC")
    dtype = {"FP32": torch.float32, "FP16": torch.float16, "BF16": torch.bfloat16}[str(row["dtype"])]
    cdt = {"FP32": cudnn.data_type.FLOAT, "FP16": cudnn.data_type.HALF, "BF16": cudnn.data_type.BFLOAT16}[str(row["dtype"])]
    direction, groups = str(row["direction"]), int(row["groups"])
    torch.backends.cudnn.benchmark = False

    def tensor(shape):
        t = torch.empty_strided(shape, dense_strides(shape, channels_last), dtype=dtype, device="cuda")
        return t.uniform_(-1, 1)

    x, w, y = tensor(x_shape), tensor(w_shape), tensor(y_shape)
    mask = {"B": [True, False, False], "W": [False, True, False]}
    conv = {3: torch.nn.functional.conv3d, 2: torch.nn.functional.conv2d}[len(x_shape) - 2]

    def reference(xx, ww, yy):
        if direction == "F":
            return conv(xx, ww, None, stride, pad, dil, groups)
        res = torch.ops.aten.convolution_backward(yy, xx, ww, None, stride, pad, dil, False, [0] * len(pad), groups,
                                                  mask[direction])
        return res[0] if direction == "B" else res[1]

    ref = reference(x.double(), w.double(), y.double())
    ref_norm = float(ref.norm()) or 1.0
    out = {"F": y, "B": x, "W": w}[direction]
    pytorch_ms = _event_ms(torch, lambda: reference(x, w, y))
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    desc = {name: (t.shape, dense_strides(t.shape, channels_last)) for name, t in (("x", x), ("w", w), ("y", y))}
    g, ports = build_graph(cudnn, handle, direction, cdt, desc["x"], desc["w"], desc["y"], pad, stride, dil)
    names = offered_plans(cudnn, g)
    pack = {ports["O"]: out}
    for name, t in (("X", x), ("W", w), ("DY", y)):
        if name in ports:
            pack[ports[name]] = t
    best, errors, correct = None, [], 0
    for i, name in enumerate(names):
        try:
            g.build_plan_at_index(i)
            ws = torch.empty(max(int(g.get_workspace_size_plan_at_index(i)), 1), dtype=torch.uint8, device="cuda")

            def run(ws=ws, i=i):
                g.execute_plan_at_index(pack, ws, index=i, handle=handle)
            first = _event_ms(torch, run, warmup=0, repeats=1)
            err = float((out.double() - ref).norm()) / ref_norm
            if err > TOLERANCE[str(row["dtype"])]:
                errors.append(f"{name}: relative error {err:.3g}")
                continue
            correct += 1
            ms = first if first > SLOW_MS else _event_ms(torch, run)
        except Exception as exc:  # noqa: BLE001 - a plan that does not build or run is left out
            errors.append(f"{name}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        if best is None or ms < best[1]:
            best = (name, ms)
    result = {"n_offered": len(names), "n_correct": correct, "pytorch_ms": pytorch_ms, "plan": None,
              "time_ms": None, "error": "; ".join(errors[:3]) if best is None else ""}
    if best is not None:
        eid, knobs = plan_engine_and_knobs(best[0])
        result.update(plan=best[0], time_ms=best[1], engine_id=eid, knobs=knobs)
    return result


__all__ = ["REPEATS", "WARMUP", "problem_shapes", "time_problem"]

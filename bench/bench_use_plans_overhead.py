"""Host (CPU) time per convolution call of ``kbench.torch.use_plans``'s path against PyTorch's own, on a GPU.

    python bench/bench_use_plans_overhead.py [--calls 50] [--rounds 20] [--out bench/results/use_plans_overhead.json]

For each case (a small 2D and a small 3D conv, BF16 channels-last) the same module runs forward only
(``torch.no_grad``) and forward + backward, with PyTorch's default path and through ``use_plans`` with
the first plan cuDNN offers for each direction (:func:`kbench.model.use_plans.first_buildable_plans`:
any working plan; the host's work does not depend on which), and, alone, the frontend's
``execute_plan_at_index`` of the forward plan with its variant pack made once (the part of the
cached path's host time that is the frontend's), in the dictionary form the cached path passes
(``frontend_execute_forward``) and in the frontend's ordered form (``tensor_uids=``: the buffers as a
tuple with their uids, where the frontend offers it; ``frontend_execute_forward_ordered``, with
``matches_dict_form``: whether its output equals the dictionary form's bit for bit, or ``error``
where the frontend refuses it): whether the ordered form would cut the frontend's share.

**Protocol.** Each round first queues a spin kernel (``torch.cuda._sleep``) long enough to keep the
GPU busy while the host issues ``--calls`` calls, so the host never waits for the GPU: the host clock
over the round's issue is the host's time alone, and CUDA events recorded after the spin and after
the calls time the GPU's work alone (it runs back to back from the queue). The spin is sized from a
first, unspun round (twice its host time, at least 5 ms); a round whose issue outlasted its spin is
flagged (``queue_drained``: its GPU time then holds host gaps). Per mode: the medians over
``--rounds`` rounds of ``host_us_per_call`` and ``gpu_us_per_call``; ``overhead_us_*`` is the cached
path's host time less PyTorch's. ``calls`` x kernels per call stays far below CUDA's launch queue
(about a thousand launches), so issuing never blocks on a full queue.

An earlier version ran 2,000 calls back to back: the queue filled, the host waited for the GPU and its
"host" time was the GPU's (its host and GPU figures agreed to 0.1 %), so it measured the plans' speed
as much as the host's work. Needs a CUDA GPU and the cuDNN frontend; prints the JSON and writes it to
``--out``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {"conv2d_64x14x14": ("Conv2d", (8, 64, 14, 14), 64, 3),
         "conv3d_32x4x14x14": ("Conv3d", (2, 32, 4, 14, 14), 32, 3)}
PROTOCOL = ("per round: a spin kernel keeps the GPU busy while the host issues the calls; host clock over the "
            "issue, CUDA events after the spin and after the calls; medians over rounds")


def _cycles_per_ms(torch) -> float:
    """Spin-kernel cycles per millisecond on this GPU (one calibration)."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)  # the clocks up
    s.record()
    torch.cuda._sleep(10_000_000)
    e.record()
    e.synchronize()
    return 10_000_000 / s.elapsed_time(e)


def _round(torch, fn, calls: int, spin_cycles: int) -> tuple[float, float, float]:
    """(host us, GPU us per call, spin ms) of one round: ``calls`` calls issued behind a spin kernel."""
    s, e, spun = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    torch.cuda.synchronize()
    spin_start = torch.cuda.Event(enable_timing=True)
    spin_start.record()
    if spin_cycles:
        torch.cuda._sleep(spin_cycles)
    spun.record()
    t0 = time.perf_counter()
    s.record()
    for _ in range(calls):
        fn()
    e.record()
    host = time.perf_counter() - t0
    e.synchronize()
    return 1e6 * host / calls, 1e3 * s.elapsed_time(e) / calls, spin_start.elapsed_time(spun)


def _time(torch, fn, calls: int, rounds: int, cycles_per_ms: float) -> dict:
    for _ in range(20):
        fn()
    host0, _, _ = _round(torch, fn, calls, 0)  # unspun: sizes the spin
    spin = int(cycles_per_ms * max(5.0, 2 * host0 * calls / 1e3))
    host, gpu, drained = [], [], 0
    for _ in range(rounds):
        h, g, spin_ms = _round(torch, fn, calls, spin)
        host.append(h)
        gpu.append(g)
        drained += h * calls / 1e3 > spin_ms
    return {"host_us_per_call": statistics.median(host), "gpu_us_per_call": statistics.median(gpu),
            "queue_drained_rounds": drained}


def _ordered_form(torch, d, buffers, ws, h, calls: int, rounds: int, cycles: float) -> dict:
    """The frontend's ordered execute of direction ``d``'s plan (``buffers`` in ``d.ports`` order), timed as
    the dictionary form is, with whether its output equals that form's; ``error`` where the frontend
    refuses it."""
    try:
        uids = tuple(int(port.get_uid()) for port in d.ports)
        out = buffers[2]
        d.graph.execute_plan_at_index({port: t for port, t in zip(d.ports, buffers)}, ws, index=d.index, handle=h)
        expected = out.clone()
        out.zero_()
        d.graph.execute_plan_at_index(buffers, ws, index=d.index, handle=h, tensor_uids=uids)
        torch.cuda.synchronize()
        matches = bool(torch.equal(out, expected))

        def execute(g=d.graph, buffers=buffers, ws=ws, index=d.index, h=h, uids=uids):
            g.execute_plan_at_index(buffers, ws, index=index, handle=h, tensor_uids=uids)

        return {**_time(torch, execute, calls, rounds, cycles), "matches_dict_form": matches}
    except Exception as exc:  # noqa: BLE001 - a frontend without the ordered form: recorded, the bench goes on
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def measure(calls: int, rounds: int) -> dict:
    import torch

    import kbench.torch as ktorch
    from kbench.model.plan_cache import PlanCache, PlanCacheHeader, PlanEntry, TraceRef, current_environment
    from kbench.model.use_plans import first_buildable_plans
    env = {k: str(v) for k, v in current_environment().items()}
    cycles = _cycles_per_ms(torch)
    out = {"gpu": env, "torch": torch.__version__, "python": platform.python_version(), "calls": calls,
           "rounds": rounds, "protocol": PROTOCOL, "spin_cycles_per_ms": cycles, "cases": {}}
    for name, (kind, shape, channels, k) in CASES.items():
        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
        module = getattr(torch.nn, kind)(channels, channels, k, padding=k // 2).cuda().to(torch.bfloat16)
        module = module.to(memory_format=fmt)
        x = torch.randn(shape, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=fmt)
        xg = x.clone().requires_grad_(True)
        g = torch.randn_like(module(x)).contiguous(memory_format=fmt)

        def forward(module=module, x=x):
            with torch.no_grad():
                module(x)

        def step(module=module, xg=xg, g=g):
            module(xg).backward(g)

        case = {}
        for label, fn in (("forward", forward), ("forward_backward", step)):
            case[f"pytorch_{label}"] = _time(torch, fn, calls, rounds, cycles)
        plans = first_buildable_plans(module, xg.detach())
        header = PlanCacheHeader(**env, filled_by="oracle", source="timing",
                                 trace=TraceRef(model=name, input_shape=list(shape), dtype="bf16",
                                                memory_format=str(fmt).removeprefix("torch."), mode="train"))
        entries = {key: PlanEntry(plan=p, direction=key.rsplit("-", 1)[1][0]) for key, p in plans.items()}
        handle = ktorch.use_plans(module, PlanCache(header=header, plans=entries))
        for label, fn in (("forward", forward), ("forward_backward", step)):
            case[f"use_plans_{label}"] = _time(torch, fn, calls, rounds, cycles)
            case[f"overhead_us_{label}"] = (case[f"use_plans_{label}"]["host_us_per_call"]
                                            - case[f"pytorch_{label}"]["host_us_per_call"])
        # the frontend's own part: the forward plan's execute with its pack made once
        runner = handle.runner
        geo = runner.all_geometries[0]
        d = geo.forward
        y = torch.empty(d.out_shape, dtype=x.dtype, device="cuda", memory_format=fmt)
        pack = {d.ports[0]: x, d.ports[1]: module.weight.detach(), d.ports[2]: y}
        ws = torch.empty(max(d.workspace, 1), dtype=torch.uint8, device="cuda")
        h = runner.frontend.handle(x.device)

        def execute(g=d.graph, pack=pack, ws=ws, index=d.index, h=h):
            g.execute_plan_at_index(pack, ws, index=index, handle=h)

        case["frontend_execute_forward"] = _time(torch, execute, calls, rounds, cycles)
        case["frontend_execute_forward_ordered"] = _ordered_form(torch, d, (x, module.weight.detach(), y), ws, h,
                                                                 calls, rounds, cycles)
        stats = handle.stats()
        case["use_plans_stats"] = {k: stats[k] for k in ("through_cache", "fallback")}
        case["plans"] = plans
        handle.remove()
        out["cases"][name] = case
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50, help="calls issued per round (default 50)")
    ap.add_argument("--rounds", type=int, default=20, help="rounds per mode (default 20)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "use_plans_overhead.json"))
    args = ap.parse_args()
    result = measure(args.calls, args.rounds)
    text = json.dumps(result, indent=2)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()

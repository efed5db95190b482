"""Host (CPU) time per convolution call of ``kbench.torch.use_plans``'s path against PyTorch's own, on a GPU.

    python bench/bench_use_plans_overhead.py [--calls 2000] [--out bench/results/use_plans_overhead.json]

For each case (a small 2D and a small 3D conv, BF16 channels-last, where the GPU work is short and the
host's time per call shows), the same module runs ``--calls`` times back to back, forward only
(``torch.no_grad``) and forward + backward, once with PyTorch's default path and once through
``use_plans`` with the first plan cuDNN offers for each direction
(:func:`kbench.model.use_plans.first_buildable_plans`: any working plan, the overhead is the host's).
Per mode: ``host_us_per_call``, the host clock over the calls' issue (the queue does not fill: the
kernels are shorter than the host's work), and ``gpu_us_per_call``, CUDA events around the same
calls, after a synchronize. ``overhead_us`` is the cached path's host time less PyTorch's.
Needs a CUDA GPU and the cuDNN frontend; prints the JSON and writes it to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {"conv2d_64x14x14": ("Conv2d", (8, 64, 14, 14), 64, 3),
         "conv3d_32x4x14x14": ("Conv3d", (2, 32, 4, 14, 14), 32, 3)}


def _time(torch, fn, calls: int) -> tuple[float, float]:
    """(host µs, GPU µs) per call of ``fn`` over ``calls`` calls."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    host = time.perf_counter() - t0
    end.synchronize()
    return 1e6 * host / calls, 1e3 * start.elapsed_time(end) / calls


def measure(calls: int) -> dict:
    import torch

    import kbench.torch as ktorch
    from kbench.model.plan_cache import PlanCache, PlanCacheHeader, PlanEntry, TraceRef, current_environment
    from kbench.model.use_plans import first_buildable_plans
    env = {k: str(v) for k, v in current_environment().items()}
    out = {"gpu": env, "torch": torch.__version__, "python": platform.python_version(), "calls": calls, "cases": {}}
    for name, (kind, shape, channels, k) in CASES.items():
        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
        module = getattr(torch.nn, kind)(channels, channels, k, padding=k // 2).cuda().to(torch.bfloat16)
        module = module.to(memory_format=fmt)
        x = torch.randn(shape, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=fmt)
        xg = x.clone().requires_grad_(True)

        def forward(module=module, x=x):
            with torch.no_grad():
                module(x)

        def step(module=module, xg=xg):
            module(xg).sum().backward()

        case = {}
        for label, fn in (("forward", forward), ("forward_backward", step)):
            case[f"pytorch_{label}"] = dict(zip(("host_us_per_call", "gpu_us_per_call"), _time(torch, fn, calls)))
        plans = first_buildable_plans(module, xg.detach())
        header = PlanCacheHeader(**env, filled_by="oracle", source="timing",
                                 trace=TraceRef(model=name, input_shape=list(shape), dtype="bf16",
                                                memory_format=str(fmt).removeprefix("torch."), mode="train"))
        entries = {key: PlanEntry(plan=p, direction=key.rsplit("-", 1)[1][0]) for key, p in plans.items()}
        cache = PlanCache(header=header, plans=entries)
        handle = ktorch.use_plans(module, cache)
        for label, fn in (("forward", forward), ("forward_backward", step)):
            case[f"use_plans_{label}"] = dict(zip(("host_us_per_call", "gpu_us_per_call"), _time(torch, fn, calls)))
            case[f"overhead_us_{label}"] = (case[f"use_plans_{label}"]["host_us_per_call"]
                                            - case[f"pytorch_{label}"]["host_us_per_call"])
        stats = handle.stats()
        case["use_plans_stats"] = {k: stats[k] for k in ("through_cache", "fallback")}
        handle.remove()
        out["cases"][name] = case
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "use_plans_overhead.json"))
    args = ap.parse_args()
    result = measure(args.calls)
    text = json.dumps(result, indent=2)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()

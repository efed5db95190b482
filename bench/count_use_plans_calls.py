"""Python function calls per convolution call of ``kbench.torch.use_plans``' cached path, on the CPU.

    python bench/count_use_plans_calls.py [--calls 200] [--plain] [--top 0]

A count, not a timing (deterministic for a given torch): the path's host work in Python-level calls, as
cProfile counts them, with the CPU stand-in of the cuDNN frontend (``tests/model/fake_cudnn.py``) whose
``execute_plan_at_index`` is made a no-op after the warm-up (its CPU computation is not the path's
work). The model is two Conv3d (the first's input needs no grad: F and W; the second F, B and W); the
real ``_Frontend.handle`` runs, with one unchanging stream. ``--plain`` counts PyTorch's own module
path the same way (the harness's calls, such as ``backward()``'s, are in both). Prints calls per conv
module call for a ``no_grad`` forward and for forward + backward; ``--top N`` lists the N most-called
functions.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--plain", action="store_true", help="PyTorch's own path instead of use_plans'")
    ap.add_argument("--top", type=int, default=0)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "model"))
    import fake_cudnn
    import torch

    import kbench.torch as ktorch
    from kbench.model import use_plans as up
    from kbench.model.plan_cache import PlanCache, PlanCacheHeader, PlanEntry, TraceRef
    from kbench.model.trace import trace_model

    up._Frontend.cudnn = property(lambda self: fake_cudnn)
    up._Frontend.runs_on = staticmethod(lambda tensor: True)
    up._Frontend.capturing = staticmethod(lambda: False)
    torch._C._cuda_getCurrentRawStream = lambda index: 7
    torch.cuda.current_device = lambda: 0

    class TwoConv3d(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = torch.nn.Conv3d(4, 4, 3, padding=1)
            self.c2 = torch.nn.Conv3d(4, 4, 3, padding=1)

        def forward(self, x):
            return self.c2(self.c1(x))

    shape = (1, 4, 2, 4, 4)
    model, x, g = TwoConv3d(), torch.randn(shape), torch.randn(shape)
    if not args.plain:
        keys = trace_model(TwoConv3d(), shape).problems["problem_id"]
        header = PlanCacheHeader(gpu="-", compute_capability="-", cudnn_backend="-", cudnn_frontend="-", torch="-",
                                 filled_by="oracle", source="timing",
                                 trace=TraceRef(model="count", input_shape=list(shape), dtype="fp32",
                                                memory_format="contiguous", mode="train"))
        plans = {k: PlanEntry(plan="eng0", direction=k.rsplit("-", 1)[1][0]) for k in keys}
        ktorch.use_plans(model, PlanCache(header=header, plans=plans), check=False)
    model(x).backward(g)  # builds every plan
    fake_cudnn.pygraph.execute_plan_at_index = lambda self, pack, ws, index, handle: None

    def forward():
        with torch.no_grad():
            for _ in range(args.calls):
                model(x)

    def forward_backward():
        for _ in range(args.calls):
            model(x).backward(g)

    for label, fn in (("forward", forward), ("forward+backward", forward_backward)):
        profile = cProfile.Profile()
        profile.enable()
        fn()
        profile.disable()
        stats = pstats.Stats(profile)
        total = sum(entry[1] for entry in stats.stats.values())  # all calls, recursive ones included
        print(f"{label}: {total / args.calls / 2:.1f} Python function calls per conv module call")
        if args.top:
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats("ncalls").print_stats(args.top)
            print(text.getvalue())


if __name__ == "__main__":
    main()

"""Step 5: what PyTorch runs for the same convolution.

With ``torch.backends.cudnn.benchmark = False``, PyTorch's convolution and cuDNN's top plans
run under the PyTorch profiler, spin kernels between them; the plans whose kernel sequence
equals the cuDNN kernels PyTorch launched are its choice (:func:`match_torch`).
:class:`PyTorchChoice` is a part of :class:`~kbench.collect.cudnn.collector.CudnnCollector`,
which holds the state its methods use (``torch``, ``stream``, ``opt``).
"""

from __future__ import annotations

import json

from kbench.collect.measure.cudnn.problems import conv_args
from kbench.collect.measure.cudnn.protocol import SLOW_PLAN_MS, _err

TORCH_PROFILE_TOP = 8
#: characters of a "|"-joined kernel-name list kept in a record (a long list is cut there)
KERNEL_NAMES_KEPT = 2000


def split_segments(kernel_names: list[str], marker: str = "spin_kernel") -> list[list[str]]:
    """Split a stream's kernel names (in time order) at marker kernels."""
    segs, cur = [], []
    for name in kernel_names:
        if marker in name:
            segs.append(cur)
            cur = []
        else:
            cur.append(name)
    segs.append(cur)
    return segs


def match_torch(torch_kernels: list[str], plan_kernels: dict[str, list[str]]) -> list[str]:
    """Plans whose kernel sequence equals the cuDNN kernels PyTorch launched.

    PyTorch may add its own kernels around cuDNN's (layout copies, fills);
    those are dropped first: only names that some plan also launched count.
    """
    known = {k for ks in plan_kernels.values() for k in ks}
    core = [k for k in torch_kernels if k in known]
    if not core:
        return []
    return [p for p, ks in plan_kernels.items() if ks == core]


class PyTorchChoice:
    """The collector's identification of PyTorch's plan."""

    def _torch_plans(self, p, rec, x, w, y, g, pack, plans, valid, names) -> list[str]:
        """What PyTorch runs for the convolution (into ``rec``; its kernels into the plans' records):
        the names of the plans it matches."""
        by_name = {ps.rec["plan"]: ps for ps in plans}
        torch_plans: list[str] = []
        if self.opt.torch_choice:
            a_order = [n for n in rec["heur_a"].split(";") if n in by_name and by_name[n].rec["exec_ok"]
                       and (by_name[n].rec.get("coarse_ms") or 1e9) < SLOW_PLAN_MS]
            cand = a_order[:TORCH_PROFILE_TOP]
            if valid:
                best = min(valid, key=lambda q: q.rec["coarse_ms"]).rec["plan"]
                if best not in cand:
                    cand.append(best)
            try:
                tc = self._torch_choice(p, x, w, y, g, pack, [by_name[n].index for n in cand], names)
                for n, ks in tc.pop("plan_kernels").items():
                    by_name[n].rec["kernels"] = "|".join(ks)[:KERNEL_NAMES_KEPT]
                rec.update(tc)
                torch_plans = [n for n in rec["torch_plans"].split(";") if n]
            except Exception as exc:  # noqa: BLE001
                rec.update(torch_status="error", torch_error=_err(exc))
                self._check_cuda()
        return torch_plans

    def _torch_choice(self, p, x, w, y, g, pack, indices, names) -> dict:
        t = self.torch
        import tempfile
        args = conv_args(p)
        xx, ww, yy = x.clone(), w.clone(), y.clone()  # torch writes its own outputs; keep ours
        with t.cuda.stream(self.stream):
            self._torch_conv(p, xx, ww, yy, args)  # warm: torch builds its plan outside the profile
        self.stream.synchronize()
        acts = [t.profiler.ProfilerActivity.CUDA]
        with t.profiler.profile(activities=acts) as prof:
            with t.cuda.stream(self.stream):
                self._torch_conv(p, xx, ww, yy, args)
                t.cuda._sleep(100)
                for i in indices:
                    self._run(g, pack, i)
                    t.cuda._sleep(100)
            self.stream.synchronize()
        with tempfile.NamedTemporaryFile(suffix=".json") as fh:
            prof.export_chrome_trace(fh.name)
            trace = json.load(open(fh.name))
        evs = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]
        evs.sort(key=lambda e: e.get("ts", 0))
        segs = split_segments([e["name"] for e in evs])
        torch_k = segs[0] if segs else []
        plan_k = {names[i]: segs[j + 1] for j, i in enumerate(indices) if j + 1 < len(segs)}
        matched = match_torch(torch_k, plan_k)
        return {"torch_kernels": "|".join(torch_k)[:KERNEL_NAMES_KEPT], "torch_plans": ";".join(matched),
                "torch_status": "matched" if matched else "unmatched", "plan_kernels": plan_k}

"""``kbench collect verify-labels``: the collector's verification pass, run on a shipped dataset's labels.

Datasets packaged before the verification pass existed (h100 1.0.0) hold labels
timed once. This command gives them the same second look the collector now
gives every new problem-direction (:mod:`kbench.collect.label_retiming.front_runners`), without
timing every plan again:

    kbench collect verify-labels --dataset h100 --out DIR --plan-only   # CPU: DIR/plan.json
    kbench collect verify-labels --out DIR --time-only [--time-budget S] # GPU: DIR/raw.jsonl (resumable)
    bash tools/device/run_on_device.sh labels DIR BUDGET_S            # the same on the lent machine

1. **Plan** (:func:`make_plan`, CPU, pure): per problem-direction its collector
   geometry and every listed plan's shipped time (the *first* times of the
   pass). Problems of the scored test parts come first (``random`` test, then
   ``networks`` test), then the rest, each group in seeded order, so a run cut
   short has verified what the boards score.
2. **Timing** (:func:`run_labels`, GPU): per problem, cuDNN's plan list is
   rebuilt and :func:`kbench.collect.label_retiming.front_runners.verify_problem` runs with a
   ``time_fn`` that builds, warms and captures the plans it is asked for (the
   collector's rules: k from a warm execution, spin-protected replays,
   single-execution timing for slow plans) and times them in the collector's
   precise interleaved rounds. The shipped time plays the first measurement;
   the front-runners (within 3% and at least the best 3) are timed again; a
   disagreement beyond 5% gets a third timing and the median; the winner is
   re-checked up to 3 passes. One JSON line per problem in ``raw.jsonl``.
3. **Labels** (:func:`read_labels`, CPU): the per-plan records
   (``first_ms, verify_ms, verify2_ms, verified, verified_ms``), the fields the
   collector's own pass writes, so :func:`kbench.collect.packaging.package.package` treats
   them alike: ``time_ms`` becomes ``verified_ms`` and ``timing`` ``verified``.
   A raw folder's ``labels/*.jsonl.gz`` is applied by ``kbench build-data``
   (:mod:`kbench.collect.label_retiming.apply`).
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.collect.label_retiming import front_runners
from kbench.collect.measure import cudnn as cudnn_collector
from kbench.core.errors import KbenchInputError, read_json_object
from kbench.data.dataset import load
from kbench.gpu_check.plan import collector_problems, require_cudnn_collected, require_plan_kind
from kbench.gpu_check.timing import run_resumable

PLAN_FORMAT = 1
PLAN_NAME = "plan.json"
RAW_NAME = "raw.jsonl"
#: split parts verified first, in this order (what the boards score)
FIRST_PARTS = (("random", "test"), ("networks", "test"))


def problem_order(all_ids, parts: list, seed: int = 0) -> list[str]:
    """Problem ids: each id group of ``parts`` in turn (ids not taken yet), then the rest of
    ``all_ids``; every group in a seeded random order of its sorted ids."""
    rng = np.random.default_rng(seed)
    taken: list[str] = []
    seen: set[str] = set()
    groups = [pd.Series(list(g), dtype=object).astype(str) for g in parts]
    groups.append(pd.Series(list(all_ids), dtype=object).astype(str))
    for group in groups:
        rest = sorted(set(group) - seen)
        taken += [rest[i] for i in rng.permutation(len(rest))]
        seen.update(rest)
    return taken


def make_plan(dataset, seed: int = 0, limit: int | None = None) -> dict:
    """The verification plan of a packaged kernel-selection dataset (name, folder or Dataset)."""
    ds = load(dataset) if isinstance(dataset, (str, Path)) else dataset
    require_cudnn_collected(ds, "verify-labels")
    if ds.runtimes is None or "kernel" not in ds.runtimes:
        raise KbenchInputError(f"dataset {ds.name!r} is not a kernel-selection dataset with runtimes.")
    parts = [ds.split(name)[part] for name, part in FIRST_PARTS if name in ds.split_names]
    order = problem_order(ds.problems["problem_id"], parts, seed)
    if limit is not None:
        order = order[:limit]
    rt = ds.runtimes[ds.runtimes["problem_id"].astype(str).isin(order)]
    first = {pid: dict(zip(g["kernel"].astype(str), g["time_ms"].astype(float)))
             for pid, g in rt.groupby(rt["problem_id"].astype(str), sort=False)}
    geometry = collector_problems(ds.problems[ds.problems["problem_id"].astype(str).isin(order)])
    items = [{"problem_id": pid, "problem": geometry[pid], "first": first[pid]} for pid in order if pid in first]
    return {"format": PLAN_FORMAT, "seed": int(seed), "dataset": {"name": ds.name, "version": ds.version,
                                                                  "checksum": ds.checksum},
            "problems": items}


def write_plan(plan: dict, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / PLAN_NAME
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(plan))
    tmp.replace(path)
    return path


def read_plan(out_dir: str | Path) -> dict:
    path = Path(out_dir) / PLAN_NAME
    if not path.exists():
        raise KbenchInputError(f"{path}: not found; make it first with 'kbench collect verify-labels "
                               f"--dataset NAME --out {out_dir} --plan-only'.")
    plan = read_json_object(path)
    require_plan_kind(plan, "first", path)
    if plan.get("format") != PLAN_FORMAT:
        raise KbenchInputError(f"{path}: plan format {plan.get('format')!r}; this kbench reads format {PLAN_FORMAT}.")
    return plan


# -- GPU -----------------------------------------------------------------------------------------
class _PlanTimer:
    """Builds, warms and captures one problem's plans on demand and times them (collector rules)."""

    def __init__(self, col, cudnn_collector, g, pack, names):
        self.col, self.cudnn_collector, self.g, self.pack = col, cudnn_collector, g, pack
        self.index = {n: i for i, n in enumerate(names)}
        self.states: dict = {}

    def _prepare(self, name: str):
        col, cudnn_collector, g = self.col, self.cudnn_collector, self.g
        i = self.index[name]
        g.build_plan_at_index(i)
        need = int(g.get_workspace_size_plan_at_index(i))
        if col.workspace.numel() < need:
            # a captured graph holds the old workspace's address: capture the earlier plans again
            col.workspace = None
            col.torch.cuda.empty_cache()
            col.workspace = col.torch.empty(need, dtype=col.torch.uint8, device="cuda")
            for ps in self.states.values():
                if ps.graph is not None:
                    ps.graph = col._capture(g, self.pack, ps.index, ps.k)
        first = col._single_ms(g, self.pack, i)  # the first execution is slow (outlier study): k from a warm one
        ps = cudnn_collector.PlanState(i, {"plan": name, "first_exec_ms": first})
        if first >= cudnn_collector.SLOW_PLAN_MS:
            ps.rec.update(timing_method="single", coarse_ms=first)
            return ps
        warm = col._single_ms(g, self.pack, i)
        ps.k = cudnn_collector.inner_count(warm)
        ps.graph = col._capture(g, self.pack, i, ps.k)
        replay = col._replays(ps, 1)[0]
        if replay * ps.k < cudnn_collector.COARSE_TARGET_MS / 2 and ps.k < cudnn_collector.MAX_INNER:  # warm execution read slow: recapture
            ps.k = cudnn_collector.inner_count(replay)
            ps.graph = col._capture(g, self.pack, i, ps.k)
            replay = col._replays(ps, 1)[0]
        ps.rec.update(timing_method="graph", coarse_ms=replay, warm_exec_ms=warm)
        return ps

    def time(self, order: list[str]) -> dict[str, float]:
        """``{plan: median ms}`` of ``order`` in the collector's precise rounds (plans cuDNN does not
        propose here are left out: they keep their first time)."""
        todo = [n for n in order if n in self.index]
        for n in todo:
            if n not in self.states:
                self.states[n] = self._prepare(n)
        states = [self.states[n] for n in todo]
        rounds = self.col._interleaved_rounds(self.g, self.pack, states)
        return {ps.rec["plan"]: self.cudnn_collector.timing_stats(rounds[ps.index])["median"] for ps in states}

    def release(self) -> None:
        for ps in self.states.values():
            ps.graph = None


def _verify_one(col, cudnn_collector, front_runners, item: dict, seed: int) -> dict:
    p = item["problem"]
    x, w, y, _ = col._tensors(p)
    g, pack, names, err = col._plan_list(p, x, w, y, list(col.modes.values()))
    if g is None:
        raise RuntimeError(f"graph: {err}")
    timer = _PlanTimer(col, cudnn_collector, g, pack, names)
    try:
        result = front_runners.verify_problem(item["first"], timer.time,
                                  seed=seed ^ zlib.crc32(item["problem_id"].encode()))
    finally:
        timer.release()
    missing = sorted(set(item["first"]) - set(timer.index))
    return {"passes": result.passes, "converged": result.converged, "winners": result.winners,
            "checks": result.plan_records(), "not_proposed": missing[:20], "n_not_proposed": len(missing)}


def run_labels(plan: dict, out_dir: str | Path, time_budget_s: float | None = None,
               progress_every: int = 100) -> dict:
    """Verify every unfinished problem of ``plan`` on this machine's GPU; append to ``raw.jsonl``."""
    return run_resumable(
        plan["problems"], out_dir, lambda: cudnn_collector.CudnnCollector(cudnn_collector.Options(notes=False, torch_choice=False, seed=plan["seed"])),
        lambda col, item: ([], _verify_one(col, cudnn_collector, front_runners, item, plan["seed"])), time_budget_s, progress_every,
        "verify-labels")

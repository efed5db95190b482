"""Steps 3 and 4 on the GPU: each built plan run once and checked, then timed (coarse, precise,
verification).

The protocol's numbers and pure rules are in :mod:`.protocol`; the verification pass's rules in
:mod:`kbench.collect.label_retiming.front_runners`. :class:`PlanTiming` is a part of
:class:`~kbench.collect.cudnn.collector.CudnnCollector`, which holds the state its methods use
(``torch``, ``stream``, ``handle``, ``workspace``, ``capture_s``, ``opt``, ``notes_reliable``).
"""

from __future__ import annotations

import math
import time
import zlib

from kbench.collect.measure.cudnn.candidates import FP32_PRECISE_FRACTION, TOLERANCE, default_set
from kbench.collect.measure.cudnn.protocol import (
    COARSE_REPLAYS,
    COARSE_TARGET_MS,
    FAR_BEHIND,
    MAX_INNER,
    PRECISE_BAND,
    PRECISE_MAX_PLANS,
    PRECISE_ROUNDS,
    SLOW_PLAN_MS,
    WORKSPACE_CAP,
    FatalCudaError,
    PlanState,
    _err,
    inconsistent_with_warm,
    inner_count,
    plan_priority,
    replays_per_round,
    spin_cycles,
    timing_stats,
)


class PlanTiming:
    """The collector's timing: executions, CUDA-graph capture and replays, and the timing passes."""

    # -- execution and timing -----------------------------------------------------------
    def _run(self, g, pack, index):
        g.execute_plan_at_index(pack, self.workspace, index=index, handle=self.handle)

    def _check_cuda(self):
        t = self.torch
        try:
            t.cuda.synchronize()
            v = t.ones(1, device="cuda").add_(1).item()
            if v != 2.0:
                raise FatalCudaError("CUDA sanity check computed a wrong value")
        except FatalCudaError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise FatalCudaError(f"CUDA context unusable: {_err(exc)}") from exc

    def _single_ms(self, g, pack, index) -> float:
        return self._single_fn_ms(lambda: self._run(g, pack, index))

    def _single_fn_ms(self, fn) -> float:
        """One run of ``fn`` (a launch on the collector's stream) timed with CUDA events (ms)."""
        t = self.torch
        s, e = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
        with t.cuda.stream(self.stream):
            t.cuda._sleep(spin_cycles(1))  # the GPU waits here, not for the host's launch
            s.record()
            fn()
            e.record()
        e.synchronize()
        return s.elapsed_time(e)

    def _capture(self, g, pack, index, k):
        return self._capture_fn(lambda: self._run(g, pack, index), k)

    def _capture_fn(self, fn, k):
        """A CUDA graph of ``k`` back-to-back runs of ``fn`` on the collector's stream."""
        t = self.torch
        t0 = time.perf_counter()
        cg = t.cuda.CUDAGraph()
        with t.cuda.stream(self.stream):
            cg.capture_begin(capture_error_mode="thread_local")
            try:
                for _ in range(k):
                    fn()
            finally:
                cg.capture_end()
        self.capture_s += time.perf_counter() - t0
        return cg

    def _replays(self, ps: PlanState, n: int) -> list[float]:
        t = self.torch
        evs = [(t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)) for _ in range(n)]
        with t.cuda.stream(self.stream):
            t.cuda._sleep(spin_cycles(n))  # all n replays are queued before the first event runs
            for s, e in evs:
                s.record()
                ps.graph.replay()
                e.record()
        self.stream.synchronize()
        return [s.elapsed_time(e) / ps.k for s, e in evs]

    def _eager(self, g, pack, index, k, n) -> list[float]:
        """Fallback when capture fails: k back-to-back launches behind a spin kernel."""
        t = self.torch
        out = []
        for _ in range(n):
            s, e = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            with t.cuda.stream(self.stream):
                t.cuda._sleep(int(k * 100e-6 * 1.5e9))  # keeps the GPU busy while the host queues
                s.record()
                for _ in range(k):
                    self._run(g, pack, index)
                e.record()
            e.synchronize()
            out.append(s.elapsed_time(e) / k)
        return out

    # -- the passes ---------------------------------------------------------------------
    def _ensure_workspace(self, built) -> None:
        """Grow the shared workspace to the largest need of the built plans (those under the cap)."""
        t = self.torch
        ws_need = max([ps.rec["workspace_bytes"] for ps in built
                       if ps.rec["workspace_bytes"] <= WORKSPACE_CAP] + [1])
        if self.workspace.numel() < ws_need:
            self.workspace = None
            t.cuda.empty_cache()
            self.workspace = t.empty(ws_need, dtype=t.uint8, device="cuda")

    def _coarse_timing(self, p, rec, g, pack, built, out, ref, ref_norm, e_tf32) -> list[PlanState]:
        """Every built plan in cuDNN's order: run once, check, capture, coarse timing (into its record).

        Returns the plans with a coarse time and a correct answer."""
        t_problem = time.perf_counter()
        rec["truncated"] = False
        best_ok_ms = math.inf  # fastest warm execution of a correct plan so far
        for ps in sorted(built, key=lambda q: plan_priority(q.rec)):
            r = ps.rec
            if r["workspace_bytes"] > WORKSPACE_CAP:
                r["exec_error"] = f"workspace {r['workspace_bytes']} bytes over the {WORKSPACE_CAP} cap"
                continue
            cap_s = self.opt.problem_time_cap_s
            if time.perf_counter() - t_problem > cap_s:
                r["exec_error"] = f"not run: the problem's {cap_s:g} s time cap was reached"
                rec["truncated"] = True
                continue
            if not self._first_run(p, g, pack, ps, out, ref, ref_norm, e_tf32):
                continue
            try:
                single = self._single_ms(g, pack, ps.index)
            except Exception as exc:  # noqa: BLE001
                r["exec_error"] = _err(exc)
                r["exec_ok"] = False
                self._check_cuda()
                continue
            r["warm_exec_ms"] = single
            n_coarse = 1 if single > FAR_BEHIND * best_ok_ms else COARSE_REPLAYS
            if r["correct"]:
                best_ok_ms = min(best_ok_ms, single)
            if single >= SLOW_PLAN_MS:
                # a slow plan: its warm execution is its time (host overhead < 0.1% here)
                ps.times = [single]
                r.update(timing_method="single", inner_k=1, coarse_ms=single, coarse_n=1)
                continue
            self._coarse_replays(g, pack, ps, single, n_coarse)
        timed = [ps for ps in built if ps.rec.get("coarse_ms") is not None]
        valid = [ps for ps in timed if ps.rec["correct"]]
        rec["n_valid"] = len(valid)
        return valid

    def _first_run(self, p, g, pack, ps, out, ref, ref_norm, e_tf32) -> bool:
        """Run the plan once into ``out`` poisoned with NaN and compare it with the float64 reference
        (rel_err, correct, precision and first_exec_ms into its record); False when it did not run."""
        t = self.torch
        r = ps.rec
        tol = TOLERANCE[p["dtype"]]
        try:
            out.fill_(float("nan"))
            s_ev, e_ev = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            with t.cuda.stream(self.stream):
                s_ev.record()
                self._run(g, pack, ps.index)
                e_ev.record()
            self.stream.synchronize()
            first_ms = s_ev.elapsed_time(e_ev)
            r["exec_ok"] = True
        except Exception as exc:  # noqa: BLE001
            r["exec_error"] = _err(exc)
            self._check_cuda()
            return False
        err = float((out.double() - ref).norm()) / ref_norm if ref_norm > 0 else float((out.double() - ref).norm())
        r["rel_err"] = err if math.isfinite(err) else None
        r["correct"] = bool(math.isfinite(err) and err <= tol)
        if p["dtype"] == "FP32":
            r["precision"] = ("fp32" if (e_tf32 and math.isfinite(err) and err < FP32_PRECISE_FRACTION * e_tf32)
                              else "reduced")
        # The first execution may load the plan's kernels (CUDA lazy loading) or wait for
        # the host: it is recorded, but every decision below uses a second execution.
        r["first_exec_ms"] = first_ms
        return True

    def _coarse_replays(self, g, pack, ps, single, n_coarse) -> None:
        """Coarse time of a plan from ``n_coarse`` replays of a captured graph of k executions (k from
        its warm execution ``single``), eager launches where capture fails; into ``ps`` and its record."""
        r = ps.rec
        try:
            ps.k = inner_count(single)
            ps.graph = self._capture(g, pack, ps.index, ps.k)
            r["timing_method"] = "graph"
            self._replays(ps, 1)  # the graph's first launch uploads it: never timed
            ps.times = self._replays(ps, n_coarse)
            replay_ms = timing_stats(ps.times)["median"] * ps.k
            if replay_ms < COARSE_TARGET_MS / 2 and ps.k < MAX_INNER:
                # a replay shorter than the host's launch cost is not a measurement
                # (launch_bound_mask): capture again with k from the replay and re-time
                ps.k = inner_count(replay_ms / ps.k)
                ps.graph = self._capture(g, pack, ps.index, ps.k)
                self._replays(ps, 1)
                ps.times = self._replays(ps, n_coarse)
                r["recaptured"] = True
            if inconsistent_with_warm(timing_stats(ps.times)["median"], single):
                ps.k = inner_count(single)
                ps.graph = self._capture(g, pack, ps.index, ps.k)
                self._replays(ps, 1)
                ps.times = self._replays(ps, n_coarse)
                r["retimed_inconsistent"] = True
        except Exception as exc:  # noqa: BLE001
            r["capture_error"] = _err(exc)
            ps.graph = None
            self._check_cuda()
            try:
                ps.times = self._eager(g, pack, ps.index, ps.k, n_coarse)
                r["timing_method"] = "eager"
            except Exception as exc2:  # noqa: BLE001
                r["exec_error"] = _err(exc2)
                r["exec_ok"] = False
                self._check_cuda()
                return
        r["inner_k"] = ps.k
        st = timing_stats(ps.times)
        r.update(coarse_ms=st["median"], coarse_n=st["n"] * ps.k)

    def _precise_retiming(self, p, rec, g, pack, valid, torch_plans) -> None:
        """Precise interleaved rounds over the candidates (:meth:`_precise_candidates`), then the best
        plan once more (``repeat_ms``, the noise check); into the plans' records and ``rec``."""
        chosen = self._precise_candidates(p, valid, rec, torch_plans)
        rounds = self._interleaved_rounds(g, pack, chosen)
        for ps in chosen:
            st = timing_stats(rounds[ps.index])
            ps.rec.update(precise_ms=st["median"], precise_min_ms=st["min"], precise_q1_ms=st["q1"],
                          precise_q3_ms=st["q3"], precise_n=st["n"] * ps.k)
        best = min(chosen, key=lambda q: q.rec["precise_ms"])
        n_rep = PRECISE_ROUNDS * replays_per_round(best.rec["coarse_ms"] * best.k)
        if best.graph is not None:
            reps = self._replays(best, n_rep)
        elif best.rec["timing_method"] == "single":
            reps = [self._single_ms(g, pack, best.index) for _ in range(n_rep)]
        else:
            reps = self._eager(g, pack, best.index, best.k, n_rep)
        best.rec["repeat_ms"] = timing_stats(reps)["median"]
        rec["n_precise"] = len(chosen)

    def _interleaved_rounds(self, g, pack, states) -> dict[int, list]:
        """PRECISE_ROUNDS rounds over ``states`` in the given order: {plan index: per-execution times}."""
        rounds: dict[int, list] = {ps.index: [] for ps in states}
        for _ in range(PRECISE_ROUNDS):
            for ps in states:
                n_rep = replays_per_round(ps.rec["coarse_ms"] * ps.k)
                if ps.graph is not None:
                    reps = self._replays(ps, n_rep)
                elif ps.rec["timing_method"] == "single":
                    reps = [self._single_ms(g, pack, ps.index) for _ in range(n_rep)]
                else:
                    reps = self._eager(g, pack, ps.index, ps.k, n_rep)
                rounds[ps.index] += reps
        return rounds

    def _verify(self, p, rec, g, pack, valid) -> None:
        """Re-time the front-runners (precise rounds, fresh order); label times into the plan records."""
        from kbench.collect.label_retiming import front_runners
        by_name = {ps.rec["plan"]: ps for ps in valid}
        first = {n: (ps.rec.get("precise_ms") or ps.rec["coarse_ms"]) for n, ps in by_name.items()}
        in_set = [n for n, ps in by_name.items() if default_set(ps.rec, p["dtype"], bool(self.notes_reliable))]

        def time_fn(order):
            states = [by_name[n] for n in order]
            try:
                rounds = self._interleaved_rounds(g, pack, states)
            except Exception as exc:  # noqa: BLE001 - recorded; the first times stay the labels
                rec["verify_error"] = _err(exc)
                self._check_cuda()
                return {}
            return {ps.rec["plan"]: timing_stats(rounds[ps.index])["median"] for ps in states}
        o = self.opt
        result = front_runners.verify_problem(first, time_fn, candidate_sets=[list(by_name), in_set], band=o.verify_band,
                                  min_plans=o.verify_min_plans, threshold=o.verify_disagree,
                                  max_passes=o.verify_max_passes, seed=o.seed ^ zlib.crc32(p["key"].encode()))
        for name, fields in result.plan_records().items():
            by_name[name].rec.update(fields)
        rec.update(verify_passes=result.passes, verify_converged=result.converged,
                   n_verified=len(result.checks))

    def _precise_candidates(self, p, valid, rec, torch_plans):
        best = min(q.rec["coarse_ms"] for q in valid)
        near = sorted([q for q in valid if q.rec["coarse_ms"] <= (1 + PRECISE_BAND) * best],
                      key=lambda q: q.rec["coarse_ms"])[:PRECISE_MAX_PLANS]
        chosen = {q.index: q for q in near}
        by_name = {q.rec["plan"]: q for q in valid}
        in_set = [q for q in valid if default_set(q.rec, p["dtype"], bool(self.notes_reliable))]
        extra = []
        for tag in ("a", "b"):
            order = [n for n in rec.get(f"heur_{tag}", "").split(";") if n in by_name]
            if order:
                extra.append(by_name[order[0]])
            order_set = [n for n in order if by_name[n] in in_set]
            if order_set:
                extra.append(by_name[order_set[0]])
        if in_set:
            extra.append(min(in_set, key=lambda q: q.rec["coarse_ms"]))
        extra += [by_name[n] for n in torch_plans if n in by_name]
        for q in extra:
            chosen.setdefault(q.index, q)
        return list(chosen.values())

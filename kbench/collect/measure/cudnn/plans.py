"""Steps 1 and 2 and the builds of step 3, on the host: the frontend's graphs, cuDNN's plan lists,
the numerical notes and every plan built.

Nothing here launches work on the GPU, so that ranks sharing a GPU do this part while another
rank holds the GPU's turn (:mod:`kbench.collect.gpu_turn`). :class:`PlanLists` is a part of
:class:`~kbench.collect.cudnn.collector.CudnnCollector`, which holds the state its methods use
(``torch``, ``cudnn``, ``handle``, ``opt``, ``cdt``, ``modes``, ``notes``, ``notes_cache``,
``notes_reliable``, ``kernel_caches``).
"""

from __future__ import annotations

import json
import time

from kbench.collect.measure.cudnn.candidates import classify_note_probe
from kbench.collect.measure.cudnn.problems import conv_args
from kbench.collect.measure.cudnn.protocol import PlanState, _err


def kernel_cache_topology(p: dict) -> tuple:
    """The graphs that may share one cuDNN kernel cache: same operation (direction), data type, layout
    and grouped-or-not; the sizes, strides, pads and dilations may differ.

    cuDNN re-uses a cached kernel only "on future same-topology operation graphs" (frontend docs,
    Dynamic Shapes and Kernel Cache). One cache for every graph of a run crashed the collector on an
    H100: a segmentation fault on the run's seventh problem-direction (forward, BF16, NHWC), after
    the graphs of six others (forward, BF16, NCHW among them) had used the same cache. So each
    topology gets its own."""
    return (p["direction"], p["dtype"], p["layout"], int(p["groups"]) > 1)


class PlanLists:
    """The collector's host part: graphs, cuDNN's lists, numerical notes, plan builds."""

    def _host_part(self, p, rec, x, w, y) -> dict | None:
        """Steps 1 and 2: cuDNN's lists, the numerical notes and every plan built (into ``rec``);
        the graph and its plans for :meth:`_gpu_part`, None when cuDNN offered no plan."""
        t_phase = time.perf_counter()
        # 1. cuDNN's lists, one graph per heuristic mode, then the union.
        all_modes = list(self.modes.values())
        g, pack, names = self._heuristic_lists(p, rec, x, w, y, all_modes)
        if g is None:
            return None
        ranks = {tag: {n: i for i, n in enumerate(rec[f"heur_{tag}"].split(";")) if n}
                 for tag in self.modes}
        rec["t_heur_s"] = time.perf_counter() - t_phase
        t_phase = time.perf_counter()
        # 2. notes
        flags = self._numeric_notes(p, rec, x, w, y, names, all_modes)
        rec["t_notes_s"] = time.perf_counter() - t_phase
        t_build = time.perf_counter()
        plans = [self._plan_state(g, i, name, flags, ranks) for i, name in enumerate(names)]
        rec["t_build_s"] = time.perf_counter() - t_build
        built = [ps for ps in plans if ps.rec["build_ok"]]
        rec["n_built"] = len(built)
        if self.notes_reliable is None and flags is not None:
            self.notes_reliable = True
        return {"g": g, "pack": pack, "plans": plans, "built": built, "names": names}

    def _graph(self, p, x, w, y):
        cudnn = self.cudnn
        # kernel_cache also turns on dynamic shapes (the frontend's pygraph does both)
        cache = {"kernel_cache": self._kernel_cache(p)} if self.opt.kernel_cache else {}
        g = cudnn.pygraph(io_data_type=self.cdt[p["dtype"]], intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=self.handle, **cache)
        args = conv_args(p)  # two entries for 2D, three (depth first) for 3D
        kw = dict(padding=list(args["padding"]), stride=list(args["stride"]),
                  dilation=list(args["dilation"]), compute_data_type=cudnn.data_type.FLOAT)
        d = p["direction"]
        cdt = self.cdt[p["dtype"]]
        if d == "F":
            X = g.tensor(name="X", dim=list(x.size()), stride=list(x.stride()), data_type=cdt)
            W = g.tensor(name="W", dim=list(w.size()), stride=list(w.stride()), data_type=cdt)
            O = g.conv_fprop(image=X, weight=W, name="conv", **kw)
            O.set_output(True).set_dim(list(y.size())).set_stride(list(y.stride())).set_data_type(cdt)
            pack = {X: x, W: w, O: y}
        elif d == "B":
            DY = g.tensor(name="DY", dim=list(y.size()), stride=list(y.stride()), data_type=cdt)
            W = g.tensor(name="W", dim=list(w.size()), stride=list(w.stride()), data_type=cdt)
            O = g.conv_dgrad(loss=DY, filter=W, name="dgrad", **kw)
            O.set_output(True).set_dim(list(x.size())).set_stride(list(x.stride())).set_data_type(cdt)
            pack = {DY: y, W: w, O: x}
        else:
            X = g.tensor(name="X", dim=list(x.size()), stride=list(x.stride()), data_type=cdt)
            DY = g.tensor(name="DY", dim=list(y.size()), stride=list(y.stride()), data_type=cdt)
            O = g.conv_wgrad(image=X, loss=DY, name="wgrad", **kw)
            O.set_output(True).set_dim(list(w.size())).set_stride(list(w.stride())).set_data_type(cdt)
            pack = {X: x, DY: y, O: w}
        g.validate()
        g.build_operation_graph()
        return g, pack

    def _kernel_cache(self, p):
        topology = kernel_cache_topology(p)
        if topology not in self.kernel_caches:
            self.kernel_caches[topology] = self.cudnn.create_kernel_cache()
        return self.kernel_caches[topology]

    def _plan_list(self, p, x, w, y, modes, note=None):
        """(graph, pack, [plan names], error) for ``modes`` (list of heur_mode)."""
        try:
            g, pack = self._graph(p, x, w, y)
            if note is not None:
                g.select_numeric_notes([note])
                g.deselect_workspace_greater_than(-1)
            g.create_execution_plans(modes)
            names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
            return g, pack, names, ""
        except Exception as exc:  # noqa: BLE001
            return None, None, [], _err(exc)

    def _heuristic_lists(self, p, rec, x, w, y, all_modes):
        """cuDNN's plan list of each heuristic mode (into ``rec``), then the graph of their union:
        (graph, pack, plan names), graph None when there is no plan (``rec``'s status says why)."""
        for tag, mode in self.modes.items():
            _, _, names, err = self._plan_list(p, x, w, y, [mode])
            rec[f"heur_{tag}"] = ";".join(names)
            rec[f"heur_{tag}_error"] = err
        g, pack, names, err = self._plan_list(p, x, w, y, all_modes)
        rec["n_plans"] = len(names)
        if g is None or not names:
            rec.update(status="no_plans", error=err or "cuDNN proposed no plan")
            return None, None, []
        return g, pack, names

    def _numeric_notes(self, p, rec, x, w, y, names, all_modes) -> dict[str, set] | None:
        """{plan name: numerical notes}: from the notes cache when it knows every plan's engine, else (and
        on the cache's periodic checks) from the filter probes, which the cache then learns. Into ``rec``:
        ``notes_error``, ``notes_source`` (probe, cache, check or '') and ``notes_cache_diff`` (plans
        whose probed notes differ from the cache's, on a check)."""
        rec.update(notes_error="", notes_source="", notes_cache_diff=None)
        if not self.opt.notes or self.notes_reliable is False:
            return None
        cache = self.notes_cache
        cached, check = cache.lookup(p, names) if cache is not None else (None, False)
        # the first problem of a process is probed all the same: it decides notes_reliable for this process
        if cached is not None and not check and self.notes_reliable:
            rec["notes_source"] = "cache"
            return cached
        try:
            flags = self._note_flags(p, x, w, y, names, all_modes)
        except Exception as exc:  # noqa: BLE001
            rec["notes_error"] = _err(exc)
            return None
        rec["notes_source"] = "check" if cached is not None else "probe"
        if cache is not None:
            differ = cache.learn(p, flags)
            if cached is not None:
                rec["notes_cache_diff"] = differ
        return flags

    def _note_flags(self, p, x, w, y, names, all_modes) -> dict[str, set]:
        """{plan name: set of numerical notes}, from one filter-probe graph per note."""
        flags = {n: set() for n in names}
        unclear = 0
        for note_name, note in self.notes.items():
            g, _, pnames, err = self._plan_list(p, x, w, y, all_modes, note=note)
            if g is None:
                raise RuntimeError(f"note probe {note_name}: {err}")
            for i, name in enumerate(pnames):
                try:
                    g.build_plan_at_index(i)
                    has = True  # built despite the -1 byte limit: cannot happen unless the filter is off
                    unclear += 1
                except Exception as exc:  # noqa: BLE001
                    has = classify_note_probe(str(exc))
                    if has is None:
                        unclear += 1
                        continue
                if has and name in flags:
                    flags[name].add(note_name)
        if unclear:
            raise RuntimeError(f"note probe: {unclear} unclear answers")
        return flags

    def _plan_state(self, g, i, name, flags, ranks) -> PlanState:
        """Plan ``i``'s record (engine, knobs, notes, ranks in cuDNN's lists), after building it."""
        r = {"plan": name, "engine_id": None, "knobs": "", "behavior_notes": "",
             "numeric_notes": None if flags is None else ";".join(sorted(flags.get(name, ()))),
             "rank_a": ranks["a"].get(name, -1), "rank_b": ranks["b"].get(name, -1),
             "rank_fallback": ranks["fallback"].get(name, -1), "build_ok": False, "build_error": "",
             "exec_ok": False, "exec_error": "", "correct": False, "rel_err": None, "precision": "",
             "workspace_bytes": None, "timing_method": "", "inner_k": None}
        try:
            eid, knobs = g.get_engine_and_knobs_at_index(i)
            r["engine_id"] = int(eid)
            r["knobs"] = json.dumps({str(getattr(k, "name", k)): int(v) for k, v in knobs.items()},
                                    sort_keys=True)
        except Exception as exc:  # noqa: BLE001
            r["knobs_error"] = _err(exc)
        try:
            bn = g.get_behavior_notes_for_plan_at_index(i)
            r["behavior_notes"] = ";".join(sorted(str(getattr(b, "name", b)) for b in bn))
        except Exception as exc:  # noqa: BLE001
            r["behavior_notes_error"] = _err(exc)
        tb = time.perf_counter()
        try:
            g.build_plan_at_index(i)
            r["build_ok"] = True
            r["workspace_bytes"] = int(g.get_workspace_size_plan_at_index(i))
        except Exception as exc:  # noqa: BLE001
            r["build_error"] = _err(exc)
        r["build_ms"] = 1e3 * (time.perf_counter() - tb)
        return PlanState(i, r)

"""``kbench model tune``: fill a plan cache (:mod:`.plan_cache`) for a traced model.

* **From a dataset** (CPU): for each traced problem the dataset holds, the *oracle*'s plan (the fastest
  in its ``runtimes``, ties broken by name as the packager sorts them) or a *selector*'s first choice
  (zero-shot: no timing; the candidates are the cuDNN lists of the dataset's ``heuristics`` table, as
  ``kbench model report`` gives them to the selector). The header names the dataset's GPU and library
  versions (its manifest). Traced problems the dataset lacks are left out and listed in ``missing``
  with the nearest shape it has.
* **By a selector on the live GPU** (``--selector NAME --live``): for each traced problem cuDNN is asked
  for its lists (modes A, B and fallback) as the collector asks it
  (:meth:`kbench.collect.measure.cudnn.collector.CudnnCollector.lists`: the heuristic query, the numerical
  notes, every plan built; nothing run or timed), the lists kept to the plans that build and that the
  selector's candidate set admits by their notes (:func:`admitted_lists`), and the selector's first
  choice among them is the plan (zero-shot: no dataset, no timing). The header names this machine.
* **By timing** (GPU, ``--time``): each traced problem, 2D or 3D, is measured by the collector
  (:meth:`kbench.collect.measure.cudnn.collector.CudnnCollector.measure`, its whole protocol, PyTorch's own
  choice under default flags identified), its times read as the packager reads them for the
  ``pytorch`` candidate set (:func:`kbench.collect.packaging.package.candidate_runtimes`). The header
  names this machine.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench.core.output_files import printable_path
from kbench.data.dataset import Dataset, load
from kbench.model.plan_cache import (
    MissingProblem,
    PlanCache,
    PlanCacheHeader,
    PlanEntry,
    TraceRef,
    current_environment,
    plan_engine_and_knobs,
)
from kbench.model.report import _selector_rankings, nearest_problems, read_trace

_LIBRARY = re.compile(r"cuDNN\s+(\S+)\s+\(frontend\s+(\S+)\)")


def dataset_environment(ds: Dataset) -> dict:
    """The GPU and library versions a collected NVIDIA dataset was measured with (its manifest)."""
    m = ds.manifest
    source = m.get("source") or {}
    lib = _LIBRARY.search(str(m.get("library", "")))
    arch = re.fullmatch(r"sm_(\d+)(\d)", str(m.get("arch", "")))
    env = {"gpu": source.get("gpu"), "compute_capability": f"{arch.group(1)}.{arch.group(2)}" if arch else None,
           "cudnn_backend": lib.group(1) if lib else None, "cudnn_frontend": lib.group(2) if lib else None,
           "torch": source.get("torch")}
    unknown = [k for k, v in env.items() if not v]
    if unknown:
        raise KbenchInputError(f"dataset {ds.name!r} does not record {', '.join(unknown)} in its manifest (source.gpu, "
                               "arch, library 'cuDNN X (frontend Y)', source.torch); a plan cache needs them to be "
                               "checked on the GPU. Use a collected NVIDIA dataset such as h200-pytorch.")
    return env


def _trace_ref(info: dict) -> TraceRef:
    return TraceRef(**{k: info.get(k) for k in ("model", "input_shape", "dtype", "autocast", "memory_format",
                                                "mode")})


def _entry(row, plan: str, time_ms=None, pytorch_plan=None, pytorch_ms=None, knobs=None, engine_id=None) -> PlanEntry:
    eid, parsed = plan_engine_and_knobs(plan)
    return PlanEntry(plan=plan, engine_id=engine_id if engine_id is not None else eid,
                     knobs=knobs if knobs is not None else parsed, direction=str(row["direction"]),
                     layers=str(row.get("layers", "")),
                     time_ms=None if time_ms is None or pd.isna(time_ms) else float(time_ms),
                     pytorch_plan=pytorch_plan or None,
                     pytorch_ms=None if pytorch_ms is None or pd.isna(pytorch_ms) else float(pytorch_ms))


def _missing(row, reason: str) -> MissingProblem:
    return MissingProblem(problem_id=str(row["problem_id"]), direction=str(row["direction"]),
                          layers=str(row.get("layers", "")), multiplicity=int(row.get("multiplicity", 1)),
                          reason=reason)


def oracle_plans(ds: Dataset, ids) -> pd.DataFrame:
    """Per problem of ``ids`` in ``ds``: the fastest plan of its ``runtimes`` (``plan``, ``time_ms``)."""
    rt = ds.runtimes
    rt = rt.loc[rt["problem_id"].astype(str).isin(set(map(str, ids))), ["problem_id", "kernel", "time_ms"]]
    rt = rt.assign(problem_id=rt["problem_id"].astype(str), kernel=rt["kernel"].astype(str))
    rt = rt[rt["time_ms"].notna()].sort_values(["problem_id", "time_ms", "kernel"], kind="stable")
    best = rt.drop_duplicates("problem_id").set_index("problem_id")
    return best.rename(columns={"kernel": "plan"})[["plan", "time_ms"]]


def pytorch_plans(ds: Dataset, ids) -> pd.DataFrame:
    """Per problem: the plan the dataset records as PyTorch's choice (``pytorch`` heuristic, rank 0) and its time."""
    heur = ds.heuristics
    if heur is None or "pytorch" not in set(heur["heuristic"].astype(str)):
        return pd.DataFrame(columns=["pytorch_plan", "pytorch_ms"])
    wanted = set(map(str, ids))
    h = heur[(heur["heuristic"].astype(str) == "pytorch") & (heur["rank"] == 0)]
    h = h[h["problem_id"].astype(str).isin(wanted)]
    h = pd.DataFrame({"problem_id": h["problem_id"].astype(str).to_numpy(), "kernel": h["kernel"].astype(str).to_numpy()})
    rt = ds.runtimes
    rt = rt[rt["problem_id"].astype(str).isin(wanted)]
    t = pd.DataFrame({"problem_id": rt["problem_id"].astype(str).to_numpy(), "kernel": rt["kernel"].astype(str).to_numpy(),
                      "pytorch_ms": rt["time_ms"].to_numpy(dtype=float)})
    out = h.merge(t, on=["problem_id", "kernel"], how="left").drop_duplicates("problem_id")
    return out.rename(columns={"kernel": "pytorch_plan"}).set_index("problem_id")[["pytorch_plan", "pytorch_ms"]]


def tune_from_dataset(trace_dir, dataset, *, selector: str | None = None, oracle: bool = False) -> PlanCache:
    """The plan cache of the trace in ``trace_dir`` from ``dataset``: the oracle's plans, or ``selector``'s."""
    if oracle == (selector is not None):
        raise KbenchInputError("choose one way to fill the cache: --oracle (the dataset's fastest plans) or "
                               "--selector NAME (a selector's first choice, zero-shot).")
    info, traced, _ = read_trace(trace_dir)
    ds = dataset if isinstance(dataset, Dataset) else load(str(dataset))
    if ds.task != "kernel-selection" or ds.runtimes is None or ds.manifest.get("vendor") != "NVIDIA":
        raise KbenchInputError(f"dataset {ds.name!r} is not a collected cuDNN dataset (vendor "
                               f"{ds.manifest.get('vendor')!r}, task {ds.task}); plan caches hold cuDNN plans: "
                               "use an NVIDIA kernel-selection dataset such as h200-pytorch.")
    env = dataset_environment(ds)
    traced = traced.assign(problem_id=traced["problem_id"].astype(str))
    exact = traced["problem_id"].isin(set(ds.problems["problem_id"].astype(str))).to_numpy()
    matched = traced.loc[exact]
    if not len(matched):
        deep = int((traced.get("spatial_dims", pd.Series(2, index=traced.index)).astype(int) == 3).sum())
        has_3d = bool((ds.problems["spatial_dims"] == 3).any())
        why = f" ({deep} are 3D; {ds.name} has {'other' if has_3d else 'no'} 3D problems)" if deep else ""
        shown = printable_path(trace_dir)
        raise KbenchInputError(f"none of the {len(traced)} traced problem-directions is in {ds.name}{why}; a cache "
                               f"would hold no plan. Time them on the GPU with `kbench model tune {shown} --time "
                               f"--out CACHE`, or see the nearest shapes with `kbench model report {shown} "
                               f"--dataset {ds.name}`.")
    torch_choice = pytorch_plans(ds, matched["problem_id"])
    plans: dict[str, PlanEntry] = {}
    missing: list[MissingProblem] = []
    notes: list[str] = []
    if oracle:
        chosen = oracle_plans(ds, matched["problem_id"])
        filled_by = "oracle"
    else:
        rankings, use = _selector_rankings(ds, matched["problem_id"].to_numpy(), selector)
        if rankings is None:
            raise KbenchInputError(f"selector {selector!r} cannot choose for {ds.name}: {use.note}")
        chosen = pd.DataFrame({"plan": rankings["ranking"].str.split(";").str[0].to_numpy()},
                              index=rankings["problem_id"].astype(str).to_numpy())
        t = ds.runtimes
        t = t[t["problem_id"].astype(str).isin(set(chosen.index))]
        times = dict(zip(zip(t["problem_id"].astype(str), t["kernel"].astype(str)), t["time_ms"].astype(float)))
        chosen["time_ms"] = [times.get((pid, plan)) for pid, plan in zip(chosen.index, chosen["plan"])]
        filled_by = f"selector:{selector}"
        notes.append("the selector's first choice among cuDNN's lists (modes A, B and fallback) as the dataset "
                     "records them; time_ms is the dataset's time of that plan, where measured")
    for row in matched.to_dict("records"):
        pid = row["problem_id"]
        if pid not in chosen.index:
            missing.append(_missing(row, f"{ds.name} has the problem but "
                                         + ("no timed plan" if oracle else "the selector ranked no plan for it")))
            continue
        pt = torch_choice.loc[pid] if pid in torch_choice.index else None
        plans[pid] = _entry(row, chosen.at[pid, "plan"], chosen.at[pid, "time_ms"],
                            None if pt is None else pt["pytorch_plan"], None if pt is None else pt["pytorch_ms"])
    if (~exact).any():
        near = nearest_problems(traced.loc[~exact], ds.problems)
        for (_, row), nid, dist in zip(traced.loc[~exact].iterrows(), near["nearest_id"], near["distance"]):
            why = f"not in {ds.name}"
            if isinstance(nid, str) and not pd.isna(dist):
                why += f" (nearest shape {nid} at distance {dist:.2f})"
            missing.append(_missing(row, why + "; time it with `kbench model tune --time` on the GPU"))
    header = PlanCacheHeader(**env, filled_by=filled_by, source=f"dataset:{ds.name}@{ds.manifest.get('version')}",
                             trace=_trace_ref(info), notes=notes)
    return PlanCache(header=header, plans=plans, missing=missing)


# ----------------------------------------------------------------------------- on the GPU
def _cuda_or_refuse() -> None:
    try:
        import torch
    except ImportError:
        raise KbenchInputError("kbench model tune --time needs PyTorch with CUDA.") from None
    if not torch.cuda.is_available():
        raise KbenchInputError("kbench model tune --time times plans on a CUDA GPU, and PyTorch sees none here. "
                               "Run it on the GPU machine, or fill the cache from a dataset on this one: "
                               "`kbench model tune DIR --dataset h200-pytorch --oracle --out CACHE`.")


def _collector_fastest(rec: dict, plan_recs: list[dict]):
    """(plan record of the fastest plan, its time, PyTorch's plan, its time) of one measured problem, with the
    times the packager keeps for the ``pytorch`` candidate set; None where no plan ran correctly."""
    from kbench.collect.packaging.package import candidate_runtimes
    if rec.get("status") != "ok" or not plan_recs:
        return None
    problems = pd.DataFrame([{"key": rec["key"], "status": rec["status"], "dtype": rec["dtype"]}])
    plans = pd.DataFrame([{**r, "key": rec["key"]} for r in plan_recs])
    for col in ("precise_ms", "numeric_notes", "precision", "timing_method", "coarse_n", "precise_n"):
        if col not in plans:
            plans[col] = None
    rt = candidate_runtimes(problems, plans, variant="pytorch")
    if not len(rt):
        return None
    rt = rt.sort_values(["time_ms", "plan"], kind="stable")
    best = rt.iloc[0]
    torch_names = [n for n in str(rec.get("torch_plans") or "").split(";") if n]
    times = dict(zip(rt["plan"], rt["time_ms"]))
    torch_plan = next((n for n in torch_names if n in times), torch_names[0] if torch_names else None)
    return best, float(best["time_ms"]), torch_plan, times.get(torch_plan)


def _knobs_of(plan_rec) -> dict[str, int] | None:
    import json
    try:
        knobs = json.loads(plan_rec.get("knobs") or "")
        return {str(k): int(v) for k, v in knobs.items()}
    except (ValueError, TypeError, AttributeError):
        return None


NOT_TIMED_YET = "not timed yet: the run stopped before it"


def _resumed(out, header: PlanCacheHeader, trace_dir) -> tuple[dict, list, set]:
    """(plans, missing, done) of the partial cache at ``out``, made on this machine for the same trace."""
    from kbench.model.plan_cache import environment_mismatches, load_plan_cache
    prior = load_plan_cache(out)
    env = {k: getattr(header, k) for k in ("gpu", "cudnn_backend", "cudnn_frontend", "torch")}
    wrong = environment_mismatches(prior, env)
    if prior.header.source != "timing" or prior.header.trace != header.trace or wrong:
        raise KbenchInputError(f"--resume: {printable_path(out)} is not a timing of this trace on this machine "
                               f"({'; '.join(wrong) or 'another trace or source'}); write to a new --out, or leave "
                               "out --resume to start again.")
    missing = [m for m in prior.missing if m.reason != NOT_TIMED_YET]
    return dict(prior.plans), missing, set(prior.plans) | {m.problem_id for m in missing}


def tune_by_timing(trace_dir, *, out=None, progress: bool = True, resume: bool = False,
                   time_budget_s: float | None = None) -> PlanCache:
    """The oracle cache of the trace in ``trace_dir`` from timings on this machine's GPU (see the module docstring).

    With ``out`` the cache is written after each problem, the problems not timed yet listed in ``missing``
    as such, so that a run stopped by a time limit keeps what it measured; ``resume`` continues such a
    cache (the problems it has are not timed again). ``time_budget_s``: no problem is started after that
    many seconds (the cache then lists the rest as not timed yet)."""
    import time
    t0 = time.monotonic()
    _cuda_or_refuse()
    info, traced, _ = read_trace(trace_dir)
    from kbench.collect.measure.cudnn.collector import CudnnCollector, Options
    from kbench.collect.measure.cudnn.problems import load_problems
    from kbench.model.plan_cache import write_plan_cache
    env = current_environment()
    traced = traced.assign(problem_id=traced["problem_id"].astype(str))
    deep = traced.get("spatial_dims", pd.Series(2, index=traced.index)).astype(int).to_numpy() == 3
    by_id = traced.set_index("problem_id")
    notes = ["the collector's protocol (kbench collect cudnn), the pytorch candidate set"]
    header = PlanCacheHeader(**{k: str(v) for k, v in env.items()}, filled_by="oracle", source="timing",
                             trace=_trace_ref(info), notes=notes)
    plans: dict[str, PlanEntry] = {}
    missing: list[MissingProblem] = []
    done: set[str] = set()
    if resume and out is not None and Path(out).exists():
        plans, missing, done = _resumed(out, header, trace_dir)

    def save() -> None:
        if out is None:
            return
        left = [_missing(row, NOT_TIMED_YET) for row in traced.to_dict("records") if row["problem_id"] not in done]
        write_plan_cache(PlanCache(header=header, plans=plans, missing=missing + left), out, inputs=[trace_dir])

    def out_of_time() -> bool:
        return time_budget_s is not None and time.monotonic() - t0 > time_budget_s

    todo = [p for p in _collector_problems(traced, deep, load_problems) if p["key"] not in done]
    collector = CudnnCollector(Options()) if todo else None
    if collector is not None:
        collector.warm_up()
    for i, p in enumerate(todo):
        if out_of_time():
            break
        p = {k: (v.item() if hasattr(v, "item") else v) for k, v in p.items()}
        row = by_id.loc[p["key"]].to_dict() | {"problem_id": p["key"]}
        rec, plan_recs = collector.measure(p)
        best = _collector_fastest(rec, plan_recs)
        if best is None:
            missing.append(_missing(row, f"the collector found no plan that ran correctly ({rec.get('status')}: "
                                         f"{str(rec.get('error', ''))[:160]})"))
        else:
            plan_rec, ms, torch_plan, torch_ms = best
            plans[p["key"]] = _entry(row, str(plan_rec["plan"]), ms, torch_plan, torch_ms,
                                     knobs=_knobs_of(plan_rec), engine_id=plan_rec.get("engine_id"))
        done.add(p["key"])
        save()
        if progress:
            print(f"kbench model tune: {i + 1}/{len(todo)} problem-directions timed", file=sys.stderr)
    left = [_missing(row, NOT_TIMED_YET) for row in traced.to_dict("records") if row["problem_id"] not in done]
    return PlanCache(header=header, plans=plans, missing=missing + left)


# ----------------------------------------------------------------------------- a selector on the live GPU
#: the cuDNN lists a plans selector reads, and the collector's record field of each
LIVE_LISTS = {"cudnn_mode_a": "heur_a", "cudnn_mode_b": "heur_b", "cudnn_fallback": "heur_fallback"}


def admitted_lists(rec: dict, plan_recs: list[dict], variant: str) -> dict[str, list[str]]:
    """cuDNN's lists of one problem (the collector's ``heur_*`` fields, in the heuristics' order), kept to the
    plans that built and that the candidate set ``variant`` admits by their numerical notes, as a dataset's
    ``heuristics`` table keeps them to its candidate set: ``pytorch``, PyTorch's filter (notes known, no
    DOWN_CONVERT_INPUTS); ``default``, :func:`~kbench.collect.measure.cudnn.candidates.default_set` by notes
    (an FP32 plan's precision class needs a run: here only its notes decide). No plan ran, so none was
    checked against float64."""
    from kbench.collect.measure.cudnn.candidates import default_set, pytorch_default_mask
    built = [r for r in plan_recs if r.get("build_ok")]
    if variant == "pytorch":
        frame = pd.DataFrame({"numeric_notes": [r.get("numeric_notes") for r in built]}, dtype=object)
        keep = {r["plan"] for r, ok in zip(built, pytorch_default_mask(frame)) if ok}
    else:
        dtype = str(rec.get("dtype"))
        keep = {r["plan"] for r in built if default_set({**r, "precision": "fp32"}, dtype,
                                                        r.get("numeric_notes") is not None)}
    return {name: [n for n in str(rec.get(field) or "").split(";") if n in keep] for name, field in LIVE_LISTS.items()}


def live_choice(sel, problem_id: str, lists: dict[str, list[str]]) -> str:
    """The selector's first plan for the problem of ``problem_id`` (its canonical columns read from the key,
    as the packager reads a dataset's) among ``lists``."""
    from kbench.sources.problem import parse_miopen_keys
    problem = parse_miopen_keys(pd.Series([problem_id], dtype=str), source="the trace").iloc[0].to_dict()
    return sel.choose(problem, lists)[0]


def _plan_selector(selector: str):
    """The plans selector ``selector`` (a name or folder), shipped or exported; never trained here."""
    import kbench.selector as selector_module
    try:
        sel = selector_module.load(selector, export_if_missing=False)
    except ImportError as exc:
        raise KbenchInputError(f"a selector is read with safetensors, which is not installed here ({exc}): pip "
                               "install safetensors (on the lent GPU machine: carry its wheel in .whl/).") from None
    except KbenchInputError as exc:
        raise KbenchInputError(f"{exc} A zero-shot cache needs a selector that has not seen the model's layers: "
                               "export one on a split that holds them out, e.g. `python -m kbench.selector export "
                               "h200-3d-pytorch --split networks`.") from None
    if not isinstance(sel, selector_module.PlanSelector):
        raise KbenchInputError(f"selector {selector!r} ranks {sel.dataset}'s kernels, not cuDNN plans; --live needs "
                               "a cuDNN plans selector (h200-pytorch, h100-pytorch, h200-3d-pytorch).")
    return sel


def _training_note(sel) -> str:
    t = sel.meta.get("training") or {}
    if not t:
        return f"selector {sel.dataset} ({sel.meta.get('model')}): its file records no training split"
    held = t.get("held_out_networks")
    held = ", ".join(held) if isinstance(held, list) else held
    return (f"selector {sel.dataset} ({t.get('model')}): fitted on {t.get('dataset')} {t.get('version')} split "
            f"{t.get('split')} part train ({t.get('problems', {}).get('train')} problem-directions), its test part "
            f"held out" + (f" ({held})" if held else ""))


def tune_live(trace_dir, selector: str, *, progress: bool = True) -> PlanCache:
    """The zero-shot cache of the trace in ``trace_dir``: ``selector``'s first choice among cuDNN's lists asked
    on this machine's GPU (see the module docstring). Needs CUDA and the cuDNN frontend."""
    info, traced, _ = read_trace(trace_dir)
    sel = _plan_selector(selector)
    try:
        import torch
        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if not cuda:
        raise KbenchInputError("kbench model tune --live asks cuDNN on a CUDA GPU for each problem's plan lists, and "
                               "PyTorch sees none here. Run it on the GPU machine, or rank the lists a dataset "
                               "recorded on this one: `kbench model tune DIR --dataset D --selector NAME --out "
                               "CACHE`.")
    from kbench.collect.measure.cudnn.collector import CudnnCollector, Options
    from kbench.collect.measure.cudnn.problems import load_problems
    from kbench.data.registry import DATASETS
    spec = DATASETS.get(sel.dataset)
    variant = spec.variant if spec is not None else "default"
    env = current_environment()
    traced = traced.assign(problem_id=traced["problem_id"].astype(str))
    deep = traced.get("spatial_dims", pd.Series(2, index=traced.index)).astype(int).to_numpy() == 3
    by_id = traced.set_index("problem_id")
    todo = _collector_problems(traced, deep, load_problems)
    collector = CudnnCollector(Options())
    plans: dict[str, PlanEntry] = {}
    missing: list[MissingProblem] = []
    for i, p in enumerate(todo):
        p = {k: (v.item() if hasattr(v, "item") else v) for k, v in p.items()}
        row = by_id.loc[p["key"]].to_dict() | {"problem_id": p["key"]}
        rec, plan_recs = collector.lists(p)
        lists = admitted_lists(rec, plan_recs, variant) if rec.get("status") == "ok" else {}
        if not any(lists.values()):
            why = (f"cuDNN offered no plan ({rec.get('status')}: {str(rec.get('error', ''))[:160]})"
                   if rec.get("status") != "ok" else f"no plan of cuDNN's lists builds and is in the {variant} set")
            missing.append(_missing(row, why))
        else:
            try:
                plans[p["key"]] = _entry(row, live_choice(sel, p["key"], lists))
            except KbenchInputError as exc:  # a problem outside the selector's vocabulary (another rank, dtype)
                missing.append(_missing(row, f"the selector cannot rank it: {exc}"))
        if progress:
            print(f"kbench model tune: {i + 1}/{len(todo)} problem-directions ranked", file=sys.stderr)
    notes = [f"the selector's first choice among cuDNN's lists (modes A, B and fallback) asked on this GPU as the "
             f"collector asks them, kept to the plans that build and that the {variant} candidate set admits by "
             "their numerical notes; no plan was run or timed", _training_note(sel)]
    header = PlanCacheHeader(**{k: str(v) for k, v in env.items()}, filled_by=f"selector:{selector}", source="live",
                             trace=_trace_ref(info), notes=notes)
    return PlanCache(header=header, plans=plans, missing=missing)


def _collector_problems(traced: pd.DataFrame, deep: np.ndarray, load_problems) -> list[dict]:
    """The traced problem-directions as the collector takes them: the 2D and the 3D ones each through a
    problems file of their own rank (a problems file holds one rank), in trace order."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for rank, rows in ((2, traced.loc[~deep]), (3, traced.loc[deep])):
            if not len(rows):
                continue
            if rank == 2:
                rows = rows.drop(columns=[c for c in rows.columns if c.endswith("_d")], errors="ignore")
            path = Path(tmp) / f"problems{rank}d.csv"
            rows.drop(columns=["spatial_dims"], errors="ignore").to_csv(path, index=False)
            out += load_problems(path).to_dict("records")
    return out


def summary_counts(cache: PlanCache, traced_multiplicity: dict[str, int] | None = None) -> dict:
    """Problem-directions and calls with a plan and left out, for the command's message."""
    mult = traced_multiplicity or {}
    return {"planned": len(cache.plans), "missing": len(cache.missing),
            "calls_planned": int(np.sum([mult.get(k, 1) for k in cache.plans])),
            "calls_missing": int(np.sum([m.multiplicity for m in cache.missing]))}


__all__ = ["admitted_lists", "dataset_environment", "live_choice", "oracle_plans", "pytorch_plans", "summary_counts",
           "tune_by_timing", "tune_from_dataset", "tune_live"]

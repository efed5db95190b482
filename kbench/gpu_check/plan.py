"""Planning of a GPU re-timing run (``kbench verify-on-gpu``): which plans, in which order. Pure.

For each problem of a dataset part the run re-times three roles:

* ``choice``: the plan a predictions file picks, by the evaluator's rule (the
  first plan of its ranking that is in the problem's measured list);
* ``mode_a``: the dataset's reference, cuDNN heuristic mode A's first plan of
  the candidate set (the same plan ``kbench evaluate`` measures speed-ups against);
* ``oracle``: the dataset's fastest measured plan.

Roles that name the same plan share one timing (``plans`` is deduplicated).

With ``timed_top`` K > 1 the plan also lists each problem's ``candidates``: the first K plans of the
predictions' ranking that are in its measured list (the choice first). They are timed with the roles
in every pass, and scoring (:func:`kbench.gpu_check.score.timed_choice`) keeps the fastest of them in
the pass's first round as the choice of the *timed* selector, the learned counterpart of PyTorch's
autotune: K timings of the entry's own candidates instead of cuDNN's first 10.

With live references (:func:`live_block`) the GPU also decides, per problem, what cuDNN's mode A
and mode B pick with the dataset variant's numerical-note filter (:func:`live_filter`) and times
PyTorch's own convolution: :mod:`kbench.gpu_check.live`. Those units join the problem's
interleaved rounds on the GPU (the same :func:`interleave` and :func:`problem_rng`). A plan whose live
block has ``autotune`` also times PyTorch's convolution with ``torch.backends.cudnn.benchmark = True``
(:data:`LIVE_AUTOTUNE`), in a second pass in a process of its own (:mod:`kbench.gpu_check.autotune_pass`).
The order is interleaved: ``rounds`` rounds, every plan of the problem exactly
once per round, each round in its own seeded random order, so slow drift of the
GPU (clock, temperature) falls on every plan alike. Problems themselves are
taken in a seeded random order. Every order depends only on the seed and the
problem id (:func:`problem_rng`), never on the other problems in the run.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.collect.measure.cudnn.candidates import REDUCED_NOTES
from kbench.core.errors import KbenchInputError
from kbench.scoring.long_form import long_form_rankings

PLAN_FORMAT = 1
ROLES = ("choice", "mode_a", "oracle")
#: references decided on the GPU at timing time (``--live-references``): cuDNN's heuristic modes asked
#: with the variant's filter, and PyTorch's own convolution with the variant's flags
LIVE_REFERENCES = ("live_mode_a", "live_mode_b", "pytorch_op")
#: the timing unit of PyTorch's own convolution in raw rows (no cuDNN plan name can look like it)
PYTORCH_OP_UNIT = "pytorch:conv"
#: PyTorch's real autotune as a live reference: its op with ``benchmark = True``, timed in a pass of its own
#: (PyTorch's plan cache is keyed without the benchmark flag, so a process that ran the op without
#: autotune never tunes that problem again), with the choice and the oracle beside it
LIVE_AUTOTUNE, PYTORCH_AUTOTUNE_UNIT = "pytorch_autotune", "pytorch:conv:benchmark"
#: the autotune pass's raw timings, beside ``raw.jsonl`` in the run folder
RAW_AUTOTUNE = "raw_autotune.jsonl"
#: problem fields the collector needs to rebuild the convolution (kbench.collect.measure.cudnn.problems.GEOMETRY + more)
PROBLEM_FIELDS = ("direction", "dtype", "n", "c", "k", "groups", "x_h", "x_w", "y_h", "y_w",
                  "fil_h", "fil_w", "pad_h", "pad_w", "stride_h", "stride_w", "dil_h", "dil_w")
#: the fields a 3D problem adds (with ``spatial_dims`` 3); a 2D problem's plan entry has none of them
DEPTH_FIELDS = ("x_d", "y_d", "fil_d", "pad_d", "stride_d", "dil_d")


#: ``source.collector`` of a dataset measured by kbench's own cuDNN collector
CUDNN_COLLECTOR = "kbench collect cudnn"


def require_cudnn_collected(dataset, command: str) -> None:
    """Refuse a dataset that ``kbench collect cudnn`` did not measure: re-timing needs its plans and problems
    in the collector's terms (a MIOpen find-db has no cuDNN plan to run)."""
    source = (getattr(dataset, "info", None) or {}).get("source") or {}
    if source.get("collector") != CUDNN_COLLECTOR:
        from kbench.data.registry import DATASETS
        ok = sorted(n for n, s in DATASETS.items() if s.collected)
        library = (dataset.info or {}).get("library") or "another library"
        raise KbenchInputError(f"{command}: dataset {dataset.name!r} was not measured by '{CUDNN_COLLECTOR}' "
                               f"({library}); it re-times cuDNN plans on an NVIDIA GPU, so it takes a dataset "
                               f"that collector measured: {', '.join(ok)}.")


#: each GPU re-timing command's run plan, by what every one of its problems holds: (what it is, command)
PLAN_KINDS = {"roles": ("verify-on-gpu plan", "kbench verify-on-gpu"),
              "first": ("label-verification plan", "kbench collect verify-labels")}


def require_plan_kind(plan: dict, field: str, path) -> None:
    """Refuse a run plan whose problems lack ``field`` (a :data:`PLAN_KINDS` key), naming the command
    whose plan it is when it is the other command's."""
    items = plan.get("problems")
    ok = isinstance(items, list) and all(isinstance(i, dict) for i in items)
    if ok and all(field in i for i in items):
        return
    other = next((f for f in PLAN_KINDS if f != field and ok and items and all(f in i for i in items)), None)
    hint = (f" It is a {PLAN_KINDS[other][0]}: time it with '{PLAN_KINDS[other][1]} --out {Path(path).parent} "
            "--time-only'." if other else "")
    raise KbenchInputError(f"{path}: not a {PLAN_KINDS[field][0]} (every problem with its '{field}').{hint}")


def live_filter(variant: str, dtype: str) -> dict:
    """What a live reference of ``variant`` may run on ``dtype`` data: the numerical notes whose plans
    are deselected, and ``allow_tf32`` for PyTorch's own convolution.

    ``pytorch`` follows ``filterEngineConfigs`` (``aten/src/ATen/native/cudnn/Conv_v8.cpp``) with
    PyTorch's defaults (``allow_tf32 = True``, ``deterministic = False``): only DOWN_CONVERT_INPUTS
    plans go, as :func:`kbench.collect.measure.cudnn.candidates.pytorch_default_mask` rules for the table.
    ``default`` follows :func:`kbench.collect.measure.cudnn.candidates.default_set`: FP32 data without the
    reduced-precision notes (TENSOR_CORE, DOWN_CONVERT_INPUTS, REDUCED_PRECISION_REDUCTION), which
    PyTorch matches with ``allow_tf32 = False``; FP16/BF16 data without REDUCED_PRECISION_REDUCTION,
    which no PyTorch flag excludes, so there PyTorch's op runs with its defaults.

    >>> live_filter("pytorch", "FP32")
    {'deselect': ['DOWN_CONVERT_INPUTS'], 'allow_tf32': True}
    >>> live_filter("default", "FP16")
    {'deselect': ['REDUCED_PRECISION_REDUCTION'], 'allow_tf32': True}
    """
    if variant == "pytorch":
        return {"deselect": ["DOWN_CONVERT_INPUTS"], "allow_tf32": True}
    if variant == "default":
        if dtype == "FP32":
            return {"deselect": sorted(REDUCED_NOTES), "allow_tf32": False}
        return {"deselect": ["REDUCED_PRECISION_REDUCTION"], "allow_tf32": True}
    raise KbenchInputError(f"live references: no filter for candidate set {variant!r}; "
                           "known: default, pytorch (docs/variants.md)")


def live_block(variant: str, dtypes, autotune: bool = False) -> dict:
    """The plan's ``live`` entry: the variant, the references, and each data type's filter; with
    ``autotune``, the autotune pass (:data:`LIVE_AUTOTUNE`: its unit and raw file)."""
    block = {"variant": variant, "references": list(LIVE_REFERENCES),
             "filters": {str(d): live_filter(variant, str(d)) for d in sorted(set(dtypes))}}
    if autotune:
        block["autotune"] = {"reference": LIVE_AUTOTUNE, "unit": PYTORCH_AUTOTUNE_UNIT, "raw": RAW_AUTOTUNE}
    return block


def problem_rng(seed: int, problem_id: str) -> np.random.Generator:
    """A generator that depends on the run's seed and the problem id only."""
    return np.random.default_rng([int(seed), zlib.crc32(str(problem_id).encode())])


def interleave(plans: list[str], rounds: int, rng: np.random.Generator) -> list[list[str]]:
    """``rounds`` lists, each a random permutation of ``plans`` (every plan once per round).

    >>> interleave(["a"], 2, np.random.default_rng(0))
    [['a'], ['a']]
    """
    if rounds < 1:
        raise KbenchInputError(f"rounds must be >= 1 (got {rounds})")
    return [[plans[i] for i in rng.permutation(len(plans))] for _ in range(rounds)]


def first_listed(rankings: pd.Series, listed: dict[str, set]) -> pd.Series:
    """Per problem id (the index), the first kernel of its ';'-joined ranking that is listed for it
    (None when there is none)."""
    out = {}
    for pid, ranking in rankings.items():
        ok = listed.get(pid, set())
        out[pid] = next((k for k in str(ranking).split(";") if k in ok), None)
    return pd.Series(out, dtype=object)


def first_listed_k(rankings: pd.Series, listed: dict[str, set], k: int) -> pd.Series:
    """Per problem id (the index), the list of the first ``k`` kernels of its ';'-joined ranking that are
    listed for it, in ranking order (empty when there is none).

    >>> first_listed_k(pd.Series({"p": "c;x;a;b"}), {"p": {"a", "b", "c"}}, 2).tolist()
    [['c', 'a']]
    """
    out = {}
    for pid, ranking in rankings.items():
        ok = listed.get(pid, set())
        out[pid] = [name for name in dict.fromkeys(str(ranking).split(";")) if name in ok][:k]
    return pd.Series(out, dtype=object)


def role_plans(predictions: pd.DataFrame, runtimes: pd.DataFrame, heuristics: pd.DataFrame,
               ids, reference: str = "cudnn_mode_a", timed_top: int = 1) -> pd.DataFrame:
    """One row per problem of ``ids``: ``choice``, ``mode_a``, ``oracle`` plan names and their
    table times ``t_choice``, ``t_mode_a``, ``t_oracle`` (ms); with ``timed_top`` K > 1 also
    ``candidates``, the first K listed plans of the prediction's ranking (the choice alone where
    none is listed), and ``t_candidates``, their table times.

    ``predictions`` has ``problem_id`` and ``ranking`` (or ``kernel``). The roles follow the
    scoring rules (:mod:`kbench.scoring.metrics`): a ranking, the prediction's or the reference's, whose
    plans were none of them measured is a failure and takes the problem's slowest measured plan;
    a problem for which ``reference`` proposed nothing at all has no reference time, so it is
    left out, as the board's speed-up leaves it out (the ids are in ``.attrs["no_reference"]``).
    A problem of the part with no prediction is an input error.
    """
    ids = pd.Index(pd.Series(list(ids), dtype=object).astype(str))
    rt = runtimes[runtimes["problem_id"].isin(ids)][["problem_id", "kernel", "time_ms"]].astype(
        {"problem_id": str, "kernel": str})
    times = rt.groupby(["problem_id", "kernel"])["time_ms"].min()
    listed: dict[str, set] = {}
    for pid, kernel in zip(rt["problem_id"].tolist(), rt["kernel"].tolist()):
        listed.setdefault(pid, set()).add(kernel)
    if {"kernel", "score"} <= set(predictions.columns) and "ranking" not in predictions.columns:
        # long form: ranked by score with kbench evaluate's one tie rule, not by the first row per problem
        predictions = long_form_rankings(predictions)
    col = "ranking" if "ranking" in predictions.columns else "kernel"
    if col not in predictions.columns or "problem_id" not in predictions.columns:
        raise KbenchInputError("predictions: need columns problem_id and ranking (or kernel); "
                               f"got {list(predictions.columns)}")
    preds = predictions.astype({"problem_id": str}).drop_duplicates("problem_id").set_index("problem_id")[col]
    missing = ids.difference(preds.index)
    if len(missing):
        raise KbenchInputError(f"predictions: {len(missing)} problem(s) of the part have no prediction, e.g. "
                               f"{missing[0]}; predict every problem of the part")
    heur = heuristics[(heuristics["heuristic"] == reference) & heuristics["problem_id"].isin(ids)]
    heur = heur.astype({"problem_id": str, "kernel": str}).sort_values(["problem_id", "rank"], kind="stable")
    ref_rank = heur.groupby("problem_id", sort=False)["kernel"].agg(";".join)
    no_reference = ids.difference(ref_rank.index)
    ids = ids.difference(no_reference, sort=False)
    by_time = rt.sort_values(["problem_id", "time_ms", "kernel"], kind="stable")
    best = by_time.drop_duplicates("problem_id").set_index("problem_id")["kernel"]
    slowest = by_time.drop_duplicates("problem_id", keep="last").set_index("problem_id")["kernel"]
    out = pd.DataFrame(index=ids)
    out["oracle"] = best.reindex(ids)
    bad = out["oracle"].isna()
    if bad.any():
        raise KbenchInputError(f"{int(bad.sum())} problem(s): no measured plan, e.g. {out.index[bad.to_numpy()][0]}")
    out["choice"] = first_listed(preds.reindex(ids), listed).reindex(ids).fillna(slowest.reindex(ids))
    out["mode_a"] = first_listed(ref_rank.reindex(ids), listed).reindex(ids).fillna(slowest.reindex(ids))
    out = out[list(ROLES)]
    for role in ROLES:
        key = pd.MultiIndex.from_arrays([out.index, out[role].to_numpy()])
        out[f"t_{role}"] = times.reindex(key).to_numpy(dtype=np.float64)
    if timed_top > 1:
        top = first_listed_k(preds.reindex(ids), listed, timed_top).reindex(ids)
        out["candidates"] = [names if names else [choice] for names, choice in zip(top, out["choice"])]
        out["t_candidates"] = [[float(times[(pid, name)]) for name in names]
                               for pid, names in zip(out.index, out["candidates"])]
    out.index.name = "problem_id"
    out = out.reset_index()
    out.attrs["no_reference"] = [str(x) for x in no_reference]
    return out


def collector_problems(problems: pd.DataFrame) -> dict[str, dict]:
    """{problem id: the problem as the collector takes it} (``key``, :data:`PROBLEM_FIELDS`, ``layout``)."""
    prob = problems.astype({"problem_id": str})
    is3d = prob["spatial_dims"].eq(3) if "spatial_dims" in prob else pd.Series(False, index=prob.index)
    depth = list(DEPTH_FIELDS) if is3d.any() else []
    out = {}
    for rec, three in zip(prob[["problem_id", *PROBLEM_FIELDS, *depth, "layout_x"]].to_dict("records"), is3d):
        names = PROBLEM_FIELDS + (("spatial_dims", *DEPTH_FIELDS) if three else ())
        fields = {k: (rec[k].item() if hasattr(rec[k], "item") else rec[k]) for k in names if k != "spatial_dims"}
        if three:
            fields["spatial_dims"] = 3
        # the collector's layout is one name (NCHW / NHWC); the dataset's may repeat it per tensor
        out[rec["problem_id"]] = {"key": rec["problem_id"], **fields, "layout": str(rec["layout_x"])}
    return out


def build_plan(roles: pd.DataFrame, problems: pd.DataFrame, rounds: int = 5, replays: int = 3,
               seed: int = 0) -> dict:
    """The run plan (JSON-able): problems in seeded order, each with its roles, distinct plans,
    table times and interleaved rounds; where ``roles`` has ``candidates`` (:func:`role_plans` with
    ``timed_top``), each problem's candidates join its plans."""
    if replays < 1:
        raise KbenchInputError(f"replays must be >= 1 (got {replays})")
    timed = "candidates" in roles.columns
    if timed and rounds < 2:
        raise KbenchInputError(f"a timed selector needs rounds >= 2 (got {rounds}): the first round chooses, "
                               "the others measure")
    geometry = collector_problems(problems)
    order = np.random.default_rng(int(seed)).permutation(len(roles))
    items, rows = [], roles.to_dict("records")
    for i in order:
        r = rows[int(i)]
        pid = str(r["problem_id"])
        candidates = [str(c) for c in r["candidates"]] if timed else []
        plans = list(dict.fromkeys([*(r[role] for role in ROLES), *candidates]))  # distinct, role order
        table_ms = {str(r[role]): float(r[f"t_{role}"]) for role in ROLES}
        if timed:
            table_ms.update(zip(candidates, map(float, r["t_candidates"])))
        item = {"problem_id": pid, "problem": geometry[pid],
                "roles": {role: str(r[role]) for role in ROLES},
                "table_ms": table_ms,
                "plans": plans,
                "order": interleave(plans, rounds, problem_rng(seed, pid))}
        if timed:
            item["candidates"] = candidates
        items.append(item)
    return {"format": PLAN_FORMAT, "seed": int(seed), "rounds": int(rounds), "replays": int(replays),
            "problems": items}

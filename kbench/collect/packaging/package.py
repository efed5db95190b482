"""Raw ``kbench collect cudnn`` output -> the canonical dataset tables (docs/data_model.md).

* ``problems``: one row per measured problem-direction; ``problem_id`` is the
  MIOpen key built from the true geometry (:func:`kbench.problem.to_miopen_key`,
  parsed back with :func:`kbench.problem.parse_miopen_keys`), so a convolution
  measured here has the id it has in the AMD datasets. Lists are complete
  (``censored = False``) unless the collector's per-problem time cap left
  plans unrun (``censored = True``, the unrun plans were cuDNN's lowest-ranked).
* ``runtimes``: every plan that built, ran and computed the right answer and
  is in the variant's candidate set (:func:`kbench.collect.cudnn.candidates.default_set`:
  full-FP32 plans only for FP32 data in the ``default`` variant, every correct
  plan in the ``tf32`` variant, every correct plan PyTorch's engine filter keeps
  with its default flags in the ``pytorch`` variant,
  :func:`kbench.collect.cudnn.candidates.pytorch_default_mask`). ``time_ms`` is the precise median where the
  plan was re-timed precisely, else the coarse median (``timing`` says which).
* ``kernels``: the plan vocabulary (``eng<id>_k<knob>=<v>...``); ``algorithm``
  is the cuDNN engine (``eng<id>``); ``family`` comes from cuDNN's numerical
  notes (fft, winograd, tensor_core, cuda_core).
* ``heuristics``: cuDNN's mode A, mode B and fallback orders and PyTorch's
  choice, each restricted to the kernels in ``runtimes`` for that problem and
  re-ranked from 0 (what that heuristic would run from the candidate set); with an
  autotune folder also ``pytorch_autotune``, and the ``autotune`` table of its first
  calls (:mod:`kbench.collect.packaging.autotune`).
* ``splits``: ``random`` and ``networks`` (:mod:`kbench.splits`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kbench.collect.label_retiming.apply import apply_labels, read_labels
from kbench.collect.label_retiming.front_runners import AGREE, DISAGREE_RESOLVED, label_checks
from kbench.collect.measure.cudnn import default_set, pytorch_default_mask
from kbench.collect.measure.strides import UNRECORDED_CONVENTION, run_conventions, strides_differ
from kbench.collect.packaging.autotune import autotune_tables, card_section
from kbench.collect.packaging.card import render
from kbench.collect.raw_store.shard import shard_folders
from kbench.collect.raw_store.writer import dedupe, graph_modes, load_env, load_records
from kbench.core.errors import KbenchInputError
from kbench.core.identifiers import check_identifier
from kbench.sources.dataset_files import DATASET_VERSION, REPO_ROOT, write_dataset
from kbench.sources.mituna import read_network_layers
from kbench.sources.problem import PROBLEM_COLUMNS, parse_miopen_keys
from kbench.sources.splits import (
    assign_held_out_networks_split,
    assign_networks_split,
    assign_random_split,
    assign_shapes_split,
)

HEURISTICS = {"cudnn_mode_a": "heur_a", "cudnn_mode_b": "heur_b", "cudnn_fallback": "heur_fallback"}
SPEC = {
    "h100": dict(device="NVIDIA H100 80GB HBM3 (SXM, 132 SMs)", arch="sm_90"),
    "h200": dict(device="NVIDIA H200 (132 SMs)", arch="sm_90"),
}


#: the manifest's ``device_spec``: what the collector recorded of the GPU (its environment records), so
#: that a model over several GPUs describes each by its properties, not by a name
DEVICE_SPEC = {"sm_count": "sm_count", "l2_bytes": "l2_bytes", "memory_bytes": "gpu_memory_bytes",
               "clock_max_sm_mhz": "smi_clocks_max_sm", "clock_max_mem_mhz": "smi_clocks_max_mem"}


def device_spec(env: pd.DataFrame) -> dict[str, int]:
    """The GPU's :data:`DEVICE_SPEC` from a raw folder's environment records (:func:`load_env`).

    Every run must have recorded the same values: one dataset, one kind of GPU.
    """
    missing = [key for key in DEVICE_SPEC.values() if key not in env.columns]
    if len(env) == 0 or missing:
        raise KbenchInputError(f"environment records without {', '.join(missing) or 'any run'}: the collector "
                               "records them at every run's start (kbench.collect.environment); collect again "
                               "with this kbench")
    out = {}
    for name, key in DEVICE_SPEC.items():
        values = set(pd.to_numeric(env[key].dropna(), errors="coerce").dropna().astype("int64"))
        if len(values) != 1:
            raise KbenchInputError(f"environment records: {key} is {sorted(values) or 'not a number'} across the "
                                   "runs; a dataset holds one kind of GPU, so package each GPU's runs apart")
        out[name] = int(values.pop())
    return out


#: candidate sets: ``default`` (strict FP32 for FP32 data, no reduced-precision reduction for
#: FP16/BF16), ``tf32`` (every correct plan) and ``pytorch`` (what PyTorch's cuDNN path may run
#: with its default flags, :func:`kbench.collect.cudnn.candidates.pytorch_default_mask`)
VARIANTS = ("default", "tf32", "pytorch")


def repo_relative(path: str | Path) -> str:
    """``path`` relative to the repository root when it lies inside it (so a shipped manifest does not
    depend on where the checkout sits), else as given."""
    try:
        return Path(path).resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def load_raw(raws, through_run: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(problems, plans, env) of one or more raw folders, one measurement per key; with ``through_run``,
    only the runs up to that run id (run ids start with their UTC start time, so they sort in time)."""
    raws = [raws] if isinstance(raws, (str, Path)) else list(raws)
    for raw in raws:
        if shard_folders(raw):
            raise KbenchInputError(f"{raw}: holds shard folders (shard-K-of-N) of a sharded collection; join "
                                   f"them first with 'kbench collect merge {raw} --out MERGED' and package MERGED.")
    probs, plans, envs = [], [], []
    for raw in raws:
        probs.append(load_records(raw, "problems"))
        plans.append(load_records(raw, "plans"))
        envs.append(load_env(raw))
    problems = pd.concat([p for p in probs if len(p)], ignore_index=True) if any(len(p) for p in probs) else probs[0]
    plan_df = pd.concat([p for p in plans if len(p)], ignore_index=True) if any(len(p) for p in plans) else plans[0]
    env = pd.concat(envs, ignore_index=True)
    if through_run is not None:
        if "run_id" not in env or not env["run_id"].eq(through_run).any():
            raise KbenchInputError(f"{', '.join(map(str, raws))}: no run {through_run!r} in env.jsonl; "
                                   "collected_through must name one of the folder's runs.")
        # the columns that only later runs brought (a newer collector's fields) go with them
        problems, plan_df, env = (d[d["run_id"] <= through_run].dropna(axis=1, how="all") if "run_id" in d else d
                                  for d in (problems, plan_df, env))
    if not len(problems):
        raise KbenchInputError(f"{', '.join(map(str, raws))}: no collected problems found.")
    gpus = set(env["gpu"].dropna()) if "gpu" in env else set()
    if len(gpus) > 1:
        raise KbenchInputError(f"raw folders mix GPUs ({', '.join(sorted(gpus))}); one dataset per GPU.")
    if len(modes := graph_modes(env)) > 1:
        raise KbenchInputError(f"{', '.join(map(str, raws))}: runs with and without --kernel-cache "
                               f"({', '.join(sorted(modes))}); a dataset is measured one way (package them apart).")
    problems, plan_df = dedupe(problems, plan_df)
    return problems, plan_df, env


def plan_family(notes: str | None) -> str:
    notes = set(filter(None, (notes or "").split(";")))
    if "FFT" in notes:
        return "fft"
    if "WINOGRAD" in notes:
        return "winograd"
    if "TENSOR_CORE" in notes:
        return "tensor_core"
    return "cuda_core" if notes is not None else "unknown"


def candidate_runtimes(problems: pd.DataFrame, plans: pd.DataFrame, variant: str = "default") -> pd.DataFrame:
    """Valid plans in the variant's candidate set, with time_ms and timing columns."""
    if variant not in VARIANTS:
        raise KbenchInputError(f"unknown variant {variant!r}: {', '.join(VARIANTS)}")
    ok = problems.loc[problems["status"] == "ok", ["key", "dtype"]]
    p = plans.merge(ok, on="key", how="inner")
    p = p[p["exec_ok"].astype(bool) & p["correct"].astype(bool) & p["coarse_ms"].notna()]
    if variant == "default":
        keep = [default_set(r, r["dtype"], r.get("numeric_notes") is not None)
                for r in p[["precision", "numeric_notes", "dtype"]].to_dict("records")]
        p = p[np.asarray(keep, dtype=bool)] if len(p) else p
    elif variant == "pytorch":
        p = p[pytorch_default_mask(p)]
    p = p.copy()
    precise = p["precise_ms"].notna() if "precise_ms" in p else pd.Series(False, index=p.index)
    p["time_ms"] = np.where(precise, p.get("precise_ms"), p["coarse_ms"]).astype(float)
    p["timing"] = np.where(precise, "precise", np.where(p["timing_method"].eq("single"), "single", "coarse"))
    if "verified_ms" in p:  # the verification pass ran: its label time is the plan's time
        has_label = p["verified_ms"].notna()
        p["time_ms"] = np.where(has_label, p["verified_ms"], p["time_ms"]).astype(float)
        p.loc[p["verified"].isin([AGREE, DISAGREE_RESOLVED]), "timing"] = "verified"
    for a, b in (("time_min_ms", "precise_min_ms"), ("time_q1_ms", "precise_q1_ms"),
                 ("time_q3_ms", "precise_q3_ms")):
        p[a] = p[b] if b in p else np.nan
    p["n_reps"] = np.where(precise, p.get("precise_n"), p["coarse_n"])
    return p[p["time_ms"] > 0]


def torch_choice_coverage(problems: pd.DataFrame, runtimes: pd.DataFrame) -> dict:
    """How many of the problem-directions whose PyTorch choice was matched have it in the candidate set
    ``runtimes`` (from :func:`candidate_runtimes`): the check that a variant holds what PyTorch runs."""
    ok = problems[problems["status"] == "ok"]
    matched = ok[ok.get("torch_status", pd.Series("", index=ok.index)).eq("matched")]
    first = matched["torch_plans"].astype(str).str.split(";").str[0]
    inside = pd.MultiIndex.from_arrays([matched["key"], first]).isin(
        pd.MultiIndex.from_frame(runtimes[["key", "plan"]]))
    return {"problem_directions": int(len(ok)), "torch_choice_matched": int(len(matched)),
            "torch_choice_in_set": int(inside.sum()),
            "share_in_set": round(float(inside.mean()), 4) if len(matched) else None}


def plans_in_set(runtimes: pd.DataFrame) -> pd.DataFrame:
    """A packaged ``runtimes`` table as (key, plan) pairs, the form :func:`torch_choice_coverage` reads."""
    return pd.DataFrame({"key": runtimes["problem_id"].astype(str), "plan": runtimes["kernel"].astype(str)})


def _listed_plans(orders: pd.Series, runtimes: pd.DataFrame) -> pd.DataFrame:
    """(key, plan, rank): each ';'-separated plan list of ``orders`` (indexed by key), restricted to the
    plans the key has in ``runtimes`` (the candidate set) and ranked again in the order kept."""
    listed = orders.fillna("").astype(str).str.split(";").explode()
    listed = pd.DataFrame({"key": listed.index.to_numpy(), "plan": listed.to_numpy()})
    present = pd.MultiIndex.from_arrays([runtimes["problem_id"], runtimes["kernel"]])
    kept = listed[(listed["plan"] != "") & pd.MultiIndex.from_arrays([listed["key"], listed["plan"]]).isin(present)]
    return kept.assign(rank=kept.groupby("key").cumcount()).reset_index(drop=True)


def heuristics_table(src: pd.DataFrame, runtimes: pd.DataFrame) -> pd.DataFrame:
    """cuDNN's heuristic orders (modes A, B, fallback) per problem, restricted to its candidate set, and
    PyTorch's choice (its first recorded plan in the set) where it was matched."""
    parts = [_listed_plans(src[col], runtimes).assign(heuristic=name) for name, col in HEURISTICS.items()]
    if "torch_plans" in src:
        first = _listed_plans(src["torch_plans"], runtimes).drop_duplicates("key")
        parts.append(first.assign(heuristic="pytorch"))
    rows = pd.concat(parts, ignore_index=True)
    # built from plain arrays, so the string columns take the dtype pandas infers for text (as the
    # shipped files have it)
    return pd.DataFrame({"problem_id": rows["key"].to_numpy(dtype=object),
                         "heuristic": rows["heuristic"].to_numpy(dtype=object),
                         "rank": rows["rank"].to_numpy(dtype=np.int16),
                         "kernel": rows["plan"].to_numpy(dtype=object)})


def build_tables(problems: pd.DataFrame, plans: pd.DataFrame, mituna: str | Path | None,
                 variant: str = "default") -> tuple[dict[str, pd.DataFrame], dict]:
    rt = candidate_runtimes(problems, plans, variant)
    ids = sorted(set(rt["key"]))
    if not ids:
        raise KbenchInputError("no problem has a valid plan in the candidate set.")
    src = problems.set_index("key").loc[ids]
    prob = parse_miopen_keys(pd.Series(ids, dtype=str), source="collected keys")
    prob = prob[[c for c in PROBLEM_COLUMNS if c in prob]]
    listed = rt.groupby("key").size()
    prob["n_raw"] = src["n_plans"].to_numpy().astype(np.int16)
    prob["n_listed"] = listed.reindex(ids).to_numpy().astype(np.int16)
    trunc = src["truncated"].fillna(False).astype(bool) if "truncated" in src else pd.Series(False, index=src.index)
    prob["censored"] = trunc.to_numpy()
    prob["kind"] = src["kind"].fillna("").astype(str).to_numpy()
    prob["sources"] = src["sources"].fillna("").astype(str).to_numpy()
    prob["flop"] = src["flop"].astype(float).to_numpy()
    # check: the key's geometry is the geometry that was measured
    for col in ("n", "c", "k", "groups"):
        if not (prob[col].to_numpy() == src[col].astype(np.int64).to_numpy()).all():
            raise KbenchInputError(f"collected keys disagree with the measured {col}: a collector bug.")

    rt = rt.sort_values(["key", "time_ms", "plan"], kind="stable")
    rt["rank"] = rt.groupby("key").cumcount()
    runtimes = pd.DataFrame({
        "problem_id": rt["key"].astype(str).to_numpy(),
        "kernel": rt["plan"].astype(str).to_numpy(),
        "time_ms": rt["time_ms"].astype(float).to_numpy(),
        "workspace_bytes": rt["workspace_bytes"].astype(np.int64).to_numpy(),
        "algorithm": ("eng" + rt["engine_id"].astype("Int64").astype(str)).to_numpy(),
        "rank": rt["rank"].astype(np.int16).to_numpy(),
        "timing": rt["timing"].astype(str).to_numpy(),
        "time_min_ms": rt["time_min_ms"].astype(float).to_numpy(),
        "time_q1_ms": rt["time_q1_ms"].astype(float).to_numpy(),
        "time_q3_ms": rt["time_q3_ms"].astype(float).to_numpy(),
        "n_reps": rt["n_reps"].astype(float).fillna(0).astype(np.int64).to_numpy(),
        "rel_err": rt["rel_err"].astype(float).to_numpy(),
        "numeric_notes": rt["numeric_notes"].fillna("").astype(str).to_numpy(),
    })
    direction = prob.set_index("problem_id")["direction"]
    rt_dir = runtimes.assign(direction=runtimes["problem_id"].map(direction))
    best = runtimes[runtimes["rank"] == 0]
    fam = rt.drop_duplicates("plan").set_index("plan")["numeric_notes"]
    kernels = (rt_dir.groupby("kernel")
               .agg(algorithm=("algorithm", "first"),
                    directions=("direction", lambda s: ",".join(sorted(set(s)))),
                    n_problems=("problem_id", "nunique"))
               .reset_index())
    kernels["family"] = kernels["kernel"].map(lambda k: plan_family(fam.get(k)))
    kernels["n_best"] = kernels["kernel"].map(best["kernel"].value_counts()).fillna(0).astype(np.int64)
    kernels = kernels[["kernel", "family", "algorithm", "directions", "n_problems", "n_best"]]

    heuristics = heuristics_table(src, runtimes)

    splits = dataset_splits(prob, mituna)
    report = {
        "variant": variant,
        "problem_directions_collected": int(len(problems)),
        "status": {str(k): int(v) for k, v in problems["status"].value_counts().items()},
        "problems_with_valid_plans": int(len(prob)),
        "plans_collected": int(len(plans)),
        "plans_in_runtimes": int(len(runtimes)),
        "wrong_answer_plans": int((plans["exec_ok"].astype(bool) & ~plans["correct"].astype(bool)).sum()),
    }
    checks = label_checks(rt, plans)
    report["labels"] = {k: (v if not isinstance(v, dict) else {"n": v["n"], "share": round(v["share"], 4)})
                        for k, v in checks.items()}
    return {"problems": prob.reset_index(drop=True), "runtimes": runtimes, "kernels": kernels,
            "splits": splits, "heuristics": heuristics}, report


def dataset_splits(prob: pd.DataFrame, mituna: str | Path | None) -> pd.DataFrame:
    """The standard splits (:mod:`kbench.sources.splits`). A 2D dataset: ``random`` by geometry, ``networks``
    against MITuna's layer lists (when ``mituna`` exists), ``shapes`` by the geometry with the batch size
    ignored. A 3D dataset: both grouped by the geometry
    with the batch size ignored, ``networks`` holding out whole networks of the traced 3D layers."""
    is3d = (prob["spatial_dims"] == 3).to_numpy()
    if is3d.any() and not is3d.all():
        raise KbenchInputError("the collected problems mix 2D and 3D convolutions; a dataset holds one kind "
                               "(collect and package them apart).")
    if is3d.all():
        from kbench.collect.measure.corpus3d import read_network_layers_3d
        return pd.DataFrame({"problem_id": prob["problem_id"],
                             "random": assign_random_split(prob, ignore_batch=True),
                             "networks": assign_held_out_networks_split(prob, read_network_layers_3d())})
    splits = pd.DataFrame({"problem_id": prob["problem_id"], "random": assign_random_split(prob)})
    if mituna is not None and Path(mituna).exists():
        splits["networks"] = assign_networks_split(prob, read_network_layers(mituna))
    splits["shapes"] = assign_shapes_split(prob)
    return splits


def repeats_table(runtimes: pd.DataFrame, repeat_raws, variant: str = "default",
                  gpu: str | None = None, exclude: set[str] = frozenset()) -> tuple[pd.DataFrame, dict]:
    """The ``repeats`` table: the problems re-measured in ``repeat_raws``, in every run.

    Run 0 is the dataset's own measurement (``runtimes``); run ``i`` is the
    ``i``-th raw folder of ``repeat_raws`` (a re-measurement of a sample of the
    problems in another run, e.g. from ``kbench collect sample``), packaged by the
    same rules (:func:`candidate_runtimes`). Only problems in the dataset and in
    every repeat folder are kept, less ``exclude`` (problems the dataset measured again another way).
    Returns (table, provenance for the manifest).
    """
    repeat_raws = [repeat_raws] if isinstance(repeat_raws, (str, Path)) else list(repeat_raws)
    runs, info = [], [{"run_id": 0, "source": "the dataset's runtimes"}]
    ids = set(runtimes["problem_id"].astype(str)) - set(exclude)
    for i, raw in enumerate(repeat_raws, start=1):
        problems, plans, env = load_raw(raw)
        other = set(env["gpu"].dropna()) if "gpu" in env else set()
        if gpu and other and other != {gpu}:
            raise KbenchInputError(f"{raw}: measured on {', '.join(sorted(other))}, the dataset on {gpu}; "
                                   "a repeat must come from the same GPU model.")
        rt = candidate_runtimes(problems, plans, variant)
        runs.append(pd.DataFrame({"problem_id": rt["key"].astype(str), "kernel": rt["plan"].astype(str),
                                  "run_id": np.int16(i), "time_ms": rt["time_ms"].astype(float)}))
        ids &= set(runs[-1]["problem_id"])
        info.append({"run_id": i, "raw": repo_relative(raw), "collector_runs": sorted(problems["run_id"].astype(str).unique()),
                     "gpu": sorted(other)[0] if other else None,
                     "host": env["host"].dropna().iloc[0] if "host" in env and env["host"].notna().any() else None})
    if not ids:
        raise KbenchInputError(f"{', '.join(map(str, repeat_raws))}: no re-measured problem is in the dataset "
                               "(or in every repeat folder); measure a sample from `kbench collect sample`.")
    base = runtimes.loc[runtimes["problem_id"].astype(str).isin(ids), ["problem_id", "kernel", "time_ms"]]
    base = base.assign(problem_id=base["problem_id"].astype(str), kernel=base["kernel"].astype(str),
                       run_id=np.int16(0))
    table = pd.concat([base] + [r[r["problem_id"].isin(ids)] for r in runs], ignore_index=True)
    table = table[["problem_id", "kernel", "run_id", "time_ms"]].sort_values(
        ["problem_id", "kernel", "run_id"], kind="stable").reset_index(drop=True)
    table["run_id"] = table["run_id"].astype(np.int16)
    return table, {"problems": len(ids), "runs": info}


def label_summary(checks: pd.DataFrame, verified_problems: pd.DataFrame, files) -> dict:
    """Provenance of a label verification (``kbench collect verify-labels``) for the manifest."""
    flags = checks["verified"].value_counts()
    ok = verified_problems["status"].eq("ok")
    return {"files": [Path(f).name for f in files], "problems": int(ok.sum()),
            "failed": int((~ok).sum()), "plans_retimed": int(len(checks)),
            "agree": int(flags.get(AGREE, 0)), "disagree_resolved": int(flags.get(DISAGREE_RESOLVED, 0)),
            "not_verified": int(len(checks) - flags.get(AGREE, 0) - flags.get(DISAGREE_RESOLVED, 0)),
            "not_converged": int((ok & verified_problems["converged"].eq(False)).sum())}


def overlay_retimed(problems: pd.DataFrame, plans: pd.DataFrame, env: pd.DataFrame, retimed,
                    gpu: str | None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict, set[str]]:
    """The base measurements with every problem-direction that ``retimed`` (raw folders) measured again
    replaced by its new measurement: all of that problem's plans, not a merge of old and new plans,
    so that one problem's times always come from one run. Returns (problems, plans, env, provenance,
    the replaced keys)."""
    retimed = [retimed] if isinstance(retimed, (str, Path)) else list(retimed)
    new_problems, new_plans, new_env = load_raw(retimed)
    other = set(new_env["gpu"].dropna()) if "gpu" in new_env else set()
    if gpu and other and other != {gpu}:
        raise KbenchInputError(f"{', '.join(map(str, retimed))}: measured on {', '.join(sorted(other))}, the "
                               f"dataset on {gpu}; a re-timing must come from the same GPU model.")
    replaced = set(new_problems["key"].astype(str))
    unknown = replaced - set(problems["key"].astype(str))
    if unknown:
        raise KbenchInputError(f"{', '.join(map(str, retimed))}: {len(unknown)} problem-directions that the base "
                               f"folders never measured (e.g. {sorted(unknown)[0]}); a re-timing only replaces "
                               "measurements, it adds none (collect new problems into the base folder).")
    keep = ~problems["key"].astype(str).isin(replaced)
    problems = pd.concat([problems[keep], new_problems], ignore_index=True)
    plans = pd.concat([plans[~plans["key"].astype(str).isin(replaced)], new_plans], ignore_index=True)
    env = pd.concat([env, new_env], ignore_index=True)
    info = {"raw": [repo_relative(r) for r in retimed], "problem_directions": len(replaced),
            "runs": sorted(new_problems["run_id"].astype(str).unique()),
            "tensor_strides": sorted(run_conventions(new_env).unique())}
    return problems, plans, env, info, replaced


def require_one_stride_form(problems: pd.DataFrame, env: pd.DataFrame) -> None:
    """Refuse a dataset whose problems were measured with both stride conventions where they differ.

    Runs of both conventions may share a dataset: on a problem whose tensors get the same strides
    either way (:func:`kbench.collect.strides.strides_differ`) the two measure the same thing. A problem
    whose strides differ must come from a run of the dataset's one convention, ``pytorch`` when any
    run used it."""
    conventions = run_conventions(env)
    if conventions.nunique() < 2:
        return
    run_form = problems["run_id"].astype(str).map(conventions).fillna(UNRECORDED_CONVENTION)
    stale = strides_differ(problems)["any"].to_numpy() & (run_form != "pytorch").to_numpy()
    if stale.any():
        raise KbenchInputError(
            f"{int(stale.sum())} problem-directions whose tensors get other strides under PyTorch's convention "
            f"come from legacy runs (e.g. {problems.loc[stale, 'key'].iloc[0]}), beside runs with PyTorch's "
            "strides: re-time them ('python tools/collect/stride_forms.py retime-list', docs/tensor_strides.md) "
            "or package the conventions apart.")


def package(raws, name: str, out_dir: str | Path, mituna: str | Path | None = None,
            variant: str = "default", card: str | Path | None = None, repeats=None, labels=None,
            version: str | None = None, align: tuple[str, pd.DataFrame] | None = None,
            through_run: str | None = None, retimed=None, autotune: str | Path | None = None) -> dict:
    """Write the dataset folder (parquet + manifest) and, if asked, the data card.

    ``repeats``: raw folder(s) re-measuring a sample of the problems in other
    runs: adds the ``repeats`` table (:func:`repeats_table`). ``labels``:
    label-verification files (``kbench collect verify-labels``, raw.jsonl[.gz]):
    their verified times become the re-timed plans' times, as if the
    collector's own verification pass had run. ``align``: (name, runtimes) of another
    GPU's dataset of the same corpus, for the card's alignment check. ``through_run``: package
    the runs up to this run id only (:func:`load_raw`). ``retimed``: raw folder(s) that measured some
    of the problem-directions again (all runs, ``through_run`` does not apply): their measurements
    replace the base's (:func:`overlay_retimed`), after ``labels`` are applied to the base, and the
    replaced problems leave the ``repeats`` table, whose runs measured the old form. ``autotune``: a folder
    of ``kbench collect autotune`` records of the same GPU and software: adds the ``pytorch_autotune``
    heuristic and the ``autotune`` table (:func:`kbench.collect.packaging.autotune.autotune_tables`).
    """
    check_identifier(name, "--name")  # the dataset's name becomes its folder and result paths
    problems, plans, env = load_raw(raws, through_run)
    gpu = env["gpu"].dropna().iloc[0] if "gpu" in env and env["gpu"].notna().any() else "unknown"
    label_info = None
    if labels:
        checks, verified_problems = read_labels(labels)
        plans = apply_labels(plans, checks)
        label_info = label_summary(checks, verified_problems, labels)
    retimed_info, replaced, measured = None, set(), problems
    if retimed:
        problems, plans, env, retimed_info, replaced = overlay_retimed(problems, plans, env, retimed,
                                                                       None if gpu == "unknown" else gpu)
        # every measurement any run made, the superseded ones too: the card's runs table counts them
        measured = pd.concat([measured[measured["key"].astype(str).isin(replaced)], problems], ignore_index=True)
        if label_info:  # label checks of plans whose problem was measured again no longer apply
            label_info["plans_superseded_by_retiming"] = int(checks["key"].astype(str).isin(replaced).sum())
    tables, report = build_tables(problems, plans, mituna, variant)
    # only what the tables hold: a problem that failed has no times to be stale
    require_one_stride_form(problems[problems["key"].astype(str).isin(tables["problems"]["problem_id"])], env)
    repeats_info = None
    if repeats:
        tables["repeats"], repeats_info = repeats_table(tables["runtimes"], repeats, variant,
                                                        None if gpu == "unknown" else gpu, exclude=replaced)
    autotune_info = None
    if autotune is not None:
        rows, tables["autotune"], autotune_info = autotune_tables(autotune, env, tables["problems"]["problem_id"],
                                                                  tables["runtimes"])
        tables["heuristics"] = pd.concat([tables["heuristics"], rows], ignore_index=True)
        autotune_info["folder"] = repo_relative(autotune)
    start = env[env.get("phase") == "start"].iloc[0].to_dict() if "phase" in env else {}
    spec = SPEC.get(name.removesuffix(f"-{variant}"), {})
    info = {
        "name": name, "aliases": [], "version": version or DATASET_VERSION, "variant": variant,
        "device": spec.get("device", gpu), "arch": spec.get("arch", ""), "device_spec": device_spec(env),
        "vendor": "NVIDIA",
        "library": f"cuDNN {start.get('cudnn_backend', '')} (frontend {start.get('cudnn_frontend', '')})",
        "task": "kernel-selection", "license": "MIT",
        "source": {"collector": "kbench collect cudnn", "gpu": gpu, "driver": start.get("smi_driver_version"),
                   "torch": start.get("torch"), "cuda": start.get("torch_cuda")},
        "citation": "", "default_split": "random",
        "censoring": {"rule": "complete", "text": "Every candidate plan cuDNN proposed (modes A, B, fallback) "
                      "was built and timed; a problem the collector's time cap cut short is marked censored."},
        "cleaning": report,
        "splits": {c: {p: int((tables["splits"][c] == p).sum()) for p in ("train", "valid", "test")}
                   for c in tables["splits"].columns if c != "problem_id"},
    }
    if repeats_info:
        info["repeats"] = repeats_info
    if label_info:
        info["label_verification"] = label_info
    if retimed_info:
        info["retimed"] = retimed_info
    if autotune_info:
        info["autotune"] = autotune_info
    manifest = write_dataset(out_dir, tables, info)
    if card:
        all_raws = ([raws] if isinstance(raws, (str, Path)) else list(raws)) + (
            [retimed] if isinstance(retimed, (str, Path)) else list(retimed or []))
        coverage = torch_choice_coverage(problems, plans_in_set(tables["runtimes"]))
        text = render(name, problems, plans, env, tables, all_raws, align=align, retimed=retimed_info,
                      measured=measured, variant=variant, coverage=coverage)
        if autotune_info:
            text = "\n".join([text, card_section(tables["autotune"], autotune_info, tables["problems"])])
        Path(card).write_text(text)
    return manifest

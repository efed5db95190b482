"""Scale-out collection: split the pending problem-directions into shards that any launcher can run.

A shard is ``K/N`` (``K`` counted from 0, like torchrun's ``RANK``). Shard ``K``
of a run into the output root ``OUT`` writes its own raw folder
``OUT/shard-K-of-N/`` (journal, environment, loss-free batches, lock and
``shard.json``, the list of problem-directions it was given), so ranks never
write into one another's files and a killed rank loses at most the batch it
held in memory.

**Which work is pending.** The split is computed from the corpus minus the
problem-directions already done in the *base* of ``OUT``: the root folder's own
records (for example an earlier single-GPU collection copied there) and every
shard folder of a *different* shard count. Shard folders of the same count are
left out on purpose: every rank of a run then computes the same split, whatever
its siblings have written so far, and a re-run of a shard is given the same
problem-directions again and skips those done in any folder. ``--limit L``
caps the split set to the first ``L`` pending problem-directions in corpus
order (not ``L`` per shard), so a sharded run grows a dataset in corpus order
like a single-GPU run does.

**Balance.** Problem-directions are dealt out in corpus order, each to the
shard with the least expected work so far (greedy list scheduling, ties to the
lowest shard). Dealing in corpus order rather than longest-first keeps every
shard moving through the corpus at the same pace, so a run stopped by its time
budget leaves close to a prefix of the corpus done; no shard ends more than
one problem-direction's expected cost above the average. The expected cost is
a log-linear model of a problem-direction's measured seconds
(:data:`COST_MODEL`, fitted by :func:`fit_cost_model` on the real H100 runs in
``raw/h100``; ``python -m kbench.collect.raw_store.shard raw/h100`` re-fits it).

**Launchers** (:func:`resolve_launch`): an explicit ``--shard K/N`` wins; else
torchrun's ``RANK``/``WORLD_SIZE``; else a SLURM job array
(``SLURM_ARRAY_TASK_ID``, ``SLURM_ARRAY_TASK_COUNT``, ``SLURM_ARRAY_TASK_MIN``,
``SLURM_ARRAY_TASK_STEP``); torchrun inside an array task (one task per host,
one rank per GPU) gives shard ``task * WORLD_SIZE + RANK`` of
``COUNT * WORLD_SIZE``. Under torchrun each rank takes GPU ``LOCAL_RANK``: the
launcher narrows ``CUDA_VISIBLE_DEVICES`` to it before anything touches CUDA,
so the collector's device 0 is that GPU (:func:`select_gpu`).
"""

from __future__ import annotations

import heapq
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.collect.raw_store.writer import fsync_write, load_records, resume_state
from kbench.core.errors import KbenchInputError

SHARD_FOLDER = re.compile(r"^shard-(\d+)-of-(\d+)$")
MANIFEST = "shard.json"

#: log(seconds per problem-direction) = intercept + log_flop * ln(FLOP) + the terms that apply.
#: Fitted by :func:`fit_cost_model` on the 5,523 problem-directions of the first 15 H100 runs in
#: raw/h100 (column ``t_total_s``); R^2 in log space 0.24 (tests/collect/test_shard.py re-fits it).
#: It stays fixed as raw/h100 grows: every rank, and every resume of a shard, must compute the same
#: split, so a re-fit would belong to a new version of the split, not to a new run.
COST_MODEL_RUNS = 15
COST_MODEL = {"intercept": -1.9072, "log_flop": 0.0751, "direction_B": 0.157, "direction_W": 0.4819,
              "dtype_BF16": -0.0981, "dtype_FP32": -0.3816, "layout_NHWC": 0.104, "grouped": 0.2691}


@dataclass(frozen=True)
class Shard:
    index: int  # 0-based, like torchrun's RANK
    count: int

    @property
    def folder_name(self) -> str:
        return f"shard-{self.index}-of-{self.count}"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str, what: str = "--shard") -> Shard:
    m = re.fullmatch(r"\s*(-?\d+)\s*/\s*(-?\d+)\s*", str(text))
    if not m:
        raise KbenchInputError(f"{what} {text!r}: expected K/N, e.g. 0/2 (K counts from 0 to N-1).")
    return _shard(int(m.group(1)), int(m.group(2)), what)


def _shard(index: int, count: int, what: str) -> Shard:
    if count < 1:
        raise KbenchInputError(f"{what}: the shard count must be >= 1 (got {count}).")
    if not 0 <= index < count:
        raise KbenchInputError(f"{what}: shard {index} of {count} does not exist; K counts from 0 "
                               f"to {count - 1} (0-based, like torchrun's RANK).")
    return Shard(index, count)


# ---------------------------------------------------------------------------- launchers
@dataclass
class Launch:
    """Where a collector process sits: its shard (or None) and the GPU it should take."""
    shard: Shard | None
    source: str  # "--shard", "torchrun", "slurm-array", "torchrun+slurm-array" or "none"
    local_rank: int | None = None  # torchrun's LOCAL_RANK: the GPU of this host to take
    info: dict = field(default_factory=dict)  # recorded in env.jsonl


def _env_int(env, name: str, minimum: int = 0) -> int:
    raw = env.get(name)
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise KbenchInputError(f"environment variable {name}={raw!r} is not an integer; "
                               "it is set by the launcher (torchrun or SLURM): unset it or fix it.") from None
    if value < minimum:
        raise KbenchInputError(f"environment variable {name}={raw!r} must be >= {minimum}.")
    return value


def _torchrun(env) -> tuple[int, int] | None:
    have = [v for v in ("RANK", "WORLD_SIZE") if env.get(v) not in (None, "")]
    if not have:
        return None
    if len(have) == 1:
        missing = ({"RANK", "WORLD_SIZE"} - set(have)).pop()
        raise KbenchInputError(f"{have[0]} is set but {missing} is not: run under torchrun (which sets "
                               "both), or pass --shard K/N.")
    rank, world = _env_int(env, "RANK"), _env_int(env, "WORLD_SIZE", 1)
    if rank >= world:
        raise KbenchInputError(f"RANK={rank} is not below WORLD_SIZE={world}.")
    return rank, world


def _slurm_array(env) -> tuple[int, int] | None:
    if env.get("SLURM_ARRAY_TASK_ID") in (None, ""):
        return None
    task = _env_int(env, "SLURM_ARRAY_TASK_ID")
    if env.get("SLURM_ARRAY_TASK_COUNT") in (None, ""):
        raise KbenchInputError("SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not (SLURM "
                               "older than 17.11?): pass --shard $((SLURM_ARRAY_TASK_ID))/N instead.")
    count = _env_int(env, "SLURM_ARRAY_TASK_COUNT", 1)
    low = _env_int(env, "SLURM_ARRAY_TASK_MIN") if env.get("SLURM_ARRAY_TASK_MIN") not in (None, "") else 0
    step = _env_int(env, "SLURM_ARRAY_TASK_STEP", 1) if env.get("SLURM_ARRAY_TASK_STEP") not in (None, "") else 1
    offset = task - low
    if offset < 0 or offset % step or offset // step >= count:
        raise KbenchInputError(
            f"SLURM array task {task} (min {low}, step {step}, count {count}) is not one of an evenly "
            "spaced range: submit the array as --array=0-(N-1) (or A-B[:S]), not a list, so that "
            "every task gets one shard.")
    return offset // step, count


def resolve_launch(explicit: str | None, env) -> Launch:
    """The shard and GPU of this process, from ``--shard`` or the launcher's environment."""
    torch_rank = _torchrun(env)
    local_rank = None
    if torch_rank is not None and env.get("LOCAL_RANK") not in (None, ""):
        local_rank = _env_int(env, "LOCAL_RANK")
    info = {k: env.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_ARRAY_JOB_ID",
                                    "SLURM_ARRAY_TASK_ID", "SLURM_JOB_ID", "CUDA_VISIBLE_DEVICES")
            if env.get(k) not in (None, "")}
    if explicit is not None:
        shard, source = parse_shard(explicit), "--shard"
    else:
        array = _slurm_array(env)
        if torch_rank and array:
            (rank, world), (task, tasks) = torch_rank, array
            shard, source = Shard(task * world + rank, tasks * world), "torchrun+slurm-array"
        elif torch_rank:
            shard, source = Shard(*torch_rank), "torchrun"
        elif array:
            shard, source = Shard(*array), "slurm-array"
        else:
            shard, source = None, "none"
    if shard is not None:
        info.update(shard=str(shard), shard_source=source)
    return Launch(shard, source, local_rank, info)


def select_gpu(launch: Launch, env, ranks_per_gpu: int = 1) -> str | None:
    """Narrow ``CUDA_VISIBLE_DEVICES`` in ``env`` to LOCAL_RANK's GPU; returns the device chosen.

    With ``ranks_per_gpu`` R the launcher started R ranks per GPU: LOCAL_RANK's GPU
    is ``LOCAL_RANK // R`` (ranks 0..R-1 share the first GPU, and so on).

    Must run before CUDA is initialised (the collector imports torch later).
    An already narrowed list (a SLURM allocation, a user's choice) is indexed
    by LOCAL_RANK; without one, devices are numbered in PCI bus order, the
    order nvidia-smi uses, so that the clocks and PCI id recorded per run
    belong to the GPU that was timed. ``KBENCH_NVML_DEVICE`` tells the
    collector's nvidia-smi / NVML queries which GPU that is.
    """
    if launch.local_rank is None:
        return None
    gpu = launch.local_rank // ranks_per_gpu
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible not in (None, ""):
        devices = [d.strip() for d in visible.split(",") if d.strip()]
        if gpu >= len(devices):
            per = f" at {ranks_per_gpu} ranks per GPU" if ranks_per_gpu > 1 else ""
            raise KbenchInputError(f"LOCAL_RANK={launch.local_rank} but CUDA_VISIBLE_DEVICES={visible!r} "
                                   f"lists {len(devices)} GPU(s): start at most {len(devices) * ranks_per_gpu} "
                                   f"ranks per host{per}.")
        chosen = devices[gpu]
    else:
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        chosen = str(gpu)
    env["CUDA_VISIBLE_DEVICES"] = chosen
    env["KBENCH_NVML_DEVICE"] = chosen
    launch.info["gpu_selected"] = chosen
    return chosen


# ---------------------------------------------------------------------------- cost model
def _features(problems: pd.DataFrame) -> pd.DataFrame:
    flop = problems["flop"] if "flop" in problems else (
        2.0 * problems["n"] * problems["k"] * (problems["c"] // problems["groups"])
        * problems["fil_h"] * problems["fil_w"] * problems["y_h"] * problems["y_w"])
    return pd.DataFrame({
        "intercept": 1.0,
        "log_flop": np.log(np.maximum(flop.astype(float).to_numpy(), 1.0)),
        "direction_B": problems["direction"].eq("B").astype(float).to_numpy(),
        "direction_W": problems["direction"].eq("W").astype(float).to_numpy(),
        "dtype_BF16": problems["dtype"].eq("BF16").astype(float).to_numpy(),
        "dtype_FP32": problems["dtype"].eq("FP32").astype(float).to_numpy(),
        "layout_NHWC": problems["layout"].eq("NHWC").astype(float).to_numpy(),
        "grouped": (problems["groups"].astype(int) > 1).astype(float).to_numpy(),
    }, index=problems.index)


def expected_seconds(problems: pd.DataFrame, model: dict | None = None) -> np.ndarray:
    """Expected collection seconds of each problem-direction row (only ratios matter for balance)."""
    model = model or COST_MODEL
    x = _features(problems)
    return np.exp(x[list(model)].to_numpy() @ np.array(list(model.values())))


def fit_cost_model(problems: pd.DataFrame) -> tuple[dict, float]:
    """Least-squares fit of log(t_total_s) on the model's features; (coefficients, R^2 in log space)."""
    ok = problems[(problems.get("status", "ok") == "ok") & (problems["t_total_s"] > 0)]
    x = _features(ok)
    y = np.log(ok["t_total_s"].astype(float).to_numpy())
    coef, *_ = np.linalg.lstsq(x.to_numpy(), y, rcond=None)
    resid = y - x.to_numpy() @ coef
    r2 = 1.0 - float(resid @ resid) / float(((y - y.mean()) ** 2).sum())
    return {name: round(float(c), 4) for name, c in zip(x.columns, coef)}, r2


# ---------------------------------------------------------------------------- assignment
def assign(costs, count: int) -> np.ndarray:
    """Shard of each item, dealt in the given order to the least-loaded shard (ties: lowest shard)."""
    costs = np.asarray(costs, dtype=float)
    heap = [(0.0, s) for s in range(count)]
    out = np.empty(len(costs), dtype=np.int64)
    for i, c in enumerate(costs):  # a loop: each choice depends on every earlier one
        load, s = heapq.heappop(heap)
        out[i] = s
        heapq.heappush(heap, (load + c, s))
    return out


def split(pending: pd.DataFrame, count: int) -> np.ndarray:
    """Shard of each pending problem-direction row (rows in corpus order)."""
    return assign(expected_seconds(pending), count)


def shard_folders(root: str | Path) -> dict[Shard, Path]:
    root = Path(root)
    out = {}
    if root.is_dir():
        for p in sorted(root.iterdir()):
            m = SHARD_FOLDER.match(p.name)
            if m and p.is_dir() and int(m.group(1)) < int(m.group(2)):
                out[Shard(int(m.group(1)), int(m.group(2)))] = p
    return out


def _done(folder: Path) -> set[str]:
    return resume_state(folder)[0] if folder.exists() else set()


def base_done(root: str | Path, count: int | None) -> set[str]:
    """Problem-directions done in the root folder and in shard folders of another count."""
    root = Path(root)
    done = _done(root)
    for s, folder in shard_folders(root).items():
        if s.count != count:
            done |= _done(folder)
    return done


def plan_shard(todo: pd.DataFrame, root: str | Path, shard: Shard,
               limit: int | None = None) -> pd.DataFrame:
    """The problem-directions given to ``shard`` (rows of ``todo``, corpus order), done or not."""
    pending = todo[~todo["key"].isin(base_done(root, shard.count))]
    if limit is not None:
        pending = pending.head(limit)
    return pending[split(pending, shard.count) == shard.index]


def write_manifest(folder: str | Path, shard: Shard, assigned: pd.DataFrame, extra: dict) -> None:
    rec = {"shard": str(shard), "index": shard.index, "count": shard.count,
           "n_assigned": int(len(assigned)), **extra, "assigned": assigned["key"].tolist()}
    fsync_write(Path(folder) / MANIFEST, (json.dumps(rec, indent=0) + "\n").encode())


def read_manifest(folder: str | Path) -> dict | None:
    path = Path(folder) / MANIFEST
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise KbenchInputError(f"{path}: unreadable shard manifest ({exc}); re-run the shard's "
                               "'kbench collect cudnn --shard K/N' to rewrite it.") from None


def main(argv=None) -> int:
    """``python -m kbench.collect.raw_store.shard RAW``: re-fit the cost model on a raw folder and show balance."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m kbench.collect.raw_store.shard", description=main.__doc__)
    ap.add_argument("raw", help="raw collector folder with recorded t_total_s (e.g. raw/h100)")
    ap.add_argument("--shards", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--first-runs", type=int, default=None, metavar="N",
                    help=f"only the folder's first N runs (COST_MODEL is the fit on raw/h100's first "
                         f"{COST_MODEL_RUNS})")
    args = ap.parse_args(argv)
    problems = load_records(args.raw, "problems").sort_values("order", kind="stable")
    if args.first_runs is not None:  # run ids start with their UTC start time
        problems = problems[problems["run_id"].isin(sorted(problems["run_id"].unique())[:args.first_runs])]
    # only problem-directions with recorded seconds (a setup failure records none)
    problems = problems[(problems.get("status", "ok") == "ok") & problems["t_total_s"].notna()]
    model, r2 = fit_cost_model(problems)
    print(json.dumps({"model": model, "r2_log": round(r2, 4), "rows": int(len(problems))}))
    actual = problems["t_total_s"].to_numpy()
    for n in args.shards:
        by_model = np.bincount(assign(expected_seconds(problems, model), n), weights=actual, minlength=n)
        by_count = np.bincount(np.arange(len(problems)) % n, weights=actual, minlength=n)
        print(json.dumps({"shards": n, "recorded_seconds_per_shard_cost_model": np.round(by_model, 1).tolist(),
                          "recorded_seconds_per_shard_round_robin": np.round(by_count, 1).tolist()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

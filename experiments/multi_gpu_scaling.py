"""Issues 17 and 18: collection on one, two and four GPUs of one H200 host, read from raw/h200, and on
the two GPUs of one H100 host, read from raw/h100.

Session 20 had one lease of ``nvidia-h200-x4`` (4 H200s, NVLink between every pair, 64 cores, one NUMA
node: ``raw/h200/scaling_x4/topo.txt``). Its first call ran ``run_on_device.sh ladder`` (three ranks per
GPU, 16 host cores per GPU, 149 s per step on 1, 2 and 4 GPUs, then every GPU timing the corpus's first 30
problem-directions); its next two calls were four-GPU collections of twelve ranks. All of it was merged
into ``raw/h200``, so every figure below is read from there:

* ``ladder``: the session's launches against its one-GPU step (:func:`kbench.collect.studies.scaling.ladder`);
* ``by_gpus``: every three-rank launch of ``raw/h200`` grouped by its GPU count (the one-GPU
  ``nvidia-h200`` machines of sessions 14 to 19 and this host): problem-directions per minute per GPU
  and the shard cost model's expected seconds per GPU-second, over all their GPU-seconds;
* ``phases_by_host``: the mean seconds of each collector phase per problem-direction on the one-GPU
  machines (three ranks) and on this host, to tell a host-side (build) bound from a GPU-side one;
* ``host_load``: per launch, the largest one-minute load average and the lowest SM clock its ranks
  recorded at start and end;
* ``agreement``: every pair of the host's GPUs (``scaling agreement-all``), and each GPU against
  ``raw/h200``'s own timings of the same problem-directions (another H200 machine, an earlier lease);
* ``x2_h100``: session 21's lease of ``nvidia-h200-x2``, which the device tool ran on two H100s (NVLink
  NV18, 32 cores, one NUMA node: ``raw/h100/scaling_x2/topo.txt``): ``run_on_device.sh ladder`` with
  three ranks per GPU, 16 cores per GPU, 174 s per step on 1 and 2 GPUs (merged into ``raw/h100``),
  then two agreement rounds in which each GPU timed the corpus's first 40 problem-directions
  (``scaling agreement-rounds``: the two GPUs against each GPU's own re-run in another process), and
  each GPU against ``raw/h100``'s timings of them (earlier H100 leases);
* ``x4_h100``: the same on four H100s of one host (session 21's ``nvidia-h200-x4`` call, run on H100s;
  ``raw/h100/scaling_x4/topo.txt``), 124 s per step on 1, 2 and 4 GPUs, seeded from raw/h100's travel
  copy so that its problem-directions continue raw/h100's corpus order;
* ``cores_h100``: how many host cores a GPU's three ranks need (session 22; a call for ``nvidia-h200``
  that ran on one H100): ``run_on_device.sh ladder`` with ``CORES_LADDER="16 1 2 4"``, one GPU pinned to
  16, 1, 2 and 4 cores in turn (131 s per step), then a second call with 1, 2, 16 and 1 (127 s), both
  merged into ``raw/h100``; per launch its rate, busy share, the cores its runs could use (``cpu_count``,
  their affinity), its problem mix and phase means, and the host work per built plan.

Every launch row carries ``gpu_busy_share``, the share of the wall time each GPU spent on problems' GPU
parts; unlike the per-minute rate it does not depend on what the problems of a launch's slice cost.

    python experiments/multi_gpu_scaling.py    # -> experiments/results/multi_gpu_scaling.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbench.collect.raw_store.shard import expected_seconds  # noqa: E402
from kbench.collect.raw_store.writer import load_env, load_records  # noqa: E402
from kbench.collect.studies import scaling  # noqa: E402

RAW = ROOT / "raw" / "h200"
HOST = RAW / "scaling_x4"
#: the ladder's first run: every later run of raw/h200 ran on the four-GPU host
FIRST_RUN = "20261126T230930-7f0a13"
RAW_H100 = ROOT / "raw" / "h100"
#: the two-H100 host's ladder (its first run) and the four-H100 host's, both in raw/h100
X2_FIRST_RUN = "20261127T022943-5e36b3"
X4_H100_FIRST_RUN = "20261127T025137-012e3f"
#: the one-H100 cores ladder's first run (session 22), after the four-H100 host's runs
CORES_FIRST_RUN = "20261127T055054-9e0c20"
#: a run id sorting after the cores ladders' last runs (run ids start with their UTC start time; the second
#: ladder's call ended at 06:12), so that later collections merged into raw/h100 stay out of ``cores_h100``
CORES_BEFORE = "20261127T061500"


def by_gpus(launches: list[dict]) -> list[dict]:
    frame = pd.DataFrame([x for x in launches if x["ranks_per_gpu"] == 3])
    frame["gpu_s"] = frame["elapsed_s"] * frame["gpus"]
    frame["expected_s"] = frame["expected_seconds_per_gpu_second"] * frame["gpu_s"]
    return [{"gpus": int(g), "launches": int(len(part)), "problem_directions": int(part["measured"].sum()),
             "per_minute_per_gpu": round(60 * float(part["measured"].sum()) / float(part["gpu_s"].sum()), 1),
             "expected_seconds_per_gpu_second": round(float(part["expected_s"].sum() / part["gpu_s"].sum()), 3),
             "gpu_busy_share": round(float((part["gpu_busy_share"] * part["gpu_s"]).sum() / part["gpu_s"].sum()), 3),
             "per_launch_min_max": [float(part["per_minute_per_gpu"].min()), float(part["per_minute_per_gpu"].max())]}
            for g, part in frame.groupby("gpus")]


def phases_by_host() -> dict:
    problems = load_records(RAW, "problems")
    runs = scaling.run_starts(load_env(RAW))
    three = set(runs.loc[runs["ranks_per_gpu"] == 3, "run_id"])
    ok = problems[(problems["status"] == "ok") & problems["run_id"].isin(three)].copy()
    ok["host"] = np.where(ok["run_id"] >= FIRST_RUN, "four-GPU host", "one-GPU machines")
    ok["expected_s"] = expected_seconds(ok)
    cols = ["t_heur_s", "t_notes_s", "t_build_s", "t_time_s", "t_coarse_s", "t_torch_s", "t_precise_s",
            "t_verify_s", "t_total_s", "t_wait_s"]
    return {host: {"problem_directions": int(len(part)), **{c: round(float(part[c].mean()), 3) for c in cols},
                   "total_per_expected_second": round(float(part["t_total_s"].sum() / part["expected_s"].sum()), 3)}
            for host, part in ok.groupby("host")}


def host_load() -> list[dict]:
    env = load_env(RAW)
    env = env[env["run_id"] >= FIRST_RUN]
    launch = scaling.launch_numbers(scaling.run_starts(env))
    env = env.assign(launch=env["run_id"].map(launch), sm=pd.to_numeric(env["smi_clocks_sm"], errors="coerce"))
    return [{"first_run": str(part["run_id"].min()), "ranks": int(part["run_id"].nunique()),
             "max_load_1min": float(part["load_1min"].max()), "min_sm_clock_mhz": float(part["sm"].min())}
            for _, part in env.groupby("launch")]


def agreement() -> dict:
    gpus = sorted((HOST / "agreement").iterdir())
    within = scaling.agreement_all(gpus)
    keep = ("problem_directions_on_both", "plans_on_both", "cross_gpu_abs_log_ratio",
            "single_gpu_repeat_abs_log_ratio", "same_fastest_plan_share", "within_repeatability")
    other = {g.name: {k: v for k, v in scaling.agreement(RAW, g).items() if k in keep[:5]} for g in gpus}
    cross = pd.DataFrame([p["cross_gpu_abs_log_ratio"] for p in within["pairs"].values()])
    return {"pairs": {k: {x: p[x] for x in keep} for k, p in within["pairs"].items()},
            "all_within_repeatability": within["all_within_repeatability"],
            "pairs_median_range": [round(float(cross["median"].min()), 4), round(float(cross["median"].max()), 4)],
            "pairs_p90_range": [round(float(cross["p90"].min()), 4), round(float(cross["p90"].max()), 4)],
            "against_raw_h200": other}


def _launch_keys(env: pd.DataFrame, since: str, before: str | None) -> pd.Series:
    """Each run's launch, keyed as :func:`kbench.collect.studies.scaling.launches` keys it (the launch's first
    run id), for the runs from ``since`` and before ``before``."""
    runs = scaling.run_starts(env[(env["run_id"] >= since) & (env["run_id"] < (before or "~"))])
    launch = scaling.launch_numbers(runs)
    return launch.map(runs.groupby(runs["run_id"].map(launch))["run_id"].min())


def launch_mix(raw: Path, since: str, before: str | None, *, env: pd.DataFrame | None = None,
               problems: pd.DataFrame | None = None) -> dict:
    """Per launch (keyed by its first run): what its slice of the corpus held and what a problem-direction
    cost in each phase, to tell a heavier slice from a slower GPU (``env`` and ``problems``: the folder's
    records, where the caller has read them already)."""
    key = _launch_keys(load_env(raw) if env is None else env, since, before)
    problems = load_records(raw, "problems") if problems is None else problems
    ok = problems[(problems["status"] == "ok") & problems["run_id"].isin(key.index)]
    out = {}
    for first_run, part in ok.groupby(ok["run_id"].map(key)):
        gflop = part["flop"] / 1e9
        out[str(first_run)] = {"problem_directions": int(len(part)), "gflop_mean": round(float(gflop.mean()), 1),
                               "gflop_median": round(float(gflop.median()), 1),
                               "fp32": int((part["dtype"] == "FP32").sum()),
                               **{c: round(float(part[c].mean()), 3) for c in ("t_build_s", "t_time_s", "t_wait_s")}}
    return out


def h100_host(folder: str, since: str, before: str | None = None) -> dict:
    """A multi-H100 host's ladder (its launches in raw/h100 from ``since``, before ``before``) with each
    launch's problem mix, its GPUs against their own re-runs (``agreement_rounds``), and each folder
    against raw/h100's timings."""
    gpus = sorted((RAW_H100 / folder / "agreement").iterdir())
    keep = ("problem_directions_on_both", "plans_on_both", "cross_gpu_abs_log_ratio", "same_fastest_plan_share")
    return {"ladder": scaling.ladder([RAW_H100], since=since, before=before),
            "launch_mix": launch_mix(RAW_H100, since, before),
            "agreement_rounds": scaling.agreement_rounds(gpus),
            "against_raw_h100": {g.name: {k: v for k, v in scaling.agreement(RAW_H100, g).items() if k in keep}
                                 for g in gpus}}


def cores_ladder(raw: Path, since: str, before: str | None = None) -> dict:
    """A cores ladder (one launch per cores-per-GPU step, runs from ``since``, before ``before``): each
    launch's row, the cores its runs could use, its problem mix and phase means, and the host work per
    built plan."""
    env, problems = load_env(raw), load_records(raw, "problems")
    key = _launch_keys(env, since, before)
    start_records = env[(env["phase"] == "start") & env["run_id"].isin(key.index)].drop_duplicates("run_id")
    cores = start_records.groupby(start_records["run_id"].map(key))["cpu_count"].agg(lambda c: sorted(set(c)))
    mix = launch_mix(raw, since, before, env=env, problems=problems)
    # host work per built plan (plan builds, CUDA graph captures): per plan rather than per problem, as
    # slices differ in how many plans their problems have
    ok = problems[(problems["status"] == "ok") & problems["run_id"].isin(key.index)]
    per_plan = ok.groupby(ok["run_id"].map(key))[["t_build_s", "t_capture_s", "t_time_s", "n_built"]].sum()
    host_ms = pd.DataFrame({f"{c[2:-2]}_ms_per_plan": (1e3 * per_plan[c] / per_plan["n_built"]).round(2)
                            for c in ("t_build_s", "t_capture_s", "t_time_s")})
    return {"launches": [{**row, "cores": [int(c) for c in cores[row["first_run"]]], **mix[row["first_run"]],
                          **host_ms.loc[row["first_run"]].to_dict()}
                         for row in scaling.launches([raw], since=since, before=before)]}


def main() -> int:
    everything = scaling.launches([RAW])
    out = {"command": "python experiments/multi_gpu_scaling.py", "first_run": FIRST_RUN,
           "ladder": scaling.ladder([RAW], since=FIRST_RUN), "by_gpus": by_gpus(everything),
           "phases_by_host": phases_by_host(), "host_load": host_load(), "agreement": agreement(),
           "x2_h100": h100_host("scaling_x2", X2_FIRST_RUN, before=X4_H100_FIRST_RUN),
           "x4_h100": h100_host("scaling_x4", X4_H100_FIRST_RUN, before=CORES_FIRST_RUN),
           "cores_h100": cores_ladder(RAW_H100, CORES_FIRST_RUN, CORES_BEFORE)}
    path = ROOT / "experiments" / "results" / "multi_gpu_scaling.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

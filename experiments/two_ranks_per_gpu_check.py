"""Issue 17: do two or three collector ranks sharing one H100 (``--ranks-per-gpu R``, kbench.collect.measure.gpu_turn)
time plans as one rank alone does, and how many problem-directions per minute do they measure?

Two yardsticks, both from raw folders in the repository:

* *across runs*: the corpus's first 160 problem-directions timed again with two ranks sharing the GPU
  (``raw/h100/two_ranks_check``, on a fresh lease, no base folder), with three
  (``raw/h100/three_ranks_check``) and with two ranks that lent the turn while capturing CUDA graphs
  (``raw/h100/lend_check``, commit 42ae72c; taken out again) against their first, single-rank
  measurement in ``raw/h100``; next to it, the single-rank test-retest of issue 16 (500 problem-directions
  of ``raw/h100`` against ``raw/h100/repeats/retest-20261124``, another lease): per-plan
  ``|ln(t_b / t_a)|``, same fastest plan, noise ceiling (kbench.sources.repeatability through
  ``kbench collect compare``);
* *within runs*: ``python -m kbench.collect.studies.scaling phases raw/h100 --before 20261127T022943-5e36b3`` per group of runs: the best plan
  re-timed at its problem's end, the verification pass's second reading, how often a third was needed;
* *throughput per launch* of the runs since the verification pass (runs 16 on), from the journal's
  problem start times (so a launch stopped before its end record counts too): problem-directions per
  minute between a launch's first and last start, and the shard cost model's expected seconds
  (kbench.collect.raw_store.shard.expected_seconds) done per wall second, which corrects for the problem mix;
  next to them the rate from the ranks' end records (what ``scaling throughput`` printed on the GPU:
  the ranks' problem-directions over the longest rank's elapsed time), and that of the two-rank
  launches stopped by their time budget together.

    python experiments/two_ranks_per_gpu_check.py    # -> experiments/results/two_ranks_per_gpu_check.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbench.collect.raw_store.shard import expected_seconds  # noqa: E402
from kbench.collect.raw_store.writer import load_env, load_records, read_journal  # noqa: E402
from kbench.collect.studies import retest, scaling  # noqa: E402
from kbench.sources import repeatability  # noqa: E402


def across(raw_a: Path, raw_b: Path) -> dict:
    m = retest.compare(raw_a, raw_b)
    rep = m[["key", "plan", "t_a", "t_b"]]
    cols = ["problem_id", "kernel", "time_ms"]
    long = pd.concat([rep[["key", "plan", "t_a"]].set_axis(cols, axis=1).assign(run_id=0),
                      rep[["key", "plan", "t_b"]].set_axis(cols, axis=1).assign(run_id=1)])
    s = repeatability.summary(long)
    return {"a": str(raw_a.relative_to(ROOT)), "b": str(raw_b.relative_to(ROOT)), "problems": s["problems"],
            "plans": s["plans"], "same_winner": s["same_winner"], "noise_ceiling": s["noise_ceiling"]}


def launch_rates(raw: Path, first_run: int = 15) -> list[dict]:
    """Per launch (ranks started together count once): problems per minute and expected seconds per
    second between its first and last problem start (the last problem of each rank left out)."""
    problems = load_records(raw, "problems")
    runs = sorted(problems["run_id"].unique())[first_run:]
    ok = problems[problems["run_id"].isin(runs) & (problems["status"] == "ok")].copy()
    ok["expected_s"] = expected_seconds(ok)
    journal = read_journal(raw)
    starts = journal[journal["event"] == "start"].astype({"time": float})
    ok["t"] = ok.set_index(["key", "run_id"]).index.map(
        starts.groupby(["key", "run_id"])["time"].max().to_dict().get)
    info = scaling.run_starts(load_env(raw))
    info = info[info["run_id"].isin(runs)]
    launch = scaling.launch_numbers(info)
    ok["launch"] = ok["run_id"].map(launch)
    info = info.assign(launch=info["run_id"].map(launch))
    sharing = info.set_index("run_id")["ranks_per_gpu"]
    out = []
    for number, part in ok.groupby("launch"):
        ends = info[info["launch"] == number]
        ended = bool(ends["elapsed_s"].notna().all())
        last = part.groupby("run_id")["t"].transform("max")
        span = float(part["t"].max() - part["t"].min())
        done = part[part["t"] < last]
        gpus = float((1.0 / ends["ranks_per_gpu"]).sum())  # R ranks sharing a GPU hold 1/R of it each
        out.append({"first_run": str(part["run_id"].min()), "ranks_per_gpu": int(sharing[part["run_id"].iloc[0]]),
                    "gpus": int(round(gpus)) if abs(gpus - round(gpus)) < 1e-9 else gpus,
                    "problem_directions": int(len(part)), "span_s": round(span, 1),
                    "per_minute": round(60 * len(done) / span, 1) if span > 0 else None,
                    "expected_seconds_per_second": round(float(done["expected_s"].sum()) / span, 3) if span > 0 else None,
                    "end_records": ({"measured": int(ends["measured"].sum()), "elapsed_s": float(ends["elapsed_s"].max()),
                                     "per_minute": round(60 * float(ends["measured"].sum()) / float(ends["elapsed_s"].max()), 1)}
                                    if ended else None)})
    return out


#: first run of the two-rank launch that ran out of work (its LIMIT set done) and of the one whose ranks
#: lent the GPU's turn during graph captures (commit 42ae72c, taken out again)
OUT_OF_WORK, LENDING = "20261125T065641-30733b", "20261125T080023-cb5e10"


#: raw/h200's first run on the four-GPU host (session 20): every run from it on was collected there
FOUR_GPU_HOST = "20261126T230930-7f0a13"
#: raw/h100's first run on the two-H100 host (session 21, experiments/multi_gpu_scaling.py): the
#: one-GPU machines' figures below stop before it
TWO_GPU_HOST = "20261127T022943-5e36b3"


def check_seconds(folder: Path) -> float:
    """The longest rank's elapsed seconds in a check folder (its end records)."""
    env = load_env(folder)
    return round(float(env.loc[env["phase"] == "end", "elapsed_s"].max()), 1)


def budget_bound(launches: list[dict]) -> dict:
    """Launches together: problem-directions over the sum of their longest ranks' elapsed seconds."""
    ends = [x["end_records"] for x in launches]
    return {"launches": len(ends), "first_runs": [x["first_run"] for x in launches],
            "measured": sum(e["measured"] for e in ends), "per_launch": [e["per_minute"] for e in ends],
            "per_minute": round(60 * sum(e["measured"] for e in ends) / sum(e["elapsed_s"] for e in ends), 1)}


def main() -> int:
    raw = ROOT / "raw" / "h100"
    phases = scaling.phases(raw, before=TWO_GPU_HOST)
    out = {"command": "python experiments/two_ranks_per_gpu_check.py",
           "across_runs": {"two_ranks_vs_first": across(raw, raw / "two_ranks_check"),
                           "three_ranks_vs_first": across(raw, raw / "three_ranks_check"),
                           "two_ranks_lending_vs_first": across(raw, raw / "lend_check"),
                           "single_rank_retest": across(raw, raw / "repeats" / "retest-20261124")},
           # the same 160 problem-directions on a fresh lease each (cuDNN compiles every engine anew):
           # the longest rank's elapsed seconds
           "check_seconds": {name: check_seconds(raw / name)
                             for name in ("two_ranks_check", "three_ranks_check", "lend_check")},
           "within_runs": {g: {k: v[k] for k in ("runs", "problem_directions", "per_minute", "repeat_abs_log_ratio",
                                                 "verify_abs_log_ratio", "third_timing_share")}
                           for g, v in phases.items()},
           "launches": launch_rates(raw)}
    # the launches stopped by their time budget, each with end records: two ranks without the launch that
    # ran out of work (LIMIT) and the one that lent the turn during captures; three ranks (session 11's
    # launch was stopped before writing end records)
    def launches(ranks, *first_runs):
        return [x for x in out["launches"] if x["ranks_per_gpu"] == ranks and x["end_records"]
                and (not first_runs or x["first_run"] in first_runs)]
    out["two_ranks_budget_bound"] = budget_bound([x for x in launches(2)
                                                  if x["first_run"] not in (OUT_OF_WORK, LENDING)])
    out["two_ranks_lending"] = budget_bound(launches(2, LENDING))
    out["three_ranks_budget_bound"] = budget_bound([x for x in launches(3) if x["first_run"] < TWO_GPU_HOST])
    # the H200's three-rank launches on one-GPU machines (raw/h200's runs 16 on; docs/collect_scale_out.md's
    # per-launch table; the four-GPU host's launches are in experiments/multi_gpu_scaling.py's record)
    h200 = [x for x in launch_rates(ROOT / "raw" / "h200")
            if x["ranks_per_gpu"] == 3 and x["end_records"] and x["first_run"] < FOUR_GPU_HOST]
    out["h200_three_ranks_budget_bound"] = budget_bound(h200)
    path = ROOT / "experiments" / "results" / "two_ranks_per_gpu_check.json"
    path.write_text(json.dumps(out, indent=1, default=float) + "\n")
    print(json.dumps(out, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())

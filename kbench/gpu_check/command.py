"""``kbench verify-on-gpu``: re-time a predictions file's chosen plans on the GPU.

    kbench verify-on-gpu PREDS --dataset h100 --split random --out DIR --plan-only   # CPU: DIR/plan.json
    kbench verify-on-gpu --out DIR --time-only [--time-budget S]                      # GPU: DIR/raw.jsonl
    kbench verify-on-gpu --out DIR --score-only [--method NAME]                       # CPU: DIR/verification.json
    kbench verify-on-gpu PREDS --dataset h100 --split random --out DIR                # all three in one go

Three steps, three modules: the plan (:mod:`kbench.gpu_check.plan`, pure:
which plans per problem and the interleaved order), the timing
(:mod:`kbench.gpu_check.timing`, on the GPU, resumable, raw rows as it
goes), and the score (:mod:`kbench.gpu_check.score`, pure) into a typed
:class:`kbench.scoring.records.VerificationRecord` with the measured speed-up over
cuDNN mode A (geomean overall, per direction and data type) and the oracle's
measured margin, next to the table-derived figures of the same problems.
With ``--live-references`` the GPU also decides and times the references a
PyTorch user meets (cuDNN mode A and mode B with the variant's note filter,
PyTorch's own convolution: :mod:`kbench.gpu_check.live`; and PyTorch's own
convolution with ``benchmark = True``, real autotune, in a second pass in a
process of its own: :mod:`kbench.gpu_check.autotune_pass`), and the record
(schema 2) gives the speed-up over each with a bootstrap interval, the
strongest of them, and how the run's graph and eager times agree with the table.
On the lent device: ``bash tools/device/run_on_device.sh verify DIR BUDGET_S``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError, read_json_object

PLAN_NAME = "plan.json"
RECORD_NAME = "verification.json"


def check_timed_top(k: int) -> None:
    """Refuse a ``--timed-top`` below 1."""
    if k < 1:
        raise KbenchInputError(f"--timed-top {k}: give 1 (the first choice alone) or more candidates")


def make_plan(predictions, dataset, split: str, part: str = "test", rounds: int = 5, replays: int = 3,
              seed: int = 0, method: str | None = None, live_references: bool = False,
              live_autotune: bool = True, timed_top: int = 1) -> dict:
    """The run plan of a predictions file (path or DataFrame) on ``dataset``'s split part; with
    ``live_references``, the GPU also times the references it decides itself
    (:func:`kbench.gpu_check.plan.live_block`, with the dataset variant's filter), with ``live_autotune``
    PyTorch's real autotune among them (plans made before it was one have no autotune pass); with
    ``timed_top`` K > 1, each problem's first K listed plans of the ranking are timed too, and the record
    also scores the timed selector that keeps the fastest of them (:func:`kbench.gpu_check.score.timed_choice`)."""
    # imported here, not at the top: the GPU machines run `python -m kbench.collect`, whose parser
    # registers this command, without pydantic (which the leaderboard store needs)
    from kbench.data.dataset import load
    from kbench.gpu_check.plan import build_plan, live_block, require_cudnn_collected, role_plans
    from kbench.leaderboard.store import PREDS_FILE, first_seed, read_seed_predictions
    from kbench.scoring.evaluate import read_predictions
    ds = load(dataset) if isinstance(dataset, str) else dataset
    path = sha = None
    if isinstance(predictions, (str, Path)) and Path(predictions).name == PREDS_FILE:
        # a leaderboard entry's store: its first seed, named by the sha256 of that seed as the gzip CSV
        # kbench run writes (what `kbench leaderboard validate` compares a verification.json with)
        path = str(predictions)
        predictions, sha = first_seed(read_seed_predictions(Path(predictions)))
    elif isinstance(predictions, (str, Path)):
        path = str(predictions)
        predictions, sha = read_predictions(predictions)
    require_cudnn_collected(ds, "verify-on-gpu")
    if ds.heuristics is None:
        raise KbenchInputError(f"dataset {ds.name!r} has no recorded cuDNN heuristic (heuristics table); "
                               "verify-on-gpu re-times against cuDNN mode A")
    ids = ds.split(split)[part]
    check_timed_top(timed_top)
    roles = role_plans(predictions, ds.runtimes, ds.heuristics, ids, timed_top=timed_top)
    plan = build_plan(roles, ds.problems[ds.problems["problem_id"].isin(roles["problem_id"])], rounds=rounds,
                      replays=replays, seed=seed)
    if timed_top > 1:
        plan["timed_top"] = int(timed_top)
    plan.update(dataset={"name": ds.name, "version": ds.version, "checksum": ds.checksum}, split=split, part=part,
                method=method, predictions={"path": path, "sha256": sha, "rows": int(len(predictions))})
    if live_references:
        plan["live"] = live_block(ds.info.get("variant") or "default", [p["problem"]["dtype"] for p in plan["problems"]],
                                  autotune=live_autotune)
    if roles.attrs["no_reference"]:  # left out, as the board's speed-up over the reference leaves them out
        plan["no_reference"] = roles.attrs["no_reference"]
    return plan


#: the contents of the last two raw files read (a run's plan and timings), by (path, inode, size, mtime):
#: scoring a record reads each several times (its sha256, the seeded-prefix check, the timings, the live picks)
_LAST_READ: dict = {}


def _file_key(path: Path) -> tuple:
    st = path.stat()
    return str(Path(path).resolve()), st.st_ino, st.st_size, st.st_mtime_ns


def raw_bytes(path: Path) -> bytes:
    """A raw file's content, uncompressed when ``path`` is gzipped (``.gz``, as the committed re-timings
    are): what a record's ``inputs`` sha256 is taken of, whichever form the file is kept in."""
    key = ("bytes", *_file_key(path))
    if key in _LAST_READ:
        return _LAST_READ[key]
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise KbenchInputError(f"{path}: not a readable gzip file ({exc}); copy it again from the run.") from None
    while len(_LAST_READ) > 1:
        del _LAST_READ[next(iter(_LAST_READ))]
    _LAST_READ[key] = data
    return data


def input_sha256(path: Path) -> str:
    """The sha256 of a raw input's uncompressed content (:func:`raw_bytes`)."""
    return hashlib.sha256(raw_bytes(path)).hexdigest()


def raw_rows(path: Path):
    """The JSON objects of a raw timing file, in order (shared by every reader of the file: read them, never
    change them); a line cut by a kill is skipped (as is any line that is no JSON object). ``path`` may be
    gzipped (``.gz``), as the committed re-timings are."""
    if not path.exists():
        return
    yield from _parsed_rows(path)


def _parsed_rows(path: Path) -> list[dict]:
    """:func:`raw_rows` parsed once per file content (the rows are shared between readers: read, never change)."""
    key = ("rows", *_file_key(path))
    if key not in _ROWS:
        rows = []
        for line in raw_bytes(path).decode("utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
        _ROWS.clear()
        _ROWS[key] = rows
    return _ROWS[key]


#: the last raw file's parsed rows (:func:`_parsed_rows`)
_ROWS: dict = {}


def read_raw(path: Path) -> tuple[pd.DataFrame, dict, dict, float]:
    """(time rows, {problem_id: error} of failed problems, last run's env, total timing seconds)."""
    rows, failed, env, seconds = [], {}, {}, 0.0
    for line, row in enumerate(raw_rows(path), 1):
        kind = row.get("kind")
        if kind == "time":
            rows.append(row)
        elif kind == "problem" and row.get("status") != "ok":
            if not isinstance(row.get("problem_id"), str):
                raise _bad_raw(path, f"a failed problem's row (the {line}th object) has no problem_id")
            failed[row["problem_id"]] = str(row.get("error", ""))
        elif kind == "run":
            env = row.get("env", {}) if isinstance(row.get("env", {}), dict) else {}
        elif kind == "run_end":
            value = row.get("seconds", 0.0)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise _bad_raw(path, f"a run_end row's seconds {value!r} is not a duration")
            seconds += float(value)
    cols = ["problem_id", "plan", "round", "slot", "ms"]
    if not rows:
        return pd.DataFrame(columns=cols), failed, env, seconds
    frame = pd.DataFrame(rows, columns=cols + ["k", "method"])
    ms = pd.to_numeric(frame["ms"], errors="coerce")
    names_ok = frame["problem_id"].map(type).eq(str) & frame["plan"].map(type).eq(str)
    bad = ~names_ok | ms.isna() | ~np.isfinite(ms.to_numpy(dtype=np.float64, na_value=np.nan)) | (ms <= 0)
    if bad.any():
        first = frame[bad].iloc[0]
        raise _bad_raw(path, f"{int(bad.sum())} time row(s) without a problem_id and plan name or with a time "
                             f"that is no positive number, e.g. {first[['problem_id', 'plan', 'ms']].to_dict()}")
    frame["ms"] = ms.astype(np.float64)
    return frame, failed, env, seconds


def _bad_raw(path: Path, what: str) -> KbenchInputError:
    return KbenchInputError(f"{path}: {what}; the raw timings are damaged: copy them again from the run (or "
                            "time the plan again).")


def read_live(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(each finished problem's live picks: problem_id and one column per live reference naming its
    timing unit; eager timings: problem_id, plan, ms) of a run with live references."""
    from kbench.gpu_check.plan import LIVE_REFERENCES
    picks, eager = [], []
    for row in raw_rows(path):
        kind = row.get("kind")
        if kind == "problem" and row.get("status") == "ok" and isinstance(row.get("live"), dict):
            picks.append({"problem_id": row["problem_id"], **{r: row["live"].get(r) for r in LIVE_REFERENCES}})
        elif kind == "eager":
            eager.append({"problem_id": row["problem_id"], "plan": row["plan"], "ms": row["ms"]})
    return (pd.DataFrame(picks, columns=["problem_id", *LIVE_REFERENCES]),
            pd.DataFrame(eager, columns=["problem_id", "plan", "ms"]))


def read_autotune_calls(path: Path) -> pd.DataFrame:
    """The autotune pass's host-clock calls per finished problem: problem_id, first_call_ms and
    second_call_ms (PyTorch's op), and where a timed selector made its first call
    (:func:`kbench.gpu_check.autotune_pass.timed_top_call`), call_ms and call_times (candidate -> ms), else
    NaN and None; a call whose times are not positive numbers is refused (the raw file is damaged)."""
    rows = []
    for line, row in enumerate(raw_rows(path), 1):
        if row.get("kind") != "problem" or row.get("status") != "ok" or not isinstance(row.get("autotune"), dict):
            continue
        call = row.get("timed_top_call")
        call_ms, times = np.nan, None
        if call is not None:
            ms = call.get("ms") if isinstance(call, dict) else None
            times = call.get("times") if isinstance(call, dict) else None
            if not (_duration(ms) and isinstance(times, dict) and times
                    and all(isinstance(k, str) and _duration(v) and v > 0 for k, v in times.items())):
                raise _bad_raw(path, f"the timed selector's call of {row.get('problem_id')!r} (the {line}th object) "
                                     "is not {\"ms\": a duration, \"times\": {plan: a positive time}}")
            call_ms = float(ms)
        rows.append({"problem_id": row["problem_id"], "first_call_ms": row["autotune"].get("first_call_ms"),
                     "second_call_ms": row["autotune"].get("second_call_ms"), "call_ms": call_ms,
                     "call_times": times})
    return pd.DataFrame(rows, columns=["problem_id", "first_call_ms", "second_call_ms", "call_ms", "call_times"])


def _duration(value) -> bool:
    """Whether ``value`` is a finite non-negative number (not a bool)."""
    return (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
            and value >= 0)


def _present(path: Path) -> Path:
    """``path``, or its gzipped copy where only that is there (as the device run brings files back)."""
    gz = path.with_name(path.name + ".gz")
    return gz if not path.exists() and gz.exists() else path


def timed_figures(plan: dict, raw: pd.DataFrame, picks, eager, autotune):
    """:class:`kbench.scoring.records.TimedTopFigures` of a plan with ``timed_top``: the timed selector
    chooses in each pass from that pass's first round (:func:`kbench.gpu_check.score.timed_choice`)."""
    from kbench.gpu_check.score import (
        autotune_times,
        call_choice,
        live_figures,
        measured_times,
        role_times,
        score,
        timed_choice,
    )
    from kbench.scoring.records import TimedTopFigures
    chosen, rest = timed_choice(plan, raw)
    measured, table, _ = score(chosen, rest)
    first = {item["problem_id"]: item["roles"]["choice"] for item in plan["problems"]}
    items = {item["problem_id"]: item for item in chosen["problems"]}
    timed = role_times(chosen, measured_times(rest))["problem_id"]  # the problems timed whole
    changed = [items[pid]["roles"]["choice"] != first[pid] for pid in timed]
    sizes = [len(items[pid].get("candidates") or [first[pid]]) for pid in timed]  # distinct (role_plans)
    live = rule = call_cost = call_median = None
    if picks is not None:
        auto_plan = auto = None
        if autotune is not None:
            calls = autotune[1]
            if len(calls) and calls["call_times"].notna().all():
                # the selector's own first call in the autotune pass chose: every round of that pass measures
                rule, auto_plan, auto = "first_call", call_choice(plan, calls), autotune
                whole = autotune_times(auto_plan, autotune[0])["problem_id"]
                cost = calls.set_index("problem_id").reindex(whole)["call_ms"].to_numpy(dtype=np.float64)
                if len(cost) and np.isfinite(cost).all():
                    call_cost, call_median = float(cost.sum()), float(np.median(cost))
            else:  # a pass timed before the call was recorded: its first round chooses
                rule, (auto_plan, auto_rest) = "first_round", timed_choice(plan, autotune[0])
                auto = (auto_rest, calls)
        live = live_figures(chosen, rest, picks, eager, autotune=auto, autotune_plan=auto_plan)
    return TimedTopFigures(k=int(plan["timed_top"]), candidates_mean=float(np.mean(sizes)),
                           changed_share=float(np.mean(changed)), measured=measured, table=table, live=live,
                           autotune_pass_choice=rule, call_cost_ms=call_cost, call_cost_median_ms=call_median)


def make_record(plan: dict, out_dir: Path, method: str | None = None):
    """Score ``out_dir``'s raw timings of ``plan`` into a VerificationRecord (with the autotune pass's
    ``raw_autotune.jsonl``, where the plan has one)."""
    from kbench.core.version import __version__
    from kbench.gpu_check.plan import RAW_AUTOTUNE
    from kbench.gpu_check.score import score
    from kbench.gpu_check.timing import RAW_NAME
    from kbench.scoring.records import VERIFICATION_SCHEMA_VERSION, DatasetRef, PredictionsRef, VerificationRecord
    raw_path, plan_path = _present(out_dir / RAW_NAME), _present(out_dir / PLAN_NAME)
    auto_path = _present(out_dir / RAW_AUTOTUNE)
    with_pass = bool((plan.get("live") or {}).get("autotune"))
    raw, failed, env, seconds = read_raw(raw_path)
    measured, table, n = score(plan, raw)
    live = picks = eager = autotune = None
    if plan.get("live"):
        from kbench.gpu_check.score import live_figures
        picks, eager = read_live(raw_path)
        if with_pass and auto_path.exists():
            auto_raw, _, _, auto_seconds = read_raw(auto_path)
            autotune, seconds = (auto_raw, read_autotune_calls(auto_path)), seconds + auto_seconds
        live = live_figures(plan, raw, picks, eager, autotune=autotune)
    timed = timed_figures(plan, raw, picks, eager, autotune) if plan.get("timed_top") else None
    return VerificationRecord(
        schema_version=VERIFICATION_SCHEMA_VERSION if live is not None else 1, kbench_version=__version__, method=method or plan.get("method"), dataset=DatasetRef(**plan["dataset"]),
        split=plan["split"], part=plan["part"], predictions=PredictionsRef(**plan["predictions"]),
        protocol={"seed": plan["seed"], "rounds": plan["rounds"], "replays": plan["replays"],
                  "timing": "CUDA graph of k executions per replay (collector's rule), median of replays per "
                            "round, median over rounds; single executions for plans over 20 ms"},
        device=env, problems_planned=len(plan["problems"]), problems_measured=n, problems_failed=failed,
        problems_without_reference=plan.get("no_reference", []),
        device_time_s=round(seconds, 1) if seconds else None, measured=measured, table=table, live=live,
        timed_top=timed,
        inputs={name: input_sha256(path) for name, path in
                ((PLAN_NAME, plan_path), (RAW_NAME, raw_path), (RAW_AUTOTUNE, auto_path))
                if path.exists() and (name != RAW_AUTOTUNE or with_pass)} or None)


def add_arguments(p) -> None:
    p.add_argument("predictions", nargs="?", help="predictions file (CSV/parquet); not needed with --time-only "
                                                  "or --score-only")
    p.add_argument("--dataset", default="h100")
    p.add_argument("--split", default="random")
    p.add_argument("--part", default="test", choices=["train", "valid", "test"])
    p.add_argument("--out", required=True, help="run folder: plan.json, raw.jsonl, verification.json")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per problem (default 5)")
    p.add_argument("--replays", type=int, default=3, help="replays per timing, median taken (default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the problem and round orders")
    p.add_argument("--method", default=None, help="method name for the record")
    p.add_argument("--live-references", action="store_true",
                   help="also time what cuDNN mode A and mode B pick on the GPU with the dataset variant's "
                        "note filter, and PyTorch's own convolution; every unit timed eagerly too (record schema 2); "
                        "then PyTorch's convolution with benchmark=True (real autotune) beside the choice and the "
                        "oracle, in a second pass in a process of its own (raw_autotune.jsonl)")
    p.add_argument("--no-autotune-pass", action="store_true",
                   help="with --live-references: leave the second pass (real autotune) out, as for a variant "
                        "whose candidate set PyTorch does not run (the default variant's DOWN_CONVERT plans)")
    p.add_argument("--timed-top", type=int, default=1, metavar="K",
                   help="also time each problem's first K plans of the ranking (that are in its measured list) "
                        "and score the timed selector that keeps the fastest of them in each pass's first round, "
                        "measured on the other rounds (the learned counterpart of PyTorch's autotune; default 1: "
                        "the first choice only)")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="start no new problem after this many seconds of timing")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--plan-only", action="store_true", help="write DIR/plan.json and stop (no GPU)")
    g.add_argument("--time-only", action="store_true", help="time DIR/plan.json's plans (GPU), no scoring")
    g.add_argument("--score-only", action="store_true", help="score DIR/raw.jsonl (no GPU)")


def run(args) -> int:
    check_timed_top(args.timed_top)  # before any file is read: the option alone is wrong
    if getattr(args, "no_autotune_pass", False) and not args.live_references:
        raise KbenchInputError("verify-on-gpu: --no-autotune-pass leaves out a pass of --live-references; "
                               "give --live-references too (or neither)")
    out = Path(args.out)
    plan_path = out / PLAN_NAME
    if args.time_only or args.score_only:
        if not plan_path.exists():
            raise KbenchInputError(f"{plan_path}: no run plan; write one first with "
                                   f"'kbench verify-on-gpu PREDS --out {out} --plan-only'")
        from kbench.gpu_check.plan import require_plan_kind
        plan = read_json_object(plan_path)
        require_plan_kind(plan, "roles", plan_path)
    else:
        if not args.predictions:
            raise KbenchInputError("verify-on-gpu: give the predictions file (or --time-only / --score-only "
                                   "with an existing run folder)")
        plan = make_plan(args.predictions, args.dataset, args.split, args.part, args.rounds, args.replays,
                         args.seed, args.method, args.live_references,
                         live_autotune=not getattr(args, "no_autotune_pass", False), timed_top=args.timed_top)
        if plan_path.exists() and read_json_object(plan_path) != json.loads(json.dumps(plan)):
            raise KbenchInputError(f"{plan_path}: a different run plan is already there; use a new --out folder")
        from kbench.core.output_files import atomic_write_text
        atomic_write_text(plan_path, json.dumps(plan, indent=1) + "\n")  # a killed run leaves no half a plan
        left_out = len(plan.get("no_reference", []))
        print(f"verify-on-gpu: plan of {len(plan['problems'])} problems -> {plan_path}"
              + (f" ({left_out} left out: cuDNN mode A proposed no plan for them)" if left_out else ""))
        if args.plan_only:
            return 0
    if not args.score_only:
        from kbench.gpu_check.timing import run_timing
        try:
            summary = run_timing(plan, out, args.time_budget)
        except ImportError as exc:
            raise KbenchInputError(f"the timing step needs PyTorch with CUDA and nvidia-cudnn-frontend ({exc}); "
                                   f"on a CPU machine use --plan-only here and run the timing on the GPU "
                                   f"machine (bash tools/device/run_on_device.sh verify {out} BUDGET_S)") from None
        print(json.dumps(summary))
        if args.time_only:
            return 0
    record = make_record(plan, out, args.method)
    # through the atomic, link-safe writer: a verification.json linked to raw.jsonl or plan.json (a hard
    # link) is refused, never written through, and a killed run leaves the old record whole
    from kbench.core.output_files import atomic_write_text, check_output
    target = check_output(out / RECORD_NAME, [out / PLAN_NAME, out / f"{PLAN_NAME}.gz", out / "raw.jsonl",
                                              out / "raw.jsonl.gz", out / "raw_autotune.jsonl",
                                              out / "raw_autotune.jsonl.gz"], "the record")
    atomic_write_text(target, record.model_dump_json(indent=1) + "\n")
    m, t = record.measured.overall, record.table.overall
    print(f"verify-on-gpu: {record.problems_measured} problems; speed-up over mode A measured "
          f"{m.speedup_geomean:.3f}x (table {t.speedup_geomean:.3f}x); oracle margin measured "
          f"{m.oracle_speedup_geomean:.3f}x (table {t.oracle_speedup_geomean:.3f}x) -> {out / RECORD_NAME}")
    if record.live is not None:
        for ref, f in record.live.references.items():
            print(f"  over {ref}: {f.speedup_geomean:.3f}x [{f.speedup_ci95[0]:.3f}, {f.speedup_ci95[1]:.3f}]; "
                  f"oracle over it {f.oracle_speedup_geomean:.3f}x")
        print(f"  strongest reference: {record.live.strongest_reference}")
        auto = record.live.references.get("pytorch_autotune")
        if auto is not None and auto.first_call_cost_ms is not None:
            print(f"  pytorch_autotune over {auto.problems} problems: its tuning took {auto.first_call_cost_ms:,.0f} ms "
                  f"(median {auto.first_call_cost_median_ms:.1f} ms per problem)")
    timed = record.timed_top
    if timed is not None:
        print(f"  timed top-{timed.k} ({timed.candidates_mean:.2f} candidates a problem; another plan than the "
              f"first choice on {timed.changed_share:.1%}): over mode A {timed.measured.overall.speedup_geomean:.3f}x")
        for ref, f in (timed.live.references.items() if timed.live is not None else []):
            closed = "-" if f.headroom_closed is None else f"{f.headroom_closed:.1%}"
            print(f"    over {ref}: {f.speedup_geomean:.3f}x [{f.speedup_ci95[0]:.3f}, {f.speedup_ci95[1]:.3f}]; "
                  f"headroom closed {closed}")
        if timed.autotune_pass_choice == "first_call" and timed.call_cost_ms is not None:
            print(f"    the autotune pass chose by the selector's first call: {timed.call_cost_ms:,.0f} ms in all "
                  f"(median {timed.call_cost_median_ms:.1f} ms per problem)")
        elif timed.autotune_pass_choice == "first_round":
            print("    the autotune pass chose in its first round (its raw timings record no first call)")
    return 0


def main(argv=None) -> int:
    """Stand-alone entry (``python -m kbench.gpu_check.command``), for the device machine."""
    import argparse
    import sys

    from kbench.core.errors import KbenchError
    p = argparse.ArgumentParser(prog="python -m kbench.gpu_check.command", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    args = p.parse_args(argv)
    from kbench.collect.measure.cudnn import FatalCudaError
    try:
        return run(args)
    except FatalCudaError as exc:  # the CUDA context is gone: exit 3, run_on_device.sh restarts and resumes
        print(f"kbench: fatal CUDA error: {exc}", file=sys.stderr)
        return 3
    except KbenchError as exc:
        print(f"kbench: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())

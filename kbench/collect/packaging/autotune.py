"""PyTorch's real autotune (``kbench collect autotune``) kept beside a dataset's measurements, to tables.

**Layout.** ``raw/<dataset>/autotune/`` holds what ``kbench collect autotune --out`` writes there: the
records files (``autotune.jsonl``, one ``autotune-K-of-N.jsonl`` per shard, or their ``.gz`` copies:
:func:`kbench.collect.measure.cudnn.autotune.record_files`) and ``env.jsonl`` (one ``start`` record per
run). ``kbench build-data`` reads the folder of the dataset's raw folder when it is there
(:mod:`kbench.data.build`); a variant sharing the raw folder (``h200`` and ``h200-pytorch``) shares it.

**Checks** (each refusal names the file and the fix): the folder has records and an ``env.jsonl`` with a
start record; every run of it was made with ``benchmark = True`` on the dataset's GPU and software
(:data:`SAME_FIELDS`: each value one the dataset's own runs recorded); no key has two ok records (a
failed probe retried with ``--retry-failed`` gives way to its ok record).
Records of problem-directions the dataset does not hold are counted and left out.

**Tables.**

* ``heuristics`` gains ``pytorch_autotune`` (rank 0): the plan ``benchmark = True`` settled on, where it
  was matched to plans by kernel names and one of them is in the candidate set (the first, in mode A's
  order, as for ``pytorch``, PyTorch's ``benchmark = False`` choice).
* ``autotune``: one row per problem-direction of the dataset with a record: ``status`` (:data:`STATUSES`),
  ``kernel`` (the ``pytorch_autotune`` plan, or empty), ``n_matched`` (plans with PyTorch's kernel
  sequence: more than one where plans differ only in knobs that launch the same kernels),
  ``matched_spread`` (the slowest over the fastest table time of the matched plans in the set: how much
  that ambiguity could move the heuristic's time; 1 for one plan),
  ``first_call_ms`` (the tuning call, host clock), ``second_call_ms`` (the cached plan's call) and
  ``first_call_cost_ms`` (their difference: PyTorch's own tuning time for the shape).

Problems without a record simply lack both; the data card (:func:`card_section`) gives the coverage and
the share matched to a plan of the set.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kbench.collect.measure.cudnn.autotune import read_lines, record_files
from kbench.core.errors import KbenchInputError

HEURISTIC = "pytorch_autotune"
#: what a dataset problem-direction's autotune record says: PyTorch's plan is a plan of the set, was matched
#: to plans none of which is in the set, was not matched by kernel names, or the probe failed
STATUSES = ("in_set", "not_in_set", "unmatched", "failed")
#: the environment fields an autotune run must share with the dataset's runs: the same GPU and software
SAME_FIELDS = ("gpu", "sm_count", "smi_driver_version", "torch", "torch_cuda", "cudnn_backend", "cudnn_frontend")
ENV = "env.jsonl"


def _text(value) -> str:
    """An environment value as text (numbers from JSON and from parquet alike: 132, 132.0 -> '132')."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def load_autotune(folder: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(records, start records of ``env.jsonl``) of an autotune folder; refuses a folder without records, a
    key with two ok records, and a folder without its environment; of a key's records the ok one is kept."""
    folder = Path(folder)
    files = record_files(folder)
    if not files:
        raise KbenchInputError(
            f"{folder}: no autotune records (autotune*.jsonl[.gz]); write them with "
            f"'kbench collect autotune --problems P --out {folder}', or remove the folder."
        )
    seen: dict[str, tuple[dict, str]] = {}
    for path in files:
        for number, rec in read_lines(path):
            key = rec.get("key")
            if not isinstance(key, str) or rec.get("status") not in ("ok", "failed"):
                raise KbenchInputError(
                    f"{path}: line {number} is no autotune record (a 'key' and a 'status' of ok "
                    "or failed); copy the file again from the run."
                )
            if key in seen:
                first, where = seen[key]
                if first["status"] == "ok" and rec["status"] == "ok":
                    raise KbenchInputError(
                        f"{path}: line {number} records {key} again (first at {where}); a key is "
                        "probed once: keep one of the two lines (the runs resume by key)."
                    )
                if rec["status"] == "failed":  # a retry that failed again, or a failure after an ok record
                    continue
            seen[key] = (rec, f"{path.name}:{number}")  # a failed probe retried (--retry-failed): the later one
    rows = [rec for rec, _ in seen.values()]
    env_path = folder / ENV
    starts = [rec for _, rec in read_lines(env_path) if rec.get("phase") == "start"] if env_path.exists() else []
    if not starts:
        raise KbenchInputError(
            f"{env_path}: no run's environment (a 'start' record); kbench collect autotune "
            "writes it at every run's start: copy it from the run with the records."
        )
    return pd.DataFrame(rows), pd.DataFrame(starts)


def check_environment(autotune_env: pd.DataFrame, dataset_env: pd.DataFrame, where: Path) -> None:
    """Refuse autotune runs made on another GPU or software than the dataset's runs, or without autotune."""
    flag = autotune_env.get("torch_cudnn_benchmark", pd.Series(dtype=object))
    if len(flag) != len(autotune_env) or not flag.map(lambda v: v is True).all():
        raise KbenchInputError(
            f"{where / ENV}: a run without torch.backends.cudnn.benchmark = True recorded; "
            "these are not autotune records (collect them with 'kbench collect autotune')."
        )
    limits = autotune_env.get("torch_cudnn_benchmark_limit", pd.Series(dtype=float))
    if limits.map(_text).nunique(dropna=False) > 1:
        raise KbenchInputError(
            f"{where / ENV}: runs with benchmark_limit {', '.join(sorted(set(limits.map(_text))))}; "
            "a dataset's pytorch_autotune is one setting: keep the other runs' records in a "
            "folder of their own."
        )
    for field in SAME_FIELDS:
        if field not in dataset_env or not dataset_env[field].notna().any():
            continue  # a field the dataset's runs never recorded cannot be compared
        ours = set(dataset_env[field].dropna().map(_text))
        column = autotune_env[field] if field in autotune_env else pd.Series(np.nan, index=autotune_env.index)
        other = sorted(set(column.map(lambda v: "(not recorded)" if pd.isna(v) else _text(v))) - ours)
        if other:
            raise KbenchInputError(
                f"{where / ENV}: {field} is {', '.join(other)} in an autotune run, "
                f"{', '.join(sorted(ours))} in the dataset's runs; PyTorch's choice belongs to "
                "one GPU and software: probe again on the dataset's machine, or keep the "
                "folder out of the raw folder."
            )


def _spread(times: list[float]) -> float:
    """The slowest over the fastest of ``times`` (NaN for none)."""
    return max(times) / min(times) if times else np.nan


def autotune_tables(
    folder: str | Path, dataset_env: pd.DataFrame, problem_ids, runtimes: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(``pytorch_autotune`` heuristic rows, the ``autotune`` table, the manifest's ``autotune`` entry) of
    the dataset's problems (``problem_ids``) from an autotune folder; ``runtimes`` is the dataset's
    packaged table (the candidate set: ``problem_id``, ``kernel``)."""
    folder = Path(folder)
    records, env = load_autotune(folder)
    check_environment(env, dataset_env, folder)
    ids = pd.Index(pd.Series(list(problem_ids), dtype=object).astype(str))
    inside = records["key"].isin(ids)
    rec = records[inside].sort_values("key", kind="stable").reset_index(drop=True)
    ok = rec["status"].eq("ok")
    matched = ok & rec.get("torch_autotune_status", pd.Series("", index=rec.index)).eq("matched")
    plans = rec.get("torch_autotune_plans", pd.Series("", index=rec.index)).fillna("").astype(str)
    listed = plans.str.split(";").map(lambda ps: [p for p in ps if p])
    in_set = set(zip(runtimes["problem_id"].astype(str), runtimes["kernel"].astype(str)))
    kernel = [
        next((p for p in ps if (k, p) in in_set), "") if m else "" for k, ps, m in zip(rec["key"], listed, matched)
    ]
    kernel = np.asarray(kernel, dtype=object)
    # the matched plans' table times: kernel names cannot tell plans apart whose knobs launch the same kernels
    times = runtimes.astype({"problem_id": str, "kernel": str}).set_index(["problem_id", "kernel"])["time_ms"]
    spread = [
        _spread([float(times[(k, p)]) for p in ps if (k, p) in in_set]) if m else np.nan
        for k, ps, m in zip(rec["key"], listed, matched)
    ]
    status = np.select([~ok, ~matched, kernel != ""], ["failed", "unmatched", "in_set"], "not_in_set").astype(object)

    def number(col: str) -> np.ndarray:
        return pd.to_numeric(rec.get(col, pd.Series(np.nan, index=rec.index)), errors="coerce").to_numpy(float)

    table = pd.DataFrame(
        {
            "problem_id": rec["key"].to_numpy(dtype=object),
            "status": status,
            "kernel": kernel,
            "n_matched": np.where(matched, listed.map(len), 0).astype(np.int16),
            "matched_spread": np.asarray(spread, dtype=np.float64),
            "first_call_ms": number("first_call_ms"),
            "second_call_ms": number("second_call_ms"),
            "first_call_cost_ms": number("first_call_cost_ms"),
        }
    )
    chosen = table[table["status"] == "in_set"]
    heuristic = pd.DataFrame(
        {
            "problem_id": chosen["problem_id"].to_numpy(dtype=object),
            "heuristic": np.full(len(chosen), HEURISTIC, dtype=object),
            "rank": np.zeros(len(chosen), dtype=np.int16),
            "kernel": chosen["kernel"].to_numpy(dtype=object),
        }
    )
    counts = table["status"].value_counts()
    limits = sorted({int(v) for v in env.get("torch_cudnn_benchmark_limit", pd.Series(dtype=float)).dropna()})
    info = {
        "folder": folder.as_posix(),
        "runs": int(len(env)),
        "records": int(len(records)),
        "records_outside_the_dataset": int((~inside).sum()),
        "problem_directions": int(len(ids)),
        "recorded": int(len(table)),
        **{s: int(counts.get(s, 0)) for s in STATUSES},
        "benchmark_limit": limits,
    }
    return heuristic, table, info


def _ms(v: float) -> str:
    return f"{v:,.1f} ms"


def _share(a: int, b: int) -> str:
    return f"{a / b:.1%}" if b else "–"


def card_section(table: pd.DataFrame, info: dict, problems: pd.DataFrame) -> str:
    """The data card's section on PyTorch's autotune: coverage, the share matched to a plan of the set, and
    the first call's cost per direction (every figure from the ``autotune`` table)."""
    n, rec = info["problem_directions"], len(table)
    ok = table[table["status"] != "failed"]
    matched = int((table["status"].isin(["in_set", "not_in_set"])).sum())
    in_set = int((table["status"] == "in_set").sum())
    ambiguous = int((table["n_matched"] > 1).sum())
    spread = table.loc[table["n_matched"] > 1, "matched_spread"].dropna()
    spread_text = (
        f" (their table times differ by a factor of {spread.median():.3f} at the median, {spread.max():.3f} at most)"
        if len(spread)
        else ""
    )
    direction = problems.set_index("problem_id")["direction"].astype(str)
    rows = [
        "| direction | recorded | in the set | first call, median | first call's cost, median | cost, sum |",
        "|---|---|---|---|---|---|",
    ]
    for d, part in ok.assign(direction=ok["problem_id"].map(direction)).groupby("direction"):
        rows.append(
            f"| {d} | {len(part):,} | {int((part['status'] == 'in_set').sum()):,} | "
            f"{_ms(part['first_call_ms'].median())} | {_ms(part['first_call_cost_ms'].median())} | "
            f"{_ms(part['first_call_cost_ms'].sum())} |"
        )
    limit = ", ".join(map(str, info["benchmark_limit"])) or "not recorded"
    return f"""## PyTorch's autotune (`benchmark = True`)

`kbench collect autotune` ran each problem-direction through PyTorch's own convolution in a process
with `torch.backends.cudnn.benchmark = True` from its start (`benchmark_limit` {limit}), timed its first
(tuning) call and a second call on the host clock, and matched the plan it settled on to cuDNN's mode-A
plans by kernel names (records in `{info["folder"]}`, {info["runs"]:,} run(s); docs/autotune.md). It is
recorded for {rec:,} of the {n:,} problem-directions ({_share(rec, n)}); {info["failed"]:,} probe(s) failed
and {info["unmatched"]:,} were not matched. Of the {matched:,} matched, {in_set:,} ({_share(in_set, matched)})
settled on a plan of this candidate set: the heuristic `pytorch_autotune` (its problems only);
{ambiguous:,} matched more than one plan, plans whose knobs launch the same kernels{spread_text}: the first
in mode A's order is taken. Its first call's cost, PyTorch's own tuning time for the shape, is the `autotune`
table's `first_call_cost_ms`:

{chr(10).join(rows)}
"""

"""Convert an MIOpen find-db file into the kbench tables.

A find-db line is ``<problem key>=<solver>:<time ms>,<workspace bytes>,<algorithm>;...``
with the solvers sorted fastest first. MIOpen's export keeps at most the 4
fastest valid solvers per problem (MITuna ``export_db.py``), so a line with 4
entries is *censored* and a shorter line lists every solver that ran.

Cleaning rules (each one counted in the returned report, nothing dropped silently):

* A problem whose key does not parse is an error, never skipped.
* Duplicate lines for the same key: the first is kept.
* Entries with time <= 0 are not measurements. In the shipped find-dbs they
  always sit first in their list, so the problem's fastest kernel is unknown:
  the whole problem is dropped (its label cannot be known).
* The same solver twice in one line: the first (fastest) entry is kept.
* Exact ties for the fastest and extreme outliers (a listed kernel >= 1000x
  slower than the fastest; these are real, e.g. naive reference kernels) are
  kept and counted.
* Lines not sorted fastest first are re-sorted and counted.
"""

from __future__ import annotations

import bz2
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench.sources.problem import parse_miopen_keys

#: MIOpen's export keeps this many solvers per problem; a full list is censored.
FINDDB_MAX_ENTRIES = 4
#: A listed kernel this many times slower than the fastest counts as an extreme outlier.
OUTLIER_RATIO = 1000.0


def read_finddb_lines(path: str | Path) -> pd.Series:
    """Lines of a find-db file (plain or .bz2), never modifying it."""
    path = Path(path)
    opener = bz2.open if path.suffix == ".bz2" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise KbenchInputError(f"{path}: cannot read the find-db file ({exc}).") from exc
    lines = pd.Series(text.splitlines(), dtype=str)
    return lines[lines.str.len() > 0].reset_index(drop=True)


def split_finddb(lines: pd.Series, source: str = "find-db") -> tuple[pd.Series, pd.DataFrame]:
    """Split lines into keys and a long table of raw entries (line, pos, kernel, time, ws, algo)."""
    kv = lines.str.split("=", n=1, expand=True)
    if kv.shape[1] < 2 or kv[1].isna().any():
        bad = lines[kv[1].isna()].head(3).tolist() if kv.shape[1] >= 2 else lines.head(3).tolist()
        raise KbenchInputError(f"{source}: lines without '=<entries>', e.g. {bad}")
    keys = kv[0]
    entries = kv[1].str.split(";").explode()
    pos = entries.groupby(level=0).cumcount()
    head_rest = entries.str.split(":", n=1, expand=True)
    if head_rest.shape[1] != 2 or head_rest[1].isna().any():
        line = int(entries.index[head_rest.reindex(columns=[0, 1])[1].isna()][0])
        raise KbenchInputError(f"{source}: line {line + 1}: an entry has no ':' ({lines[line][:200]})")
    # Two entry formats exist. Current MIOpen: ``solver:time,workspace,algorithm``.
    # Older find-dbs (gfx906, gfx1030): ``algorithm:solver,time,workspace,algorithm,kcache``.
    old_format = head_rest[0].str.startswith("miopenConvolution")
    fields = head_rest[1].str.split(",", expand=True).reindex(columns=range(5))
    new_ok = ~old_format & fields[2].notna() & fields[3].isna()
    old_ok = old_format & fields[3].notna()
    if not (new_ok | old_ok).all():
        line = int(entries.index[~(new_ok | old_ok)][0])
        raise KbenchInputError(
            f"{source}: line {line + 1}: entries must be 'solver:time,workspace,algorithm' (or the older "
            f"'algorithm:solver,time,workspace,algorithm,kcache'): {lines[line][:200]}")
    kernel = head_rest[0].where(~old_format, fields[0])
    time_s = fields[0].where(~old_format, fields[1])
    ws_s = fields[1].where(~old_format, fields[2])
    algo = fields[2].where(~old_format, head_rest[0])
    raw = pd.DataFrame({
        "line": entries.index.to_numpy(),
        "pos": pos.to_numpy(),
        "kernel": kernel.to_numpy(),
        "time_ms": pd.to_numeric(time_s, errors="coerce").to_numpy(),
        "workspace_bytes": pd.to_numeric(ws_s, errors="coerce").to_numpy(),
        "algorithm": algo.to_numpy(),
    })
    bad = raw["time_ms"].isna() | raw["workspace_bytes"].isna()
    if bad.any():
        line = int(raw.loc[bad, "line"].iloc[0])
        raise KbenchInputError(f"{source}: non-numeric time or workspace on line {line + 1}: {lines[line][:200]}")
    raw["workspace_bytes"] = raw["workspace_bytes"].astype(np.int64)
    return keys, raw


def convert_finddb(path: str | Path) -> tuple[dict[str, pd.DataFrame], dict]:
    """Convert one find-db file: returns ``({"problems", "runtimes", "kernels"}, report)``."""
    path = Path(path)
    lines = read_finddb_lines(path)
    keys, raw = split_finddb(lines, source=str(path))
    report: dict = {"source_lines": int(len(lines)), "source_entries": int(len(raw))}
    parsed = parse_miopen_keys(keys, source=str(path))
    is3d = parsed["spatial_dims"] == 3
    report["source_lines_3d"] = int(is3d.sum())
    report["source_lines_3d_depth1"] = int((is3d & (parsed["x_d"] == 1)).sum())
    twin_2d = parsed.loc[~is3d, "geometry_id"].unique()
    report["source_lines_3d_depth1_with_2d_twin"] = int(
        (is3d & (parsed["x_d"] == 1) & parsed["geometry_id"].isin(twin_2d)).sum())

    dup_key = keys.duplicated(keep="first")
    report["duplicate_keys_dropped"] = int(dup_key.sum())
    raw = raw[~dup_key.to_numpy()[raw["line"].to_numpy()]]

    n_raw = raw.groupby("line").size()

    nonpos = raw["time_ms"] <= 0
    report["entries_time_le_0"] = int(nonpos.sum())
    report["entries_time_le_0_first_in_list"] = int((nonpos & (raw["pos"] == 0)).sum())
    report["entries_time_le_0_kernels"] = {
        str(k): int(v) for k, v in raw.loc[nonpos, "kernel"].value_counts().items()
    }
    bad_lines = raw.loc[nonpos, "line"].unique()
    report["problems_dropped_time_le_0"] = int(len(bad_lines))
    raw = raw[~raw["line"].isin(bad_lines)]

    dup_solver = raw.duplicated(["line", "kernel"], keep="first")
    report["duplicate_solver_entries_dropped"] = int(dup_solver.sum())
    raw = raw[~dup_solver]

    unsorted = raw["time_ms"].diff().lt(0) & raw["line"].eq(raw["line"].shift())
    report["lines_resorted"] = int(raw.loc[unsorted, "line"].nunique())
    raw = raw.sort_values(["line", "time_ms", "pos"], kind="stable")

    kept_lines = raw["line"].unique()
    problems = parsed.iloc[kept_lines].reset_index(drop=True)
    line_to_pid = pd.Series(problems["problem_id"].to_numpy(), index=kept_lines)
    problems["n_raw"] = n_raw.loc[kept_lines].to_numpy().astype(np.int8)
    problems["n_listed"] = raw.groupby("line").size().loc[kept_lines].to_numpy().astype(np.int8)
    problems["censored"] = problems["n_raw"] >= FINDDB_MAX_ENTRIES

    runtimes = pd.DataFrame({
        "problem_id": line_to_pid.loc[raw["line"]].to_numpy(),
        "kernel": raw["kernel"].to_numpy(),
        "time_ms": raw["time_ms"].to_numpy(dtype=np.float64),
        "workspace_bytes": raw["workspace_bytes"].to_numpy(),
        "algorithm": raw["algorithm"].to_numpy(),
    })
    runtimes["rank"] = runtimes.groupby("problem_id", sort=False).cumcount().astype(np.int8)

    best = runtimes.groupby("problem_id", sort=False)["time_ms"].transform("min")
    first_two = runtimes[runtimes["rank"] <= 1]
    second = first_two[first_two["rank"] == 1].set_index("problem_id")["time_ms"]
    first = first_two[first_two["rank"] == 0].set_index("problem_id")["time_ms"]
    report["problems_with_exact_tie_for_fastest"] = int((second == first.reindex(second.index)).sum())
    ratio = runtimes["time_ms"] / best
    report["entries_ge_1000x_fastest"] = int((ratio >= OUTLIER_RATIO).sum())
    report["entries_ge_1000x_fastest_kernels"] = {
        str(k): int(v) for k, v in runtimes.loc[ratio >= OUTLIER_RATIO, "kernel"].value_counts().head(5).items()}
    report["max_ratio_to_fastest"] = float(ratio.max())
    report["problems"] = int(len(problems))
    report["runtime_entries"] = int(len(runtimes))
    report["problems_censored"] = int(problems["censored"].sum())
    report["problems_complete"] = int((~problems["censored"]).sum())
    status = problems["output_size_status"].value_counts()
    report["output_size_status"] = {str(k): int(v) for k, v in status.items()}
    return {"problems": problems, "runtimes": runtimes, "kernels": kernel_table(runtimes, problems)}, report


def kernel_family(kernel: pd.Series, algorithm: pd.Series) -> pd.Series:
    """Coarse family of a MIOpen solver: MIOpen's own algorithm class, naive kernels apart.

    The algorithm class comes with every find-db entry
    (``miopenConvolutionFwdAlgoImplicitGEMM`` -> ``implicit_gemm``); the naive
    reference kernels (``ConvDirectNaiveConv*``) are split off ``direct``
    because they are a fallback, not a tuned direct kernel.
    """
    algo = algorithm.str.replace(r"^miopenConvolution(Fwd|BwdData|BwdWeights)Algo", "", regex=True)
    fam = algo.map({"GEMM": "gemm", "ImplicitGEMM": "implicit_gemm", "Direct": "direct",
                    "Winograd": "winograd", "FFT": "fft"}).fillna(algo.str.lower())
    return pd.Series(np.where(kernel.str.contains("Naive"), "naive", fam), index=kernel.index, dtype=str)


def kernel_table(runtimes: pd.DataFrame, problems: pd.DataFrame) -> pd.DataFrame:
    """The kernel vocabulary: family, algorithm classes, directions, counts."""
    direction = problems.set_index("problem_id")["direction"]
    rt = runtimes.assign(direction=direction.loc[runtimes["problem_id"]].to_numpy())
    best = rt[rt["rank"] == 0]
    algo_short = rt["algorithm"].str.replace(r"^miopenConvolution(Fwd|BwdData|BwdWeights)Algo", "", regex=True)
    g = rt.assign(algo_short=algo_short).groupby("kernel")
    table = pd.DataFrame({
        "algorithm": g["algo_short"].agg(lambda s: ",".join(sorted(s.unique()))),
        "directions": g["direction"].agg(lambda s: ",".join(sorted(s.unique()))),
        "n_problems": g.size(),
    })
    table["n_best"] = best.groupby("kernel").size().reindex(table.index, fill_value=0)
    first_algo = rt.drop_duplicates("kernel")
    family = kernel_family(first_algo["kernel"], first_algo["algorithm"])
    table["family"] = pd.Series(family.to_numpy(), index=first_algo["kernel"].to_numpy()).reindex(table.index)
    table = table.reset_index()[["kernel", "family", "algorithm", "directions", "n_problems", "n_best"]]
    return table.sort_values("kernel", ignore_index=True)

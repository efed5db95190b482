"""Read MIOpen perf-db files (SQLite) into kbench problems and tuning targets.

A perf-db (``<arch>_<CUs>.db``, shipped bz2-compressed) records, per problem and
tunable solver, the tuning parameters that won MIOpen's exhaustive tuning:

* ``config``: one row per problem. Its columns are MIOpen's
  ``conv::ProblemDescription::Visit`` fields (``in_channels``, ``in_h``,
  ``in_w``, ``in_d``, ``fil_*``, ``out_channels``, ``batchsize``, ``pad_*``,
  ``conv_stride_*``, ``dilation_*``, ``bias``, ``group_count``,
  ``spatial_dim``, ``layout``, ``data_type``, ``direction``): the same
  getters that ``ProblemDescription::Serialize`` writes into the find-db key,
  so a config row is *direction relative* like a find-db key (for backward
  data and backward weights the "in" fields describe dy and
  ``out_channels`` is x's channel count). ``layout`` is only the "in"
  layout; ``data_type`` is the key's encoded type string.
* ``perf_db(solver, config, params)``: the winning parameters per (problem,
  solver), serialised comma-separated in the order of the solver's
  ``PerformanceConfig*::Visit``.

The config table has no output sizes, which the key needs ("out" = y for
forward, x for backward). For forward and for unit-stride backward
problems they follow from the row (``floor((x + 2p - d(f-1) - 1)/s) + 1`` or
its exact inverse). For a strided backward problem, ``s`` different x sizes
give the same dy: MIOpen's perf-db cannot tell them apart (they share one
row). The builder then takes the candidate(s) that appear in the same
device's find-db; the chosen x and how it was chosen are recorded in
``problems.key_source``:

``formula``             unique from the row (forward, or unit stride)
``find-db``             strided backward; exactly one candidate key is in the find-db
``find-db-ambiguous``   several candidates are in the find-db; the smallest x is kept
``fallback``            none is in the find-db (or none was given); smallest x kept

Problem ids are the MIOpen keys built from the row; canonical columns come
from :func:`kbench.sources.problem.parse_miopen_keys`, so ids and columns agree with
the kernel-selection datasets of the same device.
"""

from __future__ import annotations

import bz2
import shutil
import sqlite3
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.errors import DataIntegrityError, KbenchInputError
from kbench.sources.problem import PROBLEM_COLUMNS, parse_miopen_keys
from kbench.sources.tuning_grammar import SOLVER_PARAMS

CONFIG_COLUMNS = [
    "layout", "data_type", "direction", "spatial_dim", "in_channels", "in_h", "in_w", "in_d",
    "fil_h", "fil_w", "fil_d", "out_channels", "batchsize", "pad_h", "pad_w", "pad_d",
    "conv_stride_h", "conv_stride_w", "conv_stride_d", "dilation_h", "dilation_w",
    "dilation_d", "bias", "group_count",
]
KEY_SOURCES = ("formula", "find-db", "find-db-ambiguous", "fallback")
EXTRA_PROBLEM_COLUMNS = ["key_source", "n_solvers"]


# ----------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------
def _read_sqlite(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    uri = path.resolve().as_uri() + "?mode=ro&immutable=1"
    con = sqlite3.connect(uri, uri=True)
    try:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        if not {"config", "perf_db"} <= tables:
            raise DataIntegrityError(
                f"{path.name}: not a MIOpen perf-db (needs tables 'config' and 'perf_db', "
                f"found {sorted(tables)})"
            )
        config = pd.read_sql_query("select * from config", con)
        perf = pd.read_sql_query("select id, solver, config, params from perf_db", con)
    except sqlite3.DatabaseError as exc:
        raise DataIntegrityError(f"{path.name}: cannot be read as SQLite ({exc})") from exc
    finally:
        con.close()
    return config, perf


def read_perfdb(db_path) -> pd.DataFrame:
    """The perf-db's ``perf_db`` rows joined with their ``config`` rows.

    ``db_path`` is a ``.db.bz2`` (decompressed to a temporary file, which is
    removed afterwards) or a plain ``.db`` (opened read-only, immutable). The
    input file is never modified. Returns one row per perf_db entry:
    ``perfdb_id``, ``solver``, ``params``, ``config_id`` and the config columns.
    """
    path = Path(db_path)
    if not path.is_file():
        raise KbenchInputError(f"perf-db file not found: {path}")
    if path.suffix == ".bz2":
        with tempfile.TemporaryDirectory(prefix="kbench-perfdb-") as tmp:
            plain = Path(tmp) / path.name[: -len(".bz2")]
            try:
                with bz2.open(path, "rb") as src, open(plain, "wb") as dst:
                    shutil.copyfileobj(src, dst, length=1 << 20)
            except OSError as exc:
                raise DataIntegrityError(f"{path.name}: broken bz2 file ({exc})") from exc
            config, perf = _read_sqlite(plain)
    else:
        config, perf = _read_sqlite(path)
    missing = [c for c in CONFIG_COLUMNS if c not in config]
    if missing:
        raise DataIntegrityError(f"{path.name}: config table lacks column(s) {missing}")
    config = config.rename(columns={"id": "config_id"})
    perf = perf.rename(columns={"id": "perfdb_id", "config": "config_id"})
    joined = perf.merge(config, on="config_id", how="left", validate="many_to_one")
    dangling = joined["direction"].isna()
    if dangling.any():
        raise DataIntegrityError(
            f"{path.name}: {int(dangling.sum())} perf_db row(s) point to missing config rows"
        )
    return joined.sort_values("perfdb_id", kind="stable").reset_index(drop=True)


def default_find_db(db_path) -> Path | None:
    """The same device's find-db next to a perf-db (``gfx906_60.db.bz2`` ->
    ``gfx906_60.HIP.fdb.txt.bz2``), or None when there is none."""
    path = Path(db_path)
    stem = path.name
    for suffix in (".bz2", ".db"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    for name in (f"{stem}.HIP.fdb.txt.bz2", f"{stem}.HIP.fdb.txt", f"{stem}.OpenCL.fdb.txt.bz2"):
        cand = path.with_name(name)
        if cand.is_file():
            return cand
    return None


def read_find_db_keys(fdb_path) -> pd.Series:
    """The problem keys (the part before ``=``) of a find-db text file (.bz2 or plain)."""
    path = Path(fdb_path)
    opener = bz2.open if path.suffix == ".bz2" else open
    with opener(path, "rt") as fh:
        lines = pd.Series(fh.read().splitlines(), dtype=str)
    lines = lines[lines.str.len() > 0]
    return lines.str.split("=", n=1).str[0].reset_index(drop=True)


# ----------------------------------------------------------------------------
# Keys from config rows
# ----------------------------------------------------------------------------
def _s(a) -> pd.Series:
    return pd.Series(np.asarray(a, dtype=np.int64)).astype(str)


def _dhw(is3d, d, h, w, sep) -> pd.Series:
    hw = _s(h) + sep + _s(w)
    return pd.Series(np.where(is3d, _s(d) + sep + hw, hw))


def config_keys(cfg: pd.DataFrame, out_d, out_h, out_w) -> pd.Series:
    """MIOpen problem keys (``ProblemDescription::Serialize``) for config rows
    with the given direction-relative output ("out") sizes.

    The layout field is one word when it is the default (``NCHW``/``NCDHW``)
    and three otherwise (the config table stores only the input layout; the
    weight and output layouts are taken to be the same). Cast types are not
    stored in a perf-db config and are left out.
    """
    c = cfg.reset_index(drop=True)
    is3d = (c["spatial_dim"] == 3).to_numpy()
    layout = c["layout"].astype(str)
    layout = pd.Series(np.where(layout.isin(["NCHW", "NCDHW"]), layout,
                                layout + "-" + layout + "-" + layout))
    groups = c["group_count"].astype(np.int64)
    gsuf = pd.Series(np.where(groups != 1, "_g" + groups.astype(str), ""))
    return (
        _s(c["in_channels"]) + "-" + _dhw(is3d, c["in_d"], c["in_h"], c["in_w"], "-")
        + "-" + _dhw(is3d, c["fil_d"], c["fil_h"], c["fil_w"], "x")
        + "-" + _s(c["out_channels"]) + "-" + _dhw(is3d, out_d, out_h, out_w, "-")
        + "-" + _s(c["batchsize"])
        + "-" + _dhw(is3d, c["pad_d"], c["pad_h"], c["pad_w"], "x")
        + "-" + _dhw(is3d, c["conv_stride_d"], c["conv_stride_h"], c["conv_stride_w"], "x")
        + "-" + _dhw(is3d, c["dilation_d"], c["dilation_h"], c["dilation_w"], "x")
        + "-" + _s(c["bias"]) + "-" + layout + "-" + c["data_type"].astype(str)
        + "-" + c["direction"].astype(str) + gsuf
    )


def _spatial(cfg: pd.DataFrame, dim: str, is3d: np.ndarray):
    """(in, fil, pad, stride, dil) of one spatial dim; 2D depth is 1/1/0/1/1."""
    def get(col):
        return cfg[f"{col}_{dim}"].to_numpy(np.int64)
    x, f, p = get("in"), get("fil"), get("pad")
    s, d = cfg[f"conv_stride_{dim}"].to_numpy(np.int64), cfg[f"dilation_{dim}"].to_numpy(np.int64)
    if dim == "d":  # the config stores stride/dilation 0 for the unused depth of 2D problems
        x, f, p = np.where(is3d, x, 1), np.where(is3d, f, 1), np.where(is3d, p, 0)
        s, d = np.where(is3d, s, 1), np.where(is3d, d, 1)
    return x, f, p, s, d


def resolve_keys(cfg: pd.DataFrame, known_keys: pd.Series | None = None) -> pd.DataFrame:
    """The problem key of each config row and how its output size was found.

    Returns ``problem_id``, ``key_source`` (see the module doc),
    ``n_key_matches`` (how many candidate keys are in ``known_keys``) and the
    chosen direction-relative ``out_d/h/w``, aligned with ``cfg`` (reset
    index). Rows with a non-positive spatial size are kept here;
    :func:`perfdb_tables` drops them.
    """
    c = cfg.reset_index(drop=True)
    n = len(c)
    is3d = (c["spatial_dim"] == 3).to_numpy()
    fwd = (c["direction"] == "F").to_numpy()
    base, stride = {}, {}
    for dim in ("d", "h", "w"):
        x, f, p, s, d = _spatial(c, dim, is3d)
        s_safe = np.where(s < 1, 1, s)
        if_fwd = (x + 2 * p - d * (f - 1) - 1) // s_safe + 1
        # Smallest x whose output is this dy: (dy - 1) s - 2p + d(f - 1) + 1.
        if_bwd = (x - 1) * s_safe - 2 * p + d * (f - 1) + 1
        base[dim] = np.where(fwd, if_fwd, if_bwd)
        stride[dim] = np.where(fwd, 1, s_safe)  # number of candidate x sizes per dim
    ambiguous = (stride["d"] > 1) | (stride["h"] > 1) | (stride["w"] > 1)
    chosen = {dim: base[dim].copy() for dim in base}  # smallest x by default
    n_match = np.zeros(n, dtype=np.int64)
    if known_keys is not None and ambiguous.any():
        # An object-dtype hash index: Series.isin on arrow strings is ~100x slower.
        known = pd.Index(pd.unique(np.asarray(known_keys, dtype=object)), dtype=object)
        found = np.zeros(n, dtype=bool)
        idx_amb = np.flatnonzero(ambiguous)
        sub = c.iloc[idx_amb].reset_index(drop=True)
        # Offsets in lexicographic (d, h, w) order, so the first hit is the smallest x.
        for rd in range(int(stride["d"].max())):
            for rh in range(int(stride["h"].max())):
                for rw in range(int(stride["w"].max())):
                    m = ((rd < stride["d"]) & (rh < stride["h"]) & (rw < stride["w"]))[idx_amb]
                    if not m.any():
                        continue
                    rows = idx_amb[m]
                    keys = config_keys(sub[m], base["d"][rows] + rd, base["h"][rows] + rh,
                                       base["w"][rows] + rw)
                    hit = known.get_indexer(keys.to_numpy(dtype=object)) >= 0
                    n_match[rows] += hit
                    new = rows[hit & ~found[rows]]
                    chosen["d"][new] += rd
                    chosen["h"][new] += rh
                    chosen["w"][new] += rw
                    found[new] = True
    source = np.where(~ambiguous, "formula",
                      np.where(n_match == 1, "find-db",
                               np.where(n_match > 1, "find-db-ambiguous", "fallback")))
    return pd.DataFrame({
        "problem_id": config_keys(c, chosen["d"], chosen["h"], chosen["w"]).to_numpy(),
        "key_source": source,
        "n_key_matches": n_match,
        "out_d": chosen["d"], "out_h": chosen["h"], "out_w": chosen["w"],
    })


# ----------------------------------------------------------------------------
# Parameters
# ----------------------------------------------------------------------------
def param_columns(solvers=None) -> list[str]:
    """The typed parameter columns of a targets table (first-seen order)."""
    names: list[str] = []
    for solver, params in SOLVER_PARAMS.items():
        if solvers is not None and solver not in set(solvers):
            continue
        names += [p for p in params if p not in names]
    return names


def parse_params(solver: pd.Series, params: pd.Series) -> pd.DataFrame:
    """Typed parameter columns (nullable Int64) for the solvers of
    :data:`kbench.sources.tuning_grammar.SOLVER_PARAMS`; NA for other solvers, for
    parameters a solver lacks and for params strings that do not have the
    solver's field count or are not all integers."""
    solver = solver.reset_index(drop=True)
    params = params.reset_index(drop=True).astype(str)
    n = len(params)
    cols = param_columns()
    data = {c: np.zeros(n, dtype=np.int64) for c in cols}
    na = {c: np.ones(n, dtype=bool) for c in cols}
    for name, fields in SOLVER_PARAMS.items():
        m = (solver == name).to_numpy()
        if not m.any():
            continue
        sub = params[m]
        parts = sub.str.split(",", expand=True).reindex(columns=range(len(fields)))
        vals = parts.apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
        good = ((sub.str.count(",") + 1).to_numpy() == len(fields))
        good &= ~np.isnan(vals).any(axis=1) & (vals == np.round(vals)).all(axis=1)
        rows = np.flatnonzero(m)[good]
        for i, f in enumerate(fields):
            data[f][rows] = vals[good, i].astype(np.int64)
            na[f][rows] = False
    return pd.DataFrame({c: pd.arrays.IntegerArray(data[c], na[c]) for c in cols})


# ----------------------------------------------------------------------------
# Tables
# ----------------------------------------------------------------------------
def perfdb_tables(db_path, fdb_path="auto") -> dict:
    """``problems`` and ``targets`` of a perf-db, plus a ``summary`` dict.

    ``fdb_path``: the same device's find-db used to pick the x size of strided
    backward problems ("auto": the sibling ``<stem>.HIP.fdb.txt.bz2``; None:
    no find-db, smallest x).

    problems: the canonical columns of docs/data_model.md (from the key via
    :func:`kbench.sources.problem.parse_miopen_keys`), plus ``key_source`` and
    ``n_solvers`` (tuned solvers recorded for the problem).
    targets: ``problem_id``, ``solver``, ``params`` (the raw string) and one
    nullable Int64 column per parameter of the supported solvers.
    Rows whose problem has a non-positive spatial size are dropped (counted in
    the summary).
    """
    joined = read_perfdb(db_path)
    if fdb_path == "auto":
        fdb_path = default_find_db(db_path)
    known = read_find_db_keys(fdb_path) if fdb_path is not None else None

    cfg = joined.drop_duplicates("config_id").reset_index(drop=True)
    keys = resolve_keys(cfg, known)
    # An empty image (e.g. a 3x3 filter on a 2x2 input without padding) is no convolution.
    sizes = np.column_stack([cfg[["in_h", "in_w"]].to_numpy(np.int64),
                             keys[["out_h", "out_w"]].to_numpy(np.int64)])
    is3d = (cfg["spatial_dim"] == 3).to_numpy()
    depth = np.column_stack([cfg["in_d"].to_numpy(np.int64), keys["out_d"].to_numpy(np.int64)])
    degenerate = (sizes <= 0).any(axis=1) | (is3d & (depth <= 0).any(axis=1))
    cfg, keys = cfg[~degenerate].reset_index(drop=True), keys[~degenerate].reset_index(drop=True)
    problems = parse_miopen_keys(keys["problem_id"], source=Path(db_path).name)
    problems["key_source"] = keys["key_source"].to_numpy()
    problems["config_id"] = cfg["config_id"].to_numpy()
    if problems["problem_id"].duplicated().any():
        dup = problems.loc[problems["problem_id"].duplicated(), "problem_id"].head(3).tolist()
        raise DataIntegrityError(f"{Path(db_path).name}: config rows give the same key, e.g. {dup}")

    ids = problems[["config_id", "problem_id"]]
    t = joined[["config_id", "solver", "params"]].merge(ids, on="config_id", how="inner")
    typed = parse_params(t["solver"], t["params"])
    targets = pd.concat([t[["problem_id", "solver", "params"]].reset_index(drop=True), typed], axis=1)
    supported = targets["solver"].isin(list(SOLVER_PARAMS)).to_numpy()
    unparsed = supported & typed.isna().all(axis=1).to_numpy()
    targets = targets.sort_values(["problem_id", "solver"], kind="stable").reset_index(drop=True)

    n_solvers = targets.groupby("problem_id").size()
    problems["n_solvers"] = problems["problem_id"].map(n_solvers).astype(np.int8)
    problems = (problems[PROBLEM_COLUMNS + EXTRA_PROBLEM_COLUMNS]
                .sort_values("problem_id", kind="stable").reset_index(drop=True))

    summary = {
        "source": Path(db_path).name,
        "find_db": Path(fdb_path).name if fdb_path is not None else None,
        "perfdb_rows": int(len(joined)),
        "config_rows": int(len(cfg) + degenerate.sum()),
        "dropped_degenerate_problems": int(degenerate.sum()),
        "dropped_degenerate_rows": int(len(joined) - len(t)),
        "problems": int(len(problems)),
        "targets": int(len(targets)),
        "targets_per_solver": targets["solver"].value_counts().sort_index().astype(int).to_dict(),
        "key_source": problems["key_source"].value_counts().astype(int).to_dict(),
        "unparsed_params_rows": int(unparsed.sum()),
    }
    return {"problems": problems, "targets": targets, "summary": summary}

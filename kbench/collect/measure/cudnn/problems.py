"""The problems file of ``kbench collect cudnn``: one row per problem-direction, with its key.

A problems CSV (the corpus, a test-retest sample) names convolutions by their geometry;
:func:`load_problems` checks every row, expands the data types, layouts and directions it
leaves open, and keys each problem-direction with the MIOpen problem key
(:func:`kbench.problem.to_miopen_key`) built from the true geometry.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError

DIRECTIONS = ("F", "B", "W")
DTYPES = ("FP16", "BF16", "FP32")
LAYOUTS = ("NCHW", "NHWC")
GEOMETRY = ["n", "c", "k", "groups", "x_h", "x_w", "fil_h", "fil_w", "pad_h", "pad_w",
            "stride_h", "stride_w", "dil_h", "dil_w"]
DEFAULTS = {"groups": 1, "pad_h": 0, "pad_w": 0, "stride_h": 1, "stride_w": 1, "dil_h": 1, "dil_w": 1}
ALIASES = {"h": "x_h", "w": "x_w", "r": "fil_h", "s": "fil_w", "g": "groups"}


def parse_list(value: str | None, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    if value is None:
        return allowed
    items = tuple(v.strip().upper() for v in str(value).split(",") if v.strip())
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise KbenchInputError(f"--{what}: {', '.join(bad) or 'nothing'} not understood; "
                               f"choose from {','.join(allowed)}")
    return items


def load_problems(path: str | Path, directions=DIRECTIONS, dtypes=None, layouts=None) -> pd.DataFrame:
    """Read a problems CSV (e.g. the corpus) into one row per problem-direction, with its key.

    Required columns: n, c, k, x_h, x_w, fil_h, fil_w (or h, w, r, s). Optional:
    groups, pad_*, stride_*, dil_* (defaults 1/0/1/1), dtype, layout (else
    every one of ``dtypes`` / ``layouts``), direction (else every one of
    ``directions``; with it, rows whose direction is not in ``directions`` are
    skipped), order, kind, sources.
    """
    path = Path(path)
    if not path.exists():
        raise KbenchInputError(f"{path}: problems file not found.")
    try:
        df = pd.read_csv(path)
    except Exception as exc:  # noqa: BLE001 - any parse failure is the user's file
        raise KbenchInputError(f"{path}: cannot read as CSV ({exc}).") from None
    df = df.rename(columns={k: v for k, v in ALIASES.items() if k in df and v not in df})
    missing = [c for c in ("n", "c", "k", "x_h", "x_w", "fil_h", "fil_w") if c not in df]
    if missing:
        raise KbenchInputError(f"{path}: missing column(s) {', '.join(missing)}; a problems file needs "
                               "n, c, k, x_h, x_w, fil_h, fil_w (optional groups, pad_*, stride_*, dil_*, "
                               "dtype, layout).")
    for col, default in DEFAULTS.items():
        if col not in df:
            df[col] = default
    geo = df[GEOMETRY].apply(pd.to_numeric, errors="coerce")
    bad = geo.isna().any(axis=1) | (geo[["n", "c", "k", "groups", "x_h", "x_w", "fil_h", "fil_w",
                                        "stride_h", "stride_w", "dil_h", "dil_w"]] < 1).any(axis=1)
    bad |= (geo[["pad_h", "pad_w"]] < 0).any(axis=1)
    bad |= (geo["c"] % geo["groups"] != 0) | (geo["k"] % geo["groups"] != 0)
    df[GEOMETRY] = geo.fillna(1).astype(np.int64)
    from kbench.sources.problem import expected_output_size
    for s in ("h", "w"):
        df[f"y_{s}"] = expected_output_size(df[f"x_{s}"], df[f"fil_{s}"], df[f"pad_{s}"],
                                            df[f"stride_{s}"], df[f"dil_{s}"])
    bad |= (df["y_h"] < 1) | (df["y_w"] < 1)
    if bad.any():
        rows = ", ".join(str(i + 2) for i in np.flatnonzero(bad.to_numpy())[:5])
        raise KbenchInputError(f"{path}: {int(bad.sum())} row(s) are not valid convolutions (non-integer "
                               f"or non-positive sizes, channels not divisible by groups, or an empty "
                               f"output), e.g. line(s) {rows}.")
    df = _expand(df, "dtype", dtypes, DTYPES, path)
    df = _expand(df, "layout", layouts, LAYOUTS, path)
    if "order" not in df:
        df["order"] = np.arange(len(df))
    for col in ("kind", "sources"):
        if col not in df:
            df[col] = ""
    df = df.sort_values("order", kind="stable").reset_index(drop=True)
    if "direction" in df:  # a list of problem-directions (e.g. a test-retest sample): each row its own
        df["direction"] = df["direction"].astype(str).str.upper()
        bad = ~df["direction"].isin(DIRECTIONS)
        if bad.any():
            raise KbenchInputError(f"{path}: column direction has {sorted(df.loc[bad, 'direction'].unique())[:5]}; "
                                   f"allowed: {', '.join(DIRECTIONS)}")
        out = df[df["direction"].isin(directions)].reset_index(drop=True)
    else:
        out = df.loc[df.index.repeat(len(directions))].reset_index(drop=True)
        out["direction"] = list(directions) * len(df)
    out["key"] = problem_keys(out)
    out["kind"] = out["kind"].fillna("").astype(str)
    out["sources"] = out["sources"].fillna("").astype(str)
    return out.drop_duplicates("key").reset_index(drop=True)


def _expand(df, col, wanted, allowed, path):
    if col in df:
        df[col] = df[col].astype(str).str.upper()
        bad = ~df[col].isin(allowed)
        if bad.any():
            raise KbenchInputError(f"{path}: column {col} has {sorted(df.loc[bad, col].unique())[:5]}; "
                                   f"allowed: {', '.join(allowed)}")
        return df[df[col].isin(wanted)] if wanted else df
    values = wanted or allowed
    return df.merge(pd.DataFrame({col: list(values)}), how="cross")


def canonical(df: pd.DataFrame) -> pd.DataFrame:
    """Canonical problem columns (docs/data_model.md) for problem-direction rows."""
    out = pd.DataFrame(index=df.index)
    out["direction"] = df["direction"].astype(str)
    out["dtype"] = df["dtype"].astype(str)
    out["cast"] = ""
    lay = df["layout"].astype(str)
    out["layout_x"], out["layout_w"], out["layout_y"] = lay, lay, lay
    out["spatial_dims"] = np.int8(2)
    for col in ("n", "c", "k", "groups"):
        out[col] = df[col].astype(np.int64)
    for p in ("x", "y", "fil", "pad", "stride", "dil"):
        out[f"{p}_d"] = 0 if p == "pad" else 1
        out[f"{p}_h"] = df[f"{p}_h"].astype(np.int64)
        out[f"{p}_w"] = df[f"{p}_w"].astype(np.int64)
    out["bias"] = np.int8(0)
    return out


def problem_keys(df: pd.DataFrame) -> pd.Series:
    """MIOpen problem keys built from the true geometry (:func:`kbench.problem.to_miopen_key`)."""
    from kbench.sources.problem import to_miopen_key
    can = canonical(df.reset_index(drop=True))
    return pd.Series(to_miopen_key(can).to_numpy(), index=df.index, dtype=str)

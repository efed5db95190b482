"""The problems file of ``kbench collect cudnn``: one row per problem-direction, with its key.

A problems CSV (the corpus, a test-retest sample) names convolutions by their geometry;
:func:`load_problems` checks every row, expands the data types, layouts and directions it
leaves open, and keys each problem-direction with the MIOpen problem key
(:func:`kbench.problem.to_miopen_key`) built from the true geometry.

A file with an ``x_d`` column (or ``d``) holds 3D convolutions: every row gets the depth fields
``x_d``, ``fil_d``, ``pad_d``, ``stride_d``, ``dil_d`` (``fil_d`` defaults to 1, pad to 0, stride and
dilation to 1) and the 3D layouts ``NCDHW`` / ``NDHWC`` (PyTorch's ``contiguous`` and
``channels_last_3d``). A file without it holds 2D convolutions with ``NCHW`` / ``NHWC``. The two are
never mixed in one file, and their records differ (:func:`record_columns`), so a raw folder is of
one kind (``kbench collect merge`` refuses to join them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError

DIRECTIONS = ("F", "B", "W")
DTYPES = ("FP16", "BF16", "FP32")
LAYOUTS = ("NCHW", "NHWC")
#: the 3D layouts: NCDHW-dense (PyTorch's contiguous) and NDHWC-dense (channels_last_3d)
LAYOUTS_3D = ("NCDHW", "NDHWC")
#: the channels-last layout of each spatial rank
CHANNELS_LAST = ("NHWC", "NDHWC")
GEOMETRY = ["n", "c", "k", "groups", "x_h", "x_w", "fil_h", "fil_w", "pad_h", "pad_w",
            "stride_h", "stride_w", "dil_h", "dil_w"]
#: the depth fields a 3D problem adds to :data:`GEOMETRY`
DEPTH = ["x_d", "fil_d", "pad_d", "stride_d", "dil_d"]
DEFAULTS = {"groups": 1, "pad_h": 0, "pad_w": 0, "stride_h": 1, "stride_w": 1, "dil_h": 1, "dil_w": 1}
DEFAULTS_3D = {"fil_d": 1, "pad_d": 0, "stride_d": 1, "dil_d": 1}
ALIASES = {"h": "x_h", "w": "x_w", "r": "fil_h", "s": "fil_w", "g": "groups", "d": "x_d", "t": "fil_d"}


def spatial_dims(p) -> int:
    """2 or 3: a problem (a dict or a row) is 3D when it carries ``spatial_dims`` 3."""
    return 3 if int(p.get("spatial_dims", 2) or 2) == 3 else 2


def geometry_of(p) -> list[str]:
    """The geometry columns of a problem: :data:`GEOMETRY`, and :data:`DEPTH` for a 3D one."""
    return GEOMETRY + DEPTH if spatial_dims(p) == 3 else GEOMETRY


def record_columns(p) -> list[str]:
    """The problem fields a raw problem record starts with. A 2D record's are exactly those of every
    2D run (no depth column); a 3D one adds ``spatial_dims``, the depth fields and ``y_d``."""
    cols = ["key", "direction", "dtype", "layout", *GEOMETRY, "y_h", "y_w"]
    return cols + ["spatial_dims", *DEPTH, "y_d"] if spatial_dims(p) == 3 else cols


def conv_args(p) -> dict:
    """``stride``, ``padding``, ``dilation`` (depth first for 3D) and ``groups``, as PyTorch takes them."""
    dims = ("d", "h", "w") if spatial_dims(p) == 3 else ("h", "w")
    return {"stride": tuple(int(p[f"stride_{s}"]) for s in dims),
            "padding": tuple(int(p[f"pad_{s}"]) for s in dims),
            "dilation": tuple(int(p[f"dil_{s}"]) for s in dims), "groups": int(p["groups"])}


def tensor_shapes(p) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The logical shapes of x [N, C, (D,) H, W], w [K, C/G, (FD,) FH, FW] and y [N, K, (YD,) YH, YW]."""
    dims = ("d", "h", "w") if spatial_dims(p) == 3 else ("h", "w")
    n, c, k, g = (int(p[f]) for f in ("n", "c", "k", "groups"))
    return ((n, c, *(int(p[f"x_{s}"]) for s in dims)),
            (k, c // g, *(int(p[f"fil_{s}"]) for s in dims)),
            (n, k, *(int(p[f"y_{s}"]) for s in dims)))


def conv_flop(p) -> float:
    """2 * N * K * C/G * filter volume * output volume: the multiply-adds counted twice."""
    _, w, y = tensor_shapes(p)
    multiply_adds = y[0]  # exact integers (Python's), then one conversion
    for size in (*w, *y[2:]):
        multiply_adds *= size
    return 2.0 * multiply_adds


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
    skipped), order, kind, sources. An ``x_d`` (or ``d``) column makes every row a 3D
    convolution (optional fil_d or t, pad_d, stride_d, dil_d; layouts NCDHW, NDHWC).
    ``layouts`` names memory formats: NCHW and NCDHW both mean contiguous, NHWC and
    NDHWC channels-last, whichever the file's rank.
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
                               "dtype, layout; x_d, fil_d, pad_d, stride_d, dil_d for 3D).")
    is3d = "x_d" in df
    stray = [c for c in DEPTH[1:] if c in df and not is3d]
    if stray:
        raise KbenchInputError(f"{path}: depth column(s) {', '.join(stray)} without x_d; a 3D problems file "
                               "needs the input depth x_d (a 2D file has no depth columns).")
    geometry = GEOMETRY + DEPTH if is3d else GEOMETRY
    for col, default in {**DEFAULTS, **(DEFAULTS_3D if is3d else {})}.items():
        if col not in df:
            df[col] = default
    geo = df[geometry].apply(pd.to_numeric, errors="coerce")
    pads = [c for c in geometry if c.startswith("pad_")]
    bad = geo.isna().any(axis=1) | (geo[[c for c in geometry if c not in pads]] < 1).any(axis=1)
    bad |= (geo[pads] < 0).any(axis=1)
    bad |= (geo["c"] % geo["groups"] != 0) | (geo["k"] % geo["groups"] != 0)
    df[geometry] = geo.fillna(1).astype(np.int64)
    from kbench.sources.problem import expected_output_size
    dims = ("d", "h", "w") if is3d else ("h", "w")
    for s in dims:
        df[f"y_{s}"] = expected_output_size(df[f"x_{s}"], df[f"fil_{s}"], df[f"pad_{s}"],
                                            df[f"stride_{s}"], df[f"dil_{s}"])
        bad |= df[f"y_{s}"] < 1
    if bad.any():
        rows = ", ".join(str(i + 2) for i in np.flatnonzero(bad.to_numpy())[:5])
        raise KbenchInputError(f"{path}: {int(bad.sum())} row(s) are not valid convolutions (non-integer "
                               f"or non-positive sizes, channels not divisible by groups, or an empty "
                               f"output), e.g. line(s) {rows}.")
    if is3d:
        df["spatial_dims"] = np.int64(3)
    df = _expand(df, "dtype", dtypes, DTYPES, path)
    df = _expand(df, "layout", _same_format(layouts, is3d), LAYOUTS_3D if is3d else LAYOUTS, path)
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


def _same_format(layouts, is3d: bool):
    """``layouts`` in the file's rank: NCHW <-> NCDHW (contiguous), NHWC <-> NDHWC (channels-last)."""
    if not layouts:
        return layouts
    rank = LAYOUTS_3D if is3d else LAYOUTS
    other = LAYOUTS if is3d else LAYOUTS_3D
    return tuple(rank[other.index(v)] if v in other else v for v in layouts)


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
    is3d = (df["spatial_dims"].to_numpy() == 3) if "spatial_dims" in df else np.zeros(len(df), bool)
    out["spatial_dims"] = np.where(is3d, 3, 2).astype(np.int8)
    for col in ("n", "c", "k", "groups"):
        out[col] = df[col].astype(np.int64)
    for p in ("x", "y", "fil", "pad", "stride", "dil"):
        flat = 0 if p == "pad" else 1  # a 2D problem is a 3D one of depth 1
        out[f"{p}_d"] = np.where(is3d, df[f"{p}_d"], flat).astype(np.int64) if is3d.any() else flat
        out[f"{p}_h"] = df[f"{p}_h"].astype(np.int64)
        out[f"{p}_w"] = df[f"{p}_w"].astype(np.int64)
    out["bias"] = np.int8(0)
    return out


def problem_keys(df: pd.DataFrame) -> pd.Series:
    """MIOpen problem keys built from the true geometry (:func:`kbench.problem.to_miopen_key`)."""
    from kbench.sources.problem import to_miopen_key
    can = canonical(df.reset_index(drop=True))
    return pd.Series(to_miopen_key(can).to_numpy(), index=df.index, dtype=str)

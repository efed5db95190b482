"""Convolution problems: MIOpen problem keys <-> canonical columns.

MIOpen serialises a convolution problem as a ``-`` separated key
(``ProblemDescription::Serialize`` in MIOpen's ``src/conv/problem_description.cpp``)::

    2D:  C-H-W-FHxFW-K-OH-OW-N-PHxPW-SHxSW-DHxDW-BIAS-LAYOUT-DTYPE-DIR[_gG][_ciT...]
    3D:  C-D-H-W-FDxFHxFW-K-OD-OH-OW-N-PDxPHxPW-SDxSHxSW-DDxDHxDW-BIAS-LAYOUT-DTYPE-DIR...

``LAYOUT`` is one field when the input, weight and output layouts agree and are
the default (``NCHW``/``NCDHW``), otherwise three (``NHWC-NHWC-NHWC``), so a 2D
NHWC key has 17 fields. The key is *direction relative*: MIOpen builds the
description from (x, w, y) for forward but from (dy, w, dx) for backward data
and (dy, dw, x) for backward weights, so for ``B`` and ``W`` the leading "in"
fields describe the convolution's output y. :func:`parse_miopen_keys` undoes
that and returns every problem in true x/w/y terms; :func:`to_miopen_key` is
its inverse.

>>> df = parse_miopen_keys(pd.Series(["64-56-56-3x3-64-56-56-32-1x1-1x1-1x1-0-NCHW-FP32-F"]))
>>> df.loc[0, ["c", "k", "x_h", "y_h", "fil_h", "pad_h"]].tolist()
[64, 64, 56, 56, 3, 1]
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError

SPATIAL = ("d", "h", "w")
INT_COLUMNS = (
    ["n", "c", "k", "groups"]
    + [f"x_{s}" for s in SPATIAL]
    + [f"y_{s}" for s in SPATIAL]
    + [f"fil_{s}" for s in SPATIAL]
    + [f"pad_{s}" for s in SPATIAL]
    + [f"stride_{s}" for s in SPATIAL]
    + [f"dil_{s}" for s in SPATIAL]
)
# Order of the canonical problem columns (docs/data_model.md).
PROBLEM_COLUMNS = [
    "problem_id", "direction", "dtype", "cast", "layout", "layout_x", "layout_w", "layout_y",
    "spatial_dims", *INT_COLUMNS, "bias", "geometry_id", "output_size_ok", "output_size_status",
]
# The fields that make a convolution's geometry: what stays the same when only
# the direction, data type or layout changes. Splits group on these.
GEOMETRY_COLUMNS = ["n", "c", "k", "groups"] + [
    f"{p}_{s}" for p in ("x", "fil", "pad", "stride", "dil") for s in SPATIAL
]

_D = r"(?:(?P<{0}>\d+)x)?"  # optional depth component of an AxBxC field
_KEY_RE = (
    r"^(?P<in_c>\d+)-(?:(?P<in_d>\d+)-)?(?P<in_h>\d+)-(?P<in_w>\d+)-"
    + _D.format("fil_d") + r"(?P<fil_h>\d+)x(?P<fil_w>\d+)-"
    r"(?P<out_c>\d+)-(?:(?P<out_d>\d+)-)?(?P<out_h>\d+)-(?P<out_w>\d+)-(?P<n>\d+)-"
    + _D.format("pad_d") + r"(?P<pad_h>\d+)x(?P<pad_w>\d+)-"
    + _D.format("stride_d") + r"(?P<stride_h>\d+)x(?P<stride_w>\d+)-"
    + _D.format("dil_d") + r"(?P<dil_h>\d+)x(?P<dil_w>\d+)-"
    r"(?P<bias>\d+)-(?P<layout>[A-Za-z]+(?:-[A-Za-z]+){0,2})-(?P<dtype>[A-Za-z0-9]+)-"
    r"(?P<direction>[FBW])(?:_g(?P<groups>\d+))?(?P<cast>(?:_c[iwo][A-Za-z0-9]+)*)$"
)
_DEPTH_FIELDS = ["in_d", "out_d", "fil_d", "pad_d", "stride_d", "dil_d"]


def parse_miopen_keys(keys: pd.Series, source: str = "keys") -> pd.DataFrame:
    """Parse MIOpen problem keys into canonical problem columns (true x/w/y terms).

    Raises :class:`KbenchInputError` naming the first few keys that do not
    follow MIOpen's format (and how many there are).
    """
    keys = pd.Series(keys, dtype="string").reset_index(drop=True)
    f = keys.str.extract(_KEY_RE)
    bad = f["in_c"].isna()
    depth_present = f[_DEPTH_FIELDS].notna()
    # A key is either fully 2D or fully 3D: mixed depth fields are malformed.
    bad |= depth_present.any(axis=1) & ~depth_present.all(axis=1)
    if bad.any():
        examples = "; ".join(keys[bad].head(3).astype(str))
        raise KbenchInputError(
            f"{source}: {int(bad.sum())} problem key(s) do not follow MIOpen's format "
            f"(C-H-W-FHxFW-K-OH-OW-N-pad-stride-dil-bias-layout-dtype-dir), e.g. {examples}"
        )
    is3d = depth_present.all(axis=1)
    num = {}
    for col in f.columns:
        if col in ("layout", "dtype", "direction", "cast"):
            continue
        num[col] = pd.to_numeric(f[col]).fillna(0).astype(np.int64)
    # 2D problems are 3D problems of depth 1: filter/stride/dilation 1, pad 0.
    for col in ("in_d", "out_d", "fil_d", "stride_d", "dil_d"):
        num[col] = num[col].where(is3d, 1)
    num["groups"] = num["groups"].where(f["groups"].notna(), 1)

    direction = f["direction"].astype(str)
    fwd = (direction == "F").to_numpy()
    out = pd.DataFrame({"problem_id": keys.astype(str)})
    out["direction"] = direction
    out["dtype"] = f["dtype"].astype(str)
    out["cast"] = f["cast"].fillna("").astype(str)
    layout = f["layout"].astype(str)
    out["layout"] = layout
    parts = layout.str.split("-", expand=True).reindex(columns=[0, 1, 2]).astype(object)
    lay_in = parts[0].to_numpy(dtype=object)
    lay_w = np.where(parts[1].isna(), lay_in, parts[1].to_numpy(dtype=object))
    lay_out = np.where(parts[2].isna(), lay_in, parts[2].to_numpy(dtype=object))
    out["layout_x"] = np.where(fwd, lay_in, lay_out)
    out["layout_w"] = lay_w
    out["layout_y"] = np.where(fwd, lay_out, lay_in)
    out["spatial_dims"] = np.where(is3d, 3, 2).astype(np.int8)
    out["n"] = num["n"]
    out["c"] = np.where(fwd, num["in_c"], num["out_c"])
    out["k"] = np.where(fwd, num["out_c"], num["in_c"])
    out["groups"] = num["groups"]
    for s in SPATIAL:
        out[f"x_{s}"] = np.where(fwd, num[f"in_{s}"], num[f"out_{s}"])
    for s in SPATIAL:
        out[f"y_{s}"] = np.where(fwd, num[f"out_{s}"], num[f"in_{s}"])
    for p in ("fil", "pad", "stride", "dil"):
        for s in SPATIAL:
            out[f"{p}_{s}"] = num[f"{p}_{s}"]
    out["bias"] = num["bias"].astype(np.int8)
    out["geometry_id"] = geometry_ids(out)
    out["output_size_status"] = output_size_status(out)
    out["output_size_ok"] = out["output_size_status"] == "ok"
    return out


def expected_output_size(x, fil, pad, stride, dil):
    """The convolution output-size rule floor((x + 2p - d(f-1) - 1)/s) + 1."""
    return (x + 2 * pad - dil * (fil - 1) - 1) // stride + 1


def output_size_status(df: pd.DataFrame) -> pd.Series:
    """Check y against the output-size rule in every spatial dimension.

    ``ok``: the rule holds. ``clamped``: the filter is larger than the padded
    input, the rule gives a size <= 0 and the recorded size is 1, which is
    what MIOpen computes (its output-tensor code takes ``max(1, rule)``).
    ``same_padding``: y = max(1, ceil(x / stride)) in every dimension, the output
    size of MIOpen's ``miopenPaddingSame`` mode (the key stores the user's pad, not
    the padding that mode computes). ``mismatch``: anything else.
    """
    ok = pd.Series(True, index=df.index)
    clamped = pd.Series(True, index=df.index)
    same = pd.Series(True, index=df.index)
    for s in SPATIAL:
        exp = expected_output_size(df[f"x_{s}"], df[f"fil_{s}"], df[f"pad_{s}"],
                                   df[f"stride_{s}"], df[f"dil_{s}"])
        y = df[f"y_{s}"]
        ok &= y == exp
        clamped &= (y == exp) | ((exp <= 0) & (y == 1))
        same &= y == np.maximum(1, -(-df[f"x_{s}"] // df[f"stride_{s}"]))
    status = np.where(ok, "ok", np.where(clamped, "clamped", np.where(same, "same_padding", "mismatch")))
    return pd.Series(status, index=df.index, dtype=str)


def geometry_key(df: pd.DataFrame, columns=GEOMETRY_COLUMNS) -> pd.Series:
    """A readable string of the geometry fields (``n-c-k-g-xd-xh-...``).

    Built once per distinct geometry and joined back, which is ~50x faster
    than formatting every row.
    """
    cols = list(columns)
    values = df[cols].astype(np.int64)
    uniq = values.drop_duplicates()
    uniq = uniq.assign(_key=["-".join(map(str, t)) for t in uniq.itertuples(index=False)])
    joined = values.merge(uniq, on=cols, how="left")["_key"]
    return pd.Series(joined.to_numpy(dtype=object), index=df.index, dtype=str)


def stable_hash(strings: pd.Series, salt: str = "") -> pd.Series:
    """16 hex digits of blake2b per distinct string: identical on every machine and version.

    Hashes each distinct value once, so the cost scales with the number of
    distinct geometries, not rows.
    """
    codes, uniques = pd.factorize(strings)
    hashed = np.array(
        [hashlib.blake2b((salt + u).encode(), digest_size=8).hexdigest() for u in uniques],
        dtype=object,
    )
    return pd.Series(hashed[codes] if len(codes) else [], index=strings.index, dtype=str)


def geometry_ids(df: pd.DataFrame, columns=GEOMETRY_COLUMNS) -> pd.Series:
    return stable_hash(geometry_key(df, columns))


def to_miopen_key(df: pd.DataFrame) -> pd.Series:
    """Serialise canonical problem rows back into MIOpen problem keys (inverse of parsing).

    Needs the canonical columns; ``layout`` may be absent, then it is rebuilt
    from ``layout_x/w/y`` the way MIOpen does (one field when all three are the
    default ``NCHW``/``NCDHW``, else three in direction-relative in/w/out order).
    """
    fwd = df["direction"].to_numpy() == "F"
    is3d = df["spatial_dims"].to_numpy() == 3

    def s(col):
        return df[col].astype(np.int64).astype(str)

    def dhw(prefix, sep):
        hw = s(f"{prefix}_h") + sep + s(f"{prefix}_w")
        return pd.Series(np.where(is3d, s(f"{prefix}_d") + sep + hw, hw), index=df.index)

    x_sp, y_sp = dhw("x", "-"), dhw("y", "-")
    in_c = pd.Series(np.where(fwd, s("c"), s("k")), index=df.index)
    out_c = pd.Series(np.where(fwd, s("k"), s("c")), index=df.index)
    in_sp = pd.Series(np.where(fwd, x_sp, y_sp), index=df.index)
    out_sp = pd.Series(np.where(fwd, y_sp, x_sp), index=df.index)
    if "layout" in df:
        layout = df["layout"].astype(str)
    else:
        lin = np.where(fwd, df["layout_x"], df["layout_y"])
        lout = np.where(fwd, df["layout_y"], df["layout_x"])
        lw = df["layout_w"].to_numpy()
        default = ((lin == lw) & (lw == lout) & np.isin(lw, ["NCHW", "NCDHW"]))
        layout = pd.Series(np.where(default, lw, pd.Series(lin) + "-" + lw + "-" + pd.Series(lout)),
                           index=df.index)
    groups = df["groups"].astype(np.int64)
    gsuffix = pd.Series(np.where(groups != 1, "_g" + groups.astype(str), ""), index=df.index)
    cast = df["cast"].astype(str) if "cast" in df else ""
    bias = s("bias") if "bias" in df else "0"
    return (in_c + "-" + in_sp + "-" + dhw("fil", "x") + "-" + out_c + "-" + out_sp + "-" + s("n")
            + "-" + dhw("pad", "x") + "-" + dhw("stride", "x") + "-" + dhw("dil", "x")
            + "-" + bias + "-" + layout + "-" + df["dtype"].astype(str) + "-"
            + df["direction"].astype(str) + gsuffix + cast)

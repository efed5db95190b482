"""Shared feature engineering for every baseline: one place, vectorised.

``problem_features(problems)`` turns kbench's canonical problem columns
(``docs/data_model.md``; true x/w/y terms for every direction) into a numeric
table, one row per problem, same index and order. Nothing in it is fitted:
the same problem always gets the same features. ``Standardizer`` adds the
per-column z-normalisation (fitted on a training part) that distance- and
gradient-based models need; trees use the raw table.

Notation: N batch, C input channels, K output channels, G groups,
(Di, Hi, Wi) = x sizes, (Do, Ho, Wo) = y sizes, (T, R, S) = filter depth,
height, width; Cg = C/G, Kg = K/G; s(x), s(w), s(y) = bytes per element.

Columns (all float64)
---------------------
Categorical, one-hot
    ``dir_F``, ``dir_B``, ``dir_W``; ``dtype_FP32``, ``dtype_FP16``,
    ``dtype_BF16``, ``dtype_INT8``, ``dtype_other``, ``dtype_mixed`` (x, w, y
    types differ); ``layout_nhwc`` (x channels-last: NHWC / NDHWC),
    ``layout_mixed`` (x, w, y layouts differ), ``is_3d`` (spatial_dims 3).
Raw problem columns
    ``n, c, k, groups, x_d, x_h, x_w, y_d, y_h, y_w, fil_d, fil_h, fil_w,
    pad_*, stride_*, dil_*, bias`` as given, plus ``c_per_group`` (Cg) and
    ``k_per_group`` (Kg).
Log-scaled sizes
    ``log_<col>`` = log2(1 + value) for the sizes above and every derived
    size below.
Analytic
    ``flops`` = 2 · N · K · Do·Ho·Wo · Cg · T·R·S (a multiply-add counts 2;
    the same work in every direction).
    ``bytes_x`` = N·C·Di·Hi·Wi · s(x); ``bytes_w`` = K·Cg·T·R·S · s(w);
    ``bytes_y`` = N·K·Do·Ho·Wo · s(y).
    ``arith_intensity`` = flops / (bytes_x + bytes_w + bytes_y).
    ``out_pixels`` = N·Do·Ho·Wo; ``in_pixels`` = N·Di·Hi·Wi;
    ``filter_size`` = T·R·S.
GEMM-equivalent sizes, per group (G such GEMMs), implicit-GEMM view in which
the tensor being computed is the M x N result
    F (y = w * x):   M = Kg, N = N·Do·Ho·Wo, K = Cg·T·R·S
    B (dx = w^T * dy, a transposed convolution):
                     M = Cg, N = N·Di·Hi·Wi, K = Kg·T·R·S
    W (dw = dy * x^T): M = Kg, N = Cg·T·R·S, K = N·Do·Ho·Wo
    For F and W, 2·M·N·K·G = flops exactly; for B it equals flops when x and y
    have the same spatial size (stride 1, "same" padding). Otherwise the
    transposed view counts per x pixel: with stride s > 1 it includes the
    zero-inserted positions that stride-decomposing kernels skip.
    ``gemm_m, gemm_n, gemm_k`` and ``gemm_tz_m/n/k`` (see alignment).
Shape flags (0/1)
    ``is_1x1`` (T=R=S=1), ``is_3x3`` (2D, R=S=3), ``stride1``, ``pad0``,
    ``dil1`` (every spatial dim), ``square_filter`` (R == S),
    ``grouped`` (G > 1), ``depthwise`` (G > 1 and G == C).
Alignment
    ``tz_<v>`` = number of trailing zero bits of v, capped at 8 (v divisible
    by 2^tz): for Cg, Kg, N, Ho·Wo and the GEMM M/N/K. Vector-width and tile
    constraints of many kernels are divisibility conditions that trees cannot
    derive from the raw value.

Kernel features (``kernel_features(names)``), for models that score
(problem, kernel) pairs: a kernel one-hot (``kernel=<name>``) for a kernel
library's named solvers; for cuDNN engine configurations (``eng<id>_k<knob>=<v>``,
the NVIDIA engine set) the engine one-hot (``engine=eng<id>``) plus one numeric
column per knob id (``knob_k<id>``; ``KNOB_ABSENT`` where the engine has no such
knob). The engine and its knob values identify a configuration exactly, as the
one-hot would, but with tens of columns instead of thousands, and a model can
share what it learns between configurations of one engine.

Data-type sizes: MIOpen writes one type name when x, w and y agree, else the
three names concatenated in the key's in/w/out order ("in" = x for F and y for
B/W). Unknown names count 4 bytes and set ``dtype_other``.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError

#: Bytes per element of MIOpen's data-type names.
DTYPE_BYTES = {"FP64": 8, "FP32": 4, "TF32": 4, "INT32": 4, "FP16": 2, "BF16": 2,
               "INT8": 1, "FP8": 1, "BF8": 1, "INT8x4": 1}
ONE_HOT_DTYPES = ("FP32", "FP16", "BF16", "INT8")
DIRECTIONS = ("F", "B", "W")
SPATIAL = ("d", "h", "w")

REQUIRED_COLUMNS = ["direction", "dtype", "layout_x", "layout_w", "layout_y", "spatial_dims",
                    "n", "c", "k", "groups"] + [
    f"{p}_{s}" for p in ("x", "y", "fil", "pad", "stride", "dil") for s in SPATIAL]

_DTYPE_RE = re.compile("|".join(sorted(map(re.escape, DTYPE_BYTES), key=len, reverse=True)))


def _split_dtype(name: str) -> tuple[str, str, str]:
    """MIOpen data-type field -> (in, w, out) type names."""
    if name in DTYPE_BYTES:
        return name, name, name
    parts = _DTYPE_RE.findall(name)
    if len(parts) == 3 and "".join(parts) == name:
        return parts[0], parts[1], parts[2]
    return name, name, name


def dtype_bytes(problems: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Bytes per element of x, w, y, and a flag for unknown type names (vectorised over rows)."""
    codes, uniques = pd.factorize(problems["dtype"].astype(str))
    table = np.zeros((len(uniques), 4))
    for i, name in enumerate(uniques):  # a handful of distinct type names
        tin, tw, tout = _split_dtype(name)
        table[i] = [DTYPE_BYTES.get(tin, 4), DTYPE_BYTES.get(tw, 4), DTYPE_BYTES.get(tout, 4),
                    float(any(t not in DTYPE_BYTES for t in (tin, tw, tout)))]
    per = table[codes]
    fwd = problems["direction"].to_numpy() == "F"
    # "in" is x for forward, y (dy) for both backward directions.
    bx = np.where(fwd, per[:, 0], per[:, 2])
    by = np.where(fwd, per[:, 2], per[:, 0])
    return bx, per[:, 1], by, per[:, 3]


def _tz(v: np.ndarray, cap: int = 8) -> np.ndarray:
    """Trailing zero bits of positive integers, capped (0 for v <= 0)."""
    v = np.asarray(v, dtype=np.int64)
    out = np.zeros(v.shape, dtype=np.float64)
    for b in range(cap):  # cap steps, vectorised over rows
        out += ((v > 0) & (v % (2 ** (b + 1)) == 0))
    return out


def check_columns(problems: pd.DataFrame) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in problems.columns]
    if missing:
        raise KbenchInputError(
            f"problem features need the canonical convolution columns (docs/data_model.md); "
            f"missing: {', '.join(missing)}")


def problem_features(problems: pd.DataFrame) -> pd.DataFrame:
    """Numeric features of every problem (see the module docstring), same index and order."""
    check_columns(problems)
    p = problems
    g = lambda col: p[col].to_numpy(dtype=np.float64)  # noqa: E731
    n, c, k, groups = g("n"), g("c"), g("k"), np.maximum(g("groups"), 1)
    cg, kg = c / groups, k / groups
    xi = g("x_d") * g("x_h") * g("x_w")
    yo = g("y_d") * g("y_h") * g("y_w")
    fs = g("fil_d") * g("fil_h") * g("fil_w")
    direction = p["direction"].astype(str).to_numpy()
    bx, bw, by, dtype_unknown = dtype_bytes(p)

    f: dict[str, np.ndarray] = {}
    for d in DIRECTIONS:
        f[f"dir_{d}"] = (direction == d).astype(np.float64)
    dtype = p["dtype"].astype(str).to_numpy()
    for t in ONE_HOT_DTYPES:
        f[f"dtype_{t}"] = (dtype == t).astype(np.float64)
    f["dtype_other"] = (~np.isin(dtype, ONE_HOT_DTYPES)).astype(np.float64)
    f["dtype_unknown"] = dtype_unknown
    f["dtype_mixed"] = ((bx != bw) | (bw != by) | ~np.isin(dtype, list(DTYPE_BYTES))).astype(np.float64)
    lx = p["layout_x"].astype(str)
    f["layout_nhwc"] = lx.str.upper().str.endswith("C").to_numpy().astype(np.float64)
    f["layout_mixed"] = ((lx != p["layout_w"].astype(str)) | (lx != p["layout_y"].astype(str))
                         ).to_numpy().astype(np.float64)
    f["is_3d"] = (g("spatial_dims") == 3).astype(np.float64)

    raw = ["n", "c", "k", "groups"] + [f"{q}_{s}" for q in ("x", "y", "fil", "pad", "stride", "dil")
                                       for s in SPATIAL]
    for col in raw:
        f[col] = g(col)
    f["bias"] = g("bias") if "bias" in p.columns else np.zeros(len(p))
    f["c_per_group"], f["k_per_group"] = cg, kg

    flops = 2.0 * n * k * yo * cg * fs
    bytes_x, bytes_w, bytes_y = n * c * xi * bx, k * cg * fs * bw, n * k * yo * by
    f["flops"] = flops
    f["bytes_x"], f["bytes_w"], f["bytes_y"] = bytes_x, bytes_w, bytes_y
    f["arith_intensity"] = flops / np.maximum(bytes_x + bytes_w + bytes_y, 1.0)
    f["out_pixels"], f["in_pixels"], f["filter_size"] = n * yo, n * xi, fs
    is_f, is_b = direction == "F", direction == "B"
    f["gemm_m"] = np.where(is_b, cg, kg)
    f["gemm_n"] = np.select([is_f, is_b], [n * yo, n * xi], cg * fs)
    f["gemm_k"] = np.select([is_f, is_b], [cg * fs, kg * fs], n * yo)

    ones = lambda cols: np.logical_and.reduce([g(col) == 1 for col in cols])  # noqa: E731
    f["is_1x1"] = ones(["fil_d", "fil_h", "fil_w"]).astype(np.float64)
    f["is_3x3"] = ((g("fil_d") == 1) & (g("fil_h") == 3) & (g("fil_w") == 3)).astype(np.float64)
    f["stride1"] = ones(["stride_d", "stride_h", "stride_w"]).astype(np.float64)
    f["pad0"] = np.logical_and.reduce([g(f"pad_{s}") == 0 for s in SPATIAL]).astype(np.float64)
    f["dil1"] = ones(["dil_d", "dil_h", "dil_w"]).astype(np.float64)
    f["square_filter"] = (g("fil_h") == g("fil_w")).astype(np.float64)
    f["grouped"] = (groups > 1).astype(np.float64)
    f["depthwise"] = ((groups > 1) & (groups == c)).astype(np.float64)

    for name, v in (("cg", cg), ("kg", kg), ("n", n), ("hw", g("y_h") * g("y_w")),
                    ("gemm_m", f["gemm_m"]), ("gemm_n", f["gemm_n"]), ("gemm_k", f["gemm_k"])):
        f[f"tz_{name}"] = _tz(np.round(v).astype(np.int64))

    for col in ["n", "c", "k", "groups", "c_per_group", "k_per_group",
                "x_d", "x_h", "x_w", "y_d", "y_h", "y_w", "fil_d", "fil_h", "fil_w",
                "flops", "bytes_x", "bytes_w", "bytes_y", "arith_intensity", "out_pixels",
                "in_pixels", "filter_size", "gemm_m", "gemm_n", "gemm_k"]:
        f[f"log_{col}"] = np.log2(1.0 + np.maximum(f[col], 0.0))
    return pd.DataFrame(f, index=p.index)


#: Features for distance-based models: scale-free (log sizes, flags, one-hots).
DISTANCE_FEATURES = (
    [f"dir_{d}" for d in DIRECTIONS] + [f"dtype_{t}" for t in ONE_HOT_DTYPES]
    + ["dtype_other", "layout_nhwc", "layout_mixed", "is_3d"]
    + [f"log_{c}" for c in ("n", "c", "k", "groups", "x_d", "x_h", "x_w", "y_d", "y_h", "y_w",
                            "fil_d", "fil_h", "fil_w", "flops", "arith_intensity")]
    + [f"{q}_{s}" for q in ("pad", "stride", "dil") for s in ("h", "w")]
    + ["is_1x1", "stride1", "grouped", "depthwise"]
)


def features_for(dataset, ids=None) -> pd.DataFrame:
    """``problem_features`` of a dataset's problems (all, or ``ids`` in the given order),
    indexed by ``problem_id``."""
    problems = dataset.problems
    if ids is not None:
        idx = pd.Index(problems["problem_id"]).get_indexer(pd.Index(ids))
        if (idx < 0).any():
            bad = np.asarray(ids)[idx < 0]
            raise KbenchInputError(
                f"{int((idx < 0).sum())} problem id(s) are not in dataset {dataset.name!r}, "
                f"e.g. {', '.join(map(str, bad[:3]))}")
        problems = problems.iloc[idx]
    out = problem_features(problems)
    out.index = pd.Index(problems["problem_id"].to_numpy(), name="problem_id")
    return out


#: a cuDNN engine configuration name: ``eng<id>`` then ``_k<knob>=<value>`` per knob
ENGINE_NAME = re.compile(r"^eng(\d+)((?:_k\d+=-?\d+)*)$")
KNOB = re.compile(r"_k(\d+)=(-?\d+)")
#: knob column value of an engine without that knob (cuDNN's knob values are small
#: integers >= -1, so a tree separates "absent" with one split)
KNOB_ABSENT = -1000.0
KERNEL_ENCODINGS = ("auto", "onehot", "engine_knobs")


def is_engine_space(names) -> bool:
    """True when every name is a cuDNN engine configuration (``ENGINE_NAME``)."""
    names = pd.Series(list(names), dtype=object).astype(str)
    return len(names) > 0 and bool(names.str.fullmatch(ENGINE_NAME.pattern).all())


def kernel_features(names, encoding: str = "auto") -> pd.DataFrame:
    """Numeric features of kernels (see the module docstring), one row per name, same order.

    ``encoding``: ``onehot`` (``kernel=<name>`` columns), ``engine_knobs`` (every name
    must be an engine configuration), or ``auto``: ``engine_knobs`` when every name is
    one, else ``onehot``.

    >>> kernel_features(["eng1", "eng4_k2=3"]).to_dict("list")  # doctest: +NORMALIZE_WHITESPACE
    {'engine=eng1': [1.0, 0.0], 'engine=eng4': [0.0, 1.0], 'knob_k2': [-1000.0, 3.0]}
    """
    if encoding not in KERNEL_ENCODINGS:
        raise KbenchInputError(f"kernel encoding {encoding!r} is not one of {', '.join(KERNEL_ENCODINGS)}")
    names = pd.Series(list(names), dtype=object).astype(str)
    engines = is_engine_space(names)
    if encoding == "engine_knobs" and not engines:
        bad = names[~names.str.fullmatch(ENGINE_NAME.pattern)]
        raise KbenchInputError(f"kernel encoding 'engine_knobs' needs cuDNN engine configuration names "
                               f"(eng<id>_k<knob>=<value>...); {len(bad)} name(s) are not, e.g. {bad.iloc[0]!r}")
    if encoding == "onehot" or (encoding == "auto" and not engines):
        return pd.DataFrame(np.eye(len(names)), columns=[f"kernel={k}" for k in names])
    engine = "eng" + names.str.extract(r"^eng(\d+)")[0]
    order = sorted(engine.unique(), key=lambda e: int(e[3:]))
    out = {f"engine={e}": (engine == e).to_numpy(dtype=np.float64) for e in order}
    pairs = names.str.extractall(KNOB.pattern)  # one row per (name, knob): columns 0 = id, 1 = value
    if len(pairs):
        wide = pairs.reset_index().pivot(index="level_0", columns=0, values=1)
        for k in sorted(wide.columns, key=int):
            out[f"knob_k{k}"] = (wide[k].reindex(range(len(names))).astype(float)
                                 .fillna(KNOB_ABSENT).to_numpy(dtype=np.float64))
    return pd.DataFrame(out)


class Standardizer:
    """Per-column z-normalisation fitted on one part (the training problems); JSON-serialisable."""

    def __init__(self, columns: list[str] | None = None, mean=None, std=None):
        self.columns = list(columns) if columns is not None else None
        self.mean = None if mean is None else np.asarray(mean, dtype=np.float64)
        self.std = None if std is None else np.asarray(std, dtype=np.float64)

    def fit(self, features: pd.DataFrame, columns: list[str] | None = None) -> Standardizer:
        self.columns = list(columns or features.columns)
        x = features[self.columns].to_numpy(dtype=np.float64)
        self.mean = x.mean(axis=0)
        std = x.std(axis=0)
        self.std = np.where(std > 1e-12, std, 1.0)  # constant columns stay 0 after centring
        return self

    def transform(self, features: pd.DataFrame) -> np.ndarray:
        if self.columns is None:
            raise KbenchInputError("Standardizer: call fit(features) first")
        x = features[self.columns].to_numpy(dtype=np.float64)
        return (x - self.mean) / self.std

    def to_dict(self) -> dict:
        return {"columns": self.columns, "mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> Standardizer:
        return cls(d["columns"], d["mean"], d["std"])

    def __eq__(self, other) -> bool:
        return isinstance(other, Standardizer) and json.dumps(self.to_dict()) == json.dumps(other.to_dict())

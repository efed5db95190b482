"""Tuning-parameter grammars: what a solver's perf-db ``params`` string means.

A grammar names a tunable solver's parameters in MIOpen's serialisation order
(the ``Visit`` order of its ``PerformanceConfig*`` struct, which is the order of
the comma-separated perf-db ``params`` string), lists each parameter's legal
values and states the validity constraints as vectorised predicates on a
*prefix* of the tuple (the first ``length`` parameters) for a given problem, so
a constrained beam search can prune a partial tuple as soon as it is invalid.

ConvAsm1x1U
-----------
Source: ROCm/MIOpen ``src/solver/conv/conv_asm_1x1u.cpp``
(``PerformanceConfigConvAsm1x1U::IsValidValueImpl`` / ``IsValidImpl`` and
``ConvAsm1x1U::IsApplicable``) and ``src/include/miopen/conv/solvers.hpp``
(the struct, ``GetNPerGpr() = 64 / chunk_size``, ``IsValidValue() =
IsValidValueImpl(8)``, ``IsValid(problem) = IsValidImpl(problem, 8)``;
``IsValidPerformanceConfig = IsValidValue() && IsValid(problem)``).
MIOpen itself checks partial tuples with ``IsValidImpl(problem, L)`` when its
own tuning model emits one token at a time (``ModelApplyToken``), and every
condition of ``IsValidImpl`` for length ``L`` reads only the first ``L``
parameters, so the conditions only accumulate with ``L``: a tuple that is valid
at length 8 is valid at every shorter length (tested).

The problem enters in MIOpen's *direction-relative* terms (``ProblemDescription``
is built from (x, w, y) for forward and (dy, w, dx) for backward data):
``in_channels``/``out_channels`` are C/K for forward and K/C for backward data,
``img_hw = GetOutHeight() * GetOutWidth()`` is y's H*W for forward and x's
(dx's) H*W for backward data. :func:`asm1x1u_problem_inputs` derives these
from kbench's canonical (true x/w/y) problem columns.

Parameters (``params`` order) and legal values (``IsValidValueImpl``)::

    read_size         1..4
    k_mult            1, 4, 8, 12, ..., 32
    chunks_per_wave   1..16
    chunk_size        1, 2, 4, ..., 64
    n_mult            1..8
    c_mult            1, 2, 4, ..., 32
    waves_c_in_group  1..8
    waves_k_in_group  1, 2, 4, 8

Constraints (``IsValidImpl``), with ``e = 4 / sizeof(dtype)`` elements per
dword (1 for FP32, 2 for FP16), checked once the named parameters are known:

* length > 1: ``k_mult % e == 0``; backward data: ``out_channels % k_mult == 0``
* length > 2: ``read_size * e <= chunks_per_wave``; ``chunks_per_wave % e == 0``
* length > 3: ``chunks_per_wave <= ceil(img_hw / chunk_size)``
* length > 4: ``n_mult <= ceil(batch / (64 / chunk_size))``
* length > 5: ``c_mult % e == 0``; ``vgprs < 256``; ``25 + 2 * k_mult * c_mult < 102``
  where ``vgprs = 4 + 2 * ceil(chunks_per_wave * n_mult * c_mult / e)
  + chunks_per_wave * n_mult * k_mult + (img_hw % e != 0) + 1``
* length > 6: ``waves_c_in_group <= in_channels``; with
  ``c_per_wave = ceil(in_channels / waves_c_in_group)`` and
  ``c_per_last_wave = in_channels - c_per_wave * (waves_c_in_group - 1)``,
  both divisible by ``c_mult``
* length > 7: ``k_mult * waves_k_in_group <= out_channels``;
  ``waves_c_in_group * waves_k_in_group <= 16``;
  ``(256 // vgprs) * 4 >= waves_c_in_group * waves_k_in_group``
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError, suggest

# --------------------------------------------------------------------------
# Parameter names per solver (MIOpen's Visit order = perf-db params order).
# Only solvers listed here get typed parameter columns in a tuning dataset.
# Sources (ROCm/MIOpen src/include/miopen/conv/solvers.hpp):
#   PerformanceConfigConvAsm1x1U::Visit, PerformanceConfigConvBinWinogradRxS::Visit,
#   PerformanceConvMlirIgemm::Visit (shared by ConvMlirIgemmFwd/Bwd/WrW).
# --------------------------------------------------------------------------
ASM1X1U_PARAMS = (
    "read_size", "k_mult", "chunks_per_wave", "chunk_size",
    "n_mult", "c_mult", "waves_c_in_group", "waves_k_in_group",
)
_MLIR_IGEMM_PARAMS = (
    "BlockSize", "GemmMPerBlock", "GemmNPerBlock", "GemmKPerBlock",
    "GemmMPerThread", "GemmNPerThread",
)
SOLVER_PARAMS: dict[str, tuple[str, ...]] = {
    "ConvAsm1x1U": ASM1X1U_PARAMS,
    "ConvBinWinogradRxSf2x3": ("n_groups",),
    "ConvBinWinogradRxSf3x2": ("n_groups",),
    "ConvMlirIgemmFwd": _MLIR_IGEMM_PARAMS,
    "ConvMlirIgemmBwd": _MLIR_IGEMM_PARAMS,
    "ConvMlirIgemmWrW": _MLIR_IGEMM_PARAMS,
}


def _range(lo, hi):
    return tuple(range(lo, hi + 1))


def _pow2(lo, hi):
    return tuple(v for v in (1 << i for i in range(0, 31)) if lo <= v <= hi)


# Legal values (IsValidValueImpl: IsLinear<L,H>, IsTwoPower<L,H>, Is_1_4_8_12_to_32).
ASM1X1U_LEGAL_VALUES: dict[str, tuple[int, ...]] = {
    "read_size": _range(1, 4),
    "k_mult": (1,) + tuple(4 * i for i in _range(1, 8)),
    "chunks_per_wave": _range(1, 16),
    "chunk_size": _pow2(1, 64),
    "n_mult": _range(1, 8),
    "c_mult": _pow2(1, 32),
    "waves_c_in_group": _range(1, 8),
    "waves_k_in_group": _pow2(1, 8),
}

# Bytes per element of the MIOpen data types ConvAsm1x1U can see.
_TYPE_SIZE = {"FP32": 4, "FP16": 2, "BF16": 2, "INT8": 1, "FP64": 8}


def _i64(v) -> np.ndarray:
    """Integer array; missing, non-numeric or non-integral values become -1 (never legal)."""
    a = np.asarray(v)
    if a.dtype.kind in "iub":
        return a.astype(np.int64)
    f = pd.to_numeric(pd.Series(np.ravel(a), dtype=object), errors="coerce").to_numpy(dtype=float)
    f = np.where(np.isnan(f) | (f != np.round(f)), -1, f)
    return f.astype(np.int64).reshape(a.shape)


def asm1x1u_problem_inputs(problems: pd.DataFrame) -> pd.DataFrame:
    """The problem quantities ConvAsm1x1U's constraints read, in MIOpen's terms.

    From canonical problem columns (``direction``, ``dtype``, ``n``, ``c``,
    ``k``, ``x_h``, ``x_w``, ``y_h``, ``y_w``). Returns ``elements_in_dword``,
    ``in_channels``, ``out_channels``, ``img_hw``, ``batch`` and
    ``backward_data`` (bool), one row per problem, same index.
    """
    need = ["direction", "dtype", "n", "c", "k", "x_h", "x_w", "y_h", "y_w"]
    missing = [c for c in need if c not in problems]
    if missing:
        raise KbenchInputError(f"problem table lacks column(s) {missing} needed by ConvAsm1x1U")
    fwd = (problems["direction"] == "F").to_numpy()
    size = problems["dtype"].map(_TYPE_SIZE).to_numpy(dtype=float)
    # Unknown / unsupported types (mixed types, FP64...) get 0: no tuple is valid.
    eid = np.where(np.isnan(size) | (size > 4), 0, 4 // np.where(np.isnan(size), 4, size))
    c, k = problems["c"].to_numpy(np.int64), problems["k"].to_numpy(np.int64)
    y_hw = problems["y_h"].to_numpy(np.int64) * problems["y_w"].to_numpy(np.int64)
    x_hw = problems["x_h"].to_numpy(np.int64) * problems["x_w"].to_numpy(np.int64)
    return pd.DataFrame({
        "elements_in_dword": eid.astype(np.int64),
        "in_channels": np.where(fwd, c, k),
        "out_channels": np.where(fwd, k, c),
        "img_hw": np.where(fwd, y_hw, x_hw),
        "batch": problems["n"].to_numpy(np.int64),
        "backward_data": (problems["direction"] == "B").to_numpy(),
    }, index=problems.index)


def _in_set(v: np.ndarray, legal) -> np.ndarray:
    return np.isin(v, np.asarray(legal, dtype=np.int64))


def asm1x1u_prefix_valid(values: Mapping[str, np.ndarray] | pd.DataFrame,
                         inputs: Mapping[str, np.ndarray] | pd.DataFrame,
                         length: int | None = None) -> np.ndarray:
    """``IsValidImpl(problem, length)`` (which includes ``IsValidValueImpl``), vectorised.

    ``values`` maps parameter name -> int array for at least the first
    ``length`` parameters of :data:`ASM1X1U_PARAMS` (default: all 8);
    ``inputs`` is :func:`asm1x1u_problem_inputs` (rows aligned with ``values``,
    or a single row broadcast to all). Missing / NaN values are invalid.
    Returns a bool array.
    """
    L = len(ASM1X1U_PARAMS) if length is None else int(length)
    if not 0 <= L <= len(ASM1X1U_PARAMS):
        raise KbenchInputError(f"prefix length must be in 0..8, got {length}")
    names = ASM1X1U_PARAMS[:L]
    missing = [p for p in names if p not in values]
    if missing:
        raise KbenchInputError(f"ConvAsm1x1U prefix of length {L} lacks parameter(s) {missing}")
    v = {p: _i64(values[p]) for p in names}
    shapes = {np.shape(a) for a in v.values()}
    n = len(np.atleast_1d(next(iter(v.values())))) if v else len(np.atleast_1d(inputs["batch"]))
    if len(shapes) > 1:
        raise KbenchInputError("ConvAsm1x1U parameter arrays differ in length")

    def inp(name):
        a = _i64(inputs[name]) if name != "backward_data" else np.asarray(inputs[name], dtype=bool)
        return np.broadcast_to(a, (n,)) if a.ndim == 0 or a.shape[0] == 1 else a

    eid, cin, cout = inp("elements_in_dword"), inp("in_channels"), inp("out_channels")
    img_hw, batch, bwd = inp("img_hw"), inp("batch"), inp("backward_data")

    ok = np.ones(n, dtype=bool)
    # IsValidValueImpl(length): every known parameter takes a legal value.
    for p in names:
        ok &= _in_set(v[p], ASM1X1U_LEGAL_VALUES[p])
    ok &= eid > 0
    def safe(a):  # guards divisions on already-invalid rows
        return np.where(a == 0, 1, a)
    e = safe(eid)
    if L > 1:
        km = v["k_mult"]
        ok &= (km % e) == 0
        ok &= ~bwd | (cout % safe(km) == 0)
    if L > 2:
        rs, cpw = v["read_size"], v["chunks_per_wave"]
        ok &= rs * eid <= cpw
        ok &= (cpw % e) == 0
    if L > 3:
        cs = safe(v["chunk_size"])
        total_chunks = (img_hw + cs - 1) // cs
        ok &= v["chunks_per_wave"] <= total_chunks
    if L > 4:
        n_per_gpr = safe(64 // safe(v["chunk_size"]))
        total_n_blocks = (batch + n_per_gpr - 1) // n_per_gpr
        ok &= v["n_mult"] <= total_n_blocks
    if L > 5:
        cpw, nm, cm, km = v["chunks_per_wave"], v["n_mult"], v["c_mult"], v["k_mult"]
        in_gprs = (cpw * nm * cm + e - 1) // e
        acc_gprs = cpw * nm * km
        vgprs = 4 + 2 * in_gprs + acc_gprs + (img_hw % e != 0).astype(np.int64) + 1
        ok &= (cm % e) == 0
        ok &= vgprs < 256
        ok &= (25 + 2 * km * cm) < 102
    if L > 6:
        wc, cm = v["waves_c_in_group"], safe(v["c_mult"])
        ok &= wc <= cin
        wcs = safe(wc)
        c_per_wave = (cin + wcs - 1) // wcs
        c_per_last_wave = cin - c_per_wave * (wcs - 1)
        # MIOpen's C++ % truncates towards zero; divisibility is sign-independent.
        ok &= (c_per_wave % cm == 0) & (c_per_last_wave % cm == 0)
    if L > 7:
        wk, wc, km = v["waves_k_in_group"], v["waves_c_in_group"], v["k_mult"]
        ok &= km * wk <= cout
        ok &= wc * wk <= 16
        max_waves_per_cu = (256 // np.maximum(vgprs, 1)) * 4
        ok &= max_waves_per_cu >= wc * wk
    return ok


def asm1x1u_applicable(problems: pd.DataFrame) -> pd.Series:
    """The problem-side conditions of ``ConvAsm1x1U::IsApplicable`` (bool per problem).

    Checks what a problem description decides: 2D, forward or backward data,
    FP32/FP16, uncast, default NCHW layout, 1x1 filter, zero pad, stride
    <= 2 and equal in H and W, dilation 1, no bias, one group, channel counts
    divisible by the elements per dword, ``img_hw >= e``, ``K >= 4`` for
    FP16, ``K % 4 == 0`` for FP16 backward data, and the size limits.
    The device conditions (gfx9, no xnack, code-object version, asm kernels
    enabled, packed tensors) are not problem properties and are not checked.
    """
    inp = asm1x1u_problem_inputs(problems)
    p = problems
    eid = inp["elements_in_dword"].to_numpy()
    e = np.where(eid == 0, 1, eid)
    cin, cout, n = (inp[c].to_numpy() for c in ("in_channels", "out_channels", "batch"))
    img_hw = inp["img_hw"].to_numpy()
    fwd = (p["direction"] == "F").to_numpy()
    ok = (p["spatial_dims"] == 2).to_numpy().copy()
    ok &= p["direction"].isin(["F", "B"]).to_numpy()
    ok &= p["dtype"].isin(["FP32", "FP16"]).to_numpy()
    if "cast" in p:
        ok &= (p["cast"].fillna("") == "").to_numpy()
    ok &= (p["layout"] == "NCHW").to_numpy()
    ok &= ((p["pad_h"] == 0) & (p["pad_w"] == 0)).to_numpy()
    ok &= ((p["stride_w"] <= 2) & (p["stride_w"] == p["stride_h"])).to_numpy()
    ok &= ((p["fil_h"] == 1) & (p["fil_w"] == 1)).to_numpy()
    ok &= ((p["dil_h"] == 1) & (p["dil_w"] == 1)).to_numpy()
    ok &= (p["bias"] == 0).to_numpy()
    ok &= (p["groups"] == 1).to_numpy()
    ok &= eid > 0
    ok &= (cin % e == 0) & (cout % e == 0)
    ok &= img_hw >= eid
    ok &= (eid == 1) | (cout >= 4)
    ok &= ~((p["direction"] == "B").to_numpy() & (eid != 1)) | (cout % 4 == 0)
    # Direction-relative "in"/"out" spatial sizes (in = x for F, dy for B).
    in_hw_h = np.where(fwd, p["x_h"], p["y_h"]).astype(np.int64)
    in_hw_w = np.where(fwd, p["x_w"], p["y_w"]).astype(np.int64)
    out_h = np.where(fwd, p["y_h"], p["x_h"]).astype(np.int64)
    out_w = np.where(fwd, p["y_w"], p["x_w"]).astype(np.int64)
    ok &= 4 * in_hw_w * in_hw_h * cin < (1 << 24)
    ok &= 4 * out_w * out_h * cout < (1 << 24)
    # AsmImgHeight/Width: the subsampled (output) image for strided forward, else "in".
    strided_fwd = fwd & ((p["stride_h"] > 1) | (p["stride_w"] > 1)).to_numpy()
    h_w = np.where(strided_fwd, out_h * out_w, in_hw_h * in_hw_w)
    ok &= (n < 2**16) & (cin < 2**16) & (cout < 2**16)
    ok &= (cin * h_w < 2**24) & (cout * h_w < 2**24)
    ok &= (n * cin * h_w < 2**29) & (n * cout * h_w < 2**29)
    ok &= cin * cout < 2**29  # C*K*R*S with R = S = 1
    return pd.Series(ok, index=problems.index, name="applicable")


@dataclass(frozen=True)
class Grammar:
    """A solver's tuning grammar: parameters, legal values and validity predicates.

    ``prefix_valid(values, inputs, length)`` -> bool array, where ``inputs =
    problem_inputs(problems)``; ``length=None`` means the full tuple, which is
    MIOpen's ``IsValidPerformanceConfig``.
    """

    solver: str
    params: tuple[str, ...]
    legal_values: dict[str, tuple[int, ...]]
    problem_inputs: Callable[[pd.DataFrame], pd.DataFrame]
    prefix_valid: Callable[..., np.ndarray]
    applicable: Callable[[pd.DataFrame], pd.Series]
    source: str = field(default="")

    def is_valid(self, values, problems: pd.DataFrame, length: int | None = None) -> np.ndarray:
        """Validity of (partial) tuples for canonical problem rows (aligned)."""
        return self.prefix_valid(values, self.problem_inputs(problems), length)

    def valid_next_values(self, prefix: np.ndarray, inputs: pd.DataFrame) -> np.ndarray:
        """For each row's prefix (an ``(N, L)`` int array, ``L < len(params)``),
        a ``(N, V)`` bool mask over ``legal_values[params[L]]``: which next
        values keep the prefix valid (what a constrained beam search may extend).
        ``inputs`` has N rows (or one, broadcast)."""
        prefix = np.asarray(prefix, dtype=np.int64)
        if prefix.ndim != 2 or prefix.shape[1] >= len(self.params):
            raise KbenchInputError(f"prefix must be (N, L) with L < {len(self.params)}")
        n, L = prefix.shape
        cand = np.asarray(self.legal_values[self.params[L]], dtype=np.int64)
        V = len(cand)
        vals = {p: np.repeat(prefix[:, i], V) for i, p in enumerate(self.params[:L])}
        vals[self.params[L]] = np.tile(cand, n)
        inp = pd.DataFrame(inputs)
        if len(inp) == 1:
            inp = inp.iloc[np.zeros(n * V, dtype=np.int64)]
        else:
            inp = inp.iloc[np.repeat(np.arange(n), V)]
        inp = {c: inp[c].to_numpy() for c in inp.columns}
        return self.prefix_valid(vals, inp, L + 1).reshape(n, V)


CONV_ASM_1X1U = Grammar(
    solver="ConvAsm1x1U",
    params=ASM1X1U_PARAMS,
    legal_values=ASM1X1U_LEGAL_VALUES,
    problem_inputs=asm1x1u_problem_inputs,
    prefix_valid=asm1x1u_prefix_valid,
    applicable=asm1x1u_applicable,
    source="ROCm/MIOpen src/solver/conv/conv_asm_1x1u.cpp, src/include/miopen/conv/solvers.hpp",
)

GRAMMARS: dict[str, Grammar] = {"ConvAsm1x1U": CONV_ASM_1X1U}


def get_grammar(solver: str) -> Grammar:

    if solver not in GRAMMARS:
        raise KbenchInputError(
            f"no tuning grammar for solver {solver!r}; known: {sorted(GRAMMARS)}."
            + suggest(solver, GRAMMARS)
        )
    return GRAMMARS[solver]

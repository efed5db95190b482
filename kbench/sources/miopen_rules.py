"""The ``rules`` heuristic: a hand-written decision list for MIOpen convolution solvers.

It is the reference heuristic for speed-up on every AMD dataset. ``kbench build-data``
writes its choice per problem into the dataset's ``heuristics`` table
(:func:`rules_heuristics`), so scoring reads data and never runs this code; the ``rules``
baseline (``baselines/rules.py``) ranks with the same functions. How the rules rank, and
why each rule says what it says, is in that baseline's docstring.

This module sits in the sources layer: it reads the problems and kernels tables only.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

#: name of the heuristic in the ``heuristics`` table
HEURISTIC_NAME = "rules"


#: family -> name patterns (regular expressions), in preference order inside the family.
#: A kernel belongs to the first family (in this dict's order) with a matching pattern.
FAMILIES: dict[str, list[str]] = {
    "naive": [r"Naive"],
    "fft": [r"^fft$"],
    "gemm_1x1_s1": [r"^GemmFwd1x1_0_1$", r"^GemmBwd1x1_stride1$", r"^GemmWrw1x1_stride1$"],
    "gemm_1x1_s2": [r"^GemmFwd1x1_0_2$", r"^GemmBwd1x1_stride2$"],
    "gemm_rest": [r"^GemmFwdRest$", r"^GemmBwdRest$", r"^GemmWrwUniversal$", r"^Gemm"],
    # channels-last implicit GEMM: the asm NHWC kernels and the composable-kernel (CK) ones
    "igemm_nhwc": [r"NHWC$", r"^ConvHipImplicitGemm(3D)?Group", r"^ConvHipImplicitGemm(Fwd|Bwd|Wrw)Xdlops$"],
    # implicit GEMM on the matrix cores: MLIR (broadest coverage), asm, then the HIP V4Rx kernels
    "igemm_xdlops": [r"^ConvMlirIgemm\w*Xdlops$", r"^ConvAsmImplicitGemm\w*Xdlops$",
                     r"^ConvHipImplicitGemm\w*Xdlops$", r"^ConvHipImplicitGemm\w*Xdlops\w*"],
    # implicit GEMM without matrix cores (older GPUs; also the fallback on xdlops GPUs)
    "igemm_dlops": [r"^ConvMlirIgemm(Fwd|Bwd|WrW)$", r"^ConvCkIgemm", r"^ConvAsmImplicitGemmV4R1",
                    r"^ConvHipImplicitGemmV4R4", r"^ConvHipImplicitGemmV4R1", r"^ConvHipImplicitGemmBwdDataV1R1",
                    r"ImplicitGemm|Igemm"],
    "winograd_3x3": [r"^ConvBinWinograd3x3U$", r"^ConvWinograd3x3MultipassWrW"],
    "winograd_rxs": [r"^ConvBinWinogradRxSf2x3$", r"^ConvBinWinogradRxSf3x2$", r"^ConvBinWinogradRxSf2x3g1$",
                     r"^ConvBinWinogradRxS$", r"Winograd"],
    "direct_1x1": [r"^ConvAsm1x1U$", r"^ConvAsm1x1UV2$", r"^ConvAsmBwdWrW1x1$", r"^ConvOclDirectFwd1x1$",
                   r"^ConvOclBwdWrW1x1$"],
    "direct_3x3": [r"^ConvAsm3x3U$", r"^ConvAsmBwdWrW3x3$"],
    "direct": [r"^ConvOclDirectFwd$", r"^ConvOclBwdWrW2<", r"^ConvOclBwdWrW2NonTunable$", r"^ConvOclBwdWrW53$",
               r"^ConvOclDirectFwd", r"^ConvAsm", r"^ConvOcl", r"Direct"],
    "other": [r"."],
}

#: order of the families that no rule named; naive always last
DEFAULT_ORDER = ["igemm_xdlops", "igemm_nhwc", "igemm_dlops", "gemm_rest", "gemm_1x1_s1", "gemm_1x1_s2",
                 "winograd_rxs", "winograd_3x3", "direct_1x1", "direct_3x3", "direct", "fft", "other", "naive"]


def _conditions(p: pd.DataFrame) -> dict[str, np.ndarray]:
    """Named boolean conditions over problems (the problems table's columns).

    The shape tests are the ones of ``kbench_baselines.features.problem_features`` (``is_1x1``,
    ``stride1``, ``pad0``, ``dil1``, ``is_3x3``, ``grouped``, ``depthwise``, ``layout_nhwc``),
    written out here so that the data layer does not depend on the baselines.
    """
    g = lambda col: p[col].to_numpy(dtype=np.float64)  # noqa: E731
    ones = lambda cols: np.logical_and.reduce([g(col) == 1 for col in cols])  # noqa: E731
    dtype = p["dtype"].astype(str).to_numpy()
    is2d = p["spatial_dims"].to_numpy() == 2
    fil_le7 = (g("fil_h") <= 7) & (g("fil_w") <= 7)
    is_1x1 = ones(["fil_d", "fil_h", "fil_w"])
    stride1 = ones(["stride_d", "stride_h", "stride_w"])
    pad0 = np.logical_and.reduce([g(f"pad_{s}") == 0 for s in ("d", "h", "w")])
    dil1 = ones(["dil_d", "dil_h", "dil_w"])
    is_3x3 = (g("fil_d") == 1) & (g("fil_h") == 3) & (g("fil_w") == 3)
    groups = np.maximum(g("groups"), 1)
    nhwc = p["layout_x"].astype(str).str.upper().str.endswith("C").to_numpy()
    return {
        "int8": dtype == "INT8",
        "int8_1x1_s1": (dtype == "INT8") & is_1x1 & stride1 & pad0,
        "depthwise": (groups > 1) & (groups == g("c")),
        "grouped": groups > 1,
        "nhwc": nhwc,
        "1x1_s1": is_1x1 & stride1 & pad0,
        "1x1_s2": is_1x1 & pad0 & (g("stride_h") == 2) & (g("stride_w") == 2) & (g("stride_d") == 1),
        "3d": ~is2d,
        "3x3_s1_fp32": is2d & is_3x3 & stride1 & dil1 & (dtype == "FP32"),
        "fp32_rxs_s1": is2d & fil_le7 & stride1 & dil1 & (dtype == "FP32"),
    }


#: The decision list: (rule name, condition name, families to try first). First match wins.
RULES: list[tuple[str, str, list[str]]] = [
    ("int8_1x1_s1", "int8_1x1_s1", ["gemm_1x1_s1", "igemm_xdlops", "gemm_rest"]),
    ("int8", "int8", ["igemm_xdlops", "gemm_rest", "igemm_dlops"]),
    ("depthwise", "depthwise", ["direct", "igemm_nhwc", "igemm_xdlops", "igemm_dlops", "gemm_rest"]),
    ("grouped", "grouped", ["igemm_nhwc", "igemm_xdlops", "direct", "igemm_dlops", "gemm_rest"]),
    ("nhwc", "nhwc", ["igemm_nhwc", "igemm_xdlops", "igemm_dlops"]),
    ("1x1_s1", "1x1_s1", ["gemm_1x1_s1", "direct_1x1", "igemm_xdlops", "igemm_dlops", "gemm_rest"]),
    ("1x1_s2", "1x1_s2", ["gemm_1x1_s2", "direct_1x1", "igemm_xdlops", "igemm_dlops", "gemm_rest"]),
    ("3d", "3d", ["igemm_xdlops", "igemm_nhwc", "igemm_dlops", "gemm_rest"]),
    ("3x3_s1_fp32", "3x3_s1_fp32", ["winograd_3x3", "winograd_rxs", "igemm_xdlops", "direct_3x3", "igemm_dlops"]),
    ("fp32_rxs_s1", "fp32_rxs_s1", ["winograd_rxs", "igemm_xdlops", "igemm_dlops", "gemm_rest"]),
    ("default", None, ["igemm_xdlops", "igemm_dlops", "igemm_nhwc", "gemm_rest"]),
]
RULE_NAMES = [r[0] for r in RULES]


def kernel_family(names) -> dict[str, str]:
    """kernel name -> rules family (first matching pattern in :data:`FAMILIES`)."""
    out = {}
    for name in names:
        for fam, pats in FAMILIES.items():
            if any(re.search(p, name) for p in pats):
                out[name] = fam
                break
    return out


def _within_family_key(name: str, fam: str) -> tuple[int, str]:
    pats = FAMILIES[fam]
    return next(i for i, p in enumerate(pats) if re.search(p, name)), name


def family_members(names) -> dict[str, list[str]]:
    """family -> its kernels among ``names``, in preference order."""
    fam = kernel_family(names)
    out: dict[str, list[str]] = {f: [] for f in FAMILIES}
    for name, f in fam.items():
        out[f].append(name)
    return {f: sorted(ks, key=lambda k, f=f: _within_family_key(k, f)) for f, ks in out.items()}


def rule_rankings(kernels: list[str], kdirs: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(rule, direction) -> the full kernel ranking for that rule (only kernels of the direction)."""
    members = family_members(kernels)
    out = {}
    for rule, _, head in RULES:
        fams = head + [f for f in DEFAULT_ORDER if f not in head and f != "naive"] + ["naive"]
        for d in ("F", "B", "W"):
            out[(rule, d)] = [k for f in fams for k in members[f] if d in kdirs.get(k, set())]
    return out


def which_rule(problems: pd.DataFrame) -> np.ndarray:
    """Name of the first rule that fires, per problem."""
    cond = _conditions(problems)
    choices = [cond[c] for _, c, _ in RULES if c is not None]
    return np.select(choices, RULE_NAMES[:len(choices)], default="default").astype(object)


def kernel_directions(kernels: pd.DataFrame) -> dict[str, set[str]]:
    """kernel -> the directions it runs in (the kernels table's ``directions`` column)."""
    dirs = kernels["directions"].fillna("").astype(str).str.split(",")
    return {name: {d.strip() for d in ds if d.strip()} for name, ds in zip(kernels["kernel"], dirs)}


def rules_rankings(problems: pd.DataFrame, kernels: list[str], kdirs: dict[str, set[str]]) -> np.ndarray:
    """The rules' full ranking string (kernels separated by ';') of every row of ``problems``."""
    table = {k: ";".join(v) for k, v in rule_rankings(sorted(kernels), kdirs).items()}
    key = pd.Series(which_rule(problems)) + "|" + problems["direction"].astype(str).to_numpy()
    lookup = pd.Series({f"{r}|{d}": s for (r, d), s in table.items()})
    return key.map(lookup).fillna("").to_numpy()


def rules_heuristics(problems: pd.DataFrame, runtimes: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    """The ``heuristics`` table of an MIOpen dataset: the rules' ranking of every problem.

    Columns as in the collected NVIDIA sets: ``problem_id, heuristic, rank, kernel`` (rank 0
    first). Each ranking is cut after its first kernel measured on the problem: no scoring
    rule reads a candidate past it (the first listed kernel is always applicable), so the
    table holds every choice the full ranking could give in a few rows per problem.
    A ranking with no measured kernel is kept whole.
    """
    rankings = rules_rankings(problems, list(kernels["kernel"].astype(str)), kernel_directions(kernels))
    long = pd.DataFrame({"problem_id": problems["problem_id"].astype(str).to_numpy(), "kernel": rankings})
    long["kernel"] = long["kernel"].str.split(";")
    long = long.explode("kernel", ignore_index=True)
    long = long[long["kernel"].notna() & (long["kernel"] != "")].reset_index(drop=True)
    long["rank"] = long.groupby("problem_id", sort=False).cumcount()
    measured = pd.MultiIndex.from_frame(runtimes[["problem_id", "kernel"]].astype(str))
    is_measured = pd.MultiIndex.from_frame(long[["problem_id", "kernel"]]).isin(measured)
    # rank of the first measured kernel per problem; problems without one keep every row
    first = pd.Series(np.where(is_measured, long["rank"], np.iinfo(np.int32).max)).groupby(
        long["problem_id"].to_numpy(), sort=False).transform("min").to_numpy()
    keep = long["rank"].to_numpy() <= first
    out = long[keep].reset_index(drop=True)
    return pd.DataFrame({"problem_id": out["problem_id"], "heuristic": HEURISTIC_NAME,
                         "rank": out["rank"].astype(np.int16), "kernel": out["kernel"]})

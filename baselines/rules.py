"""``rules``: a hand-written decision list for MIOpen convolution solvers.

This is the "hand-tuned heuristic" that learned models are compared against
(the reference heuristic for speed-up on every AMD dataset). It was written
from domain knowledge of the solvers (their names and what they implement),
**not fitted on data**: ``fit`` learns nothing, and no threshold below came
from the measurements.

How it ranks
------------
1. Every kernel name is put in one *family* by the first matching pattern in
   :data:`FAMILIES` (pattern order is also the order inside the family).
2. The first rule in :data:`RULES` whose condition holds for the problem
   names the families to try first, in order.
3. The remaining families follow in :data:`DEFAULT_ORDER`; the naive
   reference kernels always come last.
4. Only kernels of the dataset that can run in the problem's direction are
   listed (the ``directions`` column of the kernels table).

The rules and why
-----------------
``int8``        INT8: 1x1 stride-1 goes to the rocBLAS 1x1 GEMM, else the
                xdlops implicit GEMM (MLIR handles int8) and the im2col GEMM.
``depthwise``   groups == C > 1: almost no reuse, memory bound; group-aware
                direct kernels first, then grouped implicit GEMM.
``grouped``     groups > 1: implicit-GEMM kernels that take a group count
                (the NHWC asm and CK group kernels, then MLIR), then direct,
                then per-group GEMM.
``nhwc``        channels-last x: the NHWC implicit-GEMM kernels are written
                for that layout; the NCHW-only GEMM and Winograd kernels are
                not used.
``1x1_s1``      1x1 filter, stride 1, no padding: the convolution *is* a GEMM
                (M = K, N = N*H*W, K = C), so the rocBLAS 1x1 GEMM first, then
                the hand-written 1x1 assembly kernels.
``1x1_s2``      1x1 filter, stride 2, no padding: the strided-1x1 GEMM and the
                1x1 assembly kernel that supports stride 2.
``3d``          a 3D problem (the key has depth fields): the 2D-only assembly,
                Winograd and direct kernels do not apply; implicit GEMM, then
                GEMM.
``3x3_s1_fp32`` 2D 3x3, stride 1, dilation 1, FP32, no groups: Winograd F(2,3)
                does 2.25x fewer multiplies; the 3x3 Winograd kernel first,
                then the RxS Winograd kernels.
``fp32_rxs_s1`` other 2D FP32 filters up to 7x7 with stride 1, dilation 1:
                the RxS Winograd kernels first (they decompose any filter).
``default``     everything else (half precision, strided, large or dilated
                filters): implicit GEMM on the matrix cores (xdlops), then the
                non-xdlops implicit GEMM, then im2col GEMM.

Vectorised: the rule index is one ``np.select`` over all problems; each
(rule, direction) pair has one fixed ranking string, built once.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from baselines.base import Baseline, dataset_library, kernel_directions, predictions_frame, problems_of
from baselines.features import problem_features

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


def _conditions(p: pd.DataFrame, f: pd.DataFrame) -> dict[str, np.ndarray]:
    """Named boolean conditions over problems (``p``: problem columns, ``f``: problem_features)."""
    dtype = p["dtype"].astype(str).to_numpy()
    is2d = p["spatial_dims"].to_numpy() == 2
    fil_le7 = (p["fil_h"].to_numpy() <= 7) & (p["fil_w"].to_numpy() <= 7)
    return {
        "int8": dtype == "INT8",
        "int8_1x1_s1": (dtype == "INT8") & (f["is_1x1"] == 1).to_numpy() & (f["stride1"] == 1).to_numpy()
        & (f["pad0"] == 1).to_numpy(),
        "depthwise": (f["depthwise"] == 1).to_numpy(),
        "grouped": (f["grouped"] == 1).to_numpy(),
        "nhwc": (f["layout_nhwc"] == 1).to_numpy(),
        "1x1_s1": (f["is_1x1"] == 1).to_numpy() & (f["stride1"] == 1).to_numpy() & (f["pad0"] == 1).to_numpy(),
        "1x1_s2": (f["is_1x1"] == 1).to_numpy() & (f["pad0"] == 1).to_numpy()
        & (p["stride_h"].to_numpy() == 2) & (p["stride_w"].to_numpy() == 2) & (p["stride_d"].to_numpy() == 1),
        "3d": ~is2d,
        "3x3_s1_fp32": is2d & (f["is_3x3"] == 1).to_numpy() & (f["stride1"] == 1).to_numpy()
        & (f["dil1"] == 1).to_numpy() & (dtype == "FP32"),
        "fp32_rxs_s1": is2d & fil_le7 & (f["stride1"] == 1).to_numpy() & (f["dil1"] == 1).to_numpy()
        & (dtype == "FP32"),
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
    cond = _conditions(problems, problem_features(problems))
    choices = [cond[c] for _, c, _ in RULES if c is not None]
    return np.select(choices, RULE_NAMES[:len(choices)], default="default").astype(object)


def rules_reference(dataset, ids=None) -> pd.DataFrame:
    """The ``rules`` heuristic's predictions (``problem_id, ranking``) for ``ids`` (default: all)."""
    ids = dataset.problems["problem_id"] if ids is None else ids
    return Rules().predict(dataset, ids)


def rules_report(dataset, ids=None) -> pd.DataFrame:
    """Per problem: the rule that fired and the family of the ranking's first kernel."""
    ids = dataset.problems["problem_id"] if ids is None else ids
    problems = problems_of(dataset, ids)
    preds = Rules().predict(dataset, problems["problem_id"])
    first = preds["ranking"].str.split(";").str[0]
    fam = kernel_family(sorted(set(first)))
    return pd.DataFrame({"problem_id": preds["problem_id"], "direction": problems["direction"],
                         "rule": which_rule(problems), "first_kernel": first, "first_family": first.map(fam)})


class Rules(Baseline):
    name = "rules"
    description = "hand-written MIOpen decision list (not fitted); reference heuristic for AMD speed-ups"

    def supports(self, dataset) -> bool:
        return super().supports(dataset) and dataset_library(dataset) == "MIOpen"

    def fit(self, dataset, train_ids=None, valid_ids=None, seed: int = 0):
        """Nothing to learn: the rules are fixed. Kept for the common interface."""
        self.seed = seed
        return self

    def predict(self, dataset, ids) -> pd.DataFrame:
        problems = problems_of(dataset, ids)
        kernels = sorted(dataset.kernels["kernel"].astype(str)) if dataset.kernels is not None \
            else sorted(dataset.runtimes["kernel"].astype(str).unique())
        table = {k: ";".join(v) for k, v in rule_rankings(kernels, kernel_directions(dataset)).items()}
        key = pd.Series(which_rule(problems)) + "|" + problems["direction"].astype(str)
        lookup = pd.Series({f"{r}|{d}": s for (r, d), s in table.items()})
        return predictions_frame(problems["problem_id"], key.map(lookup).fillna("").to_numpy())

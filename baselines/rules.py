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

import pandas as pd

# the decision list lives in the sources layer, which also writes it into each AMD dataset's
# heuristics table (the speed-up reference); re-exported here for the baseline's users
from kbench.sources.miopen_rules import (  # noqa: F401
    DEFAULT_ORDER,
    FAMILIES,
    RULE_NAMES,
    RULES,
    family_members,
    kernel_family,
    rule_rankings,
    rules_rankings,
    which_rule,
)
from kbench_baselines.base import Baseline, dataset_library, kernel_directions, predictions_frame, problems_of


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
        return predictions_frame(problems["problem_id"], rules_rankings(problems, kernels, kernel_directions(dataset)))

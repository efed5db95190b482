"""The ``rules`` heuristic on hand-picked problems, and its invariants."""

import pandas as pd
import pytest

from kbench_baselines.base import kernel_directions
from kbench_baselines.rules import FAMILIES, RULES, Rules, kernel_family, rules_reference, rules_report, which_rule
from tests.baselines.helpers import KeyDataset

CASES = [
    # (problem key, rule that fires, first kernel of the ranking)
    ("64-56-56-1x1-256-56-56-32-0x0-1x1-1x1-0-NCHW-FP32-F", "1x1_s1", "GemmFwd1x1_0_1"),
    ("256-56-56-1x1-64-56-56-32-0x0-1x1-1x1-0-NCHW-FP16-W", "1x1_s1", "GemmWrw1x1_stride1"),
    ("256-28-28-1x1-512-56-56-32-0x0-2x2-1x1-0-NCHW-FP32-B", "1x1_s2", "GemmBwd1x1_stride2"),
    ("64-56-56-3x3-64-56-56-32-1x1-1x1-1x1-0-NCHW-FP32-F", "3x3_s1_fp32", "ConvBinWinograd3x3U"),
    ("64-56-56-3x3-64-56-56-32-1x1-1x1-1x1-0-NCHW-FP32-W", "3x3_s1_fp32", "ConvWinograd3x3MultipassWrW<1-1-7-2>"),
    ("64-56-56-5x5-64-56-56-32-2x2-1x1-1x1-0-NCHW-FP32-F", "fp32_rxs_s1", "ConvBinWinogradRxSf2x3"),
    ("64-56-56-3x3-64-56-56-32-1x1-1x1-1x1-0-NCHW-FP16-F", "default", "ConvMlirIgemmFwdXdlops"),
    ("64-56-56-3x3-128-28-28-32-1x1-2x2-1x1-0-NCHW-FP32-F", "default", "ConvMlirIgemmFwdXdlops"),
    ("64-56-56-3x3-64-56-56-32-1x1-1x1-1x1-0-NHWC-NHWC-NHWC-FP16-F", "nhwc",
     "ConvAsmImplicitGemmGTCDynamicFwdXdlopsNHWC"),
    ("32-112-112-3x3-32-112-112-8-1x1-1x1-1x1-0-NCHW-FP32-F_g32", "depthwise", "ConvOclDirectFwd"),
    ("64-56-56-3x3-64-56-56-32-1x1-1x1-1x1-0-NCHW-FP16-F_g4", "grouped",
     "ConvAsmImplicitGemmGTCDynamicFwdXdlopsNHWC"),
    ("16-4-28-28-3x3x3-32-4-28-28-8-1x1x1-1x1x1-1x1x1-0-NCDHW-FP32-F", "3d", "ConvMlirIgemmFwdXdlops"),
    ("64-56-56-1x1-256-56-56-32-0x0-1x1-1x1-0-NCHW-INT8-F", "int8_1x1_s1", "GemmFwd1x1_0_1"),
]


@pytest.fixture(scope="module")
def hand(mi100):
    return KeyDataset([k for k, _, _ in CASES], mi100.kernels)


def test_rules_on_hand_picked_problems(hand):
    preds = Rules().fit(hand).predict(hand, hand.problems["problem_id"])
    rules = which_rule(hand.problems)
    for (key, rule, first), r, ranking in zip(CASES, rules, preds["ranking"]):
        assert r == rule, key
        assert ranking.split(";")[0] == first, key


def test_rankings_cover_the_direction_once_naive_last(hand, mi100):
    preds = Rules().predict(hand, hand.problems["problem_id"])
    kdirs = kernel_directions(mi100)
    for d, ranking in zip(hand.problems["direction"], preds["ranking"]):
        ks = ranking.split(";")
        assert len(ks) == len(set(ks))
        assert set(ks) == {k for k, ds in kdirs.items() if d in ds}
        assert kernel_family([ks[-1]])[ks[-1]] == "naive"


def test_every_kernel_has_a_family_and_rules_are_named_once(mi100):
    fam = kernel_family(mi100.kernels["kernel"])
    assert set(fam) == set(mi100.kernels["kernel"])
    assert "other" not in fam.values()  # every mi100 kernel is placed by a specific pattern
    assert len({r[0] for r in RULES}) == len(RULES) and RULES[-1][0] == "default"
    assert all(f in FAMILIES for _, _, fams in RULES for f in fams)


def test_not_fitted_and_reference_matches(mi100):
    ids = mi100.split("random")["test"][:300]
    a = Rules().fit(mi100, mi100.split("random")["train"][:10]).predict(mi100, ids)
    b = Rules().predict(mi100, ids)
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(rules_reference(mi100, ids), b)
    rep = rules_report(mi100, ids)
    assert list(rep.columns) == ["problem_id", "direction", "rule", "first_kernel", "first_family"]
    assert rep["first_family"].notna().all() and set(rep["rule"]) <= {r[0] for r in RULES}


def test_supports_miopen_only(mi100):
    assert Rules().supports(mi100)

    class Other:
        info = {"task": "kernel-selection", "library": "cuDNN"}
    assert not Rules().supports(Other())

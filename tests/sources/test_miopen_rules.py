"""The rules decision list as data: the ``heuristics`` table build-data writes for the AMD sets."""

import numpy as np
import pandas as pd

from kbench.sources.miopen_rules import kernel_directions, rules_heuristics, rules_rankings
from kbench.sources.problem import parse_miopen_keys

KEYS = ["64-56-56-1x1-256-56-56-32-0x0-1x1-1x1-0-NCHW-FP32-F",    # rule 1x1_s1
        "64-56-56-3x3-64-56-56-32-1x1-1x1-1x1-0-NCHW-FP16-F"]     # rule default


def _tables(mi100):
    problems = parse_miopen_keys(pd.Series(KEYS))
    kernels = mi100.kernels
    full = rules_rankings(problems, list(kernels["kernel"]), kernel_directions(kernels))
    return problems, kernels, [r.split(";") for r in full]


def test_ranking_is_cut_after_the_first_measured_kernel(mi100):
    problems, kernels, full = _tables(mi100)
    assert full[0][0] == "GemmFwd1x1_0_1" and full[1][0] == "ConvMlirIgemmFwdXdlops"
    # problem 0: its 3rd and 5th ranked kernels were measured -> ranks 0..2 are kept;
    # problem 1: nothing of its ranking was measured -> the whole ranking is kept
    runtimes = pd.DataFrame({"problem_id": [KEYS[0], KEYS[0], "other"],
                             "kernel": [full[0][4], full[0][2], full[1][0]], "time_ms": [1.0, 2.0, 3.0]})
    table = rules_heuristics(problems, runtimes, kernels)
    assert list(table.columns) == ["problem_id", "heuristic", "rank", "kernel"]
    assert (table["heuristic"] == "rules").all() and table["rank"].dtype == np.int16
    first = table[table["problem_id"] == KEYS[0]]
    assert first["kernel"].tolist() == full[0][:3] and first["rank"].tolist() == [0, 1, 2]
    second = table[table["problem_id"] == KEYS[1]]
    assert second["kernel"].tolist() == full[1] and second["rank"].tolist() == list(range(len(full[1])))


def test_shipped_table_is_the_rules_baselines_choice(mi100):
    """Scoring with the shipped table gives the times the rules baseline's rankings give."""
    from kbench.scoring.evaluate import Evaluator
    from kbench_baselines.rules import Rules
    ev = Evaluator(mi100, split="random", part="valid")
    assert ev.reference_name == "rules"
    direct = Evaluator(mi100, split="random", part="valid", reference=Rules().predict(mi100, ev.ids))
    np.testing.assert_array_equal(ev._t_ref, direct._t_ref)


def test_reference_on_a_dataset_cut_to_fewer_kernels():
    """align/subset may drop kernels the table still names: those are skipped, as scoring skips them."""
    import kbench
    from kbench.scoring.evaluate import Evaluator
    ds = kbench.load("mi300x")
    dropped = ds.heuristics.loc[ds.heuristics["rank"] == 0, "kernel"].value_counts().index[0]
    cut = ds.subset(ds.problems["problem_id"])
    cut.tables["kernels"] = cut.kernels[cut.kernels["kernel"] != dropped].reset_index(drop=True)
    cut.tables["runtimes"] = cut.runtimes[cut.runtimes["kernel"] != dropped].reset_index(drop=True)
    ev = Evaluator(cut, split="random", part="valid")
    assert ev.reference_name == "rules" and dropped not in set(ev.table.kernels)

"""`tree_mismatches`: two metric trees agree where every figure agrees to the re-scorer's tolerance,
lists included, and every real difference is named by its path."""

from kbench.leaderboard.rescorer import REL_TOL, tree_mismatches


def test_lists_are_compared_item_by_item_within_tolerance():
    # the two intervals differ in the last bit of their lower bound, as a sum re-done on another BLAS may
    claimed = {"ci95": [1.0459615813220795, 1.060812447177226]}
    again = {"ci95": [1.0459615813220797, 1.060812447177226]}
    assert tree_mismatches(claimed, again, "v") == []


def test_a_list_of_rows_within_tolerance_agrees():
    claimed = {"agreement": [{"plans": 4560, "median": 0.022735111050062443, "over": 72}]}
    again = {"agreement": [{"plans": 4560, "median": 0.02273511105006244, "over": 72}]}
    assert tree_mismatches(claimed, again, "v") == []


def test_a_real_difference_inside_a_list_is_named_by_its_index():
    claimed = {"ci95": [1.0, 2.0]}
    again = {"ci95": [1.0, 2.0 * (1 + 100 * REL_TOL)]}
    assert tree_mismatches(claimed, again, "v") == [f"v.ci95[1]: claimed 2.0, re-scored {again['ci95'][1]!r}"]


def test_lists_of_different_lengths_differ_as_a_whole():
    assert tree_mismatches({"a": [1, 2]}, {"a": [1, 2, 3]}, "v") == ["v.a: claimed [1, 2], re-scored [1, 2, 3]"]


def test_a_changed_count_inside_a_row_is_named_by_its_path():
    claimed = {"rows": [{"over": 72}]}
    assert tree_mismatches(claimed, {"rows": [{"over": 73}]}, "v") == ["v.rows[0].over: claimed 72, re-scored 73"]

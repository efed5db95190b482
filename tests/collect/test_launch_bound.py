"""The check that finds launch-bound coarse measurements (issue 16), on hand-made and recorded rows."""

import pandas as pd

from kbench.collect import cudnn as C
from kbench.collect import validate_timing as V


def test_launch_bound_mask_hand_worked():
    rows = pd.DataFrame([
        # 0.03 ms timed with k=1: a 0.03 ms replay, far under half the 0.5 ms target -> launch-bound
        dict(timing_method="graph", inner_k=1, coarse_ms=0.03),
        # 0.03 ms with k=17: a 0.51 ms replay -> a measurement
        dict(timing_method="graph", inner_k=17, coarse_ms=0.03),
        # exactly half the target (0.25 ms) is long enough
        dict(timing_method="graph", inner_k=5, coarse_ms=0.05),
        # k already at the cap: nothing more could be done
        dict(timing_method="graph", inner_k=C.MAX_INNER, coarse_ms=0.001),
        # single executions and eager launches are not replays
        dict(timing_method="single", inner_k=1, coarse_ms=0.03),
        dict(timing_method="eager", inner_k=1, coarse_ms=0.03),
        # never timed
        dict(timing_method="", inner_k=None, coarse_ms=None),
    ])
    assert C.launch_bound_mask(rows).tolist() == [True, False, False, False, False, False, False]


def test_spin_covers_every_queued_launch():
    # 50 us plus 40 us per launch, at 1,500 cycles per us
    assert C.spin_cycles(1) == 135_000
    assert C.spin_cycles(5) == 375_000
    assert C.spin_cycles(0) == C.spin_cycles(1)


def test_outlier_cases_from_the_recorded_h100_runs():
    from kbench.collect.writer import load_records
    cases = V.outlier_cases("raw/h100")
    for key, plans in V.ISSUE16_RERUN.items():  # the issue's two re-run outliers come first
        assert cases[key][: len(plans)] == plans
    recorded = load_records("raw/h100", "plans")
    lb = recorded[C.launch_bound_mask(recorded)]
    added = {(k, p) for k, ps in cases.items() if k not in V.ISSUE16_RERUN for p in ps}
    assert added, "the recorded runs hold launch-bound measurements"
    # every added plan is either a launch-bound one or its problem's recorded winner
    lb_pairs = set(zip(lb["key"], lb["plan"]))
    for key, ps in cases.items():
        if key in V.ISSUE16_RERUN:
            continue
        assert any((key, p) in lb_pairs for p in ps)

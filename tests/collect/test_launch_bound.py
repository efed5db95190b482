"""The check that finds launch-bound coarse measurements (the run-to-run outliers), on hand-made and recorded rows."""

import pandas as pd

from kbench.collect.measure import cudnn
from kbench.collect.studies import validate_timing


def test_launch_bound_mask_hand_worked():
    rows = pd.DataFrame([
        # 0.03 ms timed with k=1: a 0.03 ms replay, far under half the 0.5 ms target -> launch-bound
        dict(timing_method="graph", inner_k=1, coarse_ms=0.03),
        # 0.03 ms with k=17: a 0.51 ms replay -> a measurement
        dict(timing_method="graph", inner_k=17, coarse_ms=0.03),
        # exactly half the target (0.25 ms) is long enough
        dict(timing_method="graph", inner_k=5, coarse_ms=0.05),
        # k already at the cap: nothing more could be done
        dict(timing_method="graph", inner_k=cudnn.MAX_INNER, coarse_ms=0.001),
        # single executions are for plans over SLOW_PLAN_MS: a 0.03 ms one was sent there by a slow
        # first execution and timed with the host's launch latency; a 25 ms one is what it is for
        dict(timing_method="single", inner_k=1, coarse_ms=0.03),
        dict(timing_method="single", inner_k=1, coarse_ms=25.0),
        # eager launches run behind a spin kernel
        dict(timing_method="eager", inner_k=1, coarse_ms=0.03),
        # never timed
        dict(timing_method="", inner_k=None, coarse_ms=None),
    ])
    assert cudnn.launch_bound_mask(rows).tolist() == [True, False, False, False, True, False, False, False]


def test_spin_covers_every_queued_launch():
    # 50 us plus 40 us per launch, at 1,500 cycles per us
    assert cudnn.spin_cycles(1) == 135_000
    assert cudnn.spin_cycles(5) == 375_000
    assert cudnn.spin_cycles(0) == cudnn.spin_cycles(1)


def test_outlier_cases_from_the_recorded_h100_runs():
    from kbench.collect.raw_store.writer import load_records
    cases = validate_timing.outlier_cases("raw/h100")
    for key, plans in validate_timing.RERUN_OUTLIERS.items():  # the re-run's two outliers come first
        assert cases[key][: len(plans)] == plans
    recorded = load_records("raw/h100", "plans")
    lb = recorded[cudnn.launch_bound_mask(recorded)]
    added = {(k, p) for k, ps in cases.items() if k not in validate_timing.RERUN_OUTLIERS for p in ps}
    assert added, "the recorded runs hold launch-bound measurements"
    # every added plan is either a launch-bound one or its problem's recorded winner
    lb_pairs = set(zip(lb["key"], lb["plan"]))
    for key, ps in cases.items():
        if key in validate_timing.RERUN_OUTLIERS:
            continue
        assert any((key, p) in lb_pairs for p in ps)


def test_inconsistent_with_warm_hand_worked():
    # the re-run's worst case: replays of one execution took 0.486 ms, one spin-protected execution 0.145 ms
    assert cudnn.inconsistent_with_warm(0.486, 0.145)
    # back to back faster than alone (launch overhead amortised): consistent
    assert not cudnn.inconsistent_with_warm(0.0256, 0.145)
    # exactly 1.5x is still consistent; just over is not
    assert not cudnn.inconsistent_with_warm(0.15, 0.1)
    assert cudnn.inconsistent_with_warm(0.1501, 0.1)
    # nothing to compare with
    assert not cudnn.inconsistent_with_warm(0.2, None)
    assert not cudnn.inconsistent_with_warm(None, 0.1)
    assert not cudnn.inconsistent_with_warm(0.2, 0.0)


def test_diagnosis_of_the_recorded_evidence():
    """raw/h100/validation/run_to_run_outliers: the old and new protocol on the same problems of one H100 lease."""
    d = validate_timing.diagnosis("raw/h100/validation/run_to_run_outliers")
    from kbench.collect.raw_store.writer import load_records
    old = load_records("raw/h100/validation/run_to_run_outliers/old", "plans")
    new = load_records("raw/h100/validation/run_to_run_outliers/new", "plans")
    prot = d["protocol"].set_index("protocol")
    assert prot.loc["before the fix", "launch-bound"] == int(cudnn.launch_bound_mask(old).sum())
    assert prot.loc["after the fix", "launch-bound"] == int(cudnn.launch_bound_mask(new).sum())
    # the old protocol's worst outlier is the k = 1 replay that timed the host (see inconsistent_with_warm)
    worst = d["worst"].iloc[0]
    assert worst["inner_k"] == 1 and worst["ratio"] == d["outliers"]["max ratio"]
    # the first execution of a plan is slower than its steady time in every trace (lazy set-up)
    f = d["first"]
    assert (f["first_ms"] > f["ref_ms"]).all()

"""Throughput and cross-GPU agreement read from raw folders (hand-worked records)."""

import json
import math

import pandas as pd
import pytest

from kbench.collect.raw_store import writer
from kbench.collect.studies import scaling
from kbench.core.errors import KbenchInputError


def _env(folder, measured, elapsed):
    folder.mkdir(parents=True)
    lines = [{"run_id": "r", "phase": "start", "gpu": "G"},
             {"run_id": "r", "phase": "end", "measured": measured, "elapsed_s": elapsed}]
    (folder / writer.ENV).write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_throughput_of_two_ranks(tmp_path):
    _env(tmp_path / "shard-0-of-2", 30, 60.0)
    _env(tmp_path / "shard-1-of-2", 20, 50.0)
    t = scaling.throughput([tmp_path])
    # 50 problem-directions over the longer rank's 60 s = 50 per minute, 25 per GPU
    assert (t["gpus"], t["measured"], t["elapsed_s"], t["per_minute"], t["per_minute_per_gpu"]) == (
        2, 50, 60.0, 50.0, 25.0)
    assert [r["per_minute"] for r in t["ranks"]] == [30.0, 24.0]
    assert scaling.throughput([tmp_path / "shard-1-of-2"])["per_minute"] == 24.0
    with pytest.raises(KbenchInputError, match="no env.jsonl"):
        scaling.throughput([tmp_path / "elsewhere"])


def _raw(folder, times):
    w = writer.RawWriter(folder, run_id="r", batch_size=100)
    for key, plans in times.items():
        w.add({"key": key, "status": "ok"}, [{"plan": p, "precise_ms": t, "repeat_ms": r} for p, t, r in plans])
    w.close()


def test_agreement_hand_worked(tmp_path):
    nan = float("nan")
    _raw(tmp_path / "a", {"k1": [("p1", 1.0, 1.1), ("p2", 2.0, nan)], "k2": [("p1", 4.0, 4.0)]})
    _raw(tmp_path / "b", {"k1": [("p1", 1.05, 1.0), ("p2", 1.9, nan)], "k2": [("p1", 4.4, 4.4)]})
    out = scaling.agreement(tmp_path / "a", tmp_path / "b")
    cross = sorted([abs(math.log(1.05)), abs(math.log(1.9 / 2.0)), abs(math.log(1.1))])
    repeat = sorted([abs(math.log(1.1)), 0.0, abs(math.log(1.0 / 1.05)), 0.0])
    assert out["plans_on_both"] == 3 and out["problem_directions_on_both"] == 2
    assert out["cross_gpu_abs_log_ratio"]["median"] == pytest.approx(cross[1])
    assert out["single_gpu_repeat_abs_log_ratio"]["median"] == pytest.approx((repeat[1] + repeat[2]) / 2)
    assert out["same_fastest_plan_share"] == 1.0
    assert out["within_repeatability"] is False  # median 0.0513 > 0.0244
    same = scaling.agreement(tmp_path / "a", tmp_path / "a")
    assert same["cross_gpu_abs_log_ratio"]["p90"] == 0.0 and same["within_repeatability"] is True


def test_cli_usage_and_errors(tmp_path, capsys):
    assert scaling.main([]) == 2
    assert scaling.main(["throughput", str(tmp_path / "none")]) == 2
    assert "no env.jsonl" in capsys.readouterr().err


def test_phases_hand_worked(tmp_path):
    """Two runs: one probed every problem, one took notes from the cache (a check counts as cache use)."""
    from kbench.collect.raw_store.shard import expected_seconds
    geo = dict(status="ok", flop=1e9, direction="F", dtype="FP16", layout="NCHW", groups=1)
    rows = [("probe-run", "probe", 2.0, 0.5), ("probe-run", "probe", 4.0, 0.3),
            ("cache-run", "cache", 1.0, 0.0), ("cache-run", "check", 3.0, 0.4)]
    folder = tmp_path / "raw"
    for run in ("probe-run", "cache-run"):
        w = writer.RawWriter(folder, run_id=run, batch_size=100)
        for i, (r, source, total, notes) in enumerate(rows):
            if r == run:
                w.add({"key": f"{run}-{i}", **geo, "notes_source": source, "t_total_s": total, "t_notes_s": notes}, [])
        w.close()
    ends = [{"run_id": "probe-run", "phase": "end", "measured": 2, "elapsed_s": 6.0},
            {"run_id": "cache-run", "phase": "end", "measured": 2, "elapsed_s": 4.0}]
    (folder / writer.ENV).write_text("".join(json.dumps(x) + "\n" for x in ends))
    out = scaling.phases(folder)
    one = float(expected_seconds(pd.DataFrame([geo]))[0])  # every row has the same geometry
    assert out["probes only"]["mean_s"] == {"t_total_s": 3.0, "t_notes_s": 0.4}
    assert out["notes cache"]["mean_s"]["t_total_s"] == 2.0 and out["notes cache"]["median_s"]["t_notes_s"] == 0.2
    assert out["probes only"]["per_minute"] == 20.0 and out["notes cache"]["per_minute"] == 30.0
    assert out["notes cache"]["seconds_per_expected_second"] == pytest.approx(4.0 / (2 * one))
    assert (out["notes cache"]["runs"], out["notes cache"]["problem_directions"]) == (1, 2)
    # before: only the runs whose id sorts before it ("cache-run" < "d" < "probe-run")
    assert list(scaling.phases(folder, before="d")) == ["notes cache"]
    assert scaling.main(["phases", str(folder), "--before", "d"]) == 0
    assert scaling.main(["phases", str(tmp_path / "none")]) == 2


def _launch(root, count, ranks_per_gpu, start, measured, elapsed, problems_each, world=None):
    """Shard folders ``root/shard-K-of-count`` of one launch: rank K starts at ``start + K`` s, measures
    ``measured[K]`` problem-directions (``problems_each`` of them recorded, all of one geometry) in
    ``elapsed[K]`` s."""
    geo = dict(status="ok", flop=1e9, direction="F", dtype="FP16", layout="NCHW", groups=1, t_time_s=2.0)
    for k in range(count):
        folder = root / f"shard-{k}-of-{count}"
        run = f"run-{start:05d}-{k}"
        w = writer.RawWriter(folder, run_id=run, batch_size=100)
        for i in range(problems_each):
            w.add({"key": f"{run}-{i}", **geo}, [])
        w.close()
        lines = [{"run_id": run, "phase": "start", "time": start + k, "ranks_per_gpu": ranks_per_gpu,
                  "WORLD_SIZE": str(world or count)},
                 {"run_id": run, "phase": "end", "time": start + k + elapsed[k], "measured": measured[k],
                  "elapsed_s": elapsed[k]}]
        with open(folder / writer.ENV, "a") as f:
            f.write("".join(json.dumps(x) + "\n" for x in lines))


def test_ladder_hand_worked(tmp_path):
    """1 GPU (three ranks), then 2 GPUs (six ranks), then 2 GPUs with one rank each (torchrun's
    WORLD_SIZE groups them): rates, speed-ups, efficiencies and the problem-mix correction by hand."""
    from kbench.collect.raw_store.shard import expected_seconds
    _launch(tmp_path, 3, 3, 0, [10, 12, 8], [60.0, 50.0, 40.0], 4)          # 30 over 60 s: 30 per minute
    _launch(tmp_path, 6, 3, 1000, [10] * 6, [60.0] * 6, 2)                 # 60 over 60 s on 2 GPUs
    _launch(tmp_path, 2, 1, 2000, [9, 6], [30.0, 45.0], 3)                 # 15 over 45 s on 2 GPUs
    one = float(expected_seconds(pd.DataFrame([dict(flop=1e9, direction="F", dtype="FP16", layout="NCHW",
                                                    groups=1)]))[0])
    out = scaling.ladder([tmp_path])
    rows = out["launches"]
    assert [(r["gpus"], r["ranks"], r["measured"], r["elapsed_s"]) for r in rows] == [
        (1, 3, 30, 60.0), (2, 6, 60, 60.0), (2, 2, 15, 45.0)]
    assert [r["per_minute"] for r in rows] == [30.0, 60.0, 20.0]
    assert [r["per_minute_per_gpu"] for r in rows] == [30.0, 30.0, 10.0]
    assert [r["speedup"] for r in rows] == [1.0, 2.0, round(20 / 30, 3)]
    assert [r["efficiency"] for r in rows] == [1.0, 1.0, round(10 / 30, 3)]
    # expected seconds of the recorded problems per GPU-second: 12, 12 and 6 problems of one geometry
    mix = [12 * one / 60, 12 * one / (60 * 2), 6 * one / (45 * 2)]
    assert [r["expected_seconds_per_gpu_second"] for r in rows] == [round(m, 3) for m in mix]
    assert rows[2]["mix_corrected_efficiency"] == round(round(mix[2], 3) / round(mix[0], 3), 3)
    # GPU parts of 2 s per recorded problem over GPUs x wall: 24 / 60, 24 / 120, 12 / 90
    assert [r["gpu_busy_share"] for r in rows] == [0.4, 0.2, 0.133]
    assert [r["busy_efficiency"] for r in rows] == [1.0, 0.5, 0.333]
    assert out["yardstick"] == rows[0]["first_run"] == "run-00000-0"
    # --since keeps the launches whose runs start at or after it; without a one-GPU launch no ladder
    assert [r["gpus"] for r in scaling.launches([tmp_path], since="run-01000")] == [2, 2]
    with pytest.raises(KbenchInputError, match="no one-GPU launch"):
        scaling.ladder([tmp_path], since="run-01000")
    with pytest.raises(KbenchInputError, match="no run has ended since run-9"):
        scaling.launches([tmp_path], since="run-9")
    assert scaling.main(["ladder", str(tmp_path), "--since", "run-01000"]) == 2
    # --before keeps the launches whose runs start before it: here the first two
    assert [r["gpus"] for r in scaling.ladder([tmp_path], before="run-02000")["launches"]] == [1, 2]
    assert [r["ranks"] for r in scaling.launches([tmp_path], since="run-01000", before="run-02000")] == [6]
    assert scaling.main(["ladder", str(tmp_path), "--before", "run-02000"]) == 0


def test_agreement_all_pairs(tmp_path):
    nan = float("nan")
    a = {"k1": [("p1", 1.0, 1.1), ("p2", 2.0, nan)], "k2": [("p1", 4.0, 4.0)]}
    _raw(tmp_path / "gpu0", a)
    _raw(tmp_path / "gpu1", {"k1": [("p1", 1.05, 1.0), ("p2", 1.9, nan)], "k2": [("p1", 4.4, 4.4)]})
    _raw(tmp_path / "gpu2", a)
    out = scaling.agreement_all([tmp_path / "gpu0", tmp_path / "gpu1", tmp_path / "gpu2"])
    assert list(out["pairs"]) == ["gpu0 ~ gpu1", "gpu0 ~ gpu2", "gpu1 ~ gpu2"]
    assert out["pairs"]["gpu0 ~ gpu1"] == scaling.agreement(tmp_path / "gpu0", tmp_path / "gpu1")
    assert [p["within_repeatability"] for p in out["pairs"].values()] == [False, True, False]
    assert out["all_within_repeatability"] is False
    assert scaling.agreement_all([tmp_path / "gpu0", tmp_path / "gpu2"])["all_within_repeatability"] is True
    with pytest.raises(KbenchInputError, match="at least two"):
        scaling.agreement_all([tmp_path / "gpu0"])


def test_agreement_rounds_against_the_same_gpu_timed_again(tmp_path):
    nan = float("nan")
    # two GPUs, two rounds, one problem-direction of two plans (k1) and one of one plan (k2)
    _raw(tmp_path / "agree0", {"k1": [("p1", 1.0, nan), ("p2", 2.0, nan)], "k2": [("p1", 4.0, nan)]})
    _raw(tmp_path / "agree1", {"k1": [("p1", 1.1, nan), ("p2", 2.0, nan)], "k2": [("p1", 4.0, nan)]})
    _raw(tmp_path / "agree0_r2", {"k1": [("p1", 1.2, nan), ("p2", 2.0, nan)], "k2": [("p1", 4.0, nan)]})
    _raw(tmp_path / "agree1_r2", {"k1": [("p1", 1.1, nan), ("p2", 1.0, nan)], "k2": [("p1", 4.0, nan)]})
    folders = [tmp_path / n for n in ("agree0", "agree1", "agree0_r2", "agree1_r2")]
    out = scaling.agreement_rounds(folders)
    # agree0 ~ agree1_r2 and agree1 ~ agree0_r2 mix both effects and are left out
    assert {k: v["kind"] for k, v in out["pairs"].items()} == {
        "agree0 ~ agree1": "cross_gpu", "agree0 ~ agree0_r2": "same_gpu",
        "agree1 ~ agree1_r2": "same_gpu", "agree0_r2 ~ agree1_r2": "cross_gpu"}
    # cross-GPU ratios: round 1 ln 1.1, 0, 0; round 2 ln(1.1/1.2), ln(1/2), 0
    cross = sorted([math.log(1.1), 0, 0, abs(math.log(1.1 / 1.2)), math.log(2), 0])
    assert out["cross_gpu"]["n"] == 6
    assert out["cross_gpu"]["median"] == pytest.approx((cross[2] + cross[3]) / 2)
    # same-GPU ratios: GPU 0 ln 1.2, 0, 0; GPU 1 0, ln 2, 0 -> median 0
    assert out["same_gpu"]["median"] == 0.0
    assert out["within_repeatability"] is False
    # fastest plan: p1 in every folder but agree1_r2 (p2 for k1)
    assert out["pairs"]["agree0 ~ agree1"]["same_fastest_plan_share"] == 1.0
    assert out["pairs"]["agree1 ~ agree1_r2"]["same_fastest_plan_share"] == 0.5
    # signed: GPU 1 ran p1 of k1 10% slower in round 1, the rest alike -> median of (ln 1.1, 0, 0) is 0
    assert out["pairs"]["agree0 ~ agree1"]["signed_median"] == 0.0
    assert out["pairs"]["agree0 ~ agree0_r2"]["signed_median"] == 0.0
    assert scaling.main(["agreement-rounds", *map(str, folders), "--since", "x"]) == 2
    assert scaling.main(["agreement-rounds", *map(str, folders)]) == 0
    with pytest.raises(KbenchInputError, match="two rounds"):
        scaling.agreement_rounds(folders[:2])


@pytest.mark.parametrize("slower", [1.0, 2.0])
def test_agreement_rounds_excess_interval(tmp_path, slower):
    """Each GPU repeats itself exactly; GPU 1 runs every plan ``slower`` times as long as GPU 0. The
    cross-GPU |ln ratio| is then ln(slower) for every plan, so every bootstrap draw's excess is too."""
    nan = float("nan")
    times = {f"k{i}": [("p1", 1.0 + i, nan), ("p2", 3.0 + i, nan)] for i in range(5)}
    for name, factor in (("agree0", 1.0), ("agree0_r2", 1.0), ("agree1", slower), ("agree1_r2", slower)):
        _raw(tmp_path / name, {k: [(p, t * factor, r) for p, t, r in v] for k, v in times.items()})
    out = scaling.agreement_rounds(sorted(tmp_path.iterdir()), resamples=50)
    assert out["same_gpu"]["median"] == 0.0 and out["same_gpu"]["p90"] == 0.0
    assert out["cross_gpu"]["median"] == pytest.approx(math.log(slower))
    assert out["pairs"]["agree0 ~ agree1"]["signed_median"] == pytest.approx(math.log(slower))  # GPU 1 slower
    assert out["excess"]["median"] == pytest.approx([round(math.log(slower), 5)] * 3)
    assert out["excess"]["p90"] == pytest.approx([round(math.log(slower), 5)] * 3)
    assert out["indistinguishable"] is (slower == 1.0) and out["within_repeatability"] is (slower == 1.0)

import json
from pathlib import Path

import pandas as pd
import pytest

from kbench.collect.packaging import package
from kbench.collect.packaging.card import geomean, heuristic_gaps
from kbench.core.errors import KbenchInputError
from kbench.sources.problem import parse_miopen_keys

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
RAW_SAMPLE = Path(__file__).with_name("fixtures") / "raw_sample"


@pytest.fixture(scope="module")
def raw():
    return package.load_raw(RAW_SAMPLE)


def test_sample_is_real_collector_output(raw):
    problems, plans, env = raw
    assert len(problems) >= 9 and set(problems["direction"]) == {"F", "B", "W"}
    assert set(env["gpu"]) == {"NVIDIA H100 80GB HBM3"}
    assert plans["plan"].str.match(r"^eng\d+").all()


def test_tables_follow_the_data_model(raw):
    problems, plans, _ = raw
    mituna = SHARED / "mituna"
    tables, report = package.build_tables(problems, plans, mituna if mituna.exists() else None)
    prob, rt, h = tables["problems"], tables["runtimes"], tables["heuristics"]
    # ids are MIOpen keys of the measured geometry
    back = parse_miopen_keys(prob["problem_id"])
    src = problems.set_index("key").loc[prob["problem_id"]]
    for col in ("n", "c", "k", "groups", "x_h", "x_w", "fil_h", "pad_h", "stride_h"):
        assert (back[col].to_numpy() == src[col].to_numpy()).all()
    assert prob["output_size_ok"].all()
    # ranks: 0..n-1 by time within each problem; n_listed counts them
    for _, g in rt.groupby("problem_id"):
        assert list(g.sort_values("rank")["rank"]) == list(range(len(g)))
        assert g.sort_values("rank")["time_ms"].is_monotonic_increasing
    assert (prob.set_index("problem_id")["n_listed"] == rt.groupby("problem_id").size()).all()
    assert (rt["time_ms"] > 0).all()
    # heuristics name only kernels measured for that problem
    have = set(zip(rt["problem_id"], rt["kernel"]))
    assert all((p, k) in have for p, k in zip(h["problem_id"], h["kernel"]))
    assert {"cudnn_mode_a", "cudnn_mode_b", "cudnn_fallback"} <= set(h["heuristic"])
    # kernels: vocabulary of runtimes, n_best sums to the number of problems
    k = tables["kernels"]
    assert set(k["kernel"]) == set(rt["kernel"])
    assert k["n_best"].sum() == len(prob)
    assert set(tables["splits"]["random"]) <= {"train", "valid", "test"}
    assert report["plans_in_runtimes"] == len(rt)


def test_fp32_default_excludes_reduced_precision_tf32_keeps_it(raw):
    problems, plans, _ = raw
    fp32 = set(problems.loc[problems["dtype"] == "FP32", "key"])
    reduced = plans[plans["key"].isin(fp32) & (plans["precision"] == "reduced") & plans["correct"].astype(bool)]
    assert len(reduced)
    d, _ = package.build_tables(problems, plans, None, "default")
    t, _ = package.build_tables(problems, plans, None, "tf32")
    dk = set(zip(d["runtimes"]["problem_id"], d["runtimes"]["kernel"]))
    tk = set(zip(t["runtimes"]["problem_id"], t["runtimes"]["kernel"]))
    red = set(zip(reduced["key"], reduced["plan"]))
    assert not (red & dk) and red <= tk
    with pytest.raises(KbenchInputError):
        package.build_tables(problems, plans, None, "fp8")


def test_wrong_answers_never_listed(raw):
    problems, plans, _ = raw
    t, _ = package.build_tables(problems, plans, None, "tf32")
    bad = plans[~plans["correct"].astype(bool)]
    listed = set(zip(t["runtimes"]["problem_id"], t["runtimes"]["kernel"]))
    assert not (set(zip(bad["key"], bad["plan"])) & listed)


def test_package_writes_a_loadable_dataset(tmp_path):
    from kbench.data.dataset import read_dataset_folder
    card = tmp_path / "card.md"
    manifest = package.package(RAW_SAMPLE, "h100", tmp_path / "h100", mituna=None, card=card)
    ds = read_dataset_folder(tmp_path / "h100", "h100")
    assert len(ds.problems) == manifest["files"]["problems.parquet"]["rows"]
    assert ds.info["vendor"] == "NVIDIA"
    text = card.read_text()
    assert "cuDNN's heuristic against the fastest plan" in text and "| cudnn_mode_a |" in text
    # the small recorded sample is far below the first version's size: its card is a draft
    assert "**Draft**" in text and "Version 1" not in text
    # the phase table: each phase the sample recorded, its median and mean over the ok problems; the
    # sample predates the per-phase times of notes, coarse timing etc., so those rows are left out
    from kbench.collect.raw_store.writer import load_records
    ok = load_records(RAW_SAMPLE, "problems").query("status == 'ok'")
    assert "t_notes_s" not in ok and "numerical notes, s" not in text
    for label, col in (("per problem-direction, s", "t_total_s"), ("building plans, s", "t_build_s"),
                       ("checking + timing (all), s", "t_time_s")):
        assert f"| {label} | {ok[col].median():.3f} | {ok[col].mean():.3f} |" in text


def test_status_line_turns_from_draft_to_version_1_at_the_target():
    from kbench.collect.packaging.card import FIRST_VERSION_PROBLEM_DIRECTIONS, status_line
    assert FIRST_VERSION_PROBLEM_DIRECTIONS == 5000  # the first-version size
    assert status_line(4999).startswith("**Draft**: 4,999 of the first version's 5,000")
    assert status_line(5000).startswith("**Released**: 5,000 problem-directions")
    assert status_line(12, target=10).startswith("**Released**")


def test_gap_definition():
    tables = {
        "runtimes": pd.DataFrame({"problem_id": ["p", "p", "q"], "kernel": ["a", "b", "a"],
                                  "time_ms": [1.0, 2.0, 3.0], "rank": [0, 1, 0]}),
        "heuristics": pd.DataFrame({"problem_id": ["p", "q"], "heuristic": ["h", "h"], "rank": [0, 0],
                                    "kernel": ["b", "a"]}),
        "problems": pd.DataFrame({"problem_id": ["p", "q"], "direction": ["F", "B"], "dtype": ["FP16"] * 2,
                                  "layout_x": ["NCHW"] * 2}),
    }
    g = heuristic_gaps(tables).set_index("problem_id")["gap"]
    assert g["p"] == 2.0 and g["q"] == 1.0
    assert geomean([2.0, 0.5]) == pytest.approx(1.0)


def test_failure_paths(tmp_path, raw_sample):
    with pytest.raises(KbenchInputError, match="not found"):
        package.load_raw(tmp_path / "nothing")
    env = raw_sample / "env.jsonl"
    lines = env.read_text().splitlines()
    other = json.loads(lines[0])
    other["gpu"] = "NVIDIA H200"
    env.write_text("\n".join(lines + [json.dumps(other)]) + "\n")
    with pytest.raises(KbenchInputError, match="mix GPUs"):
        package.load_raw(raw_sample)
    from kbench.cli import main
    assert main(["collect", "package", str(tmp_path / "nothing"), "--name", "h100",
                 "--out", str(tmp_path / "o")]) == 2


def test_through_run_keeps_the_runs_up_to_it(raw_sample):
    """The sample holds two runs: 9 problem-directions from 20261121T085311-a303ff, 3 from the later one."""
    problems, plans, env = package.load_raw(raw_sample, through_run="20261121T085311-a303ff")
    assert len(problems) == 9 and set(problems["run_id"]) == {"20261121T085311-a303ff"}
    assert set(plans["run_id"]) == {"20261121T085311-a303ff"} and set(plans["key"]) <= set(problems["key"])
    assert list(env["phase"]) == ["start"]
    everything = package.load_raw(raw_sample)
    assert len(everything[0]) == 12
    # the last run's id keeps everything
    assert len(package.load_raw(raw_sample, through_run="20261121T091245-f5793d")[0]) == 12
    with pytest.raises(KbenchInputError, match="no run '20991231T000000-abcdef' in env.jsonl"):
        package.load_raw(raw_sample, through_run="20991231T000000-abcdef")


# h100 1.5.0: raw/h100's first 49 runs (later runs there wait for the next version); h200 1.6.0:
# raw/h200's 120 runs (runs 16-120 with three ranks sharing each GPU; 76-120 on a host of four H200s);
# each with its affected problem-directions re-timed with PyTorch's strides (raw/<name>-pytorch-strides)
@pytest.mark.parametrize("name, version, runs_shipped, collected, retimed",
                         [("h100", "1.5.0", 49, 12342, 3460), ("h200", "1.6.0", 120, 21992, 6092)])
def test_pinned_version_ships_the_first_runs_of_its_raw_folder(name, version, runs_shipped, collected, retimed):
    import kbench
    from kbench.collect.raw_store.writer import load_records
    from kbench.data.registry import DATASETS
    through = DATASETS[name].collected_through
    runs = sorted(load_records(Path(__file__).resolve().parents[2] / "raw" / name, "problems",
                               ["key", "run_id"])["run_id"].unique())
    assert runs.index(through) == runs_shipped - 1
    ds = kbench.load(name)
    info = ds.info
    assert info["version"] == version and info["cleaning"]["problem_directions_collected"] == collected
    # every problem whose strides differ between the conventions came from a re-timing run
    from kbench.collect.measure.strides import strides_differ
    assert info["retimed"]["problem_directions"] == retimed and info["retimed"]["tensor_strides"] == ["pytorch"]
    assert int(strides_differ(ds.problems)["any"].sum()) == retimed


def test_protocol_line_counts_the_runs_without_their_own_verification_pass():
    """Runs whose problems have no verify_passes used the collector before the run-to-run outlier fix."""
    import pandas as pd

    from kbench.collect.packaging.card import protocol_line
    problems = pd.DataFrame({"run_id": ["a", "a", "b", "c", "c"],
                             "verify_passes": [None, None, 2.0, 1.0, None]})
    line = protocol_line(problems)
    assert line.startswith("1 of the 3 shipped runs (2 problem-directions) used the old protocol")
    assert line.endswith("The other 2 ran the fixed collector, verification pass included.")
    assert protocol_line(problems.assign(verify_passes=None)).startswith("Every shipped run used the old protocol")


def test_manifest_paths_do_not_depend_on_where_the_checkout_sits(tmp_path):
    """The repeats' provenance names raw folders relative to the repository; a folder outside it as given."""
    from kbench.collect.packaging.package import repo_relative
    root = Path(__file__).resolve().parents[2]
    assert repo_relative(root / "raw" / "h100" / "repeats" / "retest-20261124") == "raw/h100/repeats/retest-20261124"
    assert repo_relative(tmp_path / "r") == str(tmp_path / "r")
    manifest = (root / "kbench" / "datasets" / "h100" / "manifest.json").read_text()
    assert str(root) not in manifest


def test_fp32_first_plan_share_takes_mode_a_first_plan_that_ran_correctly():
    """Hand-worked: k1's first listed plan failed to run, its second (reduced) is the first good one;
    k2's first ran but was wrong, its second is full FP32; k3 is FP16 (left out); k4 lists no plan."""
    import pandas as pd

    from kbench.collect.packaging.card import fp32_first_plan_is_full_fp32
    ok = pd.DataFrame({"key": ["k1", "k2", "k3", "k4"], "dtype": ["FP32", "FP32", "FP16", "FP32"],
                       "heur_a": ["p1;p2;p3", "p4;p5", "p6", None]})
    plans_ok = pd.DataFrame({"key": ["k1", "k1", "k1", "k2", "k2", "k3"],
                             "plan": ["p1", "p2", "p3", "p4", "p5", "p6"],
                             "exec_ok": [False, True, True, True, True, True],
                             "correct": [False, True, True, False, True, True],
                             "precision": [None, "reduced", "fp32", "fp32", "fp32", "fp32"]})
    assert fp32_first_plan_is_full_fp32(ok, plans_ok).tolist() == [False, True]


def test_heuristics_table_keeps_each_order_within_the_candidate_set():
    """Hand-worked: p1's candidate set is {a, b, c}, p2's {d}. Mode A lists x (not a candidate) before
    b and a; mode B lists nothing for p2; PyTorch ran y (not a candidate), then c, for p1."""
    import pandas as pd

    from kbench.collect.packaging.package import heuristics_table
    runtimes = pd.DataFrame({"problem_id": ["p1", "p1", "p1", "p2"], "kernel": ["a", "b", "c", "d"]})
    src = pd.DataFrame({"heur_a": ["x;b;a", "d"], "heur_b": ["c", None], "heur_fallback": ["a;;c", "q"],
                        "torch_plans": ["y;c;a", ""]}, index=pd.Index(["p1", "p2"], name="key"))
    got = heuristics_table(src, runtimes)
    assert list(got.itertuples(index=False, name=None)) == [
        ("p1", "cudnn_mode_a", 0, "b"), ("p1", "cudnn_mode_a", 1, "a"), ("p2", "cudnn_mode_a", 0, "d"),
        ("p1", "cudnn_mode_b", 0, "c"),
        ("p1", "cudnn_fallback", 0, "a"), ("p1", "cudnn_fallback", 1, "c"),
        ("p1", "pytorch", 0, "c")]
    assert str(got["rank"].dtype) == "int16"


def test_hosts_row_names_the_cores_and_gpus_only_when_they_differ():
    from kbench.collect.packaging.card import hosts_row

    def env(rows):
        return pd.DataFrame([{"run_id": f"r{i}", "phase": "start", **r} for i, r in enumerate(rows)]
                            + [{"run_id": "r0", "phase": "end", "measured": 1}])
    one_gpu = [{"cpu_count": 16, "gpu_selected": "0"}, {"cpu_count": 16}]  # a run of one rank selects no GPU
    assert hosts_row(env(one_gpu)) == ""
    assert hosts_row(env(one_gpu + [{}])) == ""  # a run older than the field changes nothing by itself
    four = [{"cpu_count": 64, "gpu_selected": g} for g in ("2", "0", "10", "1")]
    assert hosts_row(env([{}] + one_gpu + four)) == (
        "| cores each run could use, and its GPU (start records; pinned runs count their pinned cores) | "
        "1 run with no cores recorded; 2 runs with 16 cores; 4 runs with 64 cores, on GPUs 0, 1, 2, 10 of one host |\n")
    assert hosts_row(env(four[:1])) == "" and hosts_row(pd.DataFrame()) == ""


def test_the_card_names_a_retiming_folder_with_its_runs_and_cap():
    """One problem-direction re-measured by one run under a 600 s cap, and a 2D-style folder of 27 runs
    whose start records name no cap."""
    from kbench.collect.packaging.card import retimed_line
    env = pd.DataFrame([{"run_id": "r1", "phase": "start", "problem_time_cap_s": 600.0},
                        {"run_id": "r1", "phase": "end", "problem_time_cap_s": None},
                        {"run_id": "base", "phase": "start", "problem_time_cap_s": 25.0}])
    one = {"raw": ["raw/x-retimed"], "problem_directions": 1, "runs": ["r1"]}
    assert retimed_line(one, env) == ("1 problem-direction measured again in `raw/x-retimed` (1 run, per-problem "
                                      "time cap 600 s): those measurements replace the base folder's.")
    many = {"raw": ["raw/a", "raw/b"], "problem_directions": 6092, "runs": [f"s{i}" for i in range(27)]}
    assert retimed_line(many, env) == ("6,092 problem-directions measured again in `raw/a`, `raw/b` (27 runs): "
                                       "those measurements replace the base folder's.")
    assert retimed_line(None, env) == ""

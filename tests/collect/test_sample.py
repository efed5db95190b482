"""kbench collect sample (stratified sample for the test-retest study) and the `repeats` table."""
import json
import shutil

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kbench.collect.measure.cudnn import load_problems
from kbench.collect.studies import sample
from kbench.core.errors import DataIntegrityError, KbenchInputError


def test_allocation_by_largest_remainder():
    # strata of 6, 3 and 1 problems
    sizes = pd.Series([6, 3, 1], index=["x", "y", "z"])
    assert sample.allocate(sizes, 10).tolist() == [6, 3, 1]
    assert sample.allocate(sizes, 5).tolist() == [3, 2, 0]  # quotas 3, 1.5, 0.5: the first .5 (y) wins the tie
    assert sample.allocate(sizes, 4).tolist() == [2, 1, 1]  # quotas 2.4, 1.2, 0.4: the leftover goes to z (.4)
    with pytest.raises(KbenchInputError, match="at most 10"):
        sample.allocate(sizes, 11)


@given(st.lists(st.integers(1, 40), min_size=1, max_size=12), st.data())
def test_allocation_is_proportional(sizes, data):
    sizes = pd.Series(sizes)
    n = data.draw(st.integers(1, int(sizes.sum())))
    got = sample.allocate(sizes, n)
    quota = sizes * n / sizes.sum()
    assert got.sum() == n
    assert ((got >= np.floor(quota)) & (got <= np.ceil(quota)) & (got <= sizes)).all()


@pytest.fixture(scope="module")
def h100():
    from kbench.data.dataset import load
    return load("h100")


def test_h100_sample_covers_strata_proportionally(h100, tmp_path):
    out = tmp_path / "sample.csv"
    counts = sample.write_sample(h100, out, n=500, seed=0)
    rows = pd.read_csv(out)
    assert len(rows) == 500 and rows["problem_id"].is_unique
    test_ids = set(h100.split("random")["test"])
    assert set(rows["problem_id"]) <= test_ids
    # every stratum of the test part gets floor or ceil of its proportional share
    test = h100.problems[h100.problems["problem_id"].isin(test_ids)]
    sizes = test.assign(layout=test["layout_x"]).groupby(sample.STRATA).size()
    got = rows.groupby(sample.STRATA).size().reindex(sizes.index, fill_value=0)
    quota = sizes * 500 / sizes.sum()
    assert ((got >= np.floor(quota)) & (got <= np.ceil(quota))).all()
    assert counts["problem-directions"].sum() == 500
    # the collector reads it back as exactly these problem-directions, with the shipped ids
    back = load_problems(out)
    assert back["key"].tolist() == rows["problem_id"].tolist()
    # deterministic with the seed, different with another
    again = sample.sample_corpus(h100, 500, seed=0)
    assert again["problem_id"].tolist() == rows["problem_id"].tolist()
    assert set(sample.sample_corpus(h100, 500, seed=1)["problem_id"]) != set(rows["problem_id"])


def test_3d_sample_is_a_3d_problems_file(tmp_path):
    # a 3D dataset's sample keeps the depth fields, and the collector reads back the shipped ids
    from kbench.data.dataset import load
    ds = load("h200-3d-pytorch")
    out = tmp_path / "sample3d.csv"
    sample.write_sample(ds, out, n=40, seed=0, part=None)
    rows = pd.read_csv(out)
    assert set(sample.DEPTH_COLUMNS) <= set(rows.columns) and set(rows["layout"]) <= {"NCDHW", "NDHWC"}
    shipped = ds.problems.set_index("problem_id").loc[rows["problem_id"]]
    for col in sample.DEPTH_COLUMNS:
        assert rows[col].tolist() == shipped[col].tolist()
    assert load_problems(out)["key"].tolist() == rows["problem_id"].tolist()


def test_collector_keeps_a_files_directions(tmp_path):
    path = tmp_path / "p.csv"
    pd.DataFrame([dict(n=2, c=16, k=16, x_h=8, x_w=8, fil_h=3, fil_w=3, dtype="FP16", layout="NHWC", direction=d)
                  for d in ("W", "b")]).to_csv(path, index=False)
    assert load_problems(path)["direction"].tolist() == ["W", "B"]
    assert load_problems(path, directions=("F", "B"))["direction"].tolist() == ["B"]
    pd.DataFrame([dict(n=2, c=16, k=16, x_h=8, x_w=8, fil_h=3, fil_w=3, direction="X")]).to_csv(path, index=False)
    with pytest.raises(KbenchInputError, match="column direction has"):
        load_problems(path)


def test_sample_cli(tmp_path):
    from kbench.cli import main
    out = tmp_path / "s.csv"
    assert main(["collect", "sample", "--dataset", "h100", "--n", "60", "--seed", "3", "--out", str(out)]) == 0
    assert len(pd.read_csv(out)) == 60
    assert main(["collect", "sample", "--dataset", "h100", "--n", "100000", "--out", str(out)]) == 2


# ---------------------------------------------------------------- the repeats table
def _repeat_folder(raw_sample, tmp_path, factor=1.5, n_problems=2):
    """A second raw folder: the first n problems of the sample, every time x factor, as another run."""
    from kbench.collect.raw_store.writer import RawWriter, load_records
    problems = load_records(raw_sample, "problems").head(n_problems)
    plans = load_records(raw_sample, "plans")
    out = tmp_path / "raw2"
    w = RawWriter(out, run_id="20261124T000000-repeat")
    for rec in problems.to_dict("records"):
        ps = plans[plans["key"] == rec["key"]].drop(columns=["key", "run_id"]).copy()
        for c in ("coarse_ms", "precise_ms"):
            ps[c] = ps[c] * factor
        w.add({k: v for k, v in rec.items() if k != "run_id"},
              [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
               for r in ps.to_dict("records")])
    w.flush()
    shutil.copy(raw_sample / "env.jsonl", out / "env.jsonl")
    return out, list(problems["key"])


def test_package_with_repeats_loads_and_checks(raw_sample, tmp_path):
    from kbench.collect.packaging import package
    from kbench.data.dataset import read_dataset_folder
    from kbench.sources import repeatability
    raw2, keys = _repeat_folder(raw_sample, tmp_path)
    card = tmp_path / "card.md"
    manifest = package.package(raw_sample, "h100", tmp_path / "ds", mituna=None, repeats=[raw2], card=card)
    ds = read_dataset_folder(tmp_path / "ds", "h100")
    rep = ds.repeats
    assert list(rep.columns) == ["problem_id", "kernel", "run_id", "time_ms"]
    ids = set(ds.problems["problem_id"]) & set(keys)
    assert set(rep["problem_id"]) == ids and sorted(rep["run_id"].unique()) == [0, 1]
    # run 0 is the dataset's runtimes for those problems; run 1 the same plans at 1.5x
    base = ds.runtimes[ds.runtimes["problem_id"].isin(ids)]
    r0 = rep[rep["run_id"] == 0].set_index(["problem_id", "kernel"])["time_ms"]
    r1 = rep[rep["run_id"] == 1].set_index(["problem_id", "kernel"])["time_ms"]
    assert len(r0) == len(base) and np.allclose(r1.reindex(r0.index) / r0, 1.5)
    s = repeatability.summary(rep, ds.heuristics)
    assert s["plans"]["median"] == pytest.approx(np.log(1.5)) and s["same_winner"]["share"] == 1.0
    assert s["noise_ceiling"]["max"] == pytest.approx(1.0)
    assert manifest["files"]["repeats.parquet"]["rows"] == len(rep)
    assert manifest["repeats"]["runs"][1]["collector_runs"] == ["20261124T000000-repeat"]
    text = card.read_text()
    assert "## Test-retest" in text and f"{len(ids)} problem-directions were measured again" in text
    # the checksum failure path: one byte changed, same size
    f = tmp_path / "ds" / "repeats.parquet"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(DataIntegrityError, match=r"repeats.parquet: sha256 does not match.*kbench build-data"):
        read_dataset_folder(tmp_path / "ds", "h100")


def test_without_repeats_the_card_says_the_study_is_not_run(tmp_path):
    from kbench.collect.packaging.card import repeats_section
    assert "has not been run yet" in repeats_section({})
    from kbench.data.dataset import load
    # h200 is a draft without a test-retest study; h100 ships one since 1.1.0
    assert load("h200").repeats is None
    assert load("h100").repeats is not None


def test_repeats_from_another_gpu_are_refused(raw_sample, tmp_path):
    from kbench.collect.packaging import package
    raw2, _ = _repeat_folder(raw_sample, tmp_path)
    lines = (raw2 / "env.jsonl").read_text().splitlines()
    (raw2 / "env.jsonl").write_text("\n".join(json.dumps({**json.loads(line), "gpu": "NVIDIA H200"}) for line in lines))
    with pytest.raises(KbenchInputError, match="same GPU model"):
        package.package(raw_sample, "h100", tmp_path / "ds", mituna=None, repeats=[raw2])


def test_compare_two_raw_folders(raw_sample, tmp_path, capsys):
    from kbench.cli import main
    from kbench.collect.studies import retest
    raw2, keys = _repeat_folder(raw_sample, tmp_path)
    m = retest.compare(raw_sample, raw2)
    assert set(m["key"]) <= set(keys) and np.allclose(m["log_ratio"], np.log(1.5))
    assert (m["winner_a"] == m["winner_b"]).all()
    # positions follow the collector's order (cuDNN's mode-A order first): position 0 is the built plan
    # with the smallest mode-A rank
    from kbench.collect.raw_store.writer import load_records
    plans = load_records(raw_sample, "plans")
    built = plans[plans["build_ok"].astype(bool) & (plans["rank_a"] >= 0)]
    first_a = built.sort_values("rank_a").drop_duplicates("key").set_index("key")["plan"]
    at0 = m[m["position_a"] == 0].set_index("key")["plan"]
    assert len(at0) and (at0 == first_a.reindex(at0.index)).all()
    assert main(["collect", "compare", str(raw_sample), str(raw2), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "same fastest plan: 2 of 2 (100.0%)" in out and "noise ceiling (run a's winner under run b): geomean 1.0000" in out


def test_small_parts_line_hand_worked():
    """3 problems, 3 plans: p1 and p2 are train in split `a` (fastest x and y), p3 is test. Two plans are a
    training label; the train part (2) is under the largest k-shot budget, which the transfer track uses."""
    import pandas as pd

    from kbench.collect.packaging.card import LARGEST_SHOT_BUDGET, small_parts_line
    from kbench.data.transfer_task import K_BUDGETS
    assert LARGEST_SHOT_BUDGET == max(K_BUDGETS)
    rt = pd.DataFrame({"problem_id": ["p1", "p1", "p2", "p2", "p3"], "kernel": ["x", "y", "x", "y", "z"],
                       "time_ms": [1.0, 2.0, 3.0, 0.5, 1.0]})
    splits = pd.DataFrame({"problem_id": ["p1", "p2", "p3"], "a": ["train", "train", "test"]})
    text = small_parts_line(splits, rt, "toy")
    assert text.startswith("Plans that are the fastest on a train problem, of the 3 measured: `a` 2 (over 2 problems).")
    assert text.endswith("**Small parts.** The train part of `a` (2) is under the transfer track's largest k-shot "
                         "budget (1,000), so that budget is refused with toy as the target.")

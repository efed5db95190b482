"""Packaging a dataset whose affected problem-directions were re-timed with PyTorch's strides.

The fixture is real collector output (``fixtures/raw_sample``, legacy strides): its depthwise NHWC
problem ``1152-7-7-5x5-...-FP32-*_g1152`` is the one whose filter strides differ between the two
conventions. A re-timing folder is written from it by hand: the same records with a new run id, the
``pytorch`` convention and every time halved, so that which measurement won is visible in the tables.
"""

import json
from pathlib import Path

import pandas as pd
import pytest

from kbench.collect.measure.strides import strides_differ, strides_row
from kbench.collect.packaging import package
from kbench.core.errors import KbenchInputError

RAW_SAMPLE = Path(__file__).with_name("fixtures") / "raw_sample"
NEW_RUN = "20261127T000000-retime"


def write_retimed(folder: Path, keys, gpu: str | None = None, convention: str = "pytorch") -> Path:
    problems, plans, env = package.load_raw(RAW_SAMPLE)
    folder.mkdir(parents=True)
    problems = problems[problems["key"].isin(keys)].assign(run_id=NEW_RUN)
    plans = plans[plans["key"].isin(keys)].assign(run_id=NEW_RUN)
    for col in ("coarse_ms", "precise_ms", "precise_min_ms", "precise_q1_ms", "precise_q3_ms", "repeat_ms"):
        plans[col] = plans[col] * 0.5
    problems.to_parquet(folder / "problems-0000.parquet")
    plans.to_parquet(folder / "plans-0000.parquet")
    start = json.loads((RAW_SAMPLE / "env.jsonl").read_text().splitlines()[0])
    start.update(run_id=NEW_RUN, tensor_strides=convention, **({"gpu": gpu} if gpu else {}))
    (folder / "env.jsonl").write_text(json.dumps(start) + "\n")
    return folder


@pytest.fixture(scope="module")
def base():
    return package.load_raw(RAW_SAMPLE)


def affected_keys(problems):
    return list(problems.loc[strides_differ(problems)["any"], "key"])


def test_the_fixture_has_exactly_one_affected_geometry(base):
    problems = base[0]
    assert len(affected_keys(problems)) == 3  # its F, B and W
    assert all("_g1152" in k for k in affected_keys(problems))


def test_overlay_replaces_every_plan_of_a_retimed_problem_and_nothing_else(base, tmp_path):
    problems, plans, env = base
    keys = affected_keys(problems)
    folder = write_retimed(tmp_path / "rt", keys)
    p2, pl2, env2, info, replaced = package.overlay_retimed(problems, plans, env, folder, "NVIDIA H100 80GB HBM3")
    assert replaced == set(keys) and info["problem_directions"] == 3
    assert info["tensor_strides"] == ["pytorch"] and info["runs"] == [NEW_RUN]
    assert len(p2) == len(problems) and p2["key"].is_unique
    assert set(p2.loc[p2["run_id"] == NEW_RUN, "key"]) == set(keys)
    # the re-timed problems' plans are the new ones alone, at half the old times
    old = plans[plans["key"].isin(keys)].set_index(["key", "plan"])["coarse_ms"]
    new = pl2[pl2["key"].isin(keys)].set_index(["key", "plan"])["coarse_ms"]
    assert len(new) == len(old) and pl2.loc[pl2["key"].isin(keys), "run_id"].eq(NEW_RUN).all()
    pd.testing.assert_series_equal(new.sort_index(), (old * 0.5).sort_index())
    # the others are untouched
    others = ~plans["key"].isin(keys)
    pd.testing.assert_series_equal(pl2[~pl2["key"].isin(keys)]["coarse_ms"].reset_index(drop=True),
                                   plans[others]["coarse_ms"].reset_index(drop=True))


def test_package_with_retimed_folder_takes_the_new_times(tmp_path):
    keys = affected_keys(package.load_raw(RAW_SAMPLE)[0])
    folder = write_retimed(tmp_path / "rt", keys)
    before = package.build_tables(*package.load_raw(RAW_SAMPLE)[:2], None)[0]["runtimes"]
    manifest = package.package(RAW_SAMPLE, "h100", tmp_path / "ds", retimed=folder, card=tmp_path / "card.md")
    after = pd.read_parquet(tmp_path / "ds" / "runtimes.parquet")
    best = lambda rt: rt[rt["rank"] == 0].set_index("problem_id")["time_ms"]  # noqa: E731
    ratio = best(after) / best(before)
    assert ratio[ratio.index.isin(keys)].round(12).eq(0.5).all()
    assert ratio[~ratio.index.isin(keys)].eq(1.0).all()
    assert manifest["retimed"]["problem_directions"] == 3
    card = (tmp_path / "card.md").read_text()
    assert "`legacy` (2 runs), `pytorch` (1 run)" in card
    assert "the 3 problem-directions whose strides differ between the two were all measured again" in card


def test_a_legacy_measurement_of_an_affected_problem_beside_pytorch_runs_is_refused(base, tmp_path):
    problems = base[0]
    unaffected = [k for k in problems["key"] if k not in affected_keys(problems)][:2]
    folder = write_retimed(tmp_path / "rt", unaffected)  # pytorch runs, but not of the affected problem
    with pytest.raises(KbenchInputError, match="3 problem-directions whose tensors get other strides"):
        package.package(RAW_SAMPLE, "h100", tmp_path / "ds", retimed=folder)
    assert not (tmp_path / "ds").exists()


def test_a_retiming_of_unmeasured_problems_or_another_gpu_is_refused(base, tmp_path):
    problems, plans, env = base
    folder = write_retimed(tmp_path / "rt", affected_keys(problems))
    with pytest.raises(KbenchInputError, match="another|measured on NVIDIA H100 80GB HBM3, the dataset on NVIDIA H200"):
        package.overlay_retimed(problems, plans, env, folder, "NVIDIA H200")
    fewer = problems[~problems["key"].isin(affected_keys(problems))]
    with pytest.raises(KbenchInputError, match="3 problem-directions that the base folders never measured"):
        package.overlay_retimed(fewer, plans, env, folder, None)


def test_strides_row_explains_mixed_conventions_only_with_a_retiming():
    env = pd.DataFrame({"phase": ["start"] * 3, "run_id": ["a", "b", "c"],
                        "tensor_strides": [None, "pytorch", "pytorch"]})
    assert strides_row(env) == ""
    row = strides_row(env, {"problem_directions": 6092, "raw": ["raw/h200-pytorch-strides"]})
    assert "`legacy` (1 run), `pytorch` (2 runs)" in row
    assert "the 6,092 problem-directions whose strides differ between the two were all measured again with " \
           "`pytorch` (`raw/h200-pytorch-strides`)" in row

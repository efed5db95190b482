"""A two-shard collection recorded on the GPU machine: its split, merge and packaging.

The fixture (``fixtures/two_shards``, see its README) is what ``kbench collect cudnn --shard K/2
--limit 6`` wrote on a lent H200 for shards 0/2 and 1/2, so these tests read real shard folders:
manifests, journals, environment records and loss-free batch parts exactly as the collector left them.
"""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from kbench.collect.measure.cudnn import load_problems
from kbench.collect.packaging import package
from kbench.collect.raw_store import shard
from kbench.collect.raw_store.merge import merge
from kbench.collect.raw_store.writer import load_records
from kbench.core.errors import KbenchInputError

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "fixtures" / "two_shards"
CORPUS = HERE.parents[1] / "raw" / "h100" / "corpus.csv.gz"
SHARDS = ("shard-0-of-2", "shard-1-of-2")


@pytest.fixture()
def shards(tmp_path):
    """A copy of the recorded shard folders (the tests never write into the fixture)."""
    root = tmp_path / "run"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("README.md"))
    return root


def _manifest(name: str) -> dict:
    return json.loads((FIXTURE / name / shard.MANIFEST).read_text())


def test_fixture_is_real_sharded_output():
    for k, name in enumerate(SHARDS):
        m = _manifest(name)
        assert (m["index"], m["count"], m["limit"]) == (k, 2, 6)
        env = pd.read_json(FIXTURE / name / "env.jsonl", lines=True)
        assert set(env["gpu"]) == {"NVIDIA H200"} and set(env["phase"]) == {"start", "end"}
        # each shard measured exactly the problem-directions it was given
        measured = load_records(FIXTURE / name, "problems")
        assert sorted(measured["key"]) == sorted(m["assigned"]) and (measured["status"] == "ok").all()


def test_assignment_is_the_split_of_the_first_six_pending():
    """The manifests hold what plan_shard computes now from the same corpus: a partition of its first 6."""
    todo = load_problems(CORPUS)
    assigned = [_manifest(name)["assigned"] for name in SHARDS]
    assert set(assigned[0]).isdisjoint(assigned[1])
    assert sorted(assigned[0] + assigned[1]) == sorted(todo["key"].head(6))
    for k in range(2):
        # an empty root: nothing is done, so the split is of the corpus's first 6 problem-directions
        assert shard.plan_shard(todo, FIXTURE.parent / "no-such-root", shard.Shard(k, 2), 6)["key"].tolist() == assigned[k]


def test_merge_joins_both_shards_without_loss(shards, tmp_path, raw_encoding_problems):
    report = merge([shards], out=tmp_path / "merged")
    assert [p for f in sorted((tmp_path / "merged").glob("*.parquet")) for p in raw_encoding_problems(f)] == []
    assert report["gaps"] == [] and report["problem_directions"] == 6
    parts = [load_records(shards / name, "plans") for name in SHARDS]
    assert report["plan_records"] == sum(len(p) for p in parts)
    merged = load_records(tmp_path / "merged", "plans")
    cols = ["key", "plan", "correct", "precise_ms", "run_id"]
    want = pd.concat(parts)[cols].sort_values(["key", "plan"]).reset_index(drop=True)
    assert merged[cols].sort_values(["key", "plan"]).reset_index(drop=True).equals(want)
    assert {s["shard"] for s in report["sources"]} == {"0/2", "1/2"}
    assert report["versions"]["gpu"] == "NVIDIA H200"


def test_merge_refuses_one_shard_alone_and_a_shard_twice(shards, tmp_path):
    with pytest.raises(KbenchInputError, match="incomplete") as err:
        merge([shards / SHARDS[0]], out=tmp_path / "a")
    assert "1/2" in str(err.value)
    assert not (tmp_path / "a").exists()
    twin = tmp_path / "twin" / SHARDS[0]
    shutil.copytree(shards / SHARDS[0], twin)
    with pytest.raises(KbenchInputError, match="cannot merge"):
        merge([shards / SHARDS[0], shards / SHARDS[1], twin], out=tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_merged_shards_package_into_a_loadable_dataset(shards, tmp_path):
    from kbench.data.dataset import read_dataset_folder
    merge([shards], out=tmp_path / "merged")
    manifest = package.package(tmp_path / "merged", "h200", tmp_path / "h200", mituna=None, card=tmp_path / "card.md")
    ds = read_dataset_folder(tmp_path / "h200", "h200")
    problems, plans, _ = package.load_raw(tmp_path / "merged")
    # by definition: every packaged runtime is a candidate plan of a measured problem-direction, once
    rt = ds.runtimes
    assert not rt.duplicated(["problem_id", "kernel"]).any()
    cand = package.candidate_runtimes(problems, plans)
    assert len(rt) == len(cand) == manifest["files"]["runtimes.parquet"]["rows"]
    assert set(ds.problems["problem_id"]) <= set(problems["key"]) and len(ds.problems) <= 6
    # packaging the two shards directly (no merge) gives the same tables
    direct = package.package([shards / n for n in SHARDS], "h200", tmp_path / "h200b", mituna=None,
                       card=tmp_path / "card_b.md")
    assert direct["files"]["runtimes.parquet"]["sha256"] == manifest["files"]["runtimes.parquet"]["sha256"]


def _mark_kernel_cache(folder: Path) -> None:
    """Make a shard folder look like a --kernel-cache run (its start records say so)."""
    env = folder / "env.jsonl"
    rows = [json.loads(line) for line in env.read_text().splitlines()]
    env.write_text("".join(json.dumps({**r, **({"kernel_cache": True} if r["phase"] == "start" else {})}) + "\n"
                           for r in rows))


def test_kernel_cache_runs_are_not_mixed_with_static_ones(shards, tmp_path):
    from kbench.collect.raw_store.writer import graph_modes, load_env
    assert graph_modes(load_env(shards / SHARDS[0])) == {"static"}
    _mark_kernel_cache(shards / SHARDS[1])
    assert graph_modes(load_env(shards / SHARDS[1])) == {"kernel-cache"}
    with pytest.raises(KbenchInputError, match="--kernel-cache") as err:
        merge([shards], out=tmp_path / "merged")
    assert str(shards / SHARDS[1]) in str(err.value) and not (tmp_path / "merged").exists()
    with pytest.raises(KbenchInputError, match="with and without --kernel-cache"):
        package.load_raw([shards / n for n in SHARDS])
    # both shards measured the same way merge again
    _mark_kernel_cache(shards / SHARDS[0])
    assert merge([shards], out=tmp_path / "merged")["problem_directions"] == 6

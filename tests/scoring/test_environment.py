"""The software environment every result record carries (kbench.scoring.environment)."""

from __future__ import annotations

import importlib.metadata as md
import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from kbench.core.errors import KbenchInputError
from kbench.leaderboard.schema import parse_record
from kbench.scoring.environment import (
    NOT_A_CHECKOUT,
    SOURCE_MANIFEST,
    Environment,
    _imports,
    environment,
    git_blob_id,
    git_state,
    imported_top_level,
    method_modules,
    package_versions,
)
from kbench.scoring.records import RECORD_SCHEMA_VERSION, EvaluationResult

REPO = Path(__file__).resolve().parents[2]


def test_imports_resolve_relative_and_function_level(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text(textwrap.dedent("""
        import numpy as np, os.path
        from . import features
        from .base import Baseline
        from ..kbench import dataset
        def fit():
            import xgboost
            from sklearn.ensemble import RandomForestClassifier
    """))
    assert _imports(src, "pkg.sub.mod") == {
        "numpy", "os.path", "pkg.sub", "pkg.sub.features", "pkg.sub.base", "pkg.sub.base.Baseline",
        "pkg.kbench", "pkg.kbench.dataset", "xgboost", "sklearn.ensemble",
        "sklearn.ensemble.RandomForestClassifier"}


def test_method_packages_follow_the_baselines_code():
    from kbench_baselines import base
    base.discover()
    rf = base.BASELINES["hybrid-rf"]
    assert method_modules(rf)[0] == "kbench_baselines.hybrid_rf"
    top = imported_top_level(method_modules(rf))
    assert "sklearn" in top and "torch" not in top and "kbench" not in top and "json" not in top
    packages = environment(method_modules(rf)).packages
    assert packages["scikit-learn"] == md.version("scikit-learn")
    assert {"kbench", "numpy", "pandas", "pyarrow"} <= set(packages)
    # the random floor imports no learning library
    assert "scikit-learn" not in environment(method_modules(base.BASELINES["random"])).packages


def test_package_versions_skip_what_is_not_installed():
    got = package_versions({"numpy", "a_module_that_is_not_installed"})
    assert got["numpy"] == md.version("numpy")
    assert "a_module_that_is_not_installed" not in got and "a-module-that-is-not-installed" not in got
    assert list(got) == sorted(got)


def _git(root, *args):
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_git_state_commit_dirty_and_not_a_checkout(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    assert git_state(plain).model_dump() == {"commit": None, "dirty": None, "note": NOT_A_CHECKOUT}
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    _git(repo, "add", "a.py")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    sha = _git(repo, "rev-parse", "HEAD")
    git_state.cache_clear()
    assert git_state(repo).model_dump() == {"commit": sha, "dirty": False, "note": None}
    (repo / "untracked.txt").write_text("not part of the code\n")
    git_state.cache_clear()
    assert git_state(repo).dirty is False  # untracked files do not make the code dirty
    (repo / "a.py").write_text("x = 2\n")
    git_state.cache_clear()
    state = git_state(repo)
    assert state.dirty is True and state.describe() == f"{sha[:12]} (dirty: uncommitted changes)"
    git_state.cache_clear()


def test_git_blob_id_is_gits_hash_object(tmp_path):
    # the blob id of "hello\n" as every git computes it (git hash-object), and of the empty file
    assert git_blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
    assert git_blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"


def test_a_thinned_copy_names_its_commit_and_whether_its_code_changed(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "pkg" / "a.py").write_text("x = 1\n")
    (repo / "data.bin").write_bytes(b"\0" * 100)
    (repo / "link").symlink_to("pkg/a.py")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    sha = _git(repo, "rev-parse", "HEAD")
    # the script that thins the tree for the GPU machine writes the manifest, and 'back' removes it
    script = REPO / "tools" / "device" / "device_tree.sh"
    subprocess.run(["bash", str(script), "out", str(tmp_path / "stash")], cwd=repo, check=True, capture_output=True)
    assert (repo / SOURCE_MANIFEST).read_text().splitlines()[0] == f"commit {sha}"
    copy = tmp_path / "copy"  # what travels: the files, and a .git at another commit (as the GPU machine's copy)
    shutil.copytree(repo, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    _git(copy, "init", "-q")
    _git(copy, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "other")
    (copy / "data.bin").unlink()  # left out of the thinned copy: not a change
    git_state.cache_clear()
    state = git_state(copy)
    assert state.model_dump() == {"commit": sha, "dirty": False,
                                  "note": "a travelling copy: 2 of 3 tracked files present, 0 differ from the commit"}
    (copy / "pkg" / "a.py").write_text("x = 2\n")
    git_state.cache_clear()
    assert git_state(copy).dirty is True and "1 differ" in git_state(copy).note
    git_state.cache_clear()
    subprocess.run(["bash", str(script), "back", str(tmp_path / "stash")], cwd=repo, check=True, capture_output=True)
    assert not (repo / SOURCE_MANIFEST).exists()


def test_records_carry_the_environment_and_old_records_stay_valid(tmp_path):
    shipped = next(iter(sorted((REPO / "leaderboard").glob("mi300x/random/*/result.json"))))
    # a record as kbench wrote it before records carried their environment: schema 1, no such field
    doc = {k: v for k, v in json.loads(shipped.read_text()).items() if k != "environment"}
    doc["schema_version"] = 1
    old = tmp_path / "old" / "result.json"
    old.parent.mkdir()
    old.write_text(json.dumps(doc))
    record = parse_record(old, doc)
    assert record.environment is None
    assert "environment" not in json.loads(record.model_dump_json())  # written again: the same keys
    from kbench.scoring.evaluate import Evaluator
    ev = Evaluator("mi300x", reference=None)
    best = ev.dataset.best[ev.dataset.best["problem_id"].isin(ev.ids)]
    new = ev(best.rename(columns={"kernel": "ranking"})[["problem_id", "ranking"]], method="oracle")
    assert new.overall["top1"] == 1.0
    assert new.schema_version == RECORD_SCHEMA_VERSION == 3
    assert isinstance(new.environment, Environment)
    assert new.environment.packages["pandas"] == md.version("pandas")
    again = EvaluationResult.model_validate_json(new.model_dump_json())
    assert again.environment == new.environment
    newer = {**doc, "schema_version": RECORD_SCHEMA_VERSION + 1}
    with pytest.raises(KbenchInputError, match="schema_version 4 was written by a newer kbench"):
        parse_record(tmp_path / "result.json", newer)


def test_tree_threads_override_is_validated_and_recorded(monkeypatch):
    from kbench.scoring.environment import TREE_THREADS_VARIABLE, tree_threads
    monkeypatch.delenv(TREE_THREADS_VARIABLE, raising=False)
    assert tree_threads(2) == 2
    env = environment()
    assert env.tree_threads is None and "tree_threads" not in env.model_dump()  # unset: the key is absent
    monkeypatch.setenv(TREE_THREADS_VARIABLE, "8")
    assert tree_threads(2) == 8
    env = environment()
    assert env.tree_threads == 8 and env.model_dump()["tree_threads"] == 8
    assert Environment.model_validate(json.loads(env.model_dump_json())) == env  # JSON round trip
    for bad in ("0", "-1", "two", "1.5"):
        monkeypatch.setenv(TREE_THREADS_VARIABLE, bad)
        with pytest.raises(KbenchInputError, match=f"KBENCH_THREADS={bad!r}: expected a whole number"):
            tree_threads(2)


def test_xgboost_trees_do_not_depend_on_the_thread_count(monkeypatch):
    # why the override may change only the fit time: the same booster for 1 and 3 threads
    import numpy as np
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 8)).astype(np.float32)
    y = x[:, 0] * x[:, 1] + np.sin(x[:, 2])
    from kbench_baselines.xgb_plans import XGBoostPlans
    preds = []
    for threads in ("1", "3"):
        monkeypatch.setenv("KBENCH_THREADS", threads)
        params = XGBoostPlans().xgb_params(seed=5)
        assert params["nthread"] == int(threads)
        booster = xgb.train(params, xgb.DMatrix(x, label=y), 20)
        preds.append(booster.predict(xgb.DMatrix(x)))
    assert np.array_equal(preds[0], preds[1])


def test_code_path_is_the_repository_file_of_a_baseline():
    # the import name (kbench_baselines) is not the folder's (baselines): the site links the file
    from kbench.scoring.environment import code_path
    from kbench_baselines import base
    base.discover()
    for name in ("xgboost-plans", "hybrid-rf", "reformer"):
        path = code_path(base.BASELINES[name].__module__)
        assert path.startswith("baselines/") and (REPO / path).is_file()
    assert code_path("kbench.scoring.metrics") == "kbench/scoring/metrics.py"
    assert code_path("not_imported.module") == "not_imported/module.py"


def test_every_shipped_board_record_names_its_environment():
    """Issue 44's aim: each entry on the boards says which Python, packages, commit, OS and CPU made it,
    so that a figure can be traced to the software that produced it."""
    records = {str(p.relative_to(REPO)): json.loads(p.read_text(encoding="utf-8"))
               for p in sorted((REPO / "leaderboard").glob("*/*/*/result.json"))}
    assert len(records) > 100
    assert [path for path, record in records.items() if not record.get("environment")] == []
    for path, record in records.items():
        env = record["environment"]
        assert env["python"] and env["packages"].get("kbench") and env["os"] and env["cpu"], path
        assert env["git"]["commit"] == NOT_A_CHECKOUT or len(env["git"]["commit"]) == 40, path

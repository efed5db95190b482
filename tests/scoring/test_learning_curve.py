"""experiments/learning_curve.py: the train shares it draws, and its 100% point equal to the board's fit."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def curve():
    spec = importlib.util.spec_from_file_location("learning_curve", REPO / "experiments" / "learning_curve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_share_is_a_seeded_subset_in_the_parts_order(curve):
    train = pd.Index([f"p{i:02d}" for i in range(20)])
    assert curve.train_share(train, 1.0, seed=3).equals(train)
    share = curve.train_share(train, 0.25, seed=3)
    assert len(share) == 5 and set(share) <= set(train)
    assert list(share) == sorted(share)  # kept in the part's order
    assert curve.train_share(train, 0.25, seed=3).equals(share)  # the seed fixes the draw
    assert not curve.train_share(train, 0.25, seed=4).equals(share)


def test_the_full_share_is_the_boards_own_fit(curve, tmp_path):
    # the 100% point --full-from-board reads is what `kbench run` fits and scores for the same seed
    import kbench
    from kbench.cli import main
    from kbench.scoring.evaluate import Evaluator
    from kbench_baselines import get_baseline
    assert main(["run", "--dataset", "mi300x", "--baselines", "xgboost", "--seeds", "0", "--out", str(tmp_path),
                 "--no-progress"]) == 0
    run = json.loads((tmp_path / "mi300x" / "random" / "xgboost" / "seed-0" / "result.json").read_text())
    ds = kbench.load("mi300x")
    parts = ds.split("random")
    model = get_baseline("xgboost").fit(ds, curve.train_share(pd.Index(parts["train"]), 1.0, 0), parts["valid"], seed=0)
    overall = Evaluator(ds, "random", part="test")(model.predict(ds, parts["test"])).overall
    assert {k: overall[k] for k in curve.FIGURES} == pytest.approx({k: run["metrics"]["overall"][k] for k in curve.FIGURES},
                                                                  rel=1e-12)


def test_summary_is_mean_and_sample_std_per_share(curve):
    rows = [{"fraction": 0.5, "seed": s, "train_problems": 10, "top1": t, "geomean_slowdown": g, "speedup_geomean": 1.0}
            for s, t, g in ((0, 0.8, 1.10), (1, 0.9, 1.20))]
    (point,) = curve.summary(rows)
    assert point["seeds"] == 2 and point["top1_mean"] == pytest.approx(0.85)
    assert point["top1_std"] == pytest.approx(0.0707106781, rel=1e-6)  # sqrt(((0.05)^2 * 2) / 1)
    assert point["geomean_slowdown_mean"] == pytest.approx(1.15)

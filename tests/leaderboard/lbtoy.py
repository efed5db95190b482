"""A toy dataset and fake baselines for the leaderboard tests (small: every test runs in seconds).

A uniquely named module (not conftest) so that test modules can import it unambiguously.
"""

import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # ``baselines`` is a top-level folder
    sys.path.insert(0, str(ROOT))

from kbench.data.dataset import Dataset  # noqa: E402
from kbench.leaderboard import store  # noqa: E402
from kbench_baselines import base  # noqa: E402

KERNELS = ["kA", "kB", "kC", "kD", "kE", "kF"]


def make_toy(n: int = 240, seed: int = 7, name: str = "toy") -> Dataset:
    """n problems over F/B/W and two dtypes; kernel speed depends on a hidden 'size' feature."""
    rng = np.random.default_rng(seed)
    dirs = np.array(["F", "B", "W"])[rng.integers(0, 3, n)]
    dtypes = np.array(["FP32", "FP16"])[rng.integers(0, 2, n)]
    size = rng.integers(1, 5, n)
    pids = [f"{name}-p{i:04d}-{d}" for i, d in enumerate(dirs)]
    censored = rng.random(n) < 0.3
    rows = []
    for i in range(n):
        base_t = rng.lognormal(0, 0.3, len(KERNELS))
        base_t[size[i] % len(KERNELS)] *= 0.3  # the "right" kernel for this size
        order = np.argsort(base_t)
        keep = order[:4] if censored[i] else order
        for r, k in enumerate(keep):
            rows.append((pids[i], KERNELS[k], float(base_t[k]), r))
    runtimes = pd.DataFrame(rows, columns=["problem_id", "kernel", "time_ms", "rank"])
    problems = pd.DataFrame({"problem_id": pids, "direction": dirs, "dtype": dtypes, "layout": "NCHW",
                             "size": size, "censored": censored})
    kernels = pd.DataFrame({"kernel": KERNELS, "directions": "B,F,W", "family": "toy"})
    part = np.array(["train"] * 6 + ["valid"] * 2 + ["test"] * 2)[rng.integers(0, 10, n)]
    splits = pd.DataFrame({"problem_id": pids, "random": part})
    heur = pd.DataFrame({"problem_id": pids, "heuristic": "toy_heuristic", "rank": 0, "kernel": "kA"})
    tables = {"problems": problems, "runtimes": runtimes, "kernels": kernels, "splits": splits,
              "heuristics": heur}
    manifest = {"name": name, "version": "1.0.0", "checksum": "ab" * 32, "task": "kernel-selection",
                "device": "NVIDIA H200 (a toy card)", "library": "toylib", "license": "MIT"}
    return Dataset(name, tables, manifest)


class FakeBaseline(base.Baseline):
    """Learns the best kernel per hidden size from train; ``noise`` flips some choices by seed."""

    noise = 0.0
    fits = 0  # how many times fit ran (resume test)

    def fit(self, dataset, train_ids, valid_ids=None, seed=0):
        type(self).fits += 1
        self.seed = seed
        best = dataset.best.merge(dataset.problems[["problem_id", "size"]], on="problem_id")
        best = best[best["problem_id"].isin(set(train_ids))]
        self.table = best.groupby("size")["kernel"].agg(lambda s: s.value_counts().index[0]).to_dict()
        self.fit_info = {"n_parameters": len(self.table)}
        return self

    def predict(self, dataset, ids):
        probs = base.problems_of(dataset, ids)
        rng = np.random.default_rng(self.seed)
        out = []
        for s in probs["size"]:
            first = self.table.get(s, KERNELS[0])
            rest = [k for k in KERNELS if k != first]
            if rng.random() < self.noise:
                rest[0], first = first, rest[0]
            out.append(";".join([first] + rest))
        return base.predictions_frame(probs["problem_id"], out)


class FakeOracle(base.Baseline):
    uses_test_labels = True
    leaderboard_role = "ceiling"

    def fit(self, dataset, train_ids, valid_ids=None, seed=0):
        return self

    def predict(self, dataset, ids):
        rt = dataset.runtimes[dataset.runtimes["problem_id"].isin(set(ids))].sort_values(["problem_id", "time_ms"])
        r = rt.groupby("problem_id", sort=False)["kernel"].agg(";".join)
        return base.predictions_frame(list(ids), r.reindex(list(ids)).to_numpy())


class FakeRandom(base.Baseline):
    stochastic = True
    leaderboard_role = "floor"

    def fit(self, dataset, train_ids, valid_ids=None, seed=0):
        self.seed = seed
        return self

    def predict(self, dataset, ids):
        rng = np.random.default_rng(self.seed)
        return base.predictions_frame(list(ids), [";".join(rng.permutation(KERNELS)) for _ in ids])


def registered_toy():
    """Generator for a pytest fixture: the toy dataset, registered with the leaderboard while in use."""
    ds = make_toy()
    store.register_dataset(ds)
    yield ds
    store.unregister_dataset(ds.name)


def fake_classes():
    """Fresh fake baseline classes, named after creation so they do not self-register."""
    model = type("ToyModel", (FakeBaseline,), {"noise": 0.1, "stochastic": True, "fits": 0,
                                                "description": "toy learned model"})
    rules = type("ToyRules", (FakeBaseline,), {"noise": 0.0, "stochastic": False, "fits": 0,
                                                "description": "toy deterministic model"})
    oracle = type("ToyOracle", (FakeOracle,), {"stochastic": False})
    rand = type("ToyRandom", (FakeRandom,), {})
    for cls, name in ((model, "toy-model"), (rules, "toy-rules"), (oracle, "toy-oracle"), (rand, "toy-random")):
        cls.name = name
    return {c.name: c for c in (model, rules, oracle, rand)}


def run_fakes(out: Path, leaderboard: Path | None = None, seeds=(0, 1, 2, 3, 4), classes=None, **kw):
    """Run the benchmark on the toy dataset with the fake registry (context-managed patches)."""
    from unittest import mock

    from kbench.leaderboard.runner import run_benchmark
    classes = classes or fake_classes()
    ds = make_toy()
    store.register_dataset(ds)
    try:
        with mock.patch.object(base, "BASELINES", dict(classes)), \
                mock.patch.object(base, "discover", lambda: base.BASELINES), \
                mock.patch.object(base, "UNAVAILABLE", {}):
            return run_benchmark("toy", "random", seeds=seeds, out=out, progress=False,
                                 update_leaderboard=leaderboard is not None,
                                 leaderboard_root=leaderboard or "leaderboard", log=lambda m: None, **kw)
    finally:
        store.unregister_dataset(ds.name)

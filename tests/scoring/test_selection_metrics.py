"""Best-of-K, ranking quality, the comparisons with each reference and network end-to-end time:
a three-problem case worked on paper (with a censored list), properties, and the CLI record."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbench.data.dataset import Dataset
from kbench.scoring.evaluate import Evaluator


def three_problems() -> Dataset:
    """q1 and q3 complete, q2 censored (find-db style: its 4 fastest only). E runs forward (it is measured
    on q3), so on q2 it is "slower than D or inapplicable": taken as a choice, timed at 5 (a lower bound)."""
    problems = pd.DataFrame({"problem_id": ["q1", "q2", "q3"], "direction": "F", "dtype": "FP32",
                             "layout": "NCHW", "censored": [False, True, False],
                             "network": ["netA", "netA", "netB"]})
    runtimes = pd.DataFrame([
        ("q1", "A", 1.0), ("q1", "B", 2.0), ("q1", "C", 4.0), ("q1", "D", 8.0),
        ("q2", "A", 2.0), ("q2", "B", 3.0), ("q2", "C", 4.0), ("q2", "D", 5.0),
        ("q3", "E", 1.0), ("q3", "A", 3.0),
    ], columns=["problem_id", "kernel", "time_ms"])
    kernels = pd.DataFrame({"kernel": list("ABCDE"), "directions": "F"})
    splits = pd.DataFrame({"problem_id": problems["problem_id"], "networks": "test"})
    heur = pd.DataFrame([("q1", "vendor", 0, "D"), ("q1", "vendor", 1, "C"), ("q1", "vendor", 2, "B"),
                         ("q2", "vendor", 0, "B"), ("q2", "vendor", 1, "E"),
                         ("q3", "vendor", 0, "A"), ("q3", "vendor", 1, "E")],
                        columns=["problem_id", "heuristic", "rank", "kernel"])
    tables = {"problems": problems, "runtimes": runtimes, "kernels": kernels, "splits": splits, "heuristics": heur}
    return Dataset("three", tables, {"name": "three", "version": "0", "checksum": "0" * 64})


PREDS = pd.DataFrame({"problem_id": ["q1", "q2", "q3"], "ranking": ["C;D;B;A", "E;A;D;C", "A;E"]})


def test_three_problems_by_hand():
    r = Evaluator(three_problems(), split="networks")(PREDS)
    o = r.metrics["overall"]
    # t_best = [1, 2, 1]. The best of the first K candidates:
    #   K = 1: q1 C 4, q2 E 5 (censored bound), q3 A 3   -> slowdowns 4, 2.5, 3
    #   K = 3: q1 min(C 4, D 8, B 2) = 2, q2 min(E 5, A 2, D 5) = 2 (exact: A is listed), q3 min(3, 1) = 1
    #   K = 5, 10: q1 reaches A (1): every problem at its best
    assert o["best_of_1"] == pytest.approx(30 ** (1 / 3)) and o["best_of_1"] == o["geomean_slowdown"]
    assert o["best_of_1_oracle"] == pytest.approx(30 ** (-1 / 3))
    assert o["best_of_1_censored"] == pytest.approx(1 / 3) and o["best_of_3_censored"] == 0.0
    assert o["best_of_3"] == pytest.approx(2 ** (1 / 3))
    assert o["best_of_5"] == 1.0 and o["best_of_10"] == 1.0 and o["best_of_10_oracle"] == 1.0
    # Kendall tau-b over the listed kernels, time order vs ranking position (U: not ranked, tied last):
    #   q1 (A, B, C, D) at positions (3, 2, 0, 1): 1 concordant, 5 discordant pairs of 6 -> -2/3
    #   q2 (A, B, C, D) at (0, U, 2, 1), E not listed: C C C D D D -> 0
    #   q3 (E, A) at (1, 0) -> -1
    assert o["kendall_tau"] == pytest.approx((-2 / 3 + 0 - 1) / 3) and o["kendall_tau_n"] == 3
    # NDCG@10, gain t_best / t, discount 1 / log2(position + 2):
    l2 = np.log2
    q1 = (0.25 + 0.125 / l2(3) + 0.5 / 2 + 1 / l2(5)) / (1 + 0.5 / l2(3) + 0.25 / 2 + 0.125 / l2(5))
    q2 = (1 + 0.4 / l2(3) + 0.5 / 2) / (1 + (2 / 3) / l2(3) + 0.5 / 2 + 0.4 / l2(5))
    q3 = (1 / 3 + 1 / l2(3)) / (1 + (1 / 3) / l2(3))
    assert o["ndcg_at_10"] == pytest.approx((q1 + q2 + q3) / 3)
    # the reference "vendor" chooses D 8, B 3, A 3; its own best of K: K = 1: 8, 1.5, 3; K >= 3: 2, 1.5, 1
    ref = o["references"]["vendor"]
    assert ref["n"] == 3
    assert ref["best_of_1"] == pytest.approx(36 ** (1 / 3)) and ref["best_of_1_censored"] == 0.0
    assert ref["best_of_3"] == pytest.approx(3 ** (1 / 3)) and ref["best_of_10"] == pytest.approx(3 ** (1 / 3))
    # headroom closed: sum log(t_ref / t_choice) / sum log(t_ref / t_best) = log(2 * 3/5 * 1) / log(8 * 3/2 * 3)
    assert ref["headroom_closed"] == pytest.approx(np.log(1.2) / np.log(36))
    assert ref["oracle_speedup"] == pytest.approx(36 ** (1 / 3))
    # r = t_choice / t_ref = 0.5 (improved), 5/3 (regressed), 1 (unchanged)
    assert (ref["improved"], ref["unchanged"], ref["regressed"]) == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert ref["slowdown_p95"] == pytest.approx(1 + 0.9 * (5 / 3 - 1))  # linear, sorted [0.5, 1, 5/3] at 1.9
    assert ref["slowdown_worst"] == pytest.approx(5 / 3) and ref["regressed_geomean"] == pytest.approx(5 / 3)
    assert o["speedup_geomean"] == pytest.approx((2 * 0.6 * 1) ** (1 / 3))  # the default reference is vendor
    # network end-to-end: netA = q1 + q2, netB = q3 (the dataset's own layers, each once)
    net = r.metrics["networks"]
    a, b = net["per_network"]["netA FP32 NCHW"], net["per_network"]["netB FP32 NCHW"]
    assert (a["choice_ms"], a["oracle_ms"], a["reference_ms"]) == (9.0, 3.0, 11.0)
    assert a["vs_oracle_sum"] == 3.0 and a["vs_reference_sum"] == pytest.approx(9 / 11)
    assert a["vs_oracle_geomean"] == pytest.approx(10 ** 0.5) and a["vs_reference_geomean"] == pytest.approx(
        (0.5 * 5 / 3) ** 0.5)
    assert (b["vs_oracle_sum"], b["vs_reference_sum"], b["directions"]) == (3.0, 1.0, "F")
    assert net["instances"] == 2 and net["instances_left_out"] == 0
    assert net["vs_oracle_sum"] == pytest.approx(3.0)
    assert net["vs_reference_sum"] == pytest.approx((9 / 11) ** 0.5)
    assert net["vs_oracle_geomean"] == pytest.approx((10 ** 0.5 * 3) ** 0.5)
    assert net["reference_vs_oracle_sum"] == pytest.approx((11 / 3 * 3) ** 0.5)
    assert "each layer once" in net["source"]


def test_oracle_and_reference_against_the_reference():
    ds = three_problems()
    ev = Evaluator(ds, split="networks")
    oracle = ev(pd.DataFrame({"problem_id": ["q1", "q2", "q3"], "kernel": ["A", "A", "E"]})).overall
    assert oracle["references"]["vendor"]["headroom_closed"] == 1.0
    assert oracle["kendall_tau_n"] == 3  # one ranked kernel, the rest tied last: tau-b is defined
    vendor = pd.DataFrame({"problem_id": ["q1", "q2", "q3"], "ranking": ["D;C;B", "B;E", "A;E"]})
    same = ev(vendor).overall["references"]["vendor"]
    assert same["headroom_closed"] == 0.0 and same["unchanged"] == 1.0 and same["slowdown_worst"] == 1.0
    assert same["regressed_geomean"] is None


def test_no_reference_no_network_split():
    ds = three_problems()
    ds.tables["splits"]["random"] = "test"
    o = Evaluator(ds, split="random", reference=None)(PREDS)
    assert "references" not in o.overall and "networks" not in o.metrics
    assert o.overall["best_of_3"] == pytest.approx(2 ** (1 / 3))


def test_network_layers_with_multiplicity_and_directions(monkeypatch):
    """A two-layer network: layer 1 named twice forward; FP32 has every direction (training step), FP16 only
    the forward layers (forward alone), BF16 misses layer 2 (left out)."""
    import kbench.scoring.network_time as nt
    from kbench.sources.mituna import LAYER_COLUMNS
    geo = {c: 1 for c in LAYER_COLUMNS}
    g1, g2 = {**geo, "c": 8}, {**geo, "c": 16}
    layers = pd.DataFrame([{"network": "toynet", "direction": d, "lines": n, **g} for d, n, g in
                           [("F", 2, g1), ("B", 1, g1), ("W", 1, g1), ("F", 1, g2), ("W", 1, g2)]])
    monkeypatch.setattr(nt, "shipped_network_layers", lambda: layers)
    rows = ([("FP32", d, g1) for d in "FBW"] + [("FP32", d, g2) for d in "FW"] + [("FP32", "F", {**geo, "c": 3})]
            + [("FP16", "F", g1), ("FP16", "F", g2), ("FP16", "W", g2), ("BF16", "F", g1)])
    problems = pd.DataFrame([{"dtype": dt, "direction": d, "layout": "NCHW", **g} for dt, d, g in rows])
    ns = nt.network_set(problems)
    assert ns.names == ["toynet FP16 NCHW", "toynet FP32 NCHW"] and ns.directions == ["F", "F+B+W"]
    assert ns.left_out == 1
    t_best = np.arange(1.0, len(problems) + 1)  # problem i takes i + 1 ms at best
    t_choice = 2 * t_best
    m = nt.network_metrics(ns, t_choice, t_best, None, np.ones(len(problems), dtype=bool), None)
    fp32, fp16 = m["per_network"]["toynet FP32 NCHW"], m["per_network"]["toynet FP16 NCHW"]
    # FP32: F1 x2 (1 ms), B1 (2), W1 (3), F2 (4), W2 (5): 2 + 2 + 3 + 4 + 5 = 16 ms; FP16: F1 x2 (7), F2 (8)
    assert (fp32["oracle_ms"], fp32["layers"], fp32["problems"]) == (16.0, 6.0, 5)
    assert (fp16["oracle_ms"], fp16["layers"], fp16["directions"]) == (22.0, 3.0, "F")
    assert fp32["vs_oracle_sum"] == 2.0 and fp32["vs_reference_sum"] is None and m["vs_reference_sum"] is None
    partial = np.ones(len(problems), dtype=bool)
    partial[0] = False  # an unscored layer leaves its instance out
    assert list(nt.network_metrics(ns, t_choice, t_best, None, partial, None)["per_network"]) == [
        "toynet FP16 NCHW"]


def test_shipped_network_layers_name_whole_networks():
    from kbench.sources.mituna import MIXED_LIST, shipped_network_layers
    t = shipped_network_layers()
    assert MIXED_LIST not in set(t["network"]) and "resnet50_4jobs" not in set(t["network"])
    assert (t["lines"] >= 1).all() and not t.duplicated(t.columns.drop("lines").tolist()).any()
    assert t.loc[t["network"] == "resnext101_pytorch", "lines"].max() > 1


@pytest.mark.shared_data
def test_shipped_network_layers_match_the_raw_lists(tmp_path):
    from pathlib import Path

    from kbench.sources.mituna import NETWORK_LAYERS, write_network_layers
    raw = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mituna"
    if not raw.exists():
        pytest.skip(f"{raw} not found")
    path, left_out = write_network_layers(raw, tmp_path / "layers.csv")
    assert path.read_bytes() == NETWORK_LAYERS.read_bytes()
    assert set(left_out) == {"all", "alexnet_4jobs", "msra", "resnet50_4jobs", "truncated"}


# ----------------------------------------------------------------------------- properties
def random_dataset(seed: int, n: int = 8, m: int = 7) -> Dataset:
    rng = np.random.default_rng(seed)
    rows, heur = [], []
    censored = rng.random(n) < 0.4
    for i in range(n):
        listed = rng.permutation(m)[:rng.integers(1, m + 1)]
        times = rng.choice([1.0, 1.5, 2.0, 3.0, 8.0], len(listed))
        if censored[i]:
            keep = np.argsort(times, kind="stable")[:4]
            listed, times = listed[keep], times[keep]
        rows += [(f"p{i}", f"k{k}", t) for k, t in zip(listed, times)]
        heur += [(f"p{i}", "h", r, f"k{k}") for r, k in enumerate(rng.permutation(m)[:rng.integers(1, m + 1)])]
    problems = pd.DataFrame({"problem_id": [f"p{i}" for i in range(n)], "direction": "F", "dtype": "FP32",
                             "censored": censored})
    tables = {"problems": problems, "runtimes": pd.DataFrame(rows, columns=["problem_id", "kernel", "time_ms"]),
              "kernels": pd.DataFrame({"kernel": [f"k{k}" for k in range(m)], "directions": "F"}),
              "splits": pd.DataFrame({"problem_id": problems["problem_id"], "random": "test"}),
              "heuristics": pd.DataFrame(heur, columns=["problem_id", "heuristic", "rank", "kernel"])}
    return Dataset("rand", tables, {"name": "rand", "version": "0", "checksum": "0" * 64})


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_properties(seed):
    ds = random_dataset(seed)
    ev = Evaluator(ds)
    rng = np.random.default_rng(seed)
    kernels = ds.kernels["kernel"].to_numpy()
    # every kernel ranked (7 <= 10): best-of-10 is the oracle; best-of-K never rises with K
    preds = pd.DataFrame({"problem_id": ev.table.problem_ids,
                          "ranking": [";".join(rng.permutation(kernels)) for _ in ev.table.problem_ids]})
    o = ev(preds).overall
    curve = [o[f"best_of_{k}"] for k in (1, 3, 5, 10)]
    assert all(a >= b for a, b in zip(curve, curve[1:]))
    assert curve[-1] == 1.0 and o["best_of_10_oracle"] == 1.0
    ref = o["references"]["h"]
    assert ref["improved"] + ref["unchanged"] + ref["regressed"] == pytest.approx(1.0)
    ref_curve = [ref[f"best_of_{k}"] for k in (1, 3, 5, 10)]
    assert all(a >= b for a, b in zip(ref_curve, ref_curve[1:]))
    # the reference scored against itself closes no headroom; the oracle closes all of it
    h = ds.heuristics.sort_values(["problem_id", "rank"]).groupby("problem_id")["kernel"].agg(";".join)
    own = ev(h.rename("ranking").reset_index()).overall["references"]["h"]
    assert own["headroom_closed"] in (0.0, None) and own["unchanged"] == 1.0
    rt = ds.runtimes.sort_values(["problem_id", "time_ms"], kind="stable")
    best = ev(rt.groupby("problem_id")["kernel"].agg(";".join).rename("ranking").reset_index()).overall
    assert best["references"]["h"]["headroom_closed"] in (1.0, None)
    assert best["ndcg_at_10"] == pytest.approx(1.0)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), width=st.sampled_from([3, 40]))
def test_ranking_quality_matches_scipy(seed, width):
    """tau-b against scipy's, problem by problem, over the listed kernels (unranked: tied last);
    ``width`` 40 runs past the 30 candidates scoring reads."""
    from scipy.stats import kendalltau

    from kbench.scoring.metrics import ScoringTable, score_rankings
    from kbench.scoring.selection_metrics import ranking_quality
    rng = np.random.default_rng(seed)
    n, m = 9, width
    times = np.where(rng.random((n, m)) < 0.6, rng.choice([1.0, 2.0, 3.0, 5.0], (n, m)), np.nan)
    times[np.arange(n), rng.integers(0, m, n)] = 1.0
    table = ScoringTable(np.array([f"p{i}" for i in range(n)]), np.array([f"k{j}" for j in range(m)]),
                         times, np.zeros(n, dtype=bool), ~np.isnan(times), np.array(["F"] * n),
                         np.array(["FP32"] * n))
    rankings = [list(rng.permutation(m)[:rng.integers(0, m + 1)]) for _ in range(n)]
    prob = np.concatenate([[p] * len(r) for p, r in enumerate(rankings)]).astype(int)
    kern = np.concatenate(rankings).astype(int)
    c = score_rankings(table, prob, kern)
    tau, ndcg = ranking_quality(table, c.rows)
    for p, ranking in enumerate(rankings):
        listed = np.flatnonzero(~np.isnan(times[p]))
        applicable = [k for k in ranking if k in set(listed)][:30]
        pos = {k: i for i, k in enumerate(applicable)}
        x = [pos.get(k, 10**6) for k in listed]
        want = kendalltau(x, times[p, listed], variant="b").statistic if len(listed) > 1 else np.nan
        assert (np.isnan(tau[p]) and np.isnan(want)) or tau[p] == pytest.approx(want)
        assert 0.0 <= ndcg[p] <= 1.0 + 1e-12


# ----------------------------------------------------------------------------- the CLI record
def test_cli_json_carries_every_new_field(tmp_path):
    import kbench
    from kbench.scoring.metrics import BEST_OF
    ds = kbench.load("v100-tiles")
    ids = ds.split("networks")["test"]
    rt = ds.runtimes[ds.runtimes.problem_id.isin(ids)].sort_values(["problem_id", "kernel"])
    path = tmp_path / "p.csv"
    rt.groupby("problem_id")["kernel"].agg(";".join).rename("ranking").reset_index().to_csv(path, index=False)
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "kbench.cli", "evaluate", str(path), "-d", "v100-tiles", "-s",
                        "networks", "--json", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "network end-to-end time over 3 network(s)" in r.stdout and "headroom closed" in r.stdout
    rec = json.loads(out.read_text())
    assert rec["schema_version"] == 3
    for group in [rec["metrics"]["overall"], *rec["metrics"]["by_direction"].values()]:
        for k in BEST_OF:
            assert {f"best_of_{k}", f"best_of_{k}_oracle", f"best_of_{k}_censored"} <= set(group)
        assert {"kendall_tau", "kendall_tau_n", "ndcg_at_10"} <= set(group)
        assert set(group["references"]) == {"cudnn8.2_best_no_fft_winograd", "cudnn8.2_best_any"}
        for ref in group["references"].values():
            assert {"headroom_closed", "oracle_speedup", "improved", "unchanged", "regressed", "slowdown_p95",
                    "slowdown_worst", "regressed_geomean"} <= set(ref)
    net = rec["metrics"]["networks"]
    assert net["instances"] == 3 and set(net["per_network"]) == {
        "DefoNet FP32 NCHW", "ResNet-18 FP32 NCHW", "YOLO-9000 FP32 NCHW"}
    assert {"vs_oracle_sum", "vs_oracle_geomean", "vs_reference_sum", "vs_reference_geomean"} <= set(net)


def test_mituna_networks_on_a_find_db_set():
    """mi300x networks/test: MITuna's lists matched on the full geometry; the rules order has its own curve."""
    ev = Evaluator("mi300x", split="networks")
    assert ev.networks is not None and "MITuna" in ev.networks.source
    ds = ev.dataset
    rt = ds.runtimes[ds.runtimes.problem_id.isin(ev.ids)].sort_values(["problem_id", "rank"])
    oracle = ev(rt.groupby("problem_id")["kernel"].agg(";".join).rename("ranking").reset_index())
    net = oracle.metrics["networks"]
    assert net["instances"] >= 1 and net["vs_oracle_sum"] == 1.0
    for v in net["per_network"].values():
        assert v["vs_oracle_sum"] == 1.0 and v["reference_vs_oracle_sum"] >= 1.0
    rules = oracle.overall["references"]["rules"]
    assert rules["headroom_closed"] == 1.0 and rules["best_of_1"] >= rules["best_of_10"] >= 1.0

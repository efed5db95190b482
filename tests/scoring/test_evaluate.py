"""The scorer: a hand-computed case for every metric, properties, and bad-input handling."""

import gzip
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kbench
from kbench.core.errors import KbenchInputError
from kbench.data.dataset import Dataset
from kbench.scoring.evaluate import Evaluator


def tiny_dataset() -> Dataset:
    """Four problems worked by hand (see test_hand_computed_metrics)."""
    problems = pd.DataFrame({
        "problem_id": ["p1", "p2", "p3", "p4"],
        "direction": ["F", "F", "F", "W"],
        "dtype": ["FP32", "FP32", "FP16", "FP32"],
        "censored": [False, True, False, False],
    })
    runtimes = pd.DataFrame([
        ("p1", "A", 1.0), ("p1", "B", 2.0),
        ("p2", "A", 1.0), ("p2", "B", 1.5), ("p2", "C", 2.0), ("p2", "D", 4.0),
        ("p3", "C", 2.0), ("p3", "A", 2.0), ("p3", "G", 3.0),
        ("p4", "E", 1.0), ("p4", "B", 5.0),
    ], columns=["problem_id", "kernel", "time_ms"])
    kernels = pd.DataFrame({"kernel": list("ABCDEG"), "directions": ["F", "F,W", "F", "F", "W", "F"]})
    splits = pd.DataFrame({"problem_id": problems["problem_id"], "random": "test"})
    tables = {"problems": problems, "runtimes": runtimes, "kernels": kernels, "splits": splits}
    return Dataset("tiny", tables, {"name": "tiny", "version": "0", "checksum": "0" * 64})


PREDS = pd.DataFrame({"problem_id": ["p1", "p2", "p3", "p4"], "ranking": ["C;B;A", "G;A", "A", "A;C"]})
REFERENCE = pd.DataFrame({"problem_id": ["p1", "p2", "p3", "p4"], "kernel": ["A", "D", "G", "E"]})


def test_choices_are_the_hand_computed_outcome_per_problem():
    # the same cases as test_hand_computed_metrics, problem by problem: B on p1 (2.0), G on p2 (censored
    # at 4.0), A on p3 (2.0), and p4 a failure timed at its slowest listed plan (5.0)
    ev = Evaluator(tiny_dataset())
    ch = ev.choices(PREDS)
    assert list(ev.table.problem_ids) == ["p1", "p2", "p3", "p4"]
    assert ch.t_choice.tolist() == [2.0, 4.0, 2.0, 5.0]
    assert ch.exact.tolist() == [True, False, True, False]
    assert ch.failed.tolist() == [False, False, False, True]
    prob, kern, predicted = ev.ranked_rows(PREDS)
    assert predicted.tolist() == [True, True, True, True]
    assert [ev.table.kernels[k] for k in kern[prob == 0]] == ["C", "B", "A"]


def test_hand_computed_metrics():
    # p1 complete: C not listed -> skipped; B chosen (2.0 vs best 1.0): LoP 1; A is 2nd -> top-3, LoP@5 = 0
    # p2 censored: G unlisted but runs forward -> chosen, time censored at the 4th (4.0): LoP 3 (a bound)
    # p3: A ties C for the fastest (2.0) -> top-1, LoP 0
    # p4 (W) complete: A, C not listed -> failure, timed at the slowest listed (5.0): LoP 4
    r = Evaluator(tiny_dataset(), reference=REFERENCE)(PREDS)
    o = r.metrics["overall"]
    assert o["n"] == 4
    assert o["top1"] == 0.25 and o["top3"] == 0.75 and o["within5"] == 0.25
    assert o["lop_mean"] == 2.0 and o["lop_median"] == 2.0 and o["lop_max"] == 4.0
    assert o["lop_p90"] == pytest.approx(3.7)  # linear interpolation of [0, 1, 3, 4] at 0.9
    assert o["geomean_slowdown"] == pytest.approx(40 ** 0.25)  # (2 * 4 * 1 * 5) ** (1/4)
    assert o["lop_at_1"] == 2.0
    assert o["lop_at_5"] == 1.0  # p1, p2 reach their best in 5 candidates, p3 already, p4 fails (4)
    assert (o["share_exact"], o["share_censored"], o["share_failed"]) == (0.5, 0.25, 0.25)
    # reference times [1, 4, 3, 1] against chosen [2, 4, 2, 5]
    assert o["speedup_geomean"] == pytest.approx((0.5 * 1 * 1.5 * 0.2) ** 0.25)
    assert o["speedup_total"] == pytest.approx(9 / 13)
    f = r.metrics["by_direction"]["F"]
    assert f["n"] == 3 and f["top1"] == pytest.approx(1 / 3) and f["lop_mean"] == pytest.approx(4 / 3)
    assert r.metrics["by_dtype"]["FP16"]["top1"] == 1.0
    assert (r.counts.choices_exact, r.counts.choices_censored, r.counts.failures) == (2, 1, 1)
    assert "lower bound" in " ".join(r.bounds.values())


@pytest.mark.slow
def test_oracle_scores_perfectly(mi100):
    ev = Evaluator(mi100, reference=None)
    rt = mi100.runtimes[mi100.runtimes.problem_id.isin(ev.ids)]
    oracle = rt.sort_values(["problem_id", "rank"]).groupby("problem_id")["kernel"].agg(";".join)
    o = ev(oracle.rename("ranking").reset_index()).metrics["overall"]
    assert o["top1"] == 1.0 and o["lop_mean"] == 0.0 and o["lop_max"] == 0.0 and o["geomean_slowdown"] == 1.0
    assert o["share_exact"] == 1.0


@pytest.fixture(scope="module")
def mi300x_eval():
    return Evaluator("mi300x", reference=None)


def random_rankings(ev, seed):
    rng = np.random.default_rng(seed)
    vocab = ev.table.kernels
    return pd.DataFrame({"problem_id": ev.table.problem_ids,
                         "ranking": [";".join(rng.permutation(vocab)) for _ in ev.table.problem_ids]})


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_properties_permutation_fastest_first_nonnegative(mi300x_eval, seed):
    ev = mi300x_eval
    preds = random_rankings(ev, seed)
    a = ev(preds).metrics
    shuffled = preds.sample(frac=1.0, random_state=seed % 1000).reset_index(drop=True)
    assert ev(shuffled).metrics == a                 # row order never matters
    o = a["overall"]
    assert o["lop_mean"] >= 0 and o["lop_median"] >= 0 and o["geomean_slowdown"] >= 1.0
    assert o["lop_at_30"] <= o["lop_at_10"] <= o["lop_at_5"] <= o["lop_at_1"]
    best = ev.dataset.best.set_index("problem_id")["kernel"]
    first = preds.assign(ranking=best.loc[preds.problem_id].to_numpy() + ";" + preds.ranking)
    f = ev(first).metrics["overall"]                 # fastest first -> LoP 0 everywhere
    assert f["lop_max"] == 0.0 and f["top1"] == 1.0


def test_kernel_column_equals_one_item_ranking():
    ds = tiny_dataset()
    ev = Evaluator(ds, reference=None)
    top1 = PREDS.assign(kernel=PREDS.ranking.str.split(";").str[0]).drop(columns="ranking")
    as_ranking = top1.rename(columns={"kernel": "ranking"})
    assert ev(top1).metrics == ev(as_ranking).metrics


def test_long_form_scores():
    ev = Evaluator(tiny_dataset(), reference=None)
    long = pd.DataFrame({"problem_id": ["p1", "p1", "p1", "p2", "p2", "p3", "p4", "p4"],
                         "kernel": ["A", "B", "C", "G", "A", "A", "A", "C"],
                         "score": [0.1, 0.5, 0.9, 2.0, 1.0, 1.0, 3.0, 2.0]})
    assert ev(long).metrics == ev(PREDS).metrics  # score order C>B>A, G>A, A, A>C == PREDS


def test_every_input_problem_reported_at_once():
    ev = Evaluator(tiny_dataset(), reference=None)
    bad = pd.DataFrame({"problem_id": ["p1", "p1", "zz", "p3"], "ranking": ["A", "B", "A", "Winograd;"]})
    with pytest.raises(KbenchInputError) as info:
        ev(bad)
    msg = str(info.value)
    assert "duplicated problem_id" in msg and "1 problem id(s) not in tiny" in msg
    assert "'Winograd'" in msg and "empty name" in msg
    assert "1 of 4 problems" not in msg and "p2" in msg and "coverage 50.0%" in msg


def test_missing_columns_and_nan():
    ev = Evaluator(tiny_dataset(), reference=None)
    with pytest.raises(KbenchInputError, match="missing required column 'problem_id'.*'problemid' looks like it"):
        ev(pd.DataFrame({"problemid": ["p1"], "ranking": ["A"]}))
    with pytest.raises(KbenchInputError, match="needs a 'ranking' column"):
        ev(pd.DataFrame({"problem_id": ["p1"]}))
    with pytest.raises(KbenchInputError, match=r"1 row\(s\) with an empty or NaN cell \(file rows \[3\]\)"):
        ev(PREDS.assign(ranking=["A", None, "A", "E"]))


def test_unknown_kernel_suggests_nearest(mi300x_eval):
    preds = random_rankings(mi300x_eval, 0)
    name = mi300x_eval.table.kernels[0]
    preds.loc[0, "ranking"] = name[:-1] + "X"
    with pytest.raises(KbenchInputError, match=f"Did you mean '{name}'"):
        mi300x_eval(preds)


def test_partial_needs_flag():
    ev = Evaluator(tiny_dataset(), reference=None)
    part = PREDS.iloc[:2]
    with pytest.raises(KbenchInputError, match="2 of 4 problems.*--allow-partial"):
        ev(part)
    r = ev(part, allow_partial=True)
    assert r.counts.scored == 2 and r.counts.coverage == 0.5


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "kbench.cli", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def oracle_csv(tmp_path_factory):
    ds = kbench.load("mi300x")
    ids = ds.split("random")["test"]
    rt = ds.runtimes[ds.runtimes.problem_id.isin(ids)]
    frame = rt.sort_values(["problem_id", "rank"]).groupby("problem_id")["kernel"].agg(";".join).rename(
        "ranking").reset_index()
    path = tmp_path_factory.mktemp("p") / "oracle.csv"
    frame.to_csv(path, index=False)
    return path, frame


def test_cli_scores_and_writes_record(oracle_csv, tmp_path):
    path, _ = oracle_csv
    before = path.read_bytes()
    out = tmp_path / "r.json"
    r = run_cli("evaluate", str(path), "--dataset", "mi300x", "--json", str(out), "--no-reference")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1].startswith("top-1 1.0000   geomean slowdown 1.0000")
    from kbench.scoring.records import EvaluationResult
    rec = EvaluationResult.model_validate_json(out.read_text())
    import hashlib
    assert rec.predictions.sha256 == hashlib.sha256(before).hexdigest()
    assert rec.dataset.checksum == kbench.load("mi300x").checksum
    assert path.read_bytes() == before  # never modified


def test_cli_bom_crlf_and_gzip_accepted(oracle_csv, tmp_path):
    _, frame = oracle_csv
    text = frame.to_csv(index=False).replace("\n", "\r\n")
    p = tmp_path / "bom.csv"
    p.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert run_cli("validate", str(p), "--dataset", "mi300x").returncode == 0
    g = tmp_path / "p.csv.gz"
    g.write_bytes(gzip.compress(text.encode()))
    assert run_cli("validate", str(g), "--dataset", "mi300x").returncode == 0


def test_cli_wrong_delimiter_and_exit_codes(oracle_csv, tmp_path):
    _, frame = oracle_csv
    p = tmp_path / "tab.csv"
    frame.to_csv(p, sep="\t", index=False)
    r = run_cli("evaluate", str(p), "--dataset", "mi300x", "--no-reference")
    assert r.returncode == 2 and "separated by tabs" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("evaluate", str(tmp_path / "missing.csv"), "--dataset", "mi300x")
    assert r.returncode == 2 and "not found" in r.stderr
    r = run_cli("evaluate", "--explain")
    assert r.returncode == 0 and "problem_id" in r.stdout and "LoP@n" in r.stdout


def naive_choices(table, rankings):
    """The scoring rules of kbench.scoring.metrics, one problem at a time in plain Python."""
    out = []
    for p, ranking in enumerate(rankings):
        seen, cands = set(), []
        for k in ranking:
            if k in seen:
                continue
            seen.add(k)
            t = table.times[p, k]
            if not np.isnan(t):
                cands.append((k, t, True))
            elif table.censored[p] and table.runs_in_class[p, k]:
                cands.append((k, np.nanmax(table.times[p]), False))
        out.append(cands)
    return out


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_vectorised_scorer_matches_naive_rules(seed):
    # 45 kernels, so that rankings run deeper than the deepest position any metric reads (30)
    from kbench.scoring.metrics import BEST_AT, TOP_K, ScoringTable, score_rankings
    rng = np.random.default_rng(seed)
    n, m = 12, 45
    times = np.where(rng.random((n, m)) < 0.3, rng.choice([1.0, 2.0, 3.0, 5.0], (n, m)), np.nan)
    times[np.arange(n), rng.integers(0, m, n)] = 1.0  # every problem lists a kernel
    table = ScoringTable(np.array([f"p{i}" for i in range(n)]), np.array([f"k{j}" for j in range(m)]),
                         times, rng.random(n) < 0.5, rng.random((n, m)) < 0.8,
                         np.array(["F"] * n), np.array(["FP32"] * n))
    rankings = [list(rng.integers(0, m, rng.integers(0, 60))) for _ in range(n)]
    prob = np.concatenate([[p] * len(r) for p, r in enumerate(rankings)]).astype(int)
    kern = np.concatenate([r for r in rankings]).astype(int) if len(prob) else prob
    order = np.arange(len(prob))
    if seed % 2:  # problems interleave; each problem's rows keep their order
        shuffled = prob[rng.permutation(len(prob))]
        for p in range(n):
            order[shuffled == p] = np.flatnonzero(prob == p)
    c = score_rankings(table, prob[order], kern[order])
    for p, cands in enumerate(naive_choices(table, rankings)):
        t_best, t_last = np.nanmin(times[p]), np.nanmax(times[p])
        assert c.predicted[p] == bool(rankings[p])
        assert c.failed[p] == (bool(rankings[p]) and not cands)
        assert c.t_choice[p] == (cands[0][1] if cands else t_last)
        assert c.exact[p] == (bool(cands) and cands[0][2])
        for kk in TOP_K:
            assert c.top[kk][p] == any(ok and t <= t_best for _, t, ok in cands[:kk])
        for nn in BEST_AT:
            assert c.best_at[nn][p] == (min(t for _, t, _ in cands[:nn]) if cands else t_last)
            # a lower bound only while none of the first nn is listed
            assert c.best_bound_at[nn][p] == (bool(cands) and not any(ok for _, _, ok in cands[:nn]))


@pytest.mark.parametrize("chunk_rows", [1, 3])
def test_chunked_explode_equals_one_chunk(monkeypatch, mi300x_eval, chunk_rows):
    from kbench.scoring import evaluate
    preds = random_rankings(mi300x_eval, 7)
    ev_tiny = Evaluator(tiny_dataset(), reference=None)
    whole, whole_tiny = mi300x_eval(preds).metrics, ev_tiny(PREDS).metrics
    monkeypatch.setattr(evaluate, "EXPLODE_CHUNK_ROWS", chunk_rows)
    assert ev_tiny(PREDS).metrics == whole_tiny
    monkeypatch.setattr(evaluate, "EXPLODE_CHUNK_ROWS", chunk_rows * 1000)  # 1000 and 3000 rows per chunk
    assert mi300x_eval(preds).metrics == whole


def test_whitespace_around_names_is_ignored():
    ev = Evaluator(tiny_dataset(), reference=None)
    padded = PREDS.assign(ranking=PREDS.ranking.str.replace(";", " ; ").radd(" ") + "\t")
    assert ev(padded).metrics == ev(PREDS).metrics


def test_kernel_never_seen_in_class_is_skipped():
    # q3 is 3D and censored. Kernel X was measured only on 2D forward problems (q2): on q3 it is
    # inapplicable and skipped, so Y (listed, 2.0 vs best 1.0) is the choice: LoP 1, exact.
    # On the 2D censored q1, X is unlisted but runs on 2D forward problems: chosen, censored at 3.0.
    problems = pd.DataFrame({"problem_id": ["q1", "q2", "q3"], "direction": ["F"] * 3, "dtype": ["FP32"] * 3,
                             "spatial_dims": [2, 2, 3], "censored": [True, False, True]})
    runtimes = pd.DataFrame([("q1", "Y", 1.0), ("q1", "Z", 3.0), ("q2", "X", 1.0),
                             ("q3", "Z", 1.0), ("q3", "Y", 2.0)], columns=["problem_id", "kernel", "time_ms"])
    kernels = pd.DataFrame({"kernel": ["X", "Y", "Z"], "directions": ["F", "F", "F"]})
    splits = pd.DataFrame({"problem_id": problems["problem_id"], "random": "test"})
    ds = Dataset("dims", {"problems": problems, "runtimes": runtimes, "kernels": kernels, "splits": splits},
                 {"name": "dims", "version": "0", "checksum": "0" * 64})
    ev = Evaluator(ds, reference=None)
    r = ev(pd.DataFrame({"problem_id": ["q1", "q2", "q3"], "ranking": ["X;Y", "X", "X;Y"]}))
    assert ev.table.runs_in_class.tolist() == [[True, True, True], [True, True, True], [False, True, True]]
    assert r.counts.choices_exact == 2 and r.counts.choices_censored == 1
    assert r.metrics["overall"]["lop_max"] == 2.0  # q1: censored at 3.0 against 1.0; q3: 2.0 vs 1.0 -> 1
    assert r.metrics["overall"]["lop_mean"] == pytest.approx((2.0 + 0.0 + 1.0) / 3)

"""The noise-ceiling reference row, from a hand-worked 3-problem example."""
from pathlib import Path

import pandas as pd
import pytest

from kbench.data.dataset import Dataset
from kbench.leaderboard import noise, store
from kbench.leaderboard.schema import SubmissionMeta
from kbench.leaderboard.store import Entry
from kbench.scoring.evaluate import Evaluator

# (problem, kernel): (run 0 = runtimes, run 1 = the repeat); p3/b was not timed again
TIMES = {("p1", "a"): (1.0, 1.1), ("p1", "b"): (1.2, 1.0), ("p1", "c"): (2.0, 2.2),
         ("p2", "a"): (1.0, 1.0), ("p2", "b"): (1.5, 1.5),
         ("p3", "a"): (2.0, 2.0), ("p3", "b"): (1.0, None)}


def three_problems(with_repeats=True, name="noise3"):
    ids = ["p1", "p2", "p3"]
    runtimes = pd.DataFrame([(p, k, t[0]) for (p, k), t in TIMES.items()], columns=["problem_id", "kernel", "time_ms"])
    tables = {"problems": pd.DataFrame({"problem_id": ids, "direction": "F", "dtype": "FP16", "censored": False}),
              "runtimes": runtimes,
              "kernels": pd.DataFrame({"kernel": ["a", "b", "c"], "directions": "F"}),
              "splits": pd.DataFrame({"problem_id": ids + ["p4"], "random": ["test"] * 3 + ["train"]})}
    if with_repeats:
        tables["repeats"] = pd.DataFrame([(p, k, run, t[run]) for (p, k), t in TIMES.items() for run in (0, 1)
                                          if t[run] is not None], columns=["problem_id", "kernel", "run_id", "time_ms"])
    return Dataset(name, tables, {"name": name, "version": "1", "checksum": "cd" * 32, "library": "toylib"})


def test_noise_ceiling_scores_first_run_order_against_the_repeat():
    result, preds = noise.noise_ceiling_result(three_problems())
    # rankings by run 0 over the kernels timed in both runs: p3/b is left out
    assert preds.set_index("problem_id")["ranking"].to_dict() == {"p1": "a;b;c", "p2": "a;b", "p3": "a"}
    o = result.overall
    # run 1: p1's first choice a takes 1.1 against b's 1.0; p2 and p3 keep their fastest
    assert o["geomean_slowdown"] == pytest.approx(1.1 ** (1 / 3))  # 1.03228
    assert o["top1"] == pytest.approx(2 / 3) and o["within5"] == pytest.approx(2 / 3)
    assert result.counts.scored == 3 and result.method == "noise-ceiling"


def test_no_repeats_no_row():
    assert noise.noise_ceiling_result(three_problems(with_repeats=False)) is None
    assert noise.noise_entry(three_problems(with_repeats=False)) is None


def _entry(ds, method, choice, role="entry"):
    """An entry whose first choice per problem is ``choice[problem]`` (then the rest by name)."""
    rank = {p: ";".join([k] + sorted({"a", "b", "c"} - {k})) for p, k in choice.items()}
    preds = pd.DataFrame({"problem_id": list(rank), "ranking": list(rank.values())})
    rec = Evaluator(ds, "random", "test", reference=None)(preds, method=method)
    meta = SubmissionMeta(method=method, role=role, paper=None, code=None, contact="t", command="c", n_parameters=None,
                          model_size_bytes=None, training_hardware="cpu", training_time_s=None,
                          inference_latency_ms=None, external_data=False, kbench_version="0", dataset=rec.dataset,
                          split="random")
    return Entry(folder=Path(method), record=rec, meta=meta, preds_path=None)


@pytest.mark.parametrize("with_repeats", [True, False])
def test_board_row_next_to_the_oracle_and_sentence(with_repeats):
    from kbench.leaderboard.site import make_board, markdown_table
    ds = three_problems(with_repeats)
    store.register_dataset(ds)
    try:
        # run-0 slowdowns: m1 picks b on p1 (1.2); m2 a on p3 (2.0); m3 c on p1 (2.0); oracle all fastest
        entries = [_entry(ds, "oracle", {"p1": "a", "p2": "a", "p3": "b"}, role="ceiling"),
                   _entry(ds, "m1", {"p1": "b", "p2": "a", "p3": "b"}),
                   _entry(ds, "m2", {"p1": "a", "p2": "a", "p3": "a"}),
                   _entry(ds, "m3", {"p1": "c", "p2": "a", "p3": "b"})]
        board = make_board(ds.name, "random", entries)
    finally:
        store.unregister_dataset(ds.name)
    assert [r.entry.name for r in board.rows] == ["m1", "m2", "m3"]
    assert [r.primary() for r in board.rows] == [pytest.approx(1.2 ** (1 / 3)), pytest.approx(2 ** (1 / 3)),
                                                 pytest.approx(2 ** (1 / 3))]
    sentences = [n for n in board.notes if n.startswith("noise-ceiling")]
    if not with_repeats:
        assert [r.entry.name for r in board.refs] == ["oracle"] and not sentences
        return
    assert [r.entry.name for r in board.refs] == ["oracle", "noise-ceiling"]
    # noise = 1.1^(1/3) - 1 = 0.0323: m2 and m3 (equal) are within it; m1 - m2 = 0.197 and m1 - 1 = 0.063 are not
    assert sentences == ["noise-ceiling: the first measurement's winners, re-measured in another run, are 1.0323x "
                         "the new fastest on 3 sampled test problems, so differences in geomean slowdown smaller "
                         "than 0.0323 are within measurement noise: m2 and m3 differ by less than that."]
    line = [x for x in markdown_table(board, "../").splitlines() if "noise-ceiling" in x][0]
    assert line.startswith("| *ceiling* | [noise-ceiling](../kbench/leaderboard/noise.py) | 1.0323 | 66.67% | "
                           "66.67% | 3.33% |")  # top-1 2/3, within-5% 2/3, mean LoP (0.1 + 0 + 0) / 3
    assert "| — |" in line.split("noise.py) |")[1] and "2026" not in line  # no date of its own

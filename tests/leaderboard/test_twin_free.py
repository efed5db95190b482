"""A `random` board's figures on its twin-free part: the test problems with no same-shape problem at another
batch size in train, scored from the stored predictions. Worked out by hand on four problems."""

import math

import numpy as np
import pandas as pd

from kbench.leaderboard import twin_free
from kbench.leaderboard.stats import ProblemScores
from kbench.sources.splits import batch_twin_shares, batch_twins


def _problems(batches, channels):
    rows = []
    for i, (n, c) in enumerate(zip(batches, channels)):
        row = {"problem_id": f"p{i}", "n": n, "c": c, "k": 8, "groups": 1}
        for axis in "dhw":
            row.update({f"x_{axis}": 7, f"y_{axis}": 7, f"fil_{axis}": 3, f"pad_{axis}": 1, f"stride_{axis}": 1,
                        f"dil_{axis}": 1})
        rows.append(row)
    return pd.DataFrame(rows)


def test_batch_twins_by_hand():
    # p0 (n=1, c=16) is in train; p1 is the same shape at n=32 in test: a twin. p2 (c=32) has no twin in
    # train: p3 has its shape but sits in valid.
    problems = _problems([1, 32, 8, 4], [16, 16, 32, 32])
    parts = pd.Series(["train", "test", "test", "valid"])
    assert batch_twins(problems, parts).tolist() == [True, True, False, False]
    splits = pd.DataFrame({"problem_id": problems["problem_id"], "random": parts})
    assert batch_twin_shares(problems, splits) == {"random": {"test": 2, "with_twin": 1, "share": 0.5}}


def test_the_published_shares_are_the_data():
    import kbench
    mi100 = kbench.load("mi100")
    shares = batch_twin_shares(mi100.problems, mi100.tables["splits"])
    assert shares["random"]["with_twin"] == 33281 and shares["random"]["test"] == 36821  # 90.4%
    assert shares["networks"]["with_twin"] == 0
    h3d = kbench.load("h200-3d")  # grouped without the batch: no twins on either split
    assert all(v["with_twin"] == 0 for v in batch_twin_shares(h3d.problems, h3d.tables["splits"]).values())


class _Row:
    def __init__(self, method):
        self.entry = type("E", (), {"method": method, "name": method})()


def test_twin_free_figures_by_hand(monkeypatch):
    """Four test problems, the first two with a twin: an entry exact on them and 2x slower on the other two
    scores geomean 2.0 and top-1 0% twin-free, against sqrt(2) and 50% on the whole test part."""
    board = type("B", (), {"split": "random", "tuning": False, "all_rows": lambda self: [_Row("m")]})()
    monkeypatch.setattr(twin_free, "twin_free_mask", lambda ds, ev: np.array([False, False, True, True]))
    log2 = math.log(2.0)
    scores = {"m": ProblemScores(lop=np.zeros(4), log_slowdown=np.array([0.0, 0.0, log2, log2]),
                                 direction=np.array(["F"] * 4))}
    ds = type("D", (), {"problems": _problems([1], [16])})()
    got = twin_free.twin_free_figures(board, ds, None, scores)
    assert (got.problems, got.test) == (2, 4)
    row = got.rows[0]
    assert math.isclose(row.geomean, 2.0) and row.top1 == 0.0
    assert math.isclose(row.full_geomean, math.sqrt(2.0)) and row.full_top1 == 0.5
    assert "| m | 2.0000 | 1.4142 | 0.00% | 50.00% |" in twin_free.twin_free_markdown(got)
    board.split = "networks"
    assert twin_free.twin_free_figures(board, ds, None, scores) is None


def test_the_shapes_board_beside_the_twin_free_figures(monkeypatch):
    """A method with a `shapes` entry shows that entry's first seed (geomean 1.25, top-1 40%), one without
    shows –; the columns appear only when some method has one."""
    from types import SimpleNamespace
    board = type("B", (), {"split": "random", "tuning": False, "all_rows": lambda self: [_Row("m"), _Row("n")]})()
    monkeypatch.setattr(twin_free, "twin_free_mask", lambda ds, ev: np.array([False, True]))
    scores = {k: ProblemScores(lop=np.zeros(2), log_slowdown=np.zeros(2), direction=np.array(["F"] * 2))
              for k in ("m", "n")}
    seeds = SimpleNamespace(per_seed=[{"geomean_slowdown": 1.25, "top1": 0.4}, {"geomean_slowdown": 9.0, "top1": 0.0}])
    shapes = [SimpleNamespace(method="m", record=SimpleNamespace(seeds=seeds, metrics={}))]
    ds = type("D", (), {"problems": _problems([1], [16])})()
    got = twin_free.twin_free_figures(board, ds, None, scores, shapes)
    md = twin_free.twin_free_markdown(got)
    assert "| m | 1.0000 | 1.0000 | 100.00% | 100.00% | 1.2500 | 40.00% |" in md
    assert "| n | 1.0000 | 1.0000 | 100.00% | 100.00% | – | – |" in md and "`shapes` top-1 |" in md
    assert "<th scope=\"col\">shapes top-1</th>" in twin_free.twin_free_html(got, "x")
    assert "shapes" not in twin_free.twin_free_markdown(twin_free.twin_free_figures(board, ds, None, scores))


def test_cards_and_info_state_the_twins(capsys):
    from pathlib import Path

    import kbench
    from kbench.cli import main
    from kbench.data.cards import render_card
    card = render_card(kbench.load("mi100"))
    assert "### Batch twins" in card and "| random | 36,821 | 33,281 | 90.4% |" in card
    shipped = Path(__file__).resolve().parents[2] / "data_cards" / "mi100.md"
    assert shipped.read_text() == card, "data_cards/ is stale: run `kbench build-data --cards-only`"
    assert main(["info", "mi100"]) == 0
    assert "batch twins: 33,281 of 36,821 test problems (90.4%)" in capsys.readouterr().out

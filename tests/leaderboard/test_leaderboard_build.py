"""`kbench leaderboard build`: deterministic README and site; ties; plots; the Markdown renderer."""

import json
import re
import shutil

import numpy as np
import pytest

from kbench.cli import main
from kbench.leaderboard import mdlite
from kbench.leaderboard.site import build, check
from kbench.leaderboard.stats import paired_bootstrap_ci, tied


def _snapshot(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and (p.name == "README.md" or "site" in p.relative_to(root).parts)}


@pytest.fixture
def board(toy_board, tmp_path):
    dst = tmp_path / "leaderboard"
    shutil.copytree(toy_board, dst)
    return dst


def test_build_is_byte_identical(board, toy, tmp_path):
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "toy.md").write_text("---\nlicense: mit\n---\n# Toy card\n\nA *toy* dataset.\n")
    build(board, cards)
    first = _snapshot(board)
    build(board, cards)
    assert _snapshot(board) == first
    # elsewhere, from the same records: the same bytes (no absolute paths, no timestamps)
    other = tmp_path / "elsewhere" / "leaderboard"
    shutil.copytree(board, other)
    shutil.rmtree(other / "site")
    build(other, cards)
    assert _snapshot(other) == first
    assert check(board, cards) == []
    assert sorted(first) == sorted([
        "README.md", "site/.kbench-site", "site/assets/sort.js", "site/assets/style.css", "site/data_cards/toy.md",
        "site/index.html", "site/plots/toy-random-accuracy-latency.svg", "site/plots/toy-random-best-of-k.svg",
        "site/plots/toy-random-lop-cdf.svg",
        "site/plots/toy-random-speedup-direction.svg", "site/toy.html"])
    for name, data in first.items():
        if name.endswith(".svg"):
            assert b"<dc:date>" not in data and b"Matplotlib v" not in data
    page = first["site/toy.html"].decode()
    assert "<h1>Toy card</h1>" not in page and "<h2>Toy card</h2>" in page  # card rendered, headings demoted
    assert 'href="data_cards/toy.md"' in page


def test_check_reports_stale_output(board, toy, capsys):
    build(board)
    path = board / "toy/random/toy-model/meta.json"
    doc = json.loads(path.read_text())
    doc["display_name"] = "Toy Model v2"
    path.write_text(json.dumps(doc))
    assert "README.md" in check(board)
    assert main(["leaderboard", "build", "--check", "--leaderboard", str(board)]) == 2
    assert "out of date" in capsys.readouterr().err
    assert main(["leaderboard", "build", "--leaderboard", str(board), "--no-progress"]) == 0
    assert check(board) == []
    assert "Toy Model v2" in (board / "README.md").read_text()


def test_tables_rank_and_mark_ties(board, toy):
    # a second entry with the same predictions as toy-model must be marked as tied with it
    src, dst = board / "toy/random/toy-model", board / "toy/random/toy-model-twin"
    shutil.copytree(src, dst)
    for name in ("result.json", "meta.json"):
        doc = json.loads((dst / name).read_text())
        doc["method"] = "toy-model-twin"
        (dst / name).write_text(json.dumps(doc))
    build(board)
    readme = (board / "README.md").read_text()
    first = readme[readme.index("\n| rank |"):].split("\n\n")[0]  # the ranking table, not the best-of-K one
    rows = [line for line in first.splitlines() if line.startswith("| ")][1:]
    ranks = [r.split(" | ")[0].strip("| ") for r in rows]
    methods = [re.search(r"\[([^\]]+)\]", r.split(" | ")[1]).group(1) for r in rows]
    assert methods[:3] == ["toy-rules", "toy-model", "toy-model-twin"]
    assert ranks == ["1", "2", "3 ≈", "*ceiling*", "*floor*"]
    html = (board / "site/index.html").read_text()
    assert html.count('class="tie"') == 1 + 1  # the legend's sample mark + the twin's rank
    assert "statistically tied with toy-model" in html
    # every record's test value is in the table
    for folder in sorted(p for p in board.glob("toy/random/*")):
        rec = json.loads((folder / "result.json").read_text())
        mean = rec["metrics"]["overall"]["geomean_slowdown"]
        assert f"{mean:.4f}" in html and f'data-method="{rec["method"]}"' in html


def test_paired_bootstrap():
    rng = np.random.default_rng(0)
    a = rng.normal(0.1, 0.05, 500)
    assert tied(a, a.copy())
    assert not tied(a, a + 0.05)
    assert tied(a, a + rng.normal(0, 0.05, 500))
    assert paired_bootstrap_ci(a, a + 0.01) == paired_bootstrap_ci(a, a + 0.01)  # seeded: deterministic
    b = a + rng.normal(0.02, 0.01, 500)
    mean, low, high = paired_bootstrap_ci(b, a)
    assert low < mean < high and mean == pytest.approx(np.mean(b - a))


def test_mdlite():
    out = mdlite.to_html("---\nx: 1\n---\n# Title\n\nSome `a<b` **bold** [link](https://x.org).\n\n"
                         "| a | b |\n|---|---|\n| 1 | 2 |\n\n- one\n- two\n\n1. first\n2. second\n"
                         "```\ncode <here>\n```\n")
    assert "<h1>Title</h1>" in out and "<code>a&lt;b</code>" in out and "<strong>bold</strong>" in out
    assert '<a href="https://x.org">link</a>' in out and "<td>2</td>" in out
    assert "<ul><li>one</li><li>two</li></ul>" in out and "<ol><li>first</li>" in out
    assert "code &lt;here&gt;" in out and "x: 1" not in out


def test_empty_leaderboard_builds(tmp_path):
    build(tmp_path)
    assert "No entries yet" in (tmp_path / "site/index.html").read_text()
    (tmp_path / "site" / ".kbench-site").unlink()
    from kbench.errors import KbenchInputError
    with pytest.raises(KbenchInputError, match="not made by"):
        build(tmp_path)

"""`kbench leaderboard build`: deterministic README and site; ties; plots; the Markdown renderer."""

import csv
import json
import re
import shutil

import numpy as np
import pytest

from kbench.cli import main
from kbench.core.errors import KbenchInputError
from kbench.leaderboard import markdown
from kbench.leaderboard.site import build, check
from kbench.leaderboard.stats import paired_bootstrap_ci, tied


def _snapshot(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and (p.name == "README.md" or "site" in p.relative_to(root).parts)}


@pytest.fixture
def board(toy_board, tmp_path):
    """A copy of the toy board in a folder laid out as the repository: the toy entries' code path
    (tests/leaderboard/lbtoy.py) is there, so the README links it."""
    dst = tmp_path / "leaderboard"
    shutil.copytree(toy_board, dst)
    (tmp_path / "tests" / "leaderboard").mkdir(parents=True)
    (tmp_path / "tests" / "leaderboard" / "lbtoy.py").write_text("# the toy baselines\n")
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
    shutil.copytree(board.parent / "tests", other.parent / "tests")  # the code paths the README links
    shutil.rmtree(other / "site")
    build(other, cards)
    assert _snapshot(other) == first
    assert check(board, cards) == []
    assert sorted(first) == sorted([
        "README.md", "site/.kbench-site", "site/assets/filter.js", "site/assets/sort.js", "site/assets/style.css",
        "site/boards/toy-random.csv", "site/boards/toy-random.json", "site/data_cards/toy.md",
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


def test_board_downloads_hold_the_stored_figures(board, toy):
    build(board)
    doc = json.loads((board / "site/boards/toy-random.json").read_text())
    assert (doc["dataset"], doc["split"], doc["ranked_by"], doc["lower_is_better"]) == \
        ("toy", "random", "geomean_slowdown", True)
    by_method = {e["method"]: e for e in doc["entries"]}
    assert [e["rank"] for e in doc["entries"]] == [1, 2, None, None]
    with open(board / "site/boards/toy-random.csv", newline="") as fh:
        rows = {r["method"]: r for r in csv.DictReader(fh)}
    assert sorted(rows) == sorted(by_method) == ["toy-model", "toy-oracle", "toy-random", "toy-rules"]
    for folder in sorted(board.glob("toy/random/*")):
        rec = json.loads((folder / "result.json").read_text())
        meta = json.loads((folder / "meta.json").read_text())
        entry, row = by_method[rec["method"]], rows[rec["method"]]
        stored = rec["metrics"]["overall"]
        assert entry["metrics"] == {k: v for k, v in stored.items() if k != "references"}  # as stored, unrounded
        assert entry["references"] == stored.get("references")  # nested: in the JSON download only
        assert entry["std"] == rec["seeds"]["std"] and entry["seeds"] == rec["seeds"]["seeds"]
        assert float(row["top1"]) == rec["metrics"]["overall"]["top1"]
        assert float(row["geomean_slowdown_std"]) == rec["seeds"]["std"]["geomean_slowdown"]
        assert entry["external_data"] is meta["external_data"] is False and row["external_data"] == "false"
        assert entry["environment"] == rec["environment"]  # recorded by kbench run
        assert row["python"] == rec["environment"]["python"]
        assert row["packages"] == ";".join(f"{k}=={v}" for k, v in rec["environment"]["packages"].items())


def test_tables_show_only_figures_rescored_from_stored_predictions(board, toy):
    """extra.valid (the submitter's validation figures) cannot be re-scored: not in the tables, and in the
    downloads only as reported_valid_*. A tampered one builds, and shows nowhere but there."""
    path = board / "toy/random/toy-model/result.json"
    doc = json.loads(path.read_text())
    stored = {m: json.loads((board / f"toy/random/{m}/result.json").read_text())["extra"]["valid"]
              for m in ("toy-model", "toy-rules", "toy-oracle", "toy-random")}
    doc["extra"]["valid"]["mean"]["geomean_slowdown"] = 0.123456  # below 1: no ranking scores it
    doc["extra"]["valid"]["std"]["geomean_slowdown"] = 0.0654321
    path.write_text(json.dumps(doc))
    build(board)
    readme, index, page = ((board / name).read_text() for name in ("README.md", "site/index.html", "site/toy.html"))
    for text in (readme, index, page):
        assert "valid geomean slowdown" not in text and 'data-col="valid"' not in text
        assert "0.1235" not in text and "0.123456" not in text and "0.0654" not in text
        assert "recomputable from stored test predictions" in text
        assert "reported_valid_geomean_slowdown" in text  # the legend says where they went
    header = next(line for line in readme.splitlines() if line.startswith("| rank | method |"))
    assert header.split(" | ")[2:4] == ["test geomean slowdown", "top-1"]
    assert "speed-up over" in header
    export = json.loads((board / "site/boards/toy-random.json").read_text())
    assert "reported_valid_" in export["reported_fields"] and "not re-scored" in export["reported_fields"]
    by_method = {e["method"]: e for e in export["entries"]}
    for method, valid in stored.items():
        entry = by_method[method]
        assert not any(k.startswith("valid") for k in entry), sorted(entry)
        claimed = (0.123456, 0.0654321) if method == "toy-model" else \
            (valid["mean"]["geomean_slowdown"], valid["std"]["geomean_slowdown"])
        assert (entry["reported_valid_geomean_slowdown"], entry["reported_valid_geomean_slowdown_std"]) == claimed
    with open(board / "site/boards/toy-random.csv", newline="") as fh:
        rows = {r["method"]: r for r in csv.DictReader(fh)}
    assert float(rows["toy-model"]["reported_valid_geomean_slowdown"]) == 0.123456
    assert not any(k.startswith("valid") for k in rows["toy-model"])


def test_code_links_work_when_the_site_is_served_alone(board, toy):
    (board.parent / "tests" / "leaderboard" / "lbtoy.py").unlink()  # as in a copy outside the repository
    build(board)
    page = (board / "site/toy.html").read_text()
    assert 'href="../../' not in page and "<code>tests/leaderboard/lbtoy.py</code>" in page  # a repository path: text
    # the README links a repository path only where the file is: not in this copy outside the repository ...
    readme = (board / "README.md").read_text()
    assert "(../tests/leaderboard/lbtoy.py)" not in readme and "code: `tests/leaderboard/lbtoy.py`" in readme
    # ... and once the file is there, relative to the folder above the leaderboard
    (board.parent / "tests" / "leaderboard" / "lbtoy.py").write_text("# the toy baselines\n")
    build(board)
    assert "[code](../tests/leaderboard/lbtoy.py)" in (board / "README.md").read_text()
    assert 'href="toy.html#entry-toy-random-toy-model"' in (board / "site/index.html").read_text()
    assert '<details class="entry" id="entry-toy-random-toy-model">' in page
    (board / "site.json").write_text(json.dumps({"code_url_prefix": "https://example.org/kbench/blob/main"}))
    build(board)
    page = (board / "site/toy.html").read_text()
    assert '<a href="https://example.org/kbench/blob/main/tests/leaderboard/lbtoy.py">' in page
    (board / "site.json").write_text(json.dumps({"code_url_prefix": "javascript:alert(1)//"}))
    with pytest.raises(KbenchInputError, match="site.json: expected"):
        build(board)


def test_external_data_is_shown(board, toy):
    path = board / "toy/random/toy-model/meta.json"
    doc = json.loads(path.read_text())
    doc["external_data"] = True
    path.write_text(json.dumps(doc))
    build(board)
    html = (board / "site/toy.html").read_text()
    row = re.search(r'<tr data-method="toy-model">.*?</tr>', html).group(0)
    assert 'class="ext"' in row and 'class="ext"' not in re.search(r'<tr data-method="toy-rules">.*?</tr>',
                                                                   html).group(0)
    assert "external data</dt><dd>yes" in html
    assert "toy-model](../tests/leaderboard/lbtoy.py) (external data)" in (board / "README.md").read_text()
    assert json.loads((board / "site/boards/toy-random.json").read_text())["entries"][1]["external_data"] is True


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


def test_markdown():
    out = markdown.to_html("---\nx: 1\n---\n# Title\n\nSome `a<b` **bold** [link](https://x.org).\n\n"
                           "| a | b |\n|---|---|\n| 1 | 2 |\n\n- one\n- two\n\n1. first\n2. second\n\n"
                           "```\ncode <here>\n```\n")
    assert "<h1>Title</h1>" in out and "<code>a&lt;b</code>" in out and "<strong>bold</strong>" in out
    assert '<a href="https://x.org">link</a>' in out and "<td>2</td>" in out
    assert "<ul>\n<li>one</li>\n<li>two</li>\n</ul>" in out and "<ol>\n<li>first</li>" in out
    assert "code &lt;here&gt;" in out and "x: 1" not in out


def test_markdown_constructs_the_hand_written_converter_broke():
    out = markdown.to_html("| a | b |\n|---|---|\n| x \\| y | 2 |\n\n- outer\n  - inner\n\n"
                           "See [the page](https://en.wikipedia.org/wiki/Roofline_(model)).\n\n> a quote\n\n"
                           "3. third\n4. fourth\n\n<script>alert(1)</script> [x](javascript:alert(1))\n", 1)
    assert "<td>x | y</td>" in out  # an escaped pipe stays in its cell
    assert "<li>outer\n<ul>\n<li>inner</li>" in out
    assert '<a href="https://en.wikipedia.org/wiki/Roofline_(model)">the page</a>' in out
    assert "<blockquote>\n<p>a quote</p>\n</blockquote>" in out and '<ol start="3">' in out
    assert "<script>" not in out and 'href="javascript' not in out  # raw HTML and script links are text
    assert '<table class="card">' in out


def test_empty_leaderboard_builds(tmp_path):
    build(tmp_path)
    assert "No entries yet" in (tmp_path / "site/index.html").read_text()
    (tmp_path / "site" / ".kbench-site").unlink()
    from kbench.core.errors import KbenchInputError
    with pytest.raises(KbenchInputError, match="not made by"):
        build(tmp_path)


def test_learning_curve_note_reads_its_experiment(tmp_path):
    from kbench.leaderboard.board import Board
    from kbench.leaderboard.table_extras import LEARNING_CURVE, curve_note, measured_json
    board = Board("mi100", "random", [], [], None, "rules")
    assert measured_json(board, tmp_path, LEARNING_CURVE) is None and curve_note(board, None) is None  # nothing measured
    curve = {"dataset": "mi100", "split": "random", "part": "test", "model": "xgboost", "seeds": [0, 1],
             "command": "python experiments/learning_curve.py --dataset mi100 --model xgboost --seeds 0 1",
             "summary": [{"fraction": 1.0, "train_problems": 127038, "seeds": 2, "top1_mean": 0.89, "top1_std": 0.0005,
                          "geomean_slowdown_mean": 1.0173, "geomean_slowdown_std": 0.0001},
                         {"fraction": 0.05, "train_problems": 6352, "seeds": 2, "top1_mean": 0.8075,
                          "top1_std": 0.0018, "geomean_slowdown_mean": 1.0558, "geomean_slowdown_std": 0.0023}]}
    path = tmp_path / LEARNING_CURVE.format(dataset="mi100")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(curve))
    note = curve_note(board, measured_json(board, tmp_path, LEARNING_CURVE))
    # smallest share first, percentages of the figures, the command that made them
    assert note.index("5% (6,352 problems): top-1 80.75% ± 0.18") < note.index("100% (127,038 problems): top-1 89.00%")
    assert "geomean slowdown 1.0558 ± 0.0023" in note and "over 2 seeds" in note and curve["command"] in note
    assert measured_json(Board("mi100", "networks", [], [], None, "rules"), tmp_path, LEARNING_CURVE) is None  # another split
    # and its plot: one SVG under the board, deterministic, its title and the points' labels kept as text
    from kbench.leaderboard.table_extras import curve_plot
    svgs = curve_plot(board, measured_json(board, tmp_path, LEARNING_CURVE))
    assert list(svgs) == ["mi100-random-learning-curve.svg"] and board.plots[-1][0] == "mi100-random-learning-curve.svg"
    svg = svgs["mi100-random-learning-curve.svg"].decode()
    assert "Learning curve of xgboost, mi100 / random (test)" in svg and "5%: top-1 80.8%" in svg
    assert curve_plot(Board("mi100", "random", [], [], None, "rules"), measured_json(board, tmp_path, LEARNING_CURVE)) == svgs
    assert "6,352 problems 1.0558; 127,038 problems 1.0173" in board.plots[-1][2]  # the alt text, smallest first


def test_deployable_selector_note_reads_its_benchmark(tmp_path):
    from kbench.leaderboard.board import Board
    from kbench.leaderboard.table_extras import SELECTOR_BENCH, selector_note
    board = Board("mi100", "random", [], [], None, "rules")
    assert selector_note(board, tmp_path) is None  # nothing measured: no note
    bench = {"split": "random", "part": "test", "model": "xgboost-compact", "seed": 0, "size_bytes": 2_500_000,
             "latency_ms_p50": 0.5, "latency_ms_p99": 0.75, "top1": 0.875, "geomean_slowdown": 1.02,
             "speedup_geomean": 1.5, "kept_gain": 5 / 6, "note": "one core, batch 1",
             "best_entry": {"method": "xgboost", "speedup_geomean": 1.6, "model_size_bytes": 30_000_000,
                            "inference_latency_ms": 20.0},
             "machine": {"cpu_count": 2, "processor": "x86_64"}}
    path = tmp_path / SELECTOR_BENCH.format(dataset="mi100")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(bench))
    note = selector_note(board, tmp_path)
    # (1.5 - 1) / (1.6 - 1) = 5/6 of the gain kept
    for part in ("2.50 MB", "0.50 ms p50 / 0.75 ms p99", "top-1 87.50%", "1.500x against xgboost's 1.600x",
                 "30.0 MB, 20.0 ms", "keeps 83.3% of that gain", "compact_selector_mi100.json"):
        assert part in note, part
    assert selector_note(Board("mi100", "networks", [], [], None, "rules"), tmp_path) is None  # another split


def test_a_board_without_cards_says_where_they_are_expected(board, toy, capsys):
    """No data_cards/ beside a copied board and no card in the package: the page says where a card is
    expected, and the build names the datasets and the places it looked."""
    assert main(["leaderboard", "build", "--leaderboard", str(board), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "note: no data card found for toy (looked for " in err and "--cards DIR" in err
    assert str(board.parent / "data_cards" / "<dataset>.md") in err
    page = (board / "site" / "toy.html").read_text()
    assert "No data card found for this dataset: the build looks for <code>data_cards/toy.md</code>" in page


def test_a_card_is_found_in_the_package_dataset_folder(board, toy, tmp_path, monkeypatch):
    from kbench.leaderboard import cards
    package = tmp_path / "package-datasets"
    (package / "toy").mkdir(parents=True)
    (package / "toy" / "card.md").write_text("---\nlicense: mit\n---\n# Toy card\n\nShipped.\n")
    monkeypatch.setattr(cards, "PACKAGE_DATASETS", package)
    build(board)
    assert (board / "site" / "data_cards" / "toy.md").read_text() == (package / "toy" / "card.md").read_text()
    page = (board / "site" / "toy.html").read_text()
    assert "<h2>Toy card</h2>" in page and "license: mit" not in page  # the front matter is not rendered
    assert cards.missing_cards(board) == []


def test_deterministic_entries_and_sampled_training_are_said(board, toy, tmp_path):
    """A method whose seeds give one result shows "det." and no "± 0.0000"; an entry trained on a sample of the
    train part says how much, in both tables."""
    rules = board / "toy" / "random" / "toy-rules"
    assert json.loads((rules / "result.json").read_text())["extra"]["stochastic"] is False
    meta = json.loads((board / "toy" / "random" / "toy-model" / "meta.json").read_text())
    meta["training_set"] = "3 × 50 sampled problems of 150"
    (board / "toy" / "random" / "toy-model" / "meta.json").write_text(json.dumps(meta))
    build(board)
    readme = (board / "README.md").read_text()
    rules_line = next(line for line in readme.splitlines() if "[toy-rules]" in line)
    assert " det." in rules_line and "± 0.0000" not in rules_line
    model_line = next(line for line in readme.splitlines() if "[toy-model]" in line)
    assert "(trained on 3 × 50 sampled problems of 150)" in model_line and " det." not in model_line
    page = (board / "site" / "toy.html").read_text()
    assert '<span class="trained">trained on 3 × 50 sampled problems of 150</span>' in page
    assert 'title="deterministic: its 5 seeds give one result"' in page


def test_training_set_of_a_sampling_baseline():
    from kbench.leaderboard.runner import training_set_of
    sampler = type("Sampler", (), {"DEFAULTS": {"rows_per_epoch": 8192, "max_epochs": 12}})
    assert training_set_of(sampler, 127038) == "12 × 8,192 sampled problems of 127,038"
    assert training_set_of(sampler, 5000) is None  # every epoch sees the whole train part
    assert training_set_of(type("Full", (), {"DEFAULTS": {"rows_per_epoch": None}}), 127038) is None

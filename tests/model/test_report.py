"""``kbench model report``: a traced model against a hand-made dataset whose times give hand-computed sums."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from kbench.cli import main  # noqa: E402
from kbench.data.build import write_dataset  # noqa: E402
from kbench.data.dataset import Dataset  # noqa: E402
from kbench.model.report import ModelReport, model_report, render_html  # noqa: E402
from kbench.model.trace import trace_model, trace_problem_ids, write_trace  # noqa: E402
from kbench.sources.problem import parse_miopen_keys  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_trace import SharedConv  # noqa: E402

# per problem of SharedConv on 2x3x8x8 (stem once; body twice per step): kernel -> time (ms), and the
# choices the dataset records. stem W is left out of the dataset (its nearest shape: the same at n=4).
TIMES = {("stem", "F"): {"kA": 1.0, "kB": 2.0}, ("body", "F"): {"kA": 3.0, "kB": 1.5},
         ("body", "B"): {"kA": 0.5, "kB": 0.7}, ("body", "W"): {"kA": 4.0}}
PYTORCH = {("stem", "F"): "kB", ("body", "F"): "kA", ("body", "B"): "kA", ("body", "W"): "kA"}
MODE_A = {("stem", "F"): ["kB", "kA"], ("body", "F"): ["kA", "kB"], ("body", "B"): ["kB"], ("body", "W"): ["kA"]}
# by hand, with the multiplicities (stem 1, body 2):
ORACLE_SUM = 1.0 + 2 * 1.5 + 2 * 0.5 + 2 * 4.0  # 13.0
PYTORCH_SUM = 2.0 + 2 * 3.0 + 2 * 0.5 + 2 * 4.0  # 17.0
MODE_A_SUM = 2.0 + 2 * 3.0 + 2 * 0.7 + 2 * 4.0  # 17.4
AUTOTUNE_SUM = 1.0 + 2 * 1.5 + 2 * 0.7 + 2 * 4.0  # 13.4: the fastest of mode A's (first 10) plans
SELECTOR_SUM = 2.0 + 2 * 1.5 + 2 * 0.7 + 2 * 4.0  # 14.4: kB first; on body W kB never ran, so kA


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    tr = trace_model(SharedConv(), (2, 3, 8, 8))
    return tr, write_trace(tr, tmp_path_factory.mktemp("trace") / "shared")


def tiny_dataset(tr) -> Dataset:
    p = tr.problems.set_index(["layers", "direction"])
    ids = {key: p.loc[key, "problem_id"] for key in TIMES}
    decoy = tr.problems[(tr.problems["layers"] == "stem") & (tr.problems["direction"] == "W")].assign(n=4)
    decoy_id = trace_problem_ids(decoy).iloc[0]
    all_ids = [*ids.values(), decoy_id]
    problems = parse_miopen_keys(pd.Series(all_ids)).assign(censored=False)
    runtimes = pd.DataFrame([(ids[key], k, t, 0) for key, kt in TIMES.items() for k, t in kt.items()]
                            + [(decoy_id, "kA", 9.0, 0)], columns=["problem_id", "kernel", "time_ms", "rank"])
    heuristics = pd.DataFrame([(ids[key], "pytorch", 0, k) for key, k in PYTORCH.items()]
                              + [(ids[key], "cudnn_mode_a", r, k) for key, ks in MODE_A.items()
                                 for r, k in enumerate(ks)], columns=["problem_id", "heuristic", "rank", "kernel"])
    tables = {"problems": problems, "runtimes": runtimes, "heuristics": heuristics,
              "kernels": pd.DataFrame({"kernel": ["kA", "kB"], "directions": "B,F,W", "family": "toy"}),
              "splits": pd.DataFrame({"problem_id": all_ids, "random": "test"})}
    manifest = {"name": "tinyset", "version": "1.0.0", "checksum": "ab" * 32, "task": "kernel-selection",
                "device": "NVIDIA H200 (a toy)", "library": "toylib", "license": "MIT"}
    return Dataset("tinyset", tables, manifest)


@pytest.fixture(scope="module")
def dataset_folder(traced, tmp_path_factory):
    """The tiny dataset as a folder, for the command line's --dataset."""
    ds = tiny_dataset(traced[0])
    path = tmp_path_factory.mktemp("data") / "tinyset"
    write_dataset(path, ds.tables, {k: v for k, v in ds.manifest.items() if k != "checksum"})
    return path


def test_oracle_and_references_sum_to_the_hand_computed_times(traced):
    tr, folder = traced
    report = model_report(folder, tiny_dataset(tr))
    cov = report.coverage
    assert (cov.problem_directions, cov.exact, cov.not_exact, cov.nearest) == (5, 4, 1, 1)
    assert (cov.calls, cov.calls_exact) == (8, 7)
    assert cov.by_direction["W"] == {"problem_directions": 2, "exact": 1, "calls": 3, "calls_exact": 2}
    assert report.timed_calls == 7
    assert report.totals_ms["oracle"] == pytest.approx(ORACLE_SUM)
    assert report.totals_ms["pytorch"] == pytest.approx(PYTORCH_SUM)
    assert report.totals_ms["cudnn_mode_a"] == pytest.approx(MODE_A_SUM)
    assert report.totals_ms["autotune_top10"] == pytest.approx(AUTOTUNE_SUM)
    assert report.vs_oracle["pytorch"] == pytest.approx(17.0 / 13.0)
    layers = {layer.layer: layer for layer in report.layers}
    assert not layers["stem"].timed and layers["stem"].times_ms["oracle"] is None  # its W is not in the set
    body = layers["body"]
    assert body.timed and body.calls == 4 and body.directions == "FBW"
    assert body.times_ms["oracle"] == pytest.approx(2 * 1.5 + 2 * 0.5 + 2 * 4.0)
    assert body.times_ms["pytorch"] == pytest.approx(15.0)
    assert body.share == pytest.approx(15.0 / 17.0)
    missing = [p for p in report.problems if p.match != "exact"]
    assert len(missing) == 1 and missing[0].match == "nearest" and missing[0].distance == pytest.approx(1.0)
    assert missing[0].nearest_id.endswith("-W") and "-4-1x1-1x1-1x1-0-NCHW" in missing[0].nearest_id
    assert "no selector" in " ".join(report.notes)


def test_a_selectors_first_applicable_choice_is_timed(traced, monkeypatch):
    import kbench.selector

    class KbFirst:  # a kernel selector that always ranks kB first
        def choose(self, problem):
            return ["kB", "kA"]

    monkeypatch.setattr(kbench.selector, "load", lambda name, export_if_missing=True: KbFirst())
    tr, folder = traced
    report = model_report(folder, tiny_dataset(tr), selector="mine")
    assert report.selector.loaded and report.totals_ms["selector"] == pytest.approx(SELECTOR_SUM)
    plans = {p.problem_id: p.selector_plan for p in report.problems if p.match == "exact"}
    assert set(plans.values()) == {"kB"}
    assert "selector" in render_html(report)


def test_no_exact_match_still_names_the_nearest(traced):
    tr, folder = traced
    ds = tiny_dataset(tr)
    keep = ds.problems["problem_id"].str.endswith("-W") & (ds.problems["n"] == 4)
    report = model_report(folder, ds.subset(ds.problems.loc[keep, "problem_id"]))
    assert report.coverage.exact == 0 and report.totals_ms == {} and report.layers[0].times_ms == {}
    assert "kbench collect cudnn --problems" in report.notes[0]
    assert sum(p.match == "nearest" for p in report.problems) == 2  # the W rows; F and B have no candidate


def test_cli_report_table_json_and_html(traced, dataset_folder, tmp_path, capsys):
    tr, folder = traced
    data = dataset_folder
    page = tmp_path / "page.html"
    assert main(["model", "report", str(folder), "--dataset", str(data), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "4 of 5 problem-directions match exactly" in out and "13" in out
    text = page.read_text()
    assert text.startswith("<!doctype html>") and "data:image/png;base64," in text and "<script" not in text
    assert main(["model", "report", str(folder), "--dataset", str(data), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["schema_version"] == 1 and record["record"] == "kbench-model-report"
    assert record["totals_ms"]["oracle"] == pytest.approx(ORACLE_SUM)
    assert record["trace"]["counts"]["calls"] == 6
    assert ModelReport.model_validate(record).coverage.exact == 4  # the JSON is the typed record, whole


def test_html_escapes_every_name(traced):
    tr, folder = traced
    report = model_report(folder, tiny_dataset(tr))
    report.layers[1].layer = "<script>alert(1)</script>"
    report.trace["model"] = "a&b<i>"
    text = render_html(report)
    assert "<script>" not in text and "&lt;script&gt;" in text and "a&amp;b&lt;i&gt;" in text


@pytest.mark.parametrize("make, says", [
    (lambda p: p, "no such folder"),
    (lambda p: (p.mkdir(), p)[1], "is not a trace folder (no trace.json)"),
    (lambda p: (p.mkdir(), (p / "trace.json").write_text("{}"), p)[2], "format None"),
])
def test_a_folder_that_is_not_a_trace_is_one_clear_error(tmp_path, capsys, make, says):
    folder = make(tmp_path / "nottrace")
    before = sorted(folder.iterdir()) if folder.exists() else None
    assert main(["model", "report", str(folder), "--dataset", "mi100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kbench: error: ") and says in err and "kbench model trace" in err and "Traceback" not in err
    assert (sorted(folder.iterdir()) if folder.exists() else None) == before


def test_html_page_is_refused_inside_the_trace_folder(traced, dataset_folder, capsys):
    tr, folder = traced
    data = dataset_folder
    assert main(["model", "report", str(folder), "--dataset", str(data), "--html", str(folder / "p.html")]) == 2
    assert "inputs are never modified" in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == ["calls.csv", "problems.csv", "trace.json"]


def test_a_plan_selector_reads_the_datasets_heuristic_lists(traced, monkeypatch):
    import kbench.selector

    class ReversedModeA(kbench.selector.PlanSelector):  # re-ranks cuDNN's lists: mode A's order reversed
        def __init__(self):
            self.seen = []

        def choose(self, problem, heuristics):
            self.seen.append((problem["direction"], heuristics["cudnn_mode_a"]))
            return heuristics["cudnn_mode_a"][::-1]

    sel = ReversedModeA()
    monkeypatch.setattr(kbench.selector, "load", lambda name, export_if_missing=True: sel)
    tr, folder = traced
    report = model_report(folder, tiny_dataset(tr), selector="plans")
    assert sorted(sel.seen) == sorted([(key[1], MODE_A[key]) for key in MODE_A])
    # stem F kA 1.0, body F kB 1.5 (x2), body B kB 0.7 (x2), body W kA 4.0 (x2)
    assert report.totals_ms["selector"] == pytest.approx(1.0 + 2 * 1.5 + 2 * 0.7 + 2 * 4.0)


def test_a_selector_named_but_missing_is_an_error(traced, dataset_folder, tmp_path, capsys):
    tr, folder = traced
    data = dataset_folder
    assert main(["model", "report", str(folder), "--dataset", str(data), "--selector", str(tmp_path / "none")]) == 2
    assert "no selector" in capsys.readouterr().err

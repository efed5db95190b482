"""Hostile submissions to `kbench submit`: bad method names and paths, HTML/JS in free text (checked in
the generated README and in a real browser), predictions outside the record's folder, checksum,
version, metric and seed mismatches, a gzip bomb as the predictions file."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from advkit import adversarial, case, refused
from lbtoy import registered_toy, run_fakes

from kbench.cli import main


@pytest.fixture(scope="module")
def toy_results(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("runs")
    run_fakes(tmp / "results")
    return tmp / "results" / "toy" / "random" / "toy-model"


@pytest.fixture
def toy():
    yield from registered_toy()


@pytest.fixture
def run_dir(toy_results, tmp_path, toy) -> Path:
    dst = tmp_path / "sub" / "toy-model"
    shutil.copytree(toy_results, dst)
    return dst


def edit(run_dir: Path, name: str, change) -> None:
    doc = json.loads((run_dir / name).read_text())
    change(doc)
    (run_dir / name).write_text(json.dumps(doc))


def submit_argv(run_dir: Path, root: Path, *extra) -> list[str]:
    return ["submit", str(run_dir / "result.json"), "--meta", str(run_dir / "meta.json"),
            "--leaderboard", str(root), *extra]


def refused_submit(capsys, run_dir, tmp_path, must, *extra):
    """Refused with exit 2; the submission folder unchanged and no leaderboard folder made."""
    root = tmp_path / "lb"
    err = refused(capsys, submit_argv(run_dir, root, *extra), must, [run_dir.parent])
    assert not root.exists()
    return err


BAD_METHODS = [case("../escape", "method-dotdot", "submissions", "error"),
               case("/etc/kbench", "method-absolute", "submissions", "error"),
               case("a/b", "method-separator", "submissions", "error"),
               case("m" * 65, "method-65-chars", "submissions", "error"),
               case("Upper<b>", "method-html", "submissions", "error")]


@pytest.mark.parametrize("method", BAD_METHODS)
def test_bad_method_names(capsys, run_dir, tmp_path, method):
    for name in ("result.json", "meta.json"):
        edit(run_dir, name, lambda d: d.update(method=method))
    refused_submit(capsys, run_dir, tmp_path, ["method", "[a-z0-9]"])


@pytest.mark.parametrize("split", [case("../../evil", "split-dotdot", "submissions", "error"),
                                   case("/tmp", "split-absolute", "submissions", "error")])
def test_bad_split_paths(capsys, run_dir, tmp_path, split):
    for name in ("result.json", "meta.json"):
        edit(run_dir, name, lambda d: d.update(split=split))
    refused_submit(capsys, run_dir, tmp_path, [str(run_dir / "result.json"), f"no split {split!r}"])


@pytest.mark.parametrize("field_value", [
    case(("paper", "javascript:alert(1)"), "paper-javascript-link", "submissions", "error"),
    case(("code", "javascript:alert(1)"), "code-javascript-link", "submissions", "error"),
    case(("paper", "data:text/html,<script>alert(1)</script>"), "paper-data-url", "submissions", "error")])
def test_script_links_are_refused(capsys, run_dir, tmp_path, field_value):
    field, value = field_value
    edit(run_dir, "meta.json", lambda d: d.update({field: value}))
    refused_submit(capsys, run_dir, tmp_path, [str(run_dir / "meta.json"), field])


@pytest.mark.parametrize("where", [case("/etc/passwd", "preds-absolute-path", "submissions", "error", fixed=True),
                                   case("../../outside.csv", "preds-parent-path", "submissions", "error",
                                        fixed=True)])
def test_predictions_outside_the_record_folder(capsys, run_dir, tmp_path, where):
    (tmp_path / "outside.csv").write_text("problem_id,ranking\n")
    edit(run_dir, "result.json", lambda d: d["predictions"].update(path=where))
    refused_submit(capsys, run_dir, tmp_path, [str(run_dir / "result.json"), repr(where), "outside",
                                                "--preds"])


@adversarial("submissions", "error")
def test_a_checksum_mismatch(capsys, run_dir, tmp_path):
    edit(run_dir, "result.json", lambda d: d["predictions"].update(sha256="0" * 64))
    refused_submit(capsys, run_dir, tmp_path, ["preds.csv.gz", "not the file the record was scored from"])


@adversarial("submissions", "error")
def test_a_wrong_dataset_version(capsys, run_dir, tmp_path):
    for name in ("result.json", "meta.json"):
        edit(run_dir, name, lambda d: d["dataset"].update(version="0.9.0"))
    refused_submit(capsys, run_dir, tmp_path, [str(run_dir / "result.json"), "0.9.0"])


@adversarial("submissions", "error")
def test_claimed_metrics_that_the_predictions_do_not_give(capsys, run_dir, tmp_path):
    from kbench.scoring.records import EvaluationResult, aggregate_seeds
    recs = []
    for seed in range(5):
        rec = EvaluationResult.model_validate_json((run_dir / f"seed-{seed}" / "result.json").read_text())
        rec.metrics["overall"]["top1"] = min(1.0, rec.metrics["overall"]["top1"] + 0.05)
        recs.append(rec)
    agg = aggregate_seeds(recs, list(range(5)))
    agg.predictions.path = "seed-0/preds.csv.gz"
    (run_dir / "result.json").write_text(agg.model_dump_json())
    refused_submit(capsys, run_dir, tmp_path, ["does not give the record's figures", "seeds.per_seed[0] (seed 0).top1: claimed"])


@adversarial("submissions", "error")
def test_fewer_than_five_seeds(capsys, run_dir, tmp_path):
    root = tmp_path / "lb"
    argv = ["submit", str(run_dir / "seed-0" / "result.json"), "--meta", str(run_dir / "meta.json"),
            "--leaderboard", str(root)]
    refused(capsys, argv, [str(run_dir / "seed-0" / "result.json"), "at least 5"], [run_dir.parent])
    assert not root.exists()


@adversarial("submissions", "error", fixed=True)
def test_a_gzip_bomb_as_the_predictions_file(capsys, run_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_MAX_PREDICTIONS_BYTES", str(10_000_000))
    bomb = run_dir / "seed-2" / "preds.csv.gz"  # one seed's predictions file
    bomb.write_bytes(gzip.compress(b"problem_id,ranking\n") + gzip.compress(b"0" * 1_000_000) * 20)
    refused_submit(capsys, run_dir, tmp_path, [str(bomb), "10,000,000-byte limit"])


HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
TEXT_FIELDS = ("display_name", "description", "contact", "command", "training_hardware", "inference_hardware")


@pytest.fixture
def hostile_board(run_dir, tmp_path, capsys) -> Path:
    """A leaderboard built from a submission with HTML/JS in every free-text field and a paper URL
    that tries to close the link and open a tag."""
    def change(d):
        for f in TEXT_FIELDS:
            d[f] = f"{f} {HOSTILE}"
        d["paper"] = 'https://example.org/p")<script>window.__pwned=3</script>'
    edit(run_dir, "meta.json", change)
    root = tmp_path / "lb"
    assert main(submit_argv(run_dir, root)) == 0, capsys.readouterr().err
    return root


@adversarial("submissions", "accepted", fixed=True)
def test_html_in_free_text_is_escaped_in_the_readme(hostile_board):
    text = (hostile_board / "README.md").read_text()
    assert "display\\_name &lt;script&gt;window.\\_\\_pwned=1&lt;/script&gt;" in text
    for raw in ("<script", "<img", ")<script"):
        assert raw not in text, raw
    assert "[paper](https://example.org/p%22%29%3Cscript%3Ewindow.__pwned=3%3C/script%3E)" in text
    # the plots are SVG files a reader may open directly: the names in them are escaped too
    for svg in (hostile_board / "site" / "plots").glob("*.svg"):
        assert "<script" not in svg.read_text() and "<img" not in svg.read_text(), svg.name


@adversarial("submissions", "accepted")
def test_html_in_free_text_is_inert_in_the_site(hostile_board):
    """In headless chromium: no script ran, the text shows as text, the paper link stays on https."""
    pytest.importorskip("selenium.webdriver")
    import os
    import time

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    chromium = os.environ.get("KBENCH_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = os.environ.get("KBENCH_CHROMEDRIVER") or shutil.which("chromedriver")
    if not chromium or not driver_path:
        pytest.skip("needs chromium and chromium-driver (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        for page in ("index.html", "toy.html"):
            driver.get((hostile_board / "site" / page).resolve().as_uri())
            deadline = time.time() + 10
            while time.time() < deadline and driver.execute_script("return document.readyState") != "complete":
                time.sleep(0.05)
            assert driver.execute_script("return window.__pwned === undefined")
            assert driver.execute_script("return document.querySelectorAll('td script, td img').length") == 0
            cell = driver.execute_script(
                "return document.querySelector('tr[data-method=\"toy-model\"] td[data-col=method]').textContent")
            assert f"display_name {HOSTILE}" in cell
            hrefs = driver.execute_script(
                "return Array.from(document.querySelectorAll('a')).map(a => a.protocol)")
            assert set(hrefs) <= {"https:", "http:", "file:"}
    finally:
        driver.quit()

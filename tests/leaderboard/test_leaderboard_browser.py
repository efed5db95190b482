"""The static site in a real headless browser (Debian's chromium + chromedriver, driven by Selenium).

Install: apt-get install chromium chromium-driver; pip install selenium. Skipped, with the reason,
when any of them is missing. Set KBENCH_SCREENSHOT_DIR to keep the screenshots.
"""

import json
import math
import os
import shutil
import time
from pathlib import Path

import pytest

from kbench.leaderboard.site import build

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("KBENCH_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = os.environ.get("KBENCH_CHROMEDRIVER") or shutil.which("chromedriver")

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
if not CHROMIUM or not CHROMEDRIVER:
    pytest.skip("headless browser test needs Debian's chromium and chromium-driver "
                "(apt-get install chromium chromium-driver); not found on PATH", allow_module_level=True)

from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000", "--disable-extensions"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def open_page(driver, path: Path) -> list[dict]:
    """Load a page from the file system; returns the console errors it logged."""
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(path.resolve().as_uri())
    deadline = time.time() + 10
    while time.time() < deadline and not driver.execute_script(
            "return document.readyState === 'complete' && Array.from(document.images).every(i => i.complete)"):
        time.sleep(0.05)
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def screenshot(driver, name: str, tmp_path: Path) -> Path:
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1400, min(max(height, 600) + 40, 8000))
    path = tmp_path / name
    driver.save_screenshot(str(path))
    keep = os.environ.get("KBENCH_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / name)
    driver.set_window_size(1400, 1000)
    return path


def table_rows(driver, table_id: str) -> list[dict]:
    return driver.execute_script("""
        const t = document.getElementById(arguments[0]);
        return Array.from(t.tBodies[0].rows).map(r => {
          const o = {method: r.dataset.method};
          for (const c of r.cells) { o[c.dataset.col] = c.hasAttribute('data-value') ? c.dataset.value : c.textContent; }
          return o;
        });""", table_id)


def check_tables_hold_records(driver, root: Path) -> int:
    """Every record under root is a row of its table, with its test score; returns how many."""
    n = 0
    for result in sorted(root.glob("*/*/*/result.json")):
        rec = json.loads(result.read_text())
        meta = json.loads((result.parent / "meta.json").read_text())
        table = f"lb-{rec['dataset']['name']}-{rec['split']}"
        tuning = rec.get("record_type") == "kbench.tuning-evaluation"
        # kernel selection: test = geomean slowdown, second = top-1; tuning: average accuracy, perfect prediction
        second = "perfect" if tuning else "top1"
        rows = driver.execute_script("""
            const t = document.getElementById(arguments[0]);
            if (!t) return null;
            return Array.from(t.querySelectorAll('tbody tr')).map(r => [r.dataset.method,
              r.querySelector('td[data-col=test]').dataset.value,
              r.querySelector('td[data-col=' + arguments[1] + ']').dataset.value]);
            """, table, second)
        assert rows is not None, f"no table {table} on the page"
        found = {m: (t, t1) for m, t, t1 in rows}
        assert rec["method"] in found, f"{rec['method']} missing from table {table}"
        test, other = found[rec["method"]]
        metrics = rec["metrics"] if tuning else rec["metrics"]["overall"]
        want = ("average_accuracy", "perfect_prediction") if tuning else ("geomean_slowdown", "top1")
        assert math.isclose(float(test), metrics[want[0]], rel_tol=1e-9)
        assert math.isclose(float(other), metrics[want[1]], rel_tol=1e-9)
        assert meta["role"] in ("entry", "floor", "ceiling")
        n += 1
    return n


def check_selection_tables(driver, root: Path) -> int:
    """The best-of-K table under each board: every record's best-of-K and its comparison with the board's
    reference are its row's values, and every reference heuristic has a row of its own curve; returns the
    number of record rows checked."""
    n = 0
    for result in sorted(root.glob("*/*/*/result.json")):
        rec = json.loads(result.read_text())
        o = rec["metrics"].get("overall", {})
        if rec.get("record_type") == "kbench.tuning-evaluation" or "best_of_1" not in o:
            continue
        rows = driver.execute_script("""
            const t = document.getElementById(arguments[0]);
            if (!t) return null;
            return Array.from(t.querySelectorAll('tbody tr')).map(r => {
              const o = {key: r.dataset.method};
              for (const c of r.cells) { o[c.dataset.col] = c.hasAttribute('data-value') ? c.dataset.value : c.textContent; }
              return o;
            });""", f"sel-{rec['dataset']['name']}-{rec['split']}")
        assert rows is not None, f"no best-of-K table for {rec['dataset']['name']} {rec['split']}"
        found = {r["key"]: r for r in rows}
        row = found[rec["method"]]
        for k in (1, 3, 5, 10):
            assert math.isclose(float(row[f"b{k}"]), o[f"best_of_{k}"], rel_tol=1e-9)
        ref = o["references"][rec["reference"]]
        assert math.isclose(float(row["regressed"]), ref["regressed"], rel_tol=1e-9, abs_tol=1e-12)
        for name, figures in o["references"].items():
            if figures.get("best_of_1") is not None:
                assert math.isclose(float(found[f"heuristic:{name}"]["b10"]), figures["best_of_10"], rel_tol=1e-9)
        n += 1
    return n


def check_plots(driver) -> int:
    images = driver.execute_script(
        "return Array.from(document.images).map(i => [i.getAttribute('src'), i.naturalWidth, i.alt])")
    for src, width, alt in images:
        assert width > 0, f"plot {src} did not render"
        assert len(alt) > 40, f"plot {src} has no real alt text"
    return len(images)


def test_site_in_headless_chromium(browser, toy_board, toy, tmp_path):
    root = tmp_path / "leaderboard"
    shutil.copytree(toy_board, root)
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "toy.md").write_text(CARD)
    build(root, cards)
    for page in ("index.html", "toy.html"):
        errors = open_page(browser, root / "site" / page)
        assert errors == [], f"console errors on {page}: {errors}"
        assert check_tables_hold_records(browser, root) == 4
        assert check_plots(browser) == 4
        assert check_selection_tables(browser, root) == 4
    # sorting: click the method header, then top-1 twice
    before = [r["method"] for r in table_rows(browser, "lb-toy-random")]
    assert before == ["toy-rules", "toy-model"]  # ranked by the primary metric
    header = browser.find_element(By.CSS_SELECTOR, "#lb-toy-random th[data-col=method] button")
    header.click()
    assert [r["method"] for r in table_rows(browser, "lb-toy-random")] == ["toy-model", "toy-rules"]
    top1 = browser.find_element(By.CSS_SELECTOR, "#lb-toy-random th[data-col=top1] button")
    for direction in ("ascending", "descending"):
        top1.click()
        th = browser.find_element(By.CSS_SELECTOR, "#lb-toy-random th[data-col=top1]")
        assert th.get_attribute("aria-sort") == direction
        values = [float(r["top1"]) for r in table_rows(browser, "lb-toy-random")]
        assert values == sorted(values, reverse=direction == "descending")
    # reference rows stay below the ranked ones, unsorted
    refs = browser.execute_script(
        "return Array.from(document.querySelectorAll('#lb-toy-random tbody.ref tr')).map(r => r.dataset.method)")
    assert refs == ["toy-oracle", "toy-random"]
    # the data-card link of the dataset page works from the file system
    open_page(browser, root / "site" / "toy.html")
    link = browser.find_element(By.CSS_SELECTOR, 'a[href="data_cards/toy.md"]')
    assert (root / "site" / link.get_attribute("href").split("/site/", 1)[1]).exists()
    shot = screenshot(browser, "toy-leaderboard.png", tmp_path)
    assert shot.stat().st_size > 10_000
    check_card(browser)
    check_filter_downloads_and_details(browser, root)


CARD = ("# Toy card\n\n| a | b |\n|---|---|\n| x \\| y | 2 |\n\n- outer\n  - inner\n\n> measured on a toy GPU\n\n"
        "3. third\n4. fourth\n\nSee [the roofline](https://en.wikipedia.org/wiki/Roofline_(model)).\n\n"
        "<script>window.__card = 1</script>\n")


def check_card(driver):
    """The data card as markdown-it-py renders it: what the hand-written converter broke, in the DOM."""
    got = driver.execute_script("""
        const c = document.querySelector('section.card');
        return {cell: c.querySelector('table.card td').textContent,
                nested: c.querySelector('ul > li > ul > li').textContent,
                quote: c.querySelector('blockquote').textContent.trim(),
                start: c.querySelector('ol').getAttribute('start'),
                href: c.querySelector('a[href*="Roofline"]').getAttribute('href'),
                script: window.__card === undefined, heading: c.querySelector('h2:not(:first-child)') !== null};""")
    assert got == {"cell": "x | y", "nested": "inner", "quote": "measured on a toy GPU", "start": "3",
                   "href": "https://en.wikipedia.org/wiki/Roofline_(model)", "script": True, "heading": True}


def check_filter_downloads_and_details(driver, root: Path):
    """Typing in a table's filter box hides the other rows; the downloads exist and hold the records;
    a method's link opens its details with the environment of its record."""
    import csv
    import platform
    box = driver.find_element(By.CSS_SELECTOR, 'input.lb-filter[data-table="lb-toy-random"]')
    box.send_keys("learned")  # toy-model's description
    visible = driver.execute_script(
        "return Array.from(document.querySelectorAll('#lb-toy-random tbody tr')).filter(r => !r.hidden)"
        ".map(r => r.dataset.method)")
    assert visible == ["toy-model"]
    assert driver.find_element(By.CSS_SELECTOR, ".board-tools .lb-count").text == "1 of 4 rows"
    box.clear()
    box.send_keys("ceiling")  # the role shown in a reference row
    assert driver.execute_script("return Array.from(document.querySelectorAll('#lb-toy-random tbody tr'))"
                                 ".filter(r => !r.hidden).map(r => r.dataset.method)") == ["toy-oracle"]
    for ext in ("csv", "json"):
        link = driver.find_element(By.CSS_SELECTOR, f'.board-tools a[href="boards/toy-random.{ext}"]')
        assert link.get_attribute("download") is not None
        assert (root / "site" / "boards" / f"toy-random.{ext}").exists()
    with open(root / "site" / "boards" / "toy-random.csv", newline="") as fh:
        top1 = {r["method"]: float(r["top1"]) for r in csv.DictReader(fh)}
    for method, value in top1.items():
        rec = json.loads((root / "toy" / "random" / method / "result.json").read_text())
        assert value == rec["metrics"]["overall"]["top1"]
    # from the index, the method link leads to its details on the dataset's page, opened
    open_page(driver, root / "site" / "index.html")
    driver.find_element(By.CSS_SELECTOR, '#lb-toy-random tr[data-method="toy-model"] td[data-col=method] a').click()
    time.sleep(0.3)
    assert driver.current_url.endswith("/site/toy.html#entry-toy-random-toy-model")
    details = driver.find_element(By.ID, "entry-toy-random-toy-model")
    assert details.get_attribute("open") is not None
    assert f"{platform.python_version()} (" in details.text and "numpy" in details.text


def test_committed_site_in_headless_chromium(browser, tmp_path):
    """The committed leaderboard/site holds every committed record and renders every plot."""
    root = REPO / "leaderboard"
    records = sorted(root.glob("*/*/*/result.json"))
    if not records:
        pytest.skip("no committed leaderboard records yet (kbench run --update-leaderboard writes them)")
    assert (root / "site" / "index.html").exists(), "leaderboard/site missing: run `kbench leaderboard build`"
    pages = [root / "site" / "index.html"] + sorted(
        (root / "site" / f"{d}.html") for d in {r.parent.parent.parent.name for r in records})
    for page in pages:
        errors = open_page(browser, page)
        assert errors == [], f"console errors on {page.name}: {errors}"
        assert check_plots(browser) >= 1
        if page.name == "index.html":
            assert check_tables_hold_records(browser, root) == len(records)
            assert check_selection_tables(browser, root) == sum(
                "best_of_1" in json.loads(r.read_text())["metrics"].get("overall", {}) for r in records)
            screenshot(browser, "committed-leaderboard.png", tmp_path)


def test_committed_boards_fit_a_1280_px_window(browser):
    """Every ranking table (``table.lb`` with an ``lb-`` id) of the committed site fits a 1280 px wide
    window with no sideways scroll, its links column in sight (the practitioner tables below scroll)."""
    root = REPO / "leaderboard" / "site"
    if not (root / "index.html").exists():
        pytest.skip("no committed leaderboard site")
    browser.set_window_size(1280, 1000)
    try:
        for page in [root / "index.html", *sorted(root.glob("*.html"))]:
            open_page(browser, page)
            tables = browser.execute_script("""
                const vw = document.documentElement.clientWidth;
                return Array.from(document.querySelectorAll('table.lb[id^="lb-"]')).map(t => {
                  const links = t.querySelector('thead th[data-col="links"]');
                  return {id: t.id, width: t.scrollWidth, room: t.parentElement.clientWidth, vw: vw,
                          links: links ? links.getBoundingClientRect().right : null};
                });""")
            for t in tables:
                assert t["width"] <= t["room"], f"{page.name} {t['id']}: {t['width']} px in {t['room']} px"
                assert t["links"] is not None and t["links"] <= t["vw"], f"{page.name} {t['id']}: links cut"
    finally:
        browser.set_window_size(1400, 1000)

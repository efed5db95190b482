"""docs/reliability.md holds the table of the cases this suite declares (computed from the markers of
the collected tests, so the suite is not run twice)."""

from pathlib import Path

from reliability import END, START, declared_cases, section

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


def test_reliability_table_is_up_to_date(request):
    items = [i for i in request.session.items if "tests/adversarial/" in i.nodeid.replace("\\", "/")
             or i.nodeid.startswith(("test_", "adversarial/"))]
    cases = declared_cases(items)
    text = DOC.read_text()
    assert START in text and END in text
    if len({i.module.__name__ for i in items}) < 5:  # run on part of the suite: nothing to compare
        import pytest
        pytest.skip("the whole adversarial suite was not collected")
    current = text[text.index(START): text.index(END) + len(END)]
    assert current == section(cases), "docs/reliability.md is stale: run python bench/reliability_report.py"


def test_the_table_counts_by_hand():
    cases = [{"id": "m::a", "category": "data", "outcome": "error", "fixed": True, "limit": None},
             {"id": "m::b", "category": "data", "outcome": "accepted", "fixed": False, "limit": "slow"},
             {"id": "m::c", "category": "predictions", "outcome": "fuzz", "fixed": False, "limit": None}]
    lines = section(cases).splitlines()
    assert "| predictions | 1 | 0 | 0 | 1 | 0 | 0 |" in lines
    assert "| data | 2 | 1 | 1 | 0 | 1 | 1 |" in lines
    assert "| **total** | 3 | 1 | 1 | 1 | 1 | 1 |" in lines
    assert "- data: slow" in lines and "- data: `m::a`" in lines

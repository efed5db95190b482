"""The reliability table of docs/reliability.md, computed from the adversarial tests' declarations.

Every test under tests/adversarial/ carries ``@pytest.mark.adversarial(category, outcome, fixed=...,
limit=...)`` (per parametrized case where cases differ). ``outcome`` is ``error`` (refused with one
clear KbenchError, exit 2), ``accepted`` (read and scored correctly) or ``fuzz`` (a hypothesis test:
either of the two, for every generated input). ``fixed=True``: the case failed before issue 22 and was
fixed there. ``limit``: a sentence describing a known limit the test pins down.
"""

from __future__ import annotations

CATEGORIES = ("predictions", "submissions", "data", "collector", "concurrency")
OUTCOMES = ("error", "accepted", "fuzz")
START, END = "<!-- reliability:start -->", "<!-- reliability:end -->"


def case_id(nodeid: str) -> str:
    """``test_predictions::test_x[case]`` from a node id (independent of the directory run from)."""
    path, _, rest = nodeid.partition("::")
    return path.rsplit("/", 1)[-1].removesuffix(".py") + "::" + rest


def declared_cases(items) -> list[dict]:
    """One dict per collected adversarial test item (id, category, outcome, fixed, limit)."""
    out = []
    for item in items:
        mark = item.get_closest_marker("adversarial")
        if mark is None:
            continue
        category, outcome = mark.args
        assert category in CATEGORIES, f"{item.nodeid}: unknown category {category!r}"
        assert outcome in OUTCOMES, f"{item.nodeid}: unknown outcome {outcome!r}"
        out.append({"id": case_id(item.nodeid), "category": category, "outcome": outcome,
                    "fixed": bool(mark.kwargs.get("fixed", False)), "limit": mark.kwargs.get("limit")})
    return out


def table(cases: list[dict]) -> str:
    """The markdown table (one row per category, then the total) and the list of known limits."""
    head = ("| category | inputs tried | refused with a clear error | read correctly | fuzzed (hypothesis) "
            "| fixed in issue 22 | known limits |")
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|"]
    rows = [(c, [x for x in cases if x["category"] == c]) for c in CATEGORIES] + [("**total**", cases)]
    for name, mine in rows:
        count = [len(mine), sum(x["outcome"] == "error" for x in mine), sum(x["outcome"] == "accepted" for x in mine),
                 sum(x["outcome"] == "fuzz" for x in mine), sum(x["fixed"] for x in mine),
                 sum(bool(x["limit"]) for x in mine)]
        lines.append(f"| {name} | " + " | ".join(map(str, count)) + " |")
    limits = sorted({(x["category"], x["limit"]) for x in cases if x["limit"]})
    lines += ["", "Known limits (each pinned down by a test):", ""]
    lines += [f"- {cat}: {text}" for cat, text in limits] or ["- none"]
    lines += ["", "Fixed in issue 22 (test ids):", ""]
    lines += [f"- {x['category']}: `{x['id']}`" for x in cases if x["fixed"]]
    return "\n".join(lines)


def section(cases: list[dict]) -> str:
    return f"{START}\n{table(cases)}\n{END}"

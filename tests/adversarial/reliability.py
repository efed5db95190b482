"""The reliability table of docs/reliability.md, computed from the adversarial tests' declarations.

Every test under tests/adversarial/ carries ``@pytest.mark.adversarial(category, outcome, fixed=...,
limit=...)`` (per parametrized case where cases differ). ``outcome`` is ``error`` (refused with one
clear KbenchError, exit 2), ``accepted`` (read and scored correctly) or ``fuzz`` (a hypothesis test:
either of the two, for every generated input). ``fixed=True``: the case failed before issue 22 and was
fixed there; ``fixed="N"``: it failed before issue N and was fixed there. ``limit``: a sentence describing a known limit the test pins down.
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
        fixed = mark.kwargs.get("fixed", False)
        out.append({"id": case_id(item.nodeid), "category": category, "outcome": outcome,
                    "fixed": "22" if fixed is True else (str(fixed) if fixed else False),
                    "limit": mark.kwargs.get("limit")})
    return out


def _fixed_in(case: dict) -> str | None:
    """The issue a case was fixed in ("22" for the declarations written as ``fixed=True``), or None."""
    fixed = case["fixed"]
    return "22" if fixed is True else (str(fixed) if fixed else None)


def table(cases: list[dict]) -> str:
    """The markdown table (one row per category, then the total) and the list of known limits."""
    issues = sorted({_fixed_in(x) for x in cases if _fixed_in(x)}, key=int) or ["22"]
    head = ("| category | inputs tried | refused with a clear error | read correctly | fuzzed (hypothesis) | "
            + " | ".join(f"fixed in issue {n}" for n in issues) + " | known limits |")
    lines = [head, "|---|---:|---:|---:|---:|" + "---:|" * len(issues) + "---:|"]
    rows = [(c, [x for x in cases if x["category"] == c]) for c in CATEGORIES] + [("**total**", cases)]
    for name, mine in rows:
        count = [len(mine), sum(x["outcome"] == "error" for x in mine), sum(x["outcome"] == "accepted" for x in mine),
                 sum(x["outcome"] == "fuzz" for x in mine)]
        count += [sum(_fixed_in(x) == n for x in mine) for n in issues]
        count += [sum(bool(x["limit"]) for x in mine)]
        lines.append(f"| {name} | " + " | ".join(map(str, count)) + " |")
    limits = sorted({(x["category"], x["limit"]) for x in cases if x["limit"]})
    lines += ["", "Known limits (each pinned down by a test):", ""]
    lines += [f"- {cat}: {text}" for cat, text in limits] or ["- none"]
    for n in issues:
        lines += ["", f"Fixed in issue {n} (test ids):", ""]
        lines += [f"- {x['category']}: `{x['id']}`" for x in cases if _fixed_in(x) == n]
    return "\n".join(lines)


def section(cases: list[dict]) -> str:
    return f"{START}\n{table(cases)}\n{END}"

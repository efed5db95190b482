"""kbench.core.card_writer: every card template parses, is shipped as package data, and fails loudly on a
missing value; block tags on lines of their own leave no line behind."""

import fnmatch
from pathlib import Path

import jinja2
import pytest
import tomllib

from kbench.core.card_writer import TEMPLATE_FOLDER, environment, render_template

ROOT = Path(__file__).resolve().parents[2]


def test_every_template_parses_and_ships():
    names = sorted(p.name for p in TEMPLATE_FOLDER.iterdir() if p.is_file())
    assert names and all(name.endswith(".j2") for name in names)
    for name in names:
        environment().get_template(name)
    shipped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["kbench"]
    for name in names:
        path = f"core/card_templates/{name}"
        assert any(fnmatch.fnmatch(path, pattern) for pattern in shipped), path


def test_a_missing_value_is_an_error():
    with pytest.raises(jinja2.UndefinedError):
        render_template("citation.md.j2")


def test_block_lines_leave_nothing_and_the_last_newline_stays():
    assert render_template("citation.md.j2", citation="@misc{x}") == "## Citation\n```bibtex\n@misc{x}\n```\n"
    text = render_template("cudnn_repeats.md.j2", statistics_table=None)
    assert text.startswith("## Test-retest\n\nThe test-retest study has not been run yet") and text.endswith(".\n")
    assert "\n\n\n" not in text

"""The data cards' wording: Jinja templates in ``kbench/core/card_templates/`` and the one renderer.

Every data card (the AMD find-db and tuning sets, the tile-selection sets, the collected cuDNN
sets) is written by filling these templates with figures its writer computed from the tables:
the writers format the numbers and tables, the templates hold the prose and the section skeletons.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jinja2

#: the folder of the card templates, shipped as package data
TEMPLATE_FOLDER = Path(__file__).parent / "card_templates"


@cache
def environment() -> jinja2.Environment:
    """The Jinja environment of the card templates.

    A missing value is an error (``StrictUndefined``), not an empty string. Block tags on lines of
    their own leave no line behind (``trim_blocks``, ``lstrip_blocks``), and a template's final
    newline is kept, so a template reads like the Markdown it writes. Cards are Markdown, not HTML:
    nothing is escaped.
    """
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_FOLDER),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render_template(template: str, /, **values) -> str:
    """The card template ``template`` (a file in :data:`TEMPLATE_FOLDER`) filled with ``values``."""
    return environment().get_template(template).render(**values)

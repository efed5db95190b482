"""Markdown to HTML for the site's data cards and rules, through markdown-it-py (installed with rich).

CommonMark plus GitHub's pipe tables and strikethrough; raw HTML in the text is escaped, not
passed through, and link targets are markdown-it's validated ones (no ``javascript:``). YAML
front matter is dropped; ``heading_offset`` demotes headings (``#`` becomes ``h{1+offset}``)
so that a card sits under the page's own headings; tables get the ``card`` class.
"""

from __future__ import annotations

from functools import lru_cache


def strip_front_matter(text: str) -> str:
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end >= 0:
            return text[end + 5:]
    return text


@lru_cache(maxsize=1)
def _parser():
    from markdown_it import MarkdownIt
    return MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def to_html(text: str, heading_offset: int = 0) -> str:
    """Markdown to an HTML fragment; ``heading_offset`` demotes headings (# -> h{1+offset}, at most h6)."""
    md = _parser()
    tokens = md.parse(strip_front_matter(text).replace("\r\n", "\n"))
    for tok in tokens:
        if tok.type in ("heading_open", "heading_close") and heading_offset:
            tok.tag = f"h{min(6, int(tok.tag[1:]) + heading_offset)}"
        elif tok.type == "table_open":
            tok.attrSet("class", "card")
    return md.renderer.render(tokens, md.options, {}).rstrip("\n")

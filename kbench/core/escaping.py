"""Text from a record, escaped for the medium it is rendered in: a Markdown table cell, HTML, a CSV cell.

A display name, a GPU name or a method name comes from a file anyone can submit, so it is
never inserted as it is: :func:`markdown_cell` keeps it inside its table cell (``|`` and line
breaks) and shows HTML and link syntax as text; :func:`html_text` escapes it for HTML (text and
attribute values); :func:`safe_href` lets only ``http(s)://`` and relative links through (no
``javascript:``, ``data:`` ...); :func:`csv_cell` quotes a cell a spreadsheet would run as a
formula (starting with ``= + - @``, a tab or a carriage return) with a leading ``'``.
"""

from __future__ import annotations

import html
import re

#: what starts a formula in a spreadsheet (OWASP's list): such a cell is prefixed with ``'``
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x85]+")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def one_line(text) -> str:
    """``text`` with every line break (any Unicode kind) turned into one space."""
    return _LINE_BREAKS.sub(" ", str(text))


def html_text(text) -> str:
    """Text for HTML content or a quoted attribute value."""
    return html.escape(str(text), quote=True)


def markdown_text(text) -> str:
    """Free text for Markdown: on one line, HTML escaped (a renderer passing HTML through shows
    ``<img onerror>`` as text), and what starts a link, an image, emphasis or code backslashed."""
    out = html.escape(one_line(text), quote=False)
    for ch in "\\`*_[]()!|":
        out = out.replace(ch, "\\" + ch)
    return out


def markdown_prose(text) -> str:
    """A sentence kbench wrote around names from records (a board note), for Markdown: on one line, HTML
    escaped, ``|`` backslashed and ``](`` broken, so that no name in it opens a tag or a link or leaves its
    paragraph; the inline code and the ``[low, high]`` intervals kbench writes itself stay as they are."""
    out = html.escape(one_line(text), quote=False).replace("|", "\\|")
    return out.replace("](", "]\\(")


def markdown_cell(text) -> str:
    """Already formatted Markdown for a table cell: on one line, and ``|`` (not already escaped) escaped."""
    return re.sub(r"(?<!\\)\|", r"\\|", one_line(text))


def safe_href(url) -> str | None:
    """``url`` when it is an ``http(s)://`` or a relative link, else None (``javascript:``, ``data:`` ...)."""
    if not isinstance(url, str) or not url.strip():
        return None
    url = url.strip()
    if any(ord(c) < 0x20 for c in url):
        return None
    if _SCHEME.match(url):
        return url if url.lower().startswith(("http://", "https://")) else None
    return None if url.startswith("//") else url


def csv_cell(value):
    """A CSV cell a spreadsheet shows as text: one starting with a formula character gets a ``'`` first."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


__all__ = ["FORMULA_STARTS", "csv_cell", "html_text", "markdown_cell", "markdown_prose", "markdown_text", "one_line", "safe_href"]

"""Names that become paths: the one rule for dataset, split, method and board names.

A name read from a file (a dataset ``manifest.json``, a record, ``meta.json``, a folder of a
leaderboard) ends up in a path: ``results/<dataset>/<split>/<method>/``, ``site/<dataset>.html``.
So every such name is an *identifier*: lower-case letters, digits, ``.``, ``_``, ``+``, ``-``,
starting with a letter or a digit, at most 64 characters (:data:`IDENTIFIER_PATTERN`, the
pattern a method id has always had), and not one of the :data:`RESERVED_NAMES` that a generated
file or folder already uses (``index`` would overwrite ``site/index.html``). No identifier can be
``.``, ``..``, absolute or hold a separator, and :func:`path_under` still resolves the joined
path and checks that it lies under its root, so a link inside the tree cannot lead out of it.

:func:`check_identifier` is the one check; every code path that turns a name into a path calls
it (through :func:`path_under`) or :func:`confined_path` for a relative file path.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from kbench.core.errors import KbenchInputError
from kbench.core.output_files import printable_path

#: an identifier: what a dataset, split, method or board name may be
IDENTIFIER_PATTERN = r"^[a-z0-9][a-z0-9._+-]{0,63}$"
IDENTIFIER_TEXT = ("lower-case letters, digits, '.', '_', '+', '-', starting with a letter or a digit, "
                   "at most 64 characters")
#: names the generated leaderboard files and folders use (site/index.html, site/assets/, transfer/ ...)
#: and device names some systems reserve: no dataset, split or method may take one
RESERVED_NAMES = frozenset({"index", "site", "assets", "boards", "plots", "data_cards", "transfer",
                            "readme.md", "con", "prn", "aux", "nul"})
_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)


def identifier_problem(value) -> str | None:
    """Why ``value`` is not an identifier (a phrase), or None when it is one."""
    if not isinstance(value, str):
        return f"is {type(value).__name__}, not text"
    if not _IDENTIFIER.fullmatch(value):
        return f"is not an identifier ({IDENTIFIER_TEXT}: {IDENTIFIER_PATTERN})"
    if value in RESERVED_NAMES:
        return f"is reserved (the names {', '.join(sorted(RESERVED_NAMES))} are used by generated files)"
    return None


def check_identifier(value, what: str = "name", where: str = "") -> str:
    """``value`` when it is an identifier, else one KbenchInputError naming ``what`` and ``where``."""
    problem = identifier_problem(value)
    if problem is not None:
        shown = repr(value)[:80] + ("…" if len(repr(value)) > 80 else "")
        prefix = f"{where}: " if where else ""
        raise KbenchInputError(f"{prefix}{what} {shown} {problem}; names become folder and file names, so "
                               "only identifiers are accepted: rename it.")
    return value


def _inside(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):
        return False


def path_under(root, *names: tuple[str, str] | str, where: str = "") -> Path:
    """``root/<name>/<name>...``: each name (a ``(what, value)`` pair or a bare value) checked to be an
    identifier, and the joined path, links resolved, checked to lie under ``root``."""
    root = Path(root)
    path = root
    for item in names:
        what, value = item if isinstance(item, tuple) else ("name", item)
        path = path / check_identifier(value, what, where)
    if not _inside(path, root):
        raise KbenchInputError(f"{where + ': ' if where else ''}{printable_path(path)} leads outside "
                               f"{printable_path(root)} (through a link): refused.")
    return path


def confined_path(root, rel, what: str = "file", where: str = "", links: bool = True) -> Path:
    """``root/rel`` for a relative path read from a file (a manifest's file list): refused when it is
    not text, is absolute, has a ``..`` part or (``links``: links resolved) leads outside ``root``.

    ``links=False`` where the files are links by design whose content is checked by its sha256 (a Hub
    snapshot's files link to the cache's blobs)."""
    root = Path(root)
    prefix = f"{where}: " if where else ""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\0" in rel:
        raise KbenchInputError(f"{prefix}{what} {rel!r:.80} is not a relative file path.")
    parts = PurePosixPath(rel).parts
    if PurePosixPath(rel).is_absolute() or ".." in parts or "." in rel.split("/"):
        raise KbenchInputError(f"{prefix}{what} {rel!r:.80} must be a path inside {printable_path(root)} "
                               "(absolute paths and '..' are refused).")
    path = root.joinpath(*parts)
    if links and not _inside(path, root):
        raise KbenchInputError(f"{prefix}{what} {rel!r:.80} leads outside {printable_path(root)} (through a "
                               "link): refused.")
    return path


__all__ = ["IDENTIFIER_PATTERN", "IDENTIFIER_TEXT", "RESERVED_NAMES", "check_identifier", "confined_path",
           "identifier_problem", "path_under"]

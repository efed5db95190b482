"""Errors kbench shows to users.

Every error a user can cause (a wrong name, a bad file, a broken data file)
is a :class:`KbenchError` with a message that says what was expected and how
to fix it; the CLI prints the message alone (no traceback) and exits with
code 2 for invalid input, 1 for a failure that is not the input's fault (a
baseline that raised, the Hub or the network).
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path


class KbenchError(Exception):
    """Base class of the errors kbench reports to users."""

    exit_code = 1


class KbenchInputError(KbenchError, ValueError):
    """The user's input (a name, a file, an argument) is invalid: exit code 2."""

    exit_code = 2


class BaselineFailed(KbenchError):
    """A method raised while fitting, predicting or being measured: exit code 1, its name in the message."""

    exit_code = 1


class KbenchEnvironmentError(KbenchError):
    """The machine refused what a valid command needs (a read-only folder, a full disk): exit code 1."""

    exit_code = 1


class DataIntegrityError(KbenchError):
    """A shipped or cached data file is missing, truncated or does not match its checksum."""

    exit_code = 2


def suggest(name: str, options, n: int = 3) -> str:
    """A ' Did you mean ...?' hint for a mistyped name, or an empty string."""
    close = difflib.get_close_matches(str(name), [str(o) for o in options], n=n, cutoff=0.5)
    return " Did you mean " + " or ".join(repr(c) for c in close) + "?" if close else ""


def read_json_object(path, error: type[KbenchError] = KbenchInputError, hint: str = "") -> dict:
    """Read a JSON object from ``path``; any problem becomes one ``error`` naming the file (+ ``hint``)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise error(f"{path}: file not found.{hint}") from None
    except IsADirectoryError:
        raise error(f"{str(path) or '(an empty path)'}: is a folder, not a JSON file.{hint}") from None
    except OSError as exc:  # a name too long, a path through a file, no permission
        raise error(f"{str(path)[:200]}: cannot be read ({exc.strerror}).{hint}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text ({exc}).{hint}") from exc
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON ({exc}).{hint}") from exc
    if not isinstance(doc, dict):
        raise error(f"{path}: expected a JSON object, found {type(doc).__name__}.{hint}")
    return doc

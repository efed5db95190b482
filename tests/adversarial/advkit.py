"""Helpers of the adversarial suite: run the CLI in-process, and prove that nothing was modified."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from kbench.cli import main


def snapshot(*roots: Path) -> dict[str, tuple]:
    """Every entry under the roots: (kind, sha256 of a file's bytes or a link's target)."""
    out = {}
    for root in roots:
        root = Path(root)
        entries = [root] + (sorted(root.rglob("*")) if root.is_dir() and not root.is_symlink() else [])
        for p in entries:
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p))
            elif p.is_fifo():
                out[str(p)] = ("fifo",)
            elif p.is_dir():
                out[str(p)] = ("dir",)
            elif p.is_file():
                try:
                    out[str(p)] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
                except PermissionError:
                    out[str(p)] = ("file", "unreadable", p.stat().st_size)
    return out


def refused(capsys, argv: list[str], must_name: list[str], watch: list[Path], hint: str | None = None) -> str:
    """Run ``kbench argv``: exit 2, one 'kbench: error:' message naming each of ``must_name`` (and
    the ``hint`` if given), no traceback, and no change under ``watch``. Returns the message."""
    before = snapshot(*watch)
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, f"exit code {code}, stderr: {err[-2000:]}"
    assert "Traceback" not in err and "internal error" not in err, err[-3000:]
    assert err.startswith("kbench: error: "), err[:500]
    for name in must_name:
        assert name in err, f"{name!r} not in the message: {err[:1500]}"
    if hint is not None:
        assert hint in err, f"hint {hint!r} not in the message: {err[:1500]}"
    assert snapshot(*watch) == before, "the command modified or wrote files it should not have"
    return err


def adversarial(category: str, outcome: str, fixed: bool = False, limit: str | None = None):
    return pytest.mark.adversarial(category, outcome, fixed=fixed, limit=limit)


def case(value, id: str, category: str, outcome: str, fixed: bool = False, limit: str | None = None):
    """A pytest.param carrying its own adversarial declaration."""
    return pytest.param(value, id=id, marks=adversarial(category, outcome, fixed, limit))

"""The ``kbench`` command line: one module per command group, wired together here.

Exit codes: 0 success; 2 invalid input (one clear message on stderr, no traceback);
1 a failure that is not the input's fault: a baseline that raised (the message names it and
the file holding its traceback), the Hub or the network, or an internal error (with its
traceback: please report it).

Every command with ``--json`` takes ``--json [PATH|-]``: the JSON goes to PATH, or to stdout
with ``-`` or no PATH (stdout then holds it alone); :mod:`.console` holds that and the table
output the commands share.

Modules: :mod:`.datasets` (``datasets``, ``info``, ``build-data``), :mod:`.evaluate`
(``evaluate``, ``validate``), :mod:`.collect` (``collect ...``), :mod:`.baseline`
(``baseline ...``, ``run``), :mod:`.leaderboard` (``submit``, ``leaderboard ...``),
:mod:`.hub` (``publish``), :mod:`.model` (``model trace``, ``model report``). It is plain argparse: no dependency beyond the standard library.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from kbench.cli.console import _console, print_frame  # noqa: F401  (re-exported for callers of kbench.cli)
from kbench.core.errors import KbenchError
from kbench.core.output_files import os_failure
from kbench.core.version import __version__

#: the command modules, in the order their commands appear in ``kbench --help``
COMMAND_MODULES = ("kbench.cli.datasets", "kbench.cli.evaluate", "kbench.cli.collect", "kbench.cli.baseline",
                   "kbench.cli.leaderboard", "kbench.cli.hub", "kbench.cli.transfer", "kbench.cli.model")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kbench", description="Datasets and benchmarks for learned GPU kernel selection.")
    parser.add_argument("--version", action="version", version=f"kbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    for module in COMMAND_MODULES:
        try:
            mod = __import__(module, fromlist=["register_cli"])
        except ModuleNotFoundError as exc:
            if exc.name and module.startswith(exc.name):
                continue  # that part of kbench is not installed in this build
            raise
        mod.register_cli(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except KbenchError as exc:
        print(f"kbench: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("kbench: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # an unexpected failure is ours, not the user's: show the traceback
        # ... unless it is a read-only folder or a full disk met outside the writers that name their file
        failure = os_failure(exc) if isinstance(exc, OSError) else None
        if failure is not None:
            print(f"kbench: error: {failure}", file=sys.stderr)
            return failure.exit_code
        traceback.print_exc()
        print("kbench: internal error (exit 1). Please report it with the traceback above.", file=sys.stderr)
        return 1


def console_main() -> None:
    """Entry point of the ``kbench`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())

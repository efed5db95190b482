"""Output helpers shared by the command modules: a rich console, compact tables, ``--json [PATH|-]``.

Conventions every command follows:

* ``--json [PATH|-]`` writes the command's result as JSON to PATH (atomically, never over an
  input), or to stdout with ``-`` or no PATH; stdout then holds that JSON alone. Integers are
  JSON integers, missing values ``null``.
* Tables fit the terminal: one line per row, headers whole, numbers whole with thousands
  separators. The widest text columns are cut with "…" first (to no fewer than
  ``MIN_TEXT_WIDTH`` characters); where that is not enough, columns are left out from the
  right; a note under the table names what was cut or left out (``--json`` has it all). Where
  fewer than half the columns (or than three) would be left, each row is a block of lines instead.
* Progress bars (tqdm) go to stderr and only to a terminal (:func:`progress_disabled`).
"""

from __future__ import annotations

import json
import math
import os
import sys

from kbench.core.output_files import atomic_write_text, check_output

STDOUT = "-"
#: text columns are cut to no fewer characters than this (nor than their header)
MIN_TEXT_WIDTH = 12
#: characters between two columns
GAP = 2


def _console():
    from rich.console import Console
    # Piped output (files, CI logs, tests) gets a wide console instead of rich's 80 columns,
    # unless COLUMNS says how wide it is.
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=200)


def progress_disabled(progress: bool = True) -> bool | None:
    """tqdm's ``disable``: None (a bar only when stderr is a terminal) unless progress is switched off."""
    return None if progress else True


# ----------------------------------------------------------------------------- JSON
def add_json_option(parser, what: str) -> None:
    """``--json [PATH|-]`` on ``parser``: ``args.json`` is None, ``"-"`` (stdout) or a path."""
    parser.add_argument("--json", nargs="?", const=STDOUT, default=None, metavar="PATH",
                        help=f"write {what} as JSON to PATH, or to stdout with '-' or no PATH "
                             "(put --json after the positional arguments, or give it a PATH)")


def json_ready(obj):
    """``obj`` with numpy/pandas scalars as Python ones, integral counts as ints and NaN/NA as None."""
    import numpy as np
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return None if math.isnan(obj) else float(obj)
    if obj is None:
        return None
    try:
        import pandas as pd
        if obj is pd.NA or obj is pd.NaT:
            return None
    except ImportError:
        pass
    return obj


def to_json_text(obj) -> str:
    return json.dumps(json_ready(obj), indent=2, ensure_ascii=False) + "\n"


def check_json_target(target: str | None, inputs=()) -> None:
    """Refuse a --json PATH that is an input or cannot hold a file, before any work is done."""
    if target and target != STDOUT:
        check_output(target, [i for i in inputs if i], option="--json")


def emit_json(target: str | None, obj, inputs=()) -> bool:
    """Write ``obj`` as JSON to ``target`` (see :func:`add_json_option`); returns whether anything was written."""
    if not target:
        return False
    text = obj if isinstance(obj, str) else to_json_text(obj)
    if target == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return True
    check_json_target(target, inputs)
    atomic_write_text(target, text)
    return True


def json_to_stdout(args) -> bool:
    return getattr(args, "json", None) == STDOUT


def say(args, *lines: str) -> None:
    """Print human-readable lines: to stdout, or to stderr when stdout carries the --json output."""
    out = sys.stderr if json_to_stdout(args) else sys.stdout
    for line in lines:
        print(line, file=out)


# ----------------------------------------------------------------------------- tables
def _cell(v, float_fmt: str) -> str:
    import numpy as np
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        return "" if v != v else float_fmt.format(v)
    try:
        import pandas as pd
        if v is pd.NA:
            return ""
    except ImportError:
        pass
    return str(v)


def _water_fill(natural: list[int], minimum: list[int], available: int) -> list[int]:
    """Widths that sum to at most ``available``: the widest columns are cut first, none below its minimum."""
    if sum(natural) <= available:
        return list(natural)
    lo, hi = 0, max(natural)
    while lo < hi:  # the largest cap whose widths fit
        cap = (lo + hi + 1) // 2
        if sum(min(n, max(cap, m)) for n, m in zip(natural, minimum)) <= available:
            lo = cap
        else:
            hi = cap - 1
    return [min(n, max(lo, m)) for n, m in zip(natural, minimum)]


def frame_text(df, float_fmt: str = "{:.4g}") -> tuple[list[str], list[list[str]], list[bool]]:
    """Headers, cell texts (column-wise) and whether each column is numeric (right-aligned, never cut)."""
    headers = [str(c) for c in df.columns]
    texts = [[_cell(v, float_fmt) for v in df[c].tolist()] for c in df.columns]
    numeric = [df[c].dtype.kind in "iuf" for c in df.columns]
    return headers, texts, numeric


def print_frame(df, title: str | None = None, float_fmt: str = "{:.4g}", console=None) -> None:
    """Print a DataFrame as a table that fits the console (see the module docstring)."""
    from rich.cells import cell_len
    from rich.table import Table
    console = console or _console()
    headers, texts, numeric = frame_text(df, float_fmt)
    if not headers:
        return
    natural = [max([cell_len(h)] + [cell_len(t) for t in col]) for h, col in zip(headers, texts)]
    # numbers and the first column (what names the row) are never cut
    minimum = [n if num or i == 0 else min(n, max(cell_len(h), MIN_TEXT_WIDTH))
               for i, (n, num, h) in enumerate(zip(natural, numeric, headers))]
    keep = len(headers)
    while keep > 2 and sum(minimum[:keep]) + GAP * (keep - 1) > console.width:
        keep -= 1
    if sum(minimum[:keep]) + GAP * (keep - 1) > console.width or keep < min(3, len(headers)) \
            or 2 * keep < len(headers):
        _print_stacked(console, headers, texts, title)
        return
    widths = _water_fill(natural[:keep], minimum[:keep], console.width - GAP * (keep - 1))
    table = Table(title=title, box=None, padding=(0, GAP // 2), pad_edge=False, show_lines=False,
                  header_style="bold underline", collapse_padding=False)
    for h, w, num in zip(headers, widths, numeric):
        table.add_column(h, justify="right" if num else "left", width=w, no_wrap=True, overflow="ellipsis")
    for row in zip(*texts[:keep]):
        table.add_row(*row)
    console.print(table)
    cut = [h for h, w, n in zip(headers, widths, natural) if w < n]
    notes = ([f"{', '.join(cut)} cut"] if cut else []) + (
        [f"{', '.join(headers[keep:])} left out"] if keep < len(headers) else [])
    if notes:
        console.print(f"[dim]({'; '.join(notes)} to fit {console.width} columns: a wider terminal or --json "
                      "shows every value whole)[/dim]", highlight=False)


def _print_stacked(console, headers: list[str], texts: list[list[str]], title: str | None) -> None:
    """One block per row (first column as its heading): for a terminal too narrow for a table."""
    from rich.markup import escape
    if title:
        console.print(f"[bold]{escape(title)}[/bold]")
    key_width = max(len(h) for h in headers[1:]) if len(headers) > 1 else 0
    for row in zip(*texts):
        console.print(f"[bold]{escape(row[0])}[/bold]", highlight=False)
        for h, v in zip(headers[1:], row[1:]):
            if v:
                console.print(f"  {escape(h):<{key_width}}  {escape(v)}", highlight=False)

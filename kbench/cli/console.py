"""Output helpers shared by the command modules: a rich console and DataFrame tables."""

from __future__ import annotations

import sys


def _console():
    from rich.console import Console
    # Piped output (files, CI logs, tests) gets a wide console instead of rich's 80 columns.
    return Console() if sys.stdout.isatty() else Console(width=200)


def print_frame(df, title: str | None = None, float_fmt: str = "{:.4g}") -> None:
    """Print a DataFrame as a rich table."""
    from rich.table import Table
    table = Table(title=title, show_lines=False)
    for col in df.columns:
        table.add_column(str(col), justify="right" if df[col].dtype.kind in "iuf" else "left")
    for row in df.itertuples(index=False):
        cells = []
        for v in row:
            if isinstance(v, float):
                cells.append("" if v != v else float_fmt.format(v))
            else:
                cells.append("" if v is None else str(v))
        table.add_row(*cells)
    _console().print(table)

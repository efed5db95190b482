"""The ``kbench`` command line.

Every user error ends with one clear message on stderr and exit code 2;
an internal error exits with 1; success with 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

from kbench.errors import KbenchError

DEFAULT_RAW = Path("../shared/data")


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


# -- commands -------------------------------------------------------------------
def cmd_datasets(args) -> int:
    import pandas as pd

    import kbench
    df = kbench.list_datasets()
    if args.json:
        print(df.to_json(orient="records", indent=2))
    elif args.markdown:
        cols = ["name", "aliases", "device", "task", "problems", "kernels", "runtimes", "targets", "censoring",
                "license"]
        shown = df[df["available"]][cols]
        print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
        for row in shown.itertuples(index=False):
            print("| " + " | ".join("" if pd.isna(v) else f"{int(v):,}" if isinstance(v, (int, float)) else str(v)
                                    for v in row) + " |")
    else:
        cols = ["name", "aliases", "device", "task", "problems", "kernels", "runtimes", "targets", "censoring",
                "license"]
        shown = df[cols].astype({c: "Int64" for c in ("problems", "kernels", "runtimes", "targets")}).astype(str)
        print_frame(shown.replace({"<NA>": "", "None": ""}), title="kbench datasets")
    return 0


def cmd_info(args) -> int:
    import kbench
    ds = kbench.load(args.name)
    info = {k: v for k, v in ds.info.items() if k != "citation"}
    if args.json:
        print(json.dumps(ds.info, indent=2))
        return 0
    console = _console()
    console.print(f"[bold]{ds.name}[/bold] — {info.get('device')}  (version {ds.version}, checksum {ds.checksum[:12]})")
    console.print(f"task: {info.get('task')}   library: {info.get('library')}   license: {info.get('license')}")
    src = info.get("source", {})
    console.print(f"source: {src.get('repository', '')} @ {src.get('commit', '')}")
    console.print(f"censoring: {info.get('censoring', {}).get('text', '')}")
    console.print(f"problems {len(ds.problems):,}   kernels {len(ds.kernels)}   runtimes {len(ds.runtimes):,}")
    for split, sizes in info.get("splits", {}).items():
        console.print(f"split {split}: " + ", ".join(f"{k} {v:,}" for k, v in sizes.items()))
    console.print("files:")
    for fname, meta in info.get("files", {}).items():
        console.print(f"  {fname}: {meta['rows']:,} rows, {meta['bytes']:,} bytes, sha256 {meta['sha256'][:16]}…")
    return 0


def cmd_build_data(args) -> int:
    from kbench.build import PACKAGE_DATA, build_dataset
    from kbench.cards import write_card
    from kbench.registry import DATASETS, resolve_name
    from kbench.errors import KbenchInputError, suggest
    names = args.names or [n for n, s in DATASETS.items() if s.raw_file]  # every dataset built from raw files
    out_root = Path(args.out) if args.out else PACKAGE_DATA
    for name in names:
        canonical = resolve_name(name)
        if canonical is None:
            raise KbenchInputError(f"unknown dataset {name!r}.{suggest(name, list(DATASETS))}")
        manifest = build_dataset(canonical, args.raw, out_root)
        card = write_card(canonical, Path(args.cards), data_root=out_root)
        print(f"{canonical}: {manifest['files']['problems.parquet']['rows']:,} problems -> "
              f"{out_root / canonical}; card {card}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kbench", description="Datasets and benchmarks for learned GPU kernel selection.")
    from kbench import __version__
    parser.add_argument("--version", action="version", version=f"kbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("datasets", help="list the datasets")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table (as in the README)")
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser("info", help="describe one dataset")
    p.add_argument("name", help="dataset name or alias, e.g. mi100 or gfx90878")
    p.add_argument("--json", action="store_true", help="print the whole manifest as JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("build-data", help="convert raw find-db files into the packaged datasets")
    p.add_argument("names", nargs="*", help="datasets to build (default: every AMD dataset)")
    p.add_argument("--raw", default=str(DEFAULT_RAW), help="raw data folder (holds miopen/ and mituna/)")
    p.add_argument("--out", default=None, help="output root (default: inside the package)")
    p.add_argument("--cards", default="data_cards", help="folder for the generated data cards")
    p.set_defaults(func=cmd_build_data)

    for module in ("kbench.evaluate_cli", "kbench.collect.cli", "kbench.baseline_cli",
                   "kbench.leaderboard.cli", "kbench.hub_cli", "kbench.transfer_cli"):
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
    except Exception:  # an unexpected failure is ours, not the user's: show the traceback
        traceback.print_exc()
        print("kbench: internal error (exit 1). Please report it with the traceback above.", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())


def console_main() -> None:
    """Entry point of the ``kbench`` console script."""
    sys.exit(main())

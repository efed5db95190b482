"""``kbench datasets``, ``kbench info`` and ``kbench build-data``: the packaged datasets."""

from __future__ import annotations

from pathlib import Path

from kbench.cli.console import STDOUT, _console, add_json_option, emit_json, print_frame
from kbench.core.errors import KbenchInputError, suggest
from kbench.data.dataset import list_datasets, load
from kbench.data.registry import DATASETS, resolve_name

DEFAULT_RAW = Path("../shared/data")


# -- commands -------------------------------------------------------------------
COUNTS = ("problems", "kernels", "runtimes", "targets")


def cmd_datasets(args) -> int:
    import pandas as pd
    df = list_datasets().astype({c: "Int64" for c in COUNTS})  # counts stay integers (absent: null)
    if args.json:
        emit_json(args.json, df.astype(object).where(df.notna(), None).to_dict(orient="records"))
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
        print_frame(df[cols].astype({"aliases": object}).replace({"": None}), title="kbench datasets")
    return 0


def source_line(src: dict) -> str:
    """Where a dataset comes from: a repository at a commit, or how it was measured."""
    if not src:
        return "not recorded"
    if src.get("repository"):
        line = src["repository"] + (f" @ {src['commit']}" if src.get("commit") else "")
        rest = {k: v for k, v in src.items() if k not in ("repository", "commit")}
    else:
        line, rest = "", src
    extra = ", ".join(f"{k} {v}" for k, v in rest.items() if v not in (None, ""))
    return f"{line} ({extra})" if line and extra else (line or extra)


def cmd_info(args) -> int:
    if args.name is None and args.json not in (None, STDOUT):  # `info --json mi100`: the name, then stdout
        args.name, args.json = args.json, STDOUT
    if args.name is None:
        raise KbenchInputError("give a dataset name or alias, e.g. `kbench info mi100` (`kbench datasets` lists them).")
    ds = load(args.name)
    info = {k: v for k, v in ds.info.items() if k != "citation"}
    from kbench.sources.splits import batch_twin_shares
    twins = batch_twin_shares(ds.problems, ds.tables["splits"]) if ds.task != "tile-selection" else {}
    if args.json:
        emit_json(args.json, {**ds.info, "batch_twins": twins} if twins else ds.info)
        return 0
    console = _console()
    console.print(f"[bold]{ds.name}[/bold] — {info.get('device')}  (version {ds.version}, checksum {ds.checksum[:12]})")
    console.print(f"task: {info.get('task')}   library: {info.get('library')}   license: {info.get('license')}")
    console.print(f"source: {source_line(info.get('source') or {})}", highlight=False)
    console.print(f"censoring: {info.get('censoring', {}).get('text', '')}")
    if ds.task == "tuning":
        console.print(f"problems {len(ds.problems):,}   tuned optima {len(ds.targets):,}")
    else:
        console.print(f"problems {len(ds.problems):,}   kernels {len(ds.kernels):,}   runtimes {len(ds.runtimes):,}")
    for split, sizes in info.get("splits", {}).items():
        twin = twins.get(split)
        console.print(f"split {split}: " + ", ".join(f"{k} {v:,}" for k, v in sizes.items())
                      + (f"; batch twins: {twin['with_twin']:,} of {twin['test']:,} test problems "
                         f"({100 * twin['share']:.1f}%) have the same shape at another batch size in train"
                         if twin else ""))
    console.print("files:")
    for fname, meta in info.get("files", {}).items():
        console.print(f"  {fname}: {meta['rows']:,} rows, {meta['bytes']:,} bytes, sha256 {meta['sha256'][:16]}…")
    return 0


def cmd_build_data(args) -> int:
    # the builders and card renderers load when the command runs (`kbench --help` stays fast)
    from kbench.data.build import PACKAGE_DATA, build_dataset
    from kbench.data.cards import write_card
    out_root = Path(args.out) if args.out else PACKAGE_DATA
    if args.cards_only:  # the cards from the packaged datasets: no raw files needed
        names = args.names or sorted(p.name for p in out_root.iterdir() if (p / "manifest.json").is_file())
        for name in names:
            canonical = resolve_name(name)
            if canonical is None:
                raise KbenchInputError(f"unknown dataset {name!r}.{suggest(name, list(DATASETS))}")
            print(f"{canonical}: card {write_card(canonical, args.cards, data_root=out_root)}")
        return 0
    names = args.names or [n for n, s in DATASETS.items() if s.raw_file]  # every dataset built from raw files
    for name in names:
        canonical = resolve_name(name)
        if canonical is None:
            raise KbenchInputError(f"unknown dataset {name!r}.{suggest(name, list(DATASETS))}")
        manifest = build_dataset(canonical, args.raw, out_root)
        card = write_card(canonical, Path(args.cards), data_root=out_root)
        print(f"{canonical}: {manifest['files']['problems.parquet']['rows']:,} problems -> "
              f"{out_root / canonical}; card {card}")
    return 0


def register_cli(sub) -> None:
    p = sub.add_parser("datasets", help="list the datasets")
    add_json_option(p, "the list (one object per dataset)")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table (as in the README)")
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser("info", help="describe one dataset")
    p.add_argument("name", nargs="?", help="dataset name or alias, e.g. mi100 or gfx90878")
    add_json_option(p, "the whole manifest")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("build-data", help="convert raw find-db files into the packaged datasets")
    p.add_argument("names", nargs="*", help="datasets to build (default: every AMD dataset)")
    p.add_argument("--raw", default=str(DEFAULT_RAW), help="raw data folder (holds miopen/ and mituna/)")
    p.add_argument("--out", default=None, help="output root (default: inside the package)")
    p.add_argument("--cards", default="data_cards", help="folder for the generated data cards")
    p.add_argument("--cards-only", action="store_true",
                   help="only re-render the data cards from the packaged datasets (every one, or NAMES)")
    p.set_defaults(func=cmd_build_data)

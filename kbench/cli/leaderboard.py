"""``kbench run``, ``kbench record aggregate``, ``kbench submit`` and ``kbench leaderboard {build,validate,schema}``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kbench.cli.console import _console, add_json_option, check_json_target, emit_json, json_to_stdout, print_frame, say
from kbench.core.errors import KbenchInputError
from kbench.leaderboard.runner import (
    DEFAULT_DATASET,
    DEFAULT_SEEDS,
    DEFAULT_SPLIT,
    report_records,
    results_frame,
    run_benchmark,
)
from kbench.leaderboard.schema import SCHEMA_DIR, SCHEMA_FILES, generated_schemas, schema_text, write_schemas
from kbench.sources.splits import SPLIT_HELP


def _print_results(report) -> None:
    df = results_frame(report_records(report))
    if df.empty:
        return
    shown = df.copy()
    for col in shown.columns:
        if shown[col].dtype.kind == "f":
            shown[col] = shown[col].map(lambda v: "" if v != v else f"{v:.4g}")
    shown = shown.astype(str).replace({"None": "", "nan": ""})
    refs = sorted({rec.reference for rec, _ in report_records(report) if rec.reference})
    over = f"; speed-up over {', '.join(refs)}" if refs else "; no reference heuristic for speed-up"
    print_frame(shown, title=f"kbench run: {report.dataset} split {report.split}, test part "
                              f"(mean over seeds {report.seeds}{over})")
    console = _console()
    for o in report.outcomes:
        if o.resumed:
            console.print(f"  {o.method}: seeds {o.resumed} resumed from {report.out}")


def _print_board_comparison(report, leaderboard: str) -> None:
    """The run's figures beside the board's entries of the same methods (not after --update-leaderboard,
    which made them the board's)."""
    from kbench.leaderboard.reproduction import board_comparison
    if report.leaderboard:
        return
    lines = board_comparison([(rec.method, rec) for rec, _ in report_records(report)], Path(leaderboard),
                             report.dataset, report.split)
    if lines:
        print(f"compared with the board ({Path(leaderboard) / report.dataset / report.split}/):")
        print("\n".join(lines))


def cmd_run(args) -> int:
    import time

    from tqdm import tqdm
    check_json_target(args.json)
    t0 = time.perf_counter()
    out = sys.stderr if json_to_stdout(args) else sys.stdout
    report = run_benchmark(dataset=args.dataset, split=args.split, baselines=args.baselines, seeds=args.seeds,
                           out=args.out, update_leaderboard=args.update_leaderboard,
                           leaderboard_root=args.leaderboard, progress=not args.no_progress,
                           log=lambda msg: tqdm.write(msg, file=out), jobs=args.jobs)
    if args.json:
        rows = results_frame(report_records(report)).to_dict(orient="records")
        emit_json(args.json, {"dataset": report.dataset, "split": report.split, "seeds": report.seeds,
                              "results": rows, "failed": {o.method: o.error for o in report.failed}})
    if not json_to_stdout(args):
        _print_results(report)
        _print_board_comparison(report, args.leaderboard)
    minutes = (time.perf_counter() - t0) / 60
    say(args, f"records in {Path(args.out) / report.dataset / report.split}/; total time {minutes:.1f} min")
    if report.leaderboard:
        say(args, f"leaderboard updated: {report.leaderboard}/ (README.md and site/index.html rebuilt)")
    if report.failed:
        for o in report.failed:
            print(f"kbench: error: {o.failure(report.dataset, report.split)}", file=sys.stderr)
        return 1
    return 0


# The site renderer, the submission checks and the re-scoring load when their command runs: `kbench --help`
# imports this module and stays fast.
def cmd_submit(args) -> int:
    if args.init_meta:
        from kbench.leaderboard.entry_files import write_meta_template
        left = write_meta_template(args.init_meta, args.result)
        print(f"wrote {args.init_meta}: fill in {', '.join(left)} (each 'FILL IN:' says what goes there; "
              "kbench/schemas/submission.schema.json is the format), then: kbench submit "
              f"{args.result or 'result.json'} --meta {args.init_meta}")
        return 0
    if not args.result or not args.meta:
        raise KbenchInputError("give the record and its metadata: kbench submit result.json --meta meta.json "
                               "(kbench submit --init-meta meta.json [result.json] writes a meta.json to fill in)")
    from kbench.leaderboard.site import build
    from kbench.leaderboard.submit import submit
    report = submit(args.result, args.meta, root=args.leaderboard, preds=args.preds, replace=args.replace)
    print(f"re-scored seed(s) {report.seeds_rescored} from their predictions: every stored figure matches")
    for note in report.notes:
        print(f"note: {note}")
    print(f"added {report.folder}")
    if not args.no_build:
        build(args.leaderboard)
        _note_missing_cards(args.leaderboard, None)
        print(f"rebuilt {Path(args.leaderboard) / 'README.md'} and {Path(args.leaderboard) / 'site/index.html'} "
              "(no `kbench leaderboard build` needed)")
    else:
        print(f"not rebuilt (--no-build): run `kbench leaderboard build --leaderboard {args.leaderboard}`")
    return 0


def cmd_record_csv(args) -> int:
    from kbench.leaderboard.entry_files import predictions_csv
    seed, rows = predictions_csv(args.parquet, args.out, args.seed)
    print(f"wrote {args.out}: seed {seed}, {rows:,} rows (kbench evaluate {args.out} --dataset ... reads it)")
    return 0


def cmd_record_aggregate(args) -> int:
    from kbench.leaderboard.entry_files import aggregate_records
    path = aggregate_records(args.records, args.out, seeds=args.seeds, method=args.method)
    seeds = args.seeds if args.seeds is not None else list(range(len(args.records)))
    print(f"wrote {path} (seeds {seeds}) and seed-<k>/preds.csv.gz, seed-<k>/result.json beside it; next: "
          f"kbench submit --init-meta meta.json {path}, fill it in, then kbench submit {path} --meta meta.json")
    return 0


def _note_missing_cards(leaderboard, cards) -> None:
    """Say on stderr which datasets' pages have no data card, and where the build looked for them."""
    from kbench.leaderboard.cards import card_places, missing_cards
    missing = missing_cards(leaderboard, cards)
    if missing:
        print(f"note: no data card found for {', '.join(missing)} (looked for "
              f"{'; '.join(card_places(Path(leaderboard), cards))}); their pages say so. Pass "
              "--cards DIR, a folder of <dataset>.md cards (kbench's data_cards/).", file=sys.stderr)


def cmd_build(args) -> int:
    from kbench.leaderboard.site import build, check
    cards = Path(args.cards) if args.cards else None
    if args.check:
        stale = check(args.leaderboard, cards)
        if stale:
            raise KbenchInputError(f"{args.leaderboard}: generated files are out of date; run "
                                   "`kbench leaderboard build`:\n  - " + "\n  - ".join(stale[:20]))
        print(f"{args.leaderboard}: README.md and site/ are up to date")
        return 0
    written = build(args.leaderboard, cards, progress=not args.no_progress)
    _note_missing_cards(args.leaderboard, cards)
    print(f"wrote {len(written)} files: {Path(args.leaderboard) / 'README.md'}, "
          f"{Path(args.leaderboard) / 'site' / 'index.html'} …")
    return 0


def cmd_rescore(args) -> int:
    from kbench.leaderboard.rescore_command import run
    return run(args)


def cmd_restamp(args) -> int:
    from kbench.leaderboard.restamp import restamp
    restamp(Path(args.leaderboard), args.datasets)
    return 0


def cmd_validate(args) -> int:
    from kbench.leaderboard.integrity import validate_all
    summary = validate_all(Path(args.leaderboard), check_data=not args.no_data, jobs=args.jobs)
    print(f"{args.leaderboard}: {summary['entries']} entries, {summary['files']} files: valid")
    if not args.no_data:
        print(f"re-scored {summary['rescored']} entries from their stored predictions: every stored figure matches")
        print(f"scored {summary['verified']} GPU re-timing(s) again from their raw timings and re-scored "
              f"{summary['transfer']} transfer record(s): every figure matches")
    if summary.get("stale"):
        print(f"{len(summary['stale'])} transfer record(s) were scored on a dataset version that is not installed "
              "(not re-scored; the README marks them stale):\n  - " + "\n  - ".join(summary["stale"]))
    if summary.get("partial"):
        print(f"{len(summary['partial'])} one-seed entries store only their first seed's predictions (their seed "
              "means and ± are not re-scored; marked on the site): " + ", ".join(summary["partial"]))
    return 0


def cmd_schema(args) -> int:
    if args.write:
        for path in write_schemas(Path(args.write) if args.write != "-" else SCHEMA_DIR):
            print(f"wrote {path}")
        return 0
    if args.check:
        stale = [k for k, s in generated_schemas().items()
                 if not (SCHEMA_DIR / SCHEMA_FILES[k]).exists()
                 or (SCHEMA_DIR / SCHEMA_FILES[k]).read_text(encoding="utf-8") != schema_text(s)]
        if stale:
            raise KbenchInputError(f"shipped schemas out of date: {', '.join(stale)}; run "
                                   "`kbench leaderboard schema --write`.")
        print("shipped schemas are up to date")
        return 0
    print(json.dumps(generated_schemas()[args.which], indent=2))
    return 0


def register_cli(sub) -> None:

    p = sub.add_parser("run", help="run the whole benchmark: train and score every baseline, print the leaderboard",
                       description="Train and score every registered baseline that supports the dataset, for "
                       "several seeds, writing records as it goes (a re-run resumes), then print the "
                       "leaderboard table. With no arguments: mi100, split random, seeds 0-4.")
    p.add_argument("--dataset", "-d", default=DEFAULT_DATASET, help=f"dataset (default {DEFAULT_DATASET})")
    p.add_argument("--split", "-s", default=DEFAULT_SPLIT, help=SPLIT_HELP % DEFAULT_SPLIT)
    p.add_argument("--baselines", "-b", nargs="+", metavar="NAME",
                   help="baselines to run (default: every registered one that supports the dataset)")
    p.add_argument("--seeds", nargs="+", type=int, default=list(DEFAULT_SEEDS),
                   help="seeds (default 0 1 2 3 4; the leaderboard needs at least 5)")
    p.add_argument("--out", default="results", help="results folder (default results/)")
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="fit N (baseline, seed) pairs at once in worker processes, each with its share of the "
                   "cores' library threads (default: one per core; 1: one after the other in this process); "
                   "the predictions are the same for any N")
    p.add_argument("--update-leaderboard", action="store_true",
                   help="write the records into the leaderboard folder and rebuild its README and site")
    p.add_argument("--leaderboard", default="leaderboard", help="leaderboard folder (default leaderboard/)")
    add_json_option(p, "the results table (one object per method) and the failures")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (there is one on stderr only when it is a terminal)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("record", help="join result records: the records of several seeds into one entry folder",
                       description="Work on result records (kbench evaluate --json).")
    rsub = p.add_subparsers(dest="record_command", metavar="ACTION")
    p.set_defaults(func=lambda args, p=p: (p.print_help(), 0)[1])
    a = rsub.add_parser("aggregate", help="the records of several seeds -> result.json + seed-<k>/preds.csv.gz",
                        description="Join the kbench evaluate --json records of several seeds (one each) into a "
                        "folder kbench submit takes: OUT/result.json (every seed, kbench.records.aggregate_seeds), "
                        "OUT/seed-<k>/result.json and OUT/seed-<k>/preds.csv.gz (each record's own predictions "
                        "file, found by its predictions.path and checked against its sha256).")
    a.add_argument("records", nargs="+", metavar="SEED_RECORD", help="one kbench evaluate --json record per seed")
    a.add_argument("--out", required=True, help="entry folder to write (result.json, seed-<k>/)")
    a.add_argument("--seeds", nargs="+", type=int, default=None,
                   help="the seed of each record, in order (default 0 1 2 ...)")
    a.add_argument("--method", default=None, help="method name (default: the one the records store)")
    a.set_defaults(func=cmd_record_aggregate)
    c = rsub.add_parser("csv", help="one seed of a leaderboard preds.parquet -> the CSV kbench evaluate reads",
                        description="Write one seed's predictions of a leaderboard preds.parquet (a seed column, "
                        "list-valued rankings) as a predictions CSV (problem_id,ranking; ';'-joined).")
    c.add_argument("parquet", help="a leaderboard entry's preds.parquet")
    c.add_argument("--out", required=True, help="CSV to write (.csv, or .csv.gz for gzip)")
    c.add_argument("--seed", type=int, default=None, help="the seed to write (default: the first stored)")
    c.set_defaults(func=cmd_record_csv)

    p = sub.add_parser("submit", help="check a result record and add it to the leaderboard",
                       description="Validate RESULT.json and META.json against the shipped schemas, check the "
                       "kbench and dataset versions and checksums, re-score every seed's predictions and "
                       "compare every stored metric, then add the entry under "
                       "leaderboard/<dataset>/<split>/<method>/ and rebuild the site.")
    p.add_argument("result", nargs="?", help="result record of every seed (kbench record aggregate / kbench run)")
    p.add_argument("--meta", help="submission metadata (kbench/schemas/submission.schema.json; "
                   "--init-meta writes one to fill in)")
    p.add_argument("--init-meta", metavar="META", default=None,
                   help="write a meta.json template to META (from RESULT's method, dataset and split when given) "
                   "and exit")
    p.add_argument("--preds", help="predictions of every seed: a preds.parquet with a seed column, or a CSV for a "
                   "one-seed record (default: the record's predictions.path, then seed-<k>/preds.csv.gz beside "
                   "the record)")
    p.add_argument("--leaderboard", default="leaderboard", help="leaderboard folder (default leaderboard/)")
    p.add_argument("--replace", action="store_true", help="replace an existing entry of the same method")
    p.add_argument("--no-build", action="store_true", help="do not rebuild README.md and the site")
    p.set_defaults(func=cmd_submit)

    lb = sub.add_parser("leaderboard", help="build or validate the leaderboard",
                        description="Build the leaderboard README and static site, validate the leaderboard "
                        "folder, or print the JSON Schemas.")
    lsub = lb.add_subparsers(dest="leaderboard_command", metavar="ACTION")
    lb.set_defaults(func=lambda args: (lb.print_help(), 0)[1])

    p = lsub.add_parser("build", help="generate leaderboard/README.md and leaderboard/site/ (deterministic)")
    p.add_argument("--leaderboard", default="leaderboard", help="leaderboard folder (default leaderboard/)")
    p.add_argument("--cards", help="data cards folder of <dataset>.md files (default: data_cards/ beside the "
                   "leaderboard folder, then the kbench checkout's data_cards/, then the package's "
                   "datasets/<dataset>/card.md)")
    p.add_argument("--check", action="store_true", help="only check that the generated files are up to date")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (there is one on stderr only when it is a terminal)")
    p.set_defaults(func=cmd_build)

    p = lsub.add_parser("validate", help="validate every file under the leaderboard folder and re-score every entry "
                        "from its stored predictions")
    p.add_argument("--leaderboard", default="leaderboard", help="leaderboard folder (default leaderboard/)")
    p.add_argument("--no-data", action="store_true", help="skip the checks against the installed datasets (and "
                   "the re-scoring)")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="re-score the datasets in N processes (default: the CPU count; 1: in this process)")
    p.set_defaults(func=cmd_validate)

    p = lsub.add_parser("rescore", help="re-score entries from their predictions with the current scoring",
                        description="Re-score leaderboard entries from their predictions with the current "
                        "Evaluator (kbench.leaderboard.rescore_command describes the modes).")
    p.add_argument("datasets", nargs="*")
    p.add_argument("--results", default="results")
    p.add_argument("--leaderboard", default="leaderboard")
    p.add_argument("--check", action="store_true", help="re-score every entry's predictions file, write nothing")
    p.add_argument("--extra-root", action="append", default=[], help="another folder of entries to check")
    p.add_argument("--dump", type=Path, default=None, help="with --check: save every re-scored record here")
    p.add_argument("--store-seeds", action="store_true",
                   help="rewrite every entry's preds.csv.gz as preds.parquet (every seed where they are known)")
    p.add_argument("--relabel", default=None, metavar="DATASET",
                   help="re-score entries recorded on an earlier version of DATASET from their seed-0 predictions")
    p.add_argument("--methods", nargs="*", default=None, help="with --relabel: only these methods")
    p.add_argument("--stored", action="store_true",
                   help="re-score every entry (of the DATASETs named, else all) from its stored preds.parquet and "
                   "rewrite its record (after a scoring change: new metrics, a new record schema)")
    p.set_defaults(func=cmd_rescore)

    p = lsub.add_parser("restamp", help="carry records over to a new version of their dataset whose scored data "
                        "is unchanged", description="Write the installed version and checksum of each DATASET "
                        "into every record naming an earlier one, then re-derive every figure of those records "
                        "from their stored inputs; where one differs, every file is put back "
                        "(kbench.leaderboard.restamp says more).")
    p.add_argument("datasets", nargs="+", metavar="DATASET")
    p.add_argument("--leaderboard", default="leaderboard", help="leaderboard folder (default leaderboard/)")
    p.set_defaults(func=cmd_restamp)

    p = lsub.add_parser("schema", help="print the JSON Schemas, or write / check the shipped ones")
    p.add_argument("which", nargs="?", default="result", choices=["result", "submission"])
    p.add_argument("--write", nargs="?", const="-", metavar="DIR",
                   help="write both schemas (default: kbench/schemas/)")
    p.add_argument("--check", action="store_true", help="check that the shipped schemas are up to date")
    p.set_defaults(func=cmd_schema)

"""``kbench evaluate`` and ``kbench validate``."""

from __future__ import annotations

import pandas as pd

from kbench.cli.console import _console, add_json_option, check_json_target, emit_json, json_to_stdout, print_frame
from kbench.core.errors import KbenchInputError
from kbench.core.output_files import printable_path
from kbench.data.dataset import load
from kbench.scoring.evaluate import EXPECTED_FORMAT, Evaluator, evaluate_tuning
from kbench.scoring.metrics import BEST_OF
from kbench.sources.splits import SPLIT_HELP

TABLE_METRICS = [("top1", "top-1"), ("top3", "top-3"), ("within5", "≤5%"), ("geomean_slowdown", "slowdown×"),
                 ("lop_mean", "LoP mean"), ("lop_median", "LoP med"), ("lop_p90", "LoP p90"),
                 ("lop_at_5", "LoP@5"), ("lop_at_30", "LoP@30"), ("speedup_geomean", "speed-up×"),
                 ("speedup_total", "total×"), ("share_censored", "censored"), ("share_failed", "failed")]


def metrics_frame(result) -> pd.DataFrame:
    rows = [("all", result.metrics["overall"])]
    rows += [(f"dir {k}", v) for k, v in result.metrics["by_direction"].items()]
    rows += [(k, v) for k, v in result.metrics["by_dtype"].items()]
    out = []
    for label, m in rows:
        row = {"group": label, "n": m.get("n", 0)}
        for key, name in TABLE_METRICS:
            row[name] = m.get(key)
        out.append(row)
    return pd.DataFrame(out)


def references_frame(result) -> pd.DataFrame:
    """One row for the choice's best-of-K curve, then one per reference heuristic: its own curve and how the
    choice compares with it (headroom closed, regressions and tails)."""
    o = result.metrics["overall"]
    rows = [{"ranking": result.method or "predictions", "n": o.get("n"),
             **{f"best-of-{k}×": o.get(f"best_of_{k}") for k in BEST_OF}}]
    for name, r in (o.get("references") or {}).items():
        rows.append({"ranking": name, "n": r.get("n"), **{f"best-of-{k}×": r.get(f"best_of_{k}") for k in BEST_OF},
                     "headroom closed": r.get("headroom_closed"), "improved": r.get("improved"),
                     "unchanged": r.get("unchanged"), "regressed": r.get("regressed"),
                     "p95×": r.get("slowdown_p95"), "worst×": r.get("slowdown_worst"),
                     "regressed×": r.get("regressed_geomean")})
    return pd.DataFrame(rows)


def networks_lines(result) -> list[str]:
    net = result.metrics.get("networks")
    if not net:
        return []
    def x(v):
        return "n/a" if v is None else f"{v:.4f}×"
    return [f"network end-to-end time over {net['instances']} network(s) ({net['instances_left_out']} left out: "
            "layers missing), geomean over networks of the choice's time to:",
            f"  the oracle's  {x(net.get('vs_oracle_sum'))} (sum over layers; per-problem geomean "
            f"{x(net.get('vs_oracle_geomean'))})",
            f"  {net.get('reference') or 'the reference'}'s  {x(net.get('vs_reference_sum'))} (per-problem geomean "
            f"{x(net.get('vs_reference_geomean'))})",
            f"  layer multiplicity: {net['source']}"]


def print_report(result) -> None:
    o = result.metrics["overall"]
    console = _console()
    ref = result.reference or "none"
    su = o.get("speedup_geomean")
    console.print(f"[bold]{result.dataset.name}[/bold] {result.split}/{result.part}  method={result.method or '-'}")
    console.print(f"top-1 {o['top1']:.4f}   geomean slowdown {o['geomean_slowdown']:.4f}×   speed-up over "
                  f"{ref}: " + (f"{su:.4f}× (total-time {o['speedup_total']:.4f}×)" if su is not None else "n/a"))
    print_frame(metrics_frame(result), title="metrics (slowdown, speed-up: ×; LoP: fraction)")
    tau, ndcg = o.get("kendall_tau"), o.get("ndcg_at_10")
    if tau is not None or ndcg is not None:
        console.print("ranking quality over the listed kernels: Kendall tau-b "
                      + (f"{tau:.4f} ({o.get('kendall_tau_n', 0):,} problems)" if tau is not None else "n/a")
                      + (f", NDCG@10 {ndcg:.4f}" if ndcg is not None else ""))
    if "best_of_1" in o:
        print_frame(references_frame(result), title="best of the first K timed (geomean slowdown ×), and the choice "
                    "against each reference (shares of problems; r = t_choice / t_ref)")
    for line in networks_lines(result):
        console.print(line)
    c = result.counts
    console.print(f"scored {c.scored:,} of {c.problems_in_part:,} problems (coverage {c.coverage:.1%}); choices exact "
                  f"{c.choices_exact:,}, censored {c.choices_censored:,}, failed {c.failures:,}")
    for metric, how in result.bounds.items():
        console.print(f"  {metric}: {how}")


def _evaluator(args, dataset=None):
    if getattr(args, "against", None) is not None and not str(args.against).strip():  # never silently the default
        raise KbenchInputError("--against: an empty path; give the predictions file of the reference heuristic, "
                               "or leave --against out to compare with the dataset's own reference.")
    reference = args.against if getattr(args, "against", None) else ("default" if not getattr(args, "no_reference", False) else None)
    return Evaluator(dataset if dataset is not None else args.dataset, split=args.split, part=args.part,
                     reference=reference)


def _inputs(args) -> list:
    return [args.predictions, getattr(args, "against", None)]


def _write_record(args, result) -> None:
    """The --json record: to stdout, or written atomically, never over an input file (compared by inode,
    so links count)."""
    emit_json(args.json, result.model_dump_json(indent=2) + "\n", inputs=_inputs(args))


def _check_json(args) -> None:
    """Refuse a --json path that is an input or cannot hold a file, before any work is done."""
    check_json_target(args.json, _inputs(args))


def _quiet(args) -> bool:
    return args.quiet or json_to_stdout(args)


def cmd_evaluate(args) -> int:
    if args.explain:
        print(EXPECTED_FORMAT)
        return 0
    if not args.predictions:
        raise KbenchInputError("give a predictions file (kbench evaluate preds.csv --dataset mi100), "
                               "or --explain for the expected format.")
    _check_json(args)
    dataset = load(args.dataset)  # loaded once, shared with the evaluator
    if dataset.task == "tuning":
        return _evaluate_tuning(args, dataset)
    ev = _evaluator(args, dataset)
    result = ev(args.predictions, allow_partial=args.allow_partial, method=args.method)
    _write_record(args, result)  # checked again: the output may have been linked to an input meanwhile
    if not _quiet(args):
        print_report(result)
    if args.json and not _quiet(args):
        print(f"record written to {printable_path(args.json)}")
    return 0


def _evaluate_tuning(args, dataset) -> int:
    result = evaluate_tuning(dataset, args.predictions, solver=args.solver, split=args.split,
                             part=args.part, allow_partial=args.allow_partial, method=args.method)
    _write_record(args, result)
    if not _quiet(args):
        m = result.metrics
        console = _console()
        console.print(f"[bold]{result.dataset.name}[/bold] {result.split}/{result.part} solver {result.solver}")
        console.print(f"average accuracy {m['average_accuracy']:.4f}   perfect prediction "
                      f"{m['perfect_prediction']:.4f}   valid share {m.get('valid_share')}")
        for name, acc in m.get("parameter_accuracy", {}).items():
            console.print(f"  {name}: {acc:.4f}")
    return 0


def cmd_validate(args) -> int:
    check_json_target(args.json, [args.predictions])
    dataset = load(args.dataset)
    where = {"predictions": printable_path(args.predictions), "dataset": dataset.name, "split": args.split,
             "part": args.part, "valid": True}
    if dataset.task == "tuning":  # tuples are checked by scoring them (nothing is printed but the verdict)
        result = evaluate_tuning(dataset, args.predictions, solver=args.solver, split=args.split, part=args.part,
                                 allow_partial=args.allow_partial)
        missing = int(result.metrics.get("n_missing") or 0)
        if emit_json(args.json, {**where, "solver": args.solver, "rows": result.predictions.rows,
                                 "problems_without_prediction": missing}) and json_to_stdout(args):
            return 0
        print(f"{printable_path(args.predictions)}: valid for {dataset.name} {args.split}/{args.part} solver "
              f"{args.solver}: {result.predictions.rows:,} rows" + (f", {missing:,} problems without a prediction"
                                                                     if missing else "") + ".")
        return 0
    ev = Evaluator(dataset, split=args.split, part=args.part, reference=None)
    report = ev.validate(args.predictions, allow_partial=args.allow_partial)
    if emit_json(args.json, {**where, **report}) and json_to_stdout(args):
        return 0
    print(f"{printable_path(args.predictions)}: valid for {args.dataset} {args.split}/{args.part}: {report['rows']:,} rows, "
          f"{report['covered']:,} of {report['problems_in_part']:,} problems ({report['coverage']:.1%}).")
    return 0


def _common(p, default_split="random"):
    p.add_argument("--dataset", "-d", default="mi100", help="dataset name or alias (default mi100)")
    p.add_argument("--split", "-s", default=default_split, help=SPLIT_HELP % default_split)
    p.add_argument("--part", default="test", choices=["train", "valid", "test"], help="part to score (default test)")
    p.add_argument("--allow-partial", action="store_true", help="score only the problems present")


def register_cli(sub) -> None:
    p = sub.add_parser("evaluate", help="score a predictions file", description="Score kernel rankings. "
                       "Run with --explain for the file format and the scoring rules.")
    p.add_argument("predictions", nargs="?", help="predictions CSV (problem_id + ranking or kernel)")
    _common(p)
    add_json_option(p, "the typed result record (with '-': the record alone on stdout)")
    p.add_argument("--against", metavar="CSV", help="predictions file of the reference heuristic for speed-up")
    p.add_argument("--no-reference", action="store_true", help="skip the speed-up over the heuristic")
    p.add_argument("--method", help="method name stored in the record")
    p.add_argument("--solver", default="ConvAsm1x1U", help="tuning datasets: the solver whose tuples are scored")
    p.add_argument("--explain", action="store_true", help="print the expected predictions format and exit")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing (with --json PATH)")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("validate", help="check a predictions file without scoring it")
    p.add_argument("predictions", help="predictions CSV")
    _common(p)
    p.add_argument("--solver", default="ConvAsm1x1U", help="tuning datasets: the solver whose tuples are checked")
    add_json_option(p, "the verdict (rows, problems covered)")
    p.set_defaults(func=cmd_validate)

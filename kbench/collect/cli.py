"""``kbench collect ...``: build a cuDNN dataset for your own NVIDIA GPU.

    kbench collect corpus  --out problems.csv               # the problem corpus (deterministic)
    kbench collect cudnn   --problems problems.csv --out DIR [--directions F,B,W] [--dtypes FP16,BF16,FP32]
    kbench collect compact DIR                              # merge a raw folder's batch files
    kbench collect package DIR --name h100 --out OUT        # canonical tables (+ data card numbers)

Registered into the main CLI by :func:`register_cli`; also runs stand-alone as
``python -m kbench.collect``. Nothing heavy (torch, cuDNN) is imported until a
command runs.
"""

from __future__ import annotations

import argparse
import json


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("collect", help="measure kernels on this machine's GPU (cuDNN)",
                              description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="collect_command", metavar="WHAT")
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])

    c = sub.add_parser("cudnn", help="time every cuDNN engine configuration per problem",
                       description="Time every cuDNN execution plan (heuristic modes A, B and the "
                                   "fallback list) of each problem-direction; resumable.")
    c.add_argument("--problems", required=True, help="problems CSV (e.g. from 'kbench collect corpus')")
    c.add_argument("--out", required=True, help="raw output folder (created; a re-run resumes it)")
    c.add_argument("--directions", default="F,B,W", help="comma list of F,B,W (default all)")
    c.add_argument("--dtypes", default=None, help="comma list of FP16,BF16,FP32 (default: the file's, or all)")
    c.add_argument("--layouts", default=None, help="comma list of NCHW,NHWC (default: the file's, or both)")
    c.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="start no new problem after this many seconds")
    c.add_argument("--limit", type=int, default=None, help="measure at most this many problem-directions")
    c.add_argument("--batch-size", type=int, default=10, help="problem-directions per saved batch")
    c.add_argument("--no-notes", action="store_true", help="skip the numerical-note probes")
    c.add_argument("--no-torch-choice", action="store_true", help="skip recording PyTorch's choice")
    c.add_argument("--no-precise", action="store_true", help="coarse timing only")
    c.add_argument("--seed", type=int, default=0, help="seed of the random input data")
    c.set_defaults(func=cmd_cudnn)

    c = sub.add_parser("corpus", help="write the deterministic problem corpus")
    from kbench.collect import corpus
    corpus.add_arguments(c)
    c.set_defaults(func=cmd_corpus)

    c = sub.add_parser("compact", help="merge a raw folder's batch files into parquet")
    c.add_argument("raw", help="raw collector folder")
    c.set_defaults(func=cmd_compact)

    c = sub.add_parser("package", help="raw collector output -> canonical dataset tables")
    c.add_argument("raw", nargs="+", help="raw collector folder(s) of ONE GPU")
    c.add_argument("--name", required=True, help="dataset name, e.g. h100")
    c.add_argument("--out", required=True, help="output folder of the dataset")
    c.add_argument("--mituna", default="../shared/data/mituna", help="MITuna lists for the networks split")
    c.add_argument("--variant", choices=["default", "tf32"], default="default",
                   help="default: FP32 problems keep full-FP32 plans only; tf32: every correct plan")
    c.add_argument("--card", default=None, help="also write the data card to this markdown file")
    c.set_defaults(func=cmd_package)

    from kbench.collect import verify_on_gpu as verify
    v = subparsers.add_parser("verify-on-gpu", help="re-time a predictions file's chosen plans, cuDNN mode A's "
                              "and the oracle's on the GPU", description=verify.__doc__.split("\n\n")[0])
    verify.add_arguments(v)
    v.set_defaults(func=verify.run)


def _check_positive(value, name):
    from kbench.errors import KbenchInputError
    if value is not None and value <= 0:
        raise KbenchInputError(f"{name} must be > 0 (got {value})")


def cmd_cudnn(args) -> int:
    from kbench.collect import cudnn as C
    _check_positive(args.time_budget, "--time-budget")
    _check_positive(args.limit, "--limit")
    _check_positive(args.batch_size, "--batch-size")
    directions = C.parse_list(args.directions, C.DIRECTIONS, "directions")
    dtypes = C.parse_list(args.dtypes, C.DTYPES, "dtypes") if args.dtypes else None
    layouts = C.parse_list(args.layouts, C.LAYOUTS, "layouts") if args.layouts else None
    opts = C.Options(notes=not args.no_notes, torch_choice=not args.no_torch_choice,
                     precise=not args.no_precise, seed=args.seed)
    summary = C.collect(args.problems, args.out, directions, dtypes, layouts,
                        time_budget_s=args.time_budget, limit=args.limit, batch_size=args.batch_size,
                        options=opts)
    print(json.dumps(summary, indent=1))
    return 3 if summary.get("fatal") else 0


def cmd_corpus(args) -> int:
    from kbench.collect import corpus
    return corpus.run(args)


def cmd_compact(args) -> int:
    from kbench.collect.writer import compact
    print(json.dumps(compact(args.raw)))
    return 0


def cmd_package(args) -> int:
    from kbench.collect import package
    manifest = package.package(args.raw, args.name, args.out, mituna=args.mituna, variant=args.variant,
                               card=args.card)
    print(f"{args.name}: {manifest['files']['problems.parquet']['rows']:,} problems -> {args.out}")
    return 0


def main(argv=None) -> int:
    """Stand-alone entry (``python -m kbench.collect``) with the same exit codes as ``kbench``."""
    import sys
    from kbench.errors import KbenchError
    parser = argparse.ArgumentParser(prog="python -m kbench.collect")
    sub = parser.add_subparsers(dest="command")
    register_cli(sub)
    argv = ["collect"] + list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KbenchError as exc:
        print(f"kbench: error: {exc}", file=sys.stderr)
        return exc.exit_code

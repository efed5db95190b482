"""``kbench collect ...`` in the main CLI: the collector's subcommands (:mod:`kbench.collect.command`), with
``sample`` (the problems of a packaged dataset to re-measure) and ``verify-labels``
(:mod:`kbench.gpu_check.labels_command`) beside them, and the top-level ``kbench verify-on-gpu``."""

from __future__ import annotations

from kbench.collect import command as collect
from kbench.gpu_check import command as verify_on_gpu
from kbench.gpu_check import labels_command


def register_cli(subparsers) -> None:
    """Add ``kbench collect`` with its subcommands, and the top-level ``kbench verify-on-gpu``."""
    # `kbench collect --help` lists the subcommands in the order they are added here
    collect.add_group(subparsers, [
        collect.add_cudnn_parser, collect.add_corpus_parser, collect.add_corpus3d_parser, collect.add_compact_parser,
        collect.add_merge_parser, collect.add_travel_copy_parser, _add_sample_parser, collect.add_compare_parser, collect.add_package_parser,
        labels_command.add_parser])
    _add_verify_on_gpu_parser(subparsers)


def _add_sample_parser(sub) -> None:
    """``kbench collect sample``: the problems to re-measure for the test-retest study."""
    c = sub.add_parser("sample", help="stratified random sample of a dataset's problems to re-measure",
                       description="Draw a stratified random sample (kind, dtype, direction, layout; "
                                   "proportional) of a dataset's problem-directions into a problems file "
                                   "for `kbench collect cudnn` (the test-retest study).")
    c.add_argument("--dataset", default="h100", help="dataset name or folder (default h100)")
    c.add_argument("--n", type=int, default=500, help="problem-directions to draw (default 500)")
    c.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    c.add_argument("--split", default="random", help="split whose part is sampled (default random)")
    c.add_argument("--part", default="test", choices=["train", "valid", "test", "all"],
                   help="part of the split to sample (default test; all: every problem)")
    c.add_argument("--out", required=True, help="problems CSV to write (.csv or .csv.gz)")
    c.set_defaults(func=cmd_sample)


def _add_verify_on_gpu_parser(subparsers) -> None:
    """``kbench verify-on-gpu`` (top level, not under ``collect``): its arguments belong to
    :mod:`kbench.gpu_check.command`."""
    v = subparsers.add_parser("verify-on-gpu", help="re-time a predictions file's chosen plans, cuDNN mode A's "
                              "and the oracle's on the GPU", description=verify_on_gpu.__doc__.split("\n\n")[0])
    verify_on_gpu.add_arguments(v)
    v.set_defaults(func=verify_on_gpu.run)


def cmd_sample(args) -> int:
    from kbench.collect.studies.sample import write_sample
    from kbench.data.dataset import load
    part = None if args.part == "all" else args.part
    counts = write_sample(load(args.dataset), args.out, n=args.n, seed=args.seed, split=args.split, part=part)
    print(f"{int(counts['problem-directions'].sum())} problem-directions in {len(counts)} strata -> {args.out}")
    return 0

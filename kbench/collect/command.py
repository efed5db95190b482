"""``kbench collect ...``: build a cuDNN dataset for your own NVIDIA GPU.

    kbench collect corpus  --out problems.csv               # the problem corpus (deterministic)
    kbench collect corpus3d --out problems3d.csv            # the 3D corpus: real 3D network layers + neighbours
    kbench collect autotune --problems problems.csv --out DIR  # what benchmark=True settles on (GPU)
    kbench collect cudnn   --problems problems.csv --out DIR [--directions F,B,W] [--dtypes FP16,BF16,FP32]
    kbench collect cudnn   ... --shard K/N                  # one shard (or from torchrun / a SLURM array)
    kbench collect merge   DIR... --out RAW                 # join shard folders (same GPU and versions)
    kbench collect compact DIR                              # merge a raw folder's batch files
    kbench collect travel-copy RAW DEST                     # RAW cut to what a collecting call resumes from
    kbench collect package DIR --name h100 --out OUT        # canonical tables (+ data card numbers)
    kbench collect sample  --dataset h100 --out sample.csv  # stratified sample to re-measure (test-retest)
    kbench collect package DIR ... --repeats DIR2           # + the test-retest table `repeats`
    kbench collect package DIR ... --autotune DIR/autotune  # + pytorch_autotune and the `autotune` table
    kbench collect verify-labels --dataset h100 --out DIR   # verification pass on shipped labels (GPU)

The measuring subcommands; ``kbench.cli.collect`` adds the group to the main CLI with the two that read
a packaged dataset (``sample``, ``verify-labels``). Also runs stand-alone as ``python -m kbench.collect``
(the measuring subcommands only). Nothing heavy (torch, cuDNN) is imported until a
command runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from kbench.collect.measure import corpus, corpus3d
from kbench.core.errors import KbenchError, KbenchInputError
from kbench.core.output_files import check_output, check_output_folder


def add_group(subparsers, parsers=None):
    """Add ``kbench collect`` with the subcommands ``parsers`` add (default :data:`PARSERS`, in the order
    ``kbench collect --help`` lists them); return the subcommands' parsers."""
    p = subparsers.add_parser("collect", help="measure kernels on this machine's GPU (cuDNN)",
                              description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="collect_command", metavar="WHAT")
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])
    for add in PARSERS if parsers is None else parsers:
        add(sub)
    return sub


def add_cudnn_parser(sub) -> None:
    """``kbench collect cudnn``: time every plan of each problem-direction (the collector itself)."""
    c = sub.add_parser("cudnn", help="time every cuDNN engine configuration per problem",
                       description="Time every cuDNN execution plan (heuristic modes A, B and the "
                                   "fallback list) of each problem-direction; resumable.")
    c.add_argument("--problems", required=True, help="problems CSV (e.g. from 'kbench collect corpus')")
    c.add_argument("--out", required=True, help="raw output folder (created; a re-run resumes it)")
    add_problem_selection(c)
    c.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="start no new problem after this many seconds, counted from the command's start "
                        "(loading the records and starting CUDA included)")
    c.add_argument("--limit", type=int, default=None,
                   help="measure at most this many problem-directions (with shards: the first this many "
                        "pending ones, split across all shards)")
    c.add_argument("--batch-size", type=int, default=10, help="problem-directions per saved batch")
    c.add_argument("--no-notes", action="store_true", help="skip the numerical-note probes")
    c.add_argument("--no-notes-cache", action="store_true",
                   help="probe the numerical notes on every problem instead of taking them from what earlier "
                        "probes said of the same engine (kbench.collect.measure.notes_cache)")
    c.add_argument("--kernel-cache", action="store_true",
                   help="experimental: dynamic-shape graphs sharing cuDNN's kernel cache (fewer runtime "
                        "compilations; tools/collect/kernel_cache_check.py compares it with the default before "
                        "a dataset may use it; recorded in env.jsonl). Not usable on the H100 with cuDNN 9.19: "
                        "most backward problems get no plan (docs/collect_scale_out.md)")
    c.add_argument("--no-torch-choice", action="store_true", help="skip recording PyTorch's choice")
    c.add_argument("--no-precise", action="store_true", help="coarse timing only")
    c.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                   help="re-time each problem's front-runners in a fresh order before keeping the label "
                        "(default on; kbench.collect.label_retiming.front_runners)")
    c.add_argument("--verify-band", type=float, default=None, metavar="FRACTION",
                   help="verify every plan within this fraction of the best (default 0.03, from the h100 noise)")
    c.add_argument("--problem-time-cap", type=float, default=None, metavar="SECONDS",
                   help="seconds of plan runs on one problem after which its remaining (lowest-ranked) plans are "
                        "not run and the problem is marked truncated (default 25; recorded in env.jsonl): more "
                        "to re-measure a problem that one very slow plan cut short")
    c.add_argument("--seed", type=int, default=0, help="seed of the random input data")
    c.add_argument("--tensor-strides", choices=["pytorch", "legacy"], default="pytorch",
                   help="the strides handed to cuDNN: 'pytorch' (default) as PyTorch's descriptors carry them, "
                        "'legacy' as runs before that convention (kbench.collect.measure.strides; recorded in env.jsonl)")
    c.add_argument("--shard", default=None, metavar="K/N",
                   help="measure only shard K (0..N-1) of the pending work, into OUT/shard-K-of-N/; default: "
                        "from torchrun (RANK/WORLD_SIZE) or a SLURM job array, else no sharding "
                        "(docs/collect_scale_out.md)")
    c.add_argument("--ranks-per-gpu", type=int, default=1, metavar="R",
                   help="ranks started per GPU by the launcher (torchrun --nproc-per-node=GPUS*R): rank "
                        "LOCAL_RANK times GPU LOCAL_RANK // R, and the ranks of a GPU take turns at it, one "
                        "building its next problem's plans while another times (kbench.collect.measure.gpu_turn; "
                        "default 1)")
    c.set_defaults(func=cmd_cudnn)


def add_problem_selection(c) -> None:
    """The directions, data types and layouts of a problems file a command takes (``collect cudnn``, ``autotune``)."""
    c.add_argument("--directions", default="F,B,W", help="comma list of F,B,W (default all)")
    c.add_argument("--dtypes", default=None, help="comma list of FP16,BF16,FP32 (default: the file's, or all)")
    c.add_argument("--layouts", default=None, help="comma list of NCHW,NHWC (2D) or NCDHW,NDHWC (3D); NCHW and NCDHW "
                   "both mean contiguous, NHWC and NDHWC channels-last (default: the file's, or both)")


def add_corpus_parser(sub) -> None:
    """``kbench collect corpus``: its arguments belong to :mod:`kbench.collect.measure.corpus`."""
    c = sub.add_parser("corpus", help="write the deterministic problem corpus")
    corpus.add_arguments(c)
    c.set_defaults(func=cmd_corpus)


def add_autotune_parser(sub) -> None:
    """``kbench collect autotune``: PyTorch's autotune choice per problem (:mod:`kbench.collect.measure.cudnn.autotune`)."""
    c = sub.add_parser("autotune", help="what PyTorch's benchmark=True runs per problem, and its first call's cost",
                       description="Run each problem-direction through PyTorch's convolution with "
                                   "torch.backends.cudnn.benchmark = True from the process's start, time its first "
                                   "(tuning) call, and match the plan it settles on to cuDNN's mode A plans; one JSON "
                                   "line per problem-direction in OUT/autotune.jsonl (a re-run resumes).")
    c.add_argument("--problems", required=True, help="problems CSV (e.g. a raw folder's corpus.csv.gz)")
    c.add_argument("--out", required=True, help="output folder (created; a re-run resumes it)")
    add_problem_selection(c)
    c.add_argument("--limit", type=int, default=None, help="probe at most this many pending problem-directions")
    c.add_argument("--time-budget", type=float, default=None, help="start no problem after this many seconds")
    c.add_argument("--shard", default=None, metavar="K/N",
                   help="probe only the keys of shard K (0..N-1; by the key's CRC-32), into "
                        "OUT/autotune-K-of-N.jsonl: one process per GPU, all into one OUT")
    c.add_argument("--benchmark-limit", type=int, default=None, metavar="N",
                   help="torch.backends.cudnn.benchmark_limit for the run (default PyTorch's, 10; 0: time every "
                        "candidate); give another setting another OUT")
    c.add_argument("--retry-failed", action="store_true",
                   help="probe again the problem-directions whose earlier probes all failed (packaging keeps "
                        "the later ok record)")
    c.set_defaults(func=cmd_autotune)


def add_corpus3d_parser(sub) -> None:
    """``kbench collect corpus3d``: its arguments belong to :mod:`kbench.collect.measure.corpus3d`."""
    c = sub.add_parser("corpus3d", help="write the deterministic 3D problem corpus (real 3D network layers "
                                        "and random neighbours)")
    corpus3d.add_arguments(c)
    c.set_defaults(func=cmd_corpus3d)


def add_compact_parser(sub) -> None:
    """``kbench collect compact``: merge a raw folder's batch files."""
    c = sub.add_parser("compact", help="merge a raw folder's batch files into parquet")
    c.add_argument("raw", help="raw collector folder")
    c.set_defaults(func=cmd_compact)


def add_merge_parser(sub) -> None:
    """``kbench collect merge``: join shard folders into a new raw folder or into an existing one."""
    c = sub.add_parser("merge", help="join shard folders into one raw folder (checks versions, duplicates, gaps)")
    c.add_argument("raw", nargs="+", help="shard folders, or output roots holding shard-K-of-N folders")
    where = c.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", help="new raw folder to write (must not exist)")
    where.add_argument("--into", help="existing raw folder to append to in new files (e.g. raw/h200)")
    c.add_argument("--allow-gaps", action="store_true",
                   help="merge even when shards left assigned problem-directions unmeasured (listed)")
    c.set_defaults(func=cmd_merge)


def add_travel_copy_parser(sub) -> None:
    """``kbench collect travel-copy``: the resume-only copy of a raw folder, to carry to a GPU machine."""
    c = sub.add_parser("travel-copy", help="copy a raw folder cut to what a collecting call resumes from",
                       description="Write the resume-only copy of a raw folder (done keys, journal, the "
                                   "numerical notes that seed the notes cache) for a collecting call on a "
                                   "machine that takes little data; merge what the call brings back into "
                                   "the full raw folder.")
    c.add_argument("raw", help="full raw collector folder (e.g. raw/h200)")
    c.add_argument("dest", help="new folder for the copy (e.g. .gpu/h200_raw)")
    c.set_defaults(func=cmd_travel_copy)


def add_compare_parser(sub) -> None:
    """``kbench collect compare``: two raw folders measuring the same problems, side by side."""
    c = sub.add_parser("compare", help="two measurements of the same problems: disagreements and provenance",
                       description="Compare two raw folders measuring the same problems (a test-retest): "
                                   "repeatability, same fastest plan, noise ceiling, and the largest "
                                   "disagreements of either run's fastest plan with how each time was taken.")
    c.add_argument("raw_a", help="first raw folder (e.g. raw/h100)")
    c.add_argument("raw_b", help="second raw folder (the re-measurement)")
    c.add_argument("--variant", choices=["default", "tf32", "pytorch"], default="default")
    c.add_argument("--top", type=int, default=15, help="disagreements to list (default 15)")
    c.add_argument("--csv", default=None, help="also write every (problem, plan) pair to this CSV")
    c.set_defaults(func=cmd_compare)


def add_package_parser(sub) -> None:
    """``kbench collect package``: raw folders of one GPU -> the canonical dataset tables."""
    c = sub.add_parser("package", help="raw collector output -> canonical dataset tables")
    c.add_argument("raw", nargs="+", help="raw collector folder(s) of ONE GPU")
    c.add_argument("--name", required=True, help="dataset name, e.g. h100")
    c.add_argument("--out", required=True, help="output folder of the dataset")
    c.add_argument("--mituna", default="../shared/data/mituna", help="MITuna lists for the networks split")
    c.add_argument("--variant", choices=["default", "tf32", "pytorch"], default="default",
                   help="default: FP32 problems keep full-FP32 plans only; tf32: every correct plan; pytorch: "
                        "what PyTorch's cuDNN path may run with its default flags (allow_tf32, not deterministic)")
    c.add_argument("--card", default=None, help="also write the data card to this markdown file")
    c.add_argument("--repeats", nargs="+", default=None, metavar="RAW2",
                   help="raw folder(s) re-measuring a sample (kbench collect sample) in other runs: "
                        "adds the test-retest table `repeats`")
    c.add_argument("--autotune", default=None, metavar="DIR",
                   help="'kbench collect autotune' records of the same GPU and software (a raw folder's autotune/, "
                        "which build-data reads by itself): adds the heuristic pytorch_autotune and the table "
                        "`autotune`")
    c.set_defaults(func=cmd_package)


#: the collector's own subcommands, in the order ``kbench collect --help`` lists them
PARSERS = [add_cudnn_parser, add_corpus_parser, add_corpus3d_parser, add_autotune_parser, add_compact_parser,
           add_merge_parser, add_travel_copy_parser, add_compare_parser, add_package_parser]


def check_positive(value, name):
    if value is not None and value <= 0:
        raise KbenchInputError(f"{name} must be > 0 (got {value})")


# Each command imports the modules that carry it out when it runs: `kbench --help` imports every command
# module and stays fast, and `python -m kbench.collect` on a GPU machine loads only the command it runs.
def cmd_cudnn(args) -> int:
    from kbench.collect.measure import cudnn as cudnn_collector
    check_positive(args.time_budget, "--time-budget")
    check_positive(args.limit, "--limit")
    check_positive(args.batch_size, "--batch-size")
    check_positive(args.ranks_per_gpu, "--ranks-per-gpu")
    directions = cudnn_collector.parse_list(args.directions, cudnn_collector.DIRECTIONS, "directions")
    dtypes = cudnn_collector.parse_list(args.dtypes, cudnn_collector.DTYPES, "dtypes") if args.dtypes else None
    layouts = cudnn_collector.parse_list(args.layouts, cudnn_collector.LAYOUTS + cudnn_collector.LAYOUTS_3D, "layouts") if args.layouts else None
    opts = cudnn_collector.Options(notes=not args.no_notes, notes_cache=not args.no_notes_cache,
                     torch_choice=not args.no_torch_choice, precise=not args.no_precise, verify=args.verify,
                     kernel_cache=args.kernel_cache, seed=args.seed, tensor_strides=args.tensor_strides)
    if args.problem_time_cap is not None:
        if not (math.isfinite(args.problem_time_cap) and args.problem_time_cap > 0):
            raise KbenchInputError(f"--problem-time-cap must be a positive number of seconds (got {args.problem_time_cap})")
        opts.problem_time_cap_s = args.problem_time_cap
    if args.verify_band is not None:
        if not 0 <= args.verify_band < 1:
            raise KbenchInputError(f"--verify-band must be in [0, 1) (got {args.verify_band})")
        opts.verify_band = args.verify_band
    from kbench.collect.raw_store.shard import resolve_launch, select_gpu
    launch = resolve_launch(args.shard, os.environ)
    device = select_gpu(launch, os.environ, ranks_per_gpu=args.ranks_per_gpu)  # before anything initialises CUDA
    if args.ranks_per_gpu > 1:
        from kbench.collect.measure.gpu_turn import turn_path
        os.makedirs(args.out, exist_ok=True)
        opts.gpu_turn = str(turn_path(args.out, device or os.environ.get("CUDA_VISIBLE_DEVICES")))
        launch.info["ranks_per_gpu"] = args.ranks_per_gpu
    summary = cudnn_collector.collect(args.problems, args.out, directions, dtypes, layouts,
                        time_budget_s=args.time_budget, limit=args.limit, batch_size=args.batch_size,
                        options=opts, shard=launch.shard, launch_info=launch.info)
    print(json.dumps(summary, indent=1))
    return 3 if summary.get("fatal") else 0


def cmd_corpus(args) -> int:
    return corpus.run(args)


def cmd_corpus3d(args) -> int:
    return corpus3d.run(args)


def cmd_autotune(args) -> int:
    from kbench.collect.measure import cudnn as cudnn_collector
    from kbench.collect.measure.cudnn import autotune
    check_positive(args.limit, "--limit")
    check_positive(args.time_budget, "--time-budget")
    directions = cudnn_collector.parse_list(args.directions, cudnn_collector.DIRECTIONS, "directions")
    dtypes = cudnn_collector.parse_list(args.dtypes, cudnn_collector.DTYPES, "dtypes") if args.dtypes else None
    layouts = (cudnn_collector.parse_list(args.layouts, cudnn_collector.LAYOUTS + cudnn_collector.LAYOUTS_3D, "layouts")
               if args.layouts else None)
    from kbench.collect.raw_store.shard import parse_shard
    shard = parse_shard(args.shard) if args.shard else None
    if args.benchmark_limit is not None and args.benchmark_limit < 0:
        raise KbenchInputError(f"--benchmark-limit {args.benchmark_limit}: give 0 (every candidate) or more.")
    summary = autotune.probe_autotune(args.problems, args.out, directions, dtypes, layouts, limit=args.limit,
                                      time_budget_s=args.time_budget, shard=shard, benchmark_limit=args.benchmark_limit,
                                      retry_failed=args.retry_failed)
    print(json.dumps(summary, indent=1))
    return 3 if "fatal" in summary else 0


def cmd_compact(args) -> int:
    from kbench.collect.raw_store.writer import compact
    print(json.dumps(compact(args.raw)))
    return 0


def cmd_merge(args) -> int:
    from kbench.collect.raw_store.merge import merge
    print(json.dumps(merge(args.raw, args.out, allow_gaps=args.allow_gaps, into=args.into), indent=1))
    return 0


def cmd_travel_copy(args) -> int:
    from kbench.collect.raw_store.travel_copy import travel_copy
    print(json.dumps(travel_copy(args.raw, args.dest), indent=1))
    return 0


def cmd_compare(args) -> int:
    from kbench.collect.studies import retest
    m = retest.compare(args.raw_a, args.raw_b, args.variant)
    if not len(m):
        raise KbenchInputError(f"{args.raw_a} and {args.raw_b} share no measured (problem, plan).")
    print(retest.report(m, args.top))
    if args.csv:
        m.to_csv(args.csv, index=False)
    return 0


def cmd_package(args) -> int:
    from kbench.collect.packaging import package
    inputs = [*args.raw, *(args.repeats or []), args.mituna, *([args.autotune] if args.autotune else [])]
    check_output_folder(args.out, inputs)
    if args.card:
        check_output(args.card, inputs, option="--card")
    if args.autotune and not Path(args.autotune).is_dir():
        raise KbenchInputError(f"--autotune {args.autotune}: no such folder; give the folder "
                               "'kbench collect autotune --out' wrote (its autotune*.jsonl and env.jsonl).")
    manifest = package.package(args.raw, args.name, args.out, mituna=args.mituna, variant=args.variant,
                               card=args.card, repeats=args.repeats, autotune=args.autotune)
    print(f"{args.name}: {manifest['files']['problems.parquet']['rows']:,} problems -> {args.out}")
    if "repeats" in manifest:
        print(f"repeats: {manifest['repeats']['problems']:,} problems in {len(manifest['repeats']['runs'])} runs")
    labels = manifest.get("cleaning", {}).get("labels", {})
    if labels.get("label_unverified", {}).get("n"):
        print(f"check: {labels['label_unverified']['n']:,} of {labels['problems']:,} labels not confirmed by the "
              f"verification pass; {labels['label_never_retimed']['n']:,} never re-timed (coarse time only)")
    return 0


def main(argv=None) -> int:
    """Stand-alone entry (``python -m kbench.collect``): the measuring subcommands, with the same exit codes
    as ``kbench``; the ones that read a packaged dataset (``sample``, ``verify-labels``) run as ``kbench collect``."""
    parser = argparse.ArgumentParser(prog="python -m kbench.collect")
    sub = parser.add_subparsers(dest="command")
    add_group(sub)
    argv = ["collect"] + list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KbenchError as exc:
        print(f"kbench: error: {exc}", file=sys.stderr)
        return exc.exit_code

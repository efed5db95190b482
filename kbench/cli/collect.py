"""``kbench collect ...`` in the main CLI: the collector's subcommands (:mod:`kbench.collect.command`), with
``sample`` (the problems of a packaged dataset to re-measure), ``autotune-problems`` (the parts of packaged
datasets' splits as a problems file for ``kbench collect autotune``) and ``verify-labels``
(:mod:`kbench.gpu_check.labels_command`) beside them, and the top-level ``kbench verify-on-gpu``."""

from __future__ import annotations

from pathlib import Path

from kbench.collect import command as collect
from kbench.gpu_check import command as verify_on_gpu
from kbench.gpu_check import labels_command


def register_cli(subparsers) -> None:
    """Add ``kbench collect`` with its subcommands, and the top-level ``kbench verify-on-gpu``."""
    # `kbench collect --help` lists the subcommands in the order they are added here
    collect.add_group(subparsers, [
        collect.add_cudnn_parser, collect.add_corpus_parser, collect.add_corpus3d_parser, collect.add_autotune_parser,
        _add_autotune_problems_parser, collect.add_compact_parser, collect.add_merge_parser,
        collect.add_travel_copy_parser, _add_sample_parser, collect.add_compare_parser, collect.add_package_parser,
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


def _add_autotune_problems_parser(sub) -> None:
    """``kbench collect autotune-problems``: which problem-directions ``kbench collect autotune`` probes."""
    c = sub.add_parser("autotune-problems", help="the parts of datasets' splits as a problems file for "
                                                 "'kbench collect autotune'",
                       description="Write the problem-directions of the given parts of the given splits of one or "
                                   "more datasets (their union: variants of one raw folder share their problems) "
                                   "as a problems file for 'kbench collect autotune', in a seeded order, each row "
                                   "keyed as the dataset keys it (checked).")
    c.add_argument("--datasets", required=True, help="comma list of datasets, all 2D or all 3D (e.g. h200,h200-pytorch)")
    c.add_argument("--splits", default="random,networks", help="comma list of splits (default random,networks)")
    c.add_argument("--parts", default="valid,test", help="comma list of train, valid, test (default valid,test)")
    c.add_argument("--seed", type=int, default=0, help="seed of the rows' order (default 0)")
    c.add_argument("--out", required=True, help="problems CSV to write (.csv or .csv.gz), e.g. "
                                                "raw/h200/autotune/problems.csv.gz")
    c.set_defaults(func=cmd_autotune_problems)


def autotune_problems(names: list[str], splits: list[str], parts: list[str], seed: int = 0):
    """The union of the ``parts`` of ``splits`` of the datasets ``names`` as problems-file rows (2D or 3D), in
    a seeded order; each row's ``problem_id`` is the dataset's."""
    import numpy as np
    import pandas as pd

    from kbench.collect.studies.sample import corpus_rows
    from kbench.core.errors import KbenchInputError, suggest
    from kbench.data.dataset import load
    frames = []
    for name in names:
        ds = load(name)
        for split in splits:
            if split not in ds.split_names:
                raise KbenchInputError(f"--splits: dataset {ds.name!r} has no split {split!r}; its splits are "
                                       f"{', '.join(ds.split_names)}.{suggest(split, ds.split_names)}")
            ids = set().union(*(set(map(str, ds.split(split)[part])) for part in parts))
            frames.append(ds.problems[ds.problems["problem_id"].astype(str).isin(ids)])
    problems = pd.concat(frames, ignore_index=True).astype({"problem_id": str})
    problems = problems.drop_duplicates("problem_id").sort_values("problem_id", kind="stable")
    rows = corpus_rows(problems.reset_index(drop=True))  # 2D or 3D as the problems are; a mix is refused
    rows = rows.iloc[np.random.default_rng(seed).permutation(len(rows))].reset_index(drop=True)
    rows["order"] = np.arange(len(rows))
    return rows


def _comma_list(value) -> list[str]:
    return [x.strip() for x in str(value).split(",") if x.strip()]


def cmd_autotune_problems(args) -> int:
    import gzip
    import tempfile

    from kbench.collect.measure.cudnn.problems import load_problems
    from kbench.core.errors import KbenchInputError
    from kbench.core.output_files import atomic_write_bytes, check_output
    names, splits, parts = _comma_list(args.datasets), _comma_list(args.splits), _comma_list(args.parts)
    bad = [p for p in parts if p not in ("train", "valid", "test")]
    if bad or not parts or not names or not splits:
        raise KbenchInputError(f"--parts {args.parts!r}: give train, valid or test (comma list); --datasets and "
                               "--splits take comma lists too.")
    target = check_output(args.out, [], "--out")
    rows = autotune_problems(names, splits, parts, args.seed)
    data = rows.to_csv(index=False, lineterminator="\n").encode("utf-8")
    with tempfile.TemporaryDirectory() as tmp:  # read back as the probe reads it, before anything is written
        (Path(tmp) / "p.csv").write_bytes(data)
        keys = set(load_problems(Path(tmp) / "p.csv")["key"])
    if keys != set(rows["problem_id"]):  # the probe's keys must be the datasets' ids, or nothing is matched
        raise KbenchInputError(f"{len(keys ^ set(rows['problem_id']))} problem-direction(s) key differently from "
                               "their dataset's problem_id when read back as a problems file: a kbench bug, report it.")
    atomic_write_bytes(target, gzip.compress(data, mtime=0) if str(target).endswith(".gz") else data)
    print(f"{len(rows):,} problem-directions ({', '.join(parts)} of {', '.join(splits)}; {', '.join(names)}) -> "
          f"{args.out}")
    return 0


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

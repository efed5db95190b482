"""``kbench collect verify-labels``: the collector's verification pass run on a shipped dataset's labels
(:mod:`kbench.gpu_check.shipped_labels`); registered under ``kbench collect`` by :mod:`kbench.cli.collect`."""

from __future__ import annotations

import json

from kbench.collect.command import check_positive
from kbench.core.errors import KbenchInputError


def add_parser(sub) -> None:
    """``kbench collect verify-labels``: the verification pass on a packaged dataset's labels."""
    c = sub.add_parser("verify-labels", help="the verification pass on a shipped dataset's labels (GPU)",
                       description="Re-time each problem's front-runners of a packaged dataset (the collector's "
                                   "verification pass on labels timed before it existed); resumable.")
    c.add_argument("--dataset", default=None, help="dataset name or folder (with --plan-only, or for a new plan)")
    c.add_argument("--out", required=True, help="run folder: plan.json, raw.jsonl")
    step = c.add_mutually_exclusive_group()
    step.add_argument("--plan-only", action="store_true", help="write OUT/plan.json and stop (CPU)")
    step.add_argument("--time-only", action="store_true", help="time OUT/plan.json's problems (GPU)")
    c.add_argument("--limit", type=int, default=None, help="plan only the first this many problems")
    c.add_argument("--seed", type=int, default=0, help="seed of the order and of the input data")
    c.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="start no new problem after this many seconds")
    c.set_defaults(func=cmd_verify_labels)


def cmd_verify_labels(args) -> int:
    from kbench.gpu_check import shipped_labels
    check_positive(args.limit, "--limit")
    check_positive(args.time_budget, "--time-budget")
    if args.time_only:
        plan = shipped_labels.read_plan(args.out)
    else:
        if args.dataset is None:
            raise KbenchInputError("--dataset is needed to make a plan (or give --time-only to time OUT/plan.json)")
        plan = shipped_labels.make_plan(args.dataset, seed=args.seed, limit=args.limit)
        path = shipped_labels.write_plan(plan, args.out)
        print(f"verify-labels: plan of {len(plan['problems']):,} problems -> {path}")
        if args.plan_only:
            return 0
    from kbench.collect.measure.cudnn import FatalCudaError
    try:
        print(json.dumps(shipped_labels.run_labels(plan, args.out, time_budget_s=args.time_budget)))
    except FatalCudaError as exc:  # the CUDA context is gone: exit 3 so that the caller restarts and resumes
        print(f"verify-labels: {exc}")
        return 3
    return 0


def main(argv=None) -> int:
    """Stand-alone entry (``python -m kbench.gpu_check.labels_command``, what the device machine runs):
    ``kbench collect verify-labels`` without the main CLI, with its exit codes."""
    import argparse
    import sys

    from kbench.core.errors import KbenchError
    parser = argparse.ArgumentParser(prog="python -m kbench.gpu_check.labels_command")
    sub = parser.add_subparsers(dest="command")
    add_parser(sub)
    args = parser.parse_args(["verify-labels", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args) or 0)
    except KbenchError as exc:
        print(f"kbench: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())

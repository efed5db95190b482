"""``kbench model trace``, ``report``, ``tune``, ``bench`` and ``check``: argparse wiring and output; the logic is in :mod:`kbench.model`."""

from __future__ import annotations

import argparse

from kbench.cli.console import _console, add_json_option, check_json_target, emit_json, json_to_stdout, print_frame, say

TRACE_EPILOG = """\
What it writes into DIR:
  problems.csv  one row per distinct problem-direction, the problems file that
                `kbench collect cudnn --problems DIR/problems.csv` reads:
                  n, c, k, groups, x_h, x_w, y_h, y_w, fil_h, fil_w, pad_h, pad_w,
                  stride_h, stride_w, dil_h, dil_w (3D traces add x_d, y_d, fil_d,
                  pad_d, stride_d, dil_d), dtype (FP32|FP16|BF16), layout (NCHW|NHWC,
                  3D: NCDHW|NDHWC), direction (F forward, B backward-data,
                  W backward-weights), spatial_dims (2|3), transposed (1: from a
                  ConvTranspose), depthwise (1: channels = groups > 1),
                  multiplicity (calls per step), layers (module names,
                  ';'-joined), problem_id (the MIOpen-style key the collector
                  builds), order, kind (model), sources (the model)
  calls.csv     every convolution call in the order autograd issued it, as issued
                (shapes, strides, output_mask, the directions and problem ids it maps to)
  trace.json    the model, input shape, dtype, memory format, mode, torch version, counts

It runs on the CPU on fake tensors (no GPU, no arithmetic, no download: random weights).
Directions are those autograd really calls: a first layer whose input needs no grad has
no B. A conv1d is a 2D problem with H = 1; a transposed conv is the equivalent conv (its
forward is that conv's B, its grad_input an F). Layout follows PyTorch's cuDNN rule:
channels-last where the input or the weight is. docs/model.md has the details.

Examples:
  kbench model trace torchvision:resnet50 --input-shape 32,3,224,224 --dtype fp16 \\
      --memory-format channels_last --out traces/resnet50
  kbench model trace torchvision:r3d_18 --input-shape 16,3,16,112,112 --autocast bf16 \\
      --memory-format channels_last_3d --out traces/r3d_18
  kbench model trace mymodels:build_unet --input-shape 4,1,64,64,64 --out traces/unet
"""

REPORT_EPILOG = """\
Coverage: a traced problem-direction matches a dataset problem when their problem ids are
equal. For the others the report names the nearest problem of the same direction, dtype,
layout and dimensionality: the smallest Euclidean distance over log2 of n, c, k, groups,
the input sizes, filter sizes, strides and dilations and log2(1 + pad) (0: the same
shape; 1: one size doubled or halved). Times are the dataset's, for exact matches only:
per call, summed per layer and over the step with each problem's multiplicity, for the
oracle (fastest measured plan), PyTorch's choice, cuDNN heuristic modes A and B,
PyTorch's real autotune (pytorch_autotune, where recorded) and autotune_top10 (the
idealised autotune: the best of mode A's first 10 plans, each timed exactly), as far as
the dataset records them, and for a selector's first choice where one is exported for
the dataset.
"""


def cmd_model_trace(args) -> int:
    from kbench.core.output_files import check_output_folder
    from kbench.model.spec import build_model
    from kbench.model.trace import parse_input_shape, trace_model, write_trace
    shape = parse_input_shape(args.input_shape)
    check_output_folder(args.out, option="--out")  # before the model builds: a wrong --out fails at once
    check_json_target(args.json)
    model = build_model(args.model)
    trace = trace_model(model, shape, dtype=args.dtype, autocast=args.autocast, memory_format=args.memory_format,
                        mode=args.mode, spec=args.model)
    out = write_trace(trace, args.out)
    counts = trace.info["counts"]
    if emit_json(args.json, trace.info):
        if json_to_stdout(args):
            return 0
    by_dir = counts["by_direction"]
    calls = counts["calls_by_direction"]
    say(args, f"{args.model}: {counts['calls']} convolution calls ({counts['forward_calls']} forward, "
              f"{counts['backward_calls']} backward) -> {counts['problem_directions']} distinct problem-directions: "
              + ", ".join(f"{d} {by_dir[d]} ({calls[d]} calls)" for d in ("F", "B", "W")),
        *([f"{counts['calls_not_on_cudnn']} call(s) never run on cuDNN (a transposed conv with output_padding >= "
           "stride): listed in calls.csv (cudnn 0), not in problems.csv"] if counts["calls_not_on_cudnn"] else []),
        f"wrote {out / 'problems.csv'}, calls.csv and trace.json; time them on a GPU with "
        f"`kbench collect cudnn --problems {out / 'problems.csv'}`, or see their coverage with "
        f"`kbench model report {out} --dataset h200-pytorch`.")
    return 0


def cmd_model_report(args) -> int:
    from kbench.model.report import model_report, write_html
    check_json_target(args.json, [args.dir])
    report = model_report(args.dir, args.dataset, selector=args.selector)
    record = report.model_dump(mode="json")
    if args.html:
        write_html(report, args.html, inputs=[args.dir])
    if emit_json(args.json, record, inputs=[args.dir]) and json_to_stdout(args):
        return 0
    print_report(report)
    if args.html:
        say(args, f"wrote {args.html}")
    return 0


TUNE_EPILOG = """\
Fills a plan cache: one cuDNN plan per traced problem-direction, for
kbench.torch.use_plans(model, CACHE) and `kbench model bench --cache CACHE`.

  --dataset D --oracle        the fastest plan D measured for each problem (CPU)
  --dataset D --selector NAME the selector's first choice among cuDNN's lists as D records
                              them: zero-shot, no timing (CPU)
  --selector NAME --live      the selector's first choice among cuDNN's lists asked on this GPU
                              for each problem as the collector asks them: zero-shot, no dataset,
                              no timing (GPU)
  --time                      time every traced problem's plans on this GPU (the collector, 2D
                              and 3D alike) and keep the fastest

Problems the dataset lacks are listed in the cache's `missing` (with the nearest shape) and
left to PyTorch at run time. The header names the GPU model, compute capability, cuDNN,
frontend and torch versions the plans hold for; use_plans refuses the cache elsewhere.

Examples:
  kbench model tune traces/resnet50 --dataset h200-pytorch --oracle --out resnet50.oracle.json
  kbench model tune traces/resnet50 --dataset h200-pytorch --selector h200-pytorch \\
      --out resnet50.selector.json
  kbench model tune traces/r3d_18 --time --out r3d_18.oracle.json        # on the GPU
  kbench model tune traces/r3d_18 --selector h200-3d-pytorch --live --out r3d_18.selector.json  # GPU
  kbench model tune traces/r3d_18 --time --resume --time-budget 500 --out r3d_18.oracle.json
"""

BENCH_EPILOG = """\
Times the training step (train mode, forward and backward of the outputs' sum, no
optimizer) and inference (eval, no_grad) in modes default (cudnn.benchmark False),
autotune (benchmark True) and one cache mode per --cache (use_plans; named cache:oracle or
cache:selector by the cache), each (mode, step) in its own process: the first step on the
host clock, --warmup steps, --steps timed steps (CUDA events: median and IQR), one profiled
step for the share of CUDA time in convolutions. The record (--out, JSON, rewritten after
each process) holds the software and GPU environment. Needs a CUDA GPU (exit 2 without).

Example:
  kbench model bench torchvision:r3d_18 --input-shape 16,3,16,112,112 --autocast bf16 \\
      --memory-format channels_last_3d --cache r3d_18.oracle.json --out raw/models/r3d_18.json
"""


def cmd_model_tune(args) -> int:
    from kbench.core.output_files import check_output
    from kbench.model.plan_cache import write_plan_cache
    from kbench.model.tune import tune_by_timing, tune_from_dataset, tune_live
    check_output(args.out, [args.dir], option="--out")
    check_json_target(args.json, [args.dir])
    if args.live:
        from kbench.core.errors import KbenchInputError
        if not args.selector or args.dataset or args.oracle or args.time:
            raise KbenchInputError("--live asks cuDNN on this GPU for the lists a selector ranks: give it with "
                                   "--selector NAME alone, without --dataset, --oracle or --time.")
        cache = tune_live(args.dir, args.selector, progress=not args.quiet)
    elif args.time:
        if args.dataset or args.oracle or args.selector:
            from kbench.core.errors import KbenchInputError
            raise KbenchInputError("--time measures on this GPU: give it alone, without --dataset, --oracle or "
                                   "--selector.")
        cache = tune_by_timing(args.dir, out=args.out, progress=not args.quiet, resume=args.resume,
                               time_budget_s=args.time_budget)
    else:
        if not args.dataset:
            from kbench.core.errors import KbenchInputError
            raise KbenchInputError("give --dataset D with --oracle or --selector NAME (on the CPU), or --time "
                                   "or --selector NAME --live (on a GPU).")
        cache = tune_from_dataset(args.dir, args.dataset, selector=args.selector, oracle=args.oracle)
    path = write_plan_cache(cache, args.out, inputs=[args.dir])
    record = cache.model_dump(mode="json")
    if emit_json(args.json, record, inputs=[args.dir]) and json_to_stdout(args):
        return 0
    calls_missing = sum(m.multiplicity for m in cache.missing)
    say(args, f"{cache.header.trace.model}: {len(cache.plans)} problem-directions with a plan "
              f"({cache.header.filled_by}, from {cache.header.source}), {len(cache.missing)} left to PyTorch "
              f"({calls_missing} calls per step)",
        *[f"  missing {m.direction} {m.problem_id} ({m.layers}): {m.reason}" for m in cache.missing[:20]],
        *([f"  ... and {len(cache.missing) - 20} more (the cache's `missing` lists them)"]
          if len(cache.missing) > 20 else []),
        f"wrote {path} (for {cache.header.gpu}, cuDNN {cache.header.cudnn_backend}, frontend "
        f"{cache.header.cudnn_frontend}, torch {cache.header.torch})")
    return 0


def cmd_model_bench(args) -> int:
    from kbench.core.errors import KbenchInputError
    from kbench.model.bench import STEPS, bench
    from kbench.model.trace import parse_input_shape
    shape = parse_input_shape(args.input_shape)
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in ("default", "autotune")]
    steps = [s for s in args.step.split(",") if s]
    if bad or [s for s in steps if s not in STEPS]:
        raise KbenchInputError(f"--modes takes default,autotune (cache modes come from --cache); --step takes "
                               f"train,inference: got {args.modes!r}, {args.step!r}.")
    record = bench(args.model, shape, out=args.out, dtype=args.dtype, autocast=args.autocast,
                   memory_format=args.memory_format, caches=args.cache or [], modes=modes, steps=steps,
                   warmup=args.warmup, timed=args.steps, allow_mismatch=args.allow_version_mismatch,
                   progress=not args.quiet)
    ok = [r for r in record.results if r.status == "ok"]
    say(args, *[f"{r.step:9s} {r.mode:16s} {r.step_ms_median:9.3f} ms (IQR {r.step_ms_iqr:.3f}), first step "
                f"{r.first_step_ms:8.0f} ms, conv share {r.conv_share if r.conv_share is not None else float('nan'):.2f}"
                for r in ok], f"wrote {args.out}")
    return 0 if len(ok) == len(record.results) else 1


def cmd_model_check(args) -> int:
    from kbench.model.check import check_model
    from kbench.model.trace import parse_input_shape
    record = check_model(args.model, parse_input_shape(args.input_shape), cache_path=args.cache, out=args.out,
                         dtype=args.dtype, autocast=args.autocast, memory_format=args.memory_format,
                         allow_mismatch=args.allow_version_mismatch, progress=not args.quiet)
    s = record.summary
    worst = s["worst_kbench"]
    say(args, f"{s['within_tolerance']}/{s['layers']} layers within tolerance, {s['all_through_cache']} all through "
              f"the cache; worst {worst['share_of_tolerance']:.3f} of its tolerance ({worst['layer']}, "
              f"{worst['direction']}); PyTorch's own worst {s['worst_pytorch']['share_of_tolerance']:.3f}",
        f"wrote {args.out}")
    return 0 if s["within_tolerance"] == s["layers"] else 1


def print_report(report) -> None:
    import pandas as pd
    console = _console()
    cov = report.coverage
    console.print(f"[bold]{report.trace['model']}[/bold] in [bold]{report.dataset.name}[/bold]: "
                  f"{cov.exact} of {cov.problem_directions} problem-directions match exactly "
                  f"({cov.calls_exact} of {cov.calls} calls per step); of the other {cov.not_exact}, {cov.nearest} have a "
                  "nearest shape of the same direction, dtype, layout and dims",
                  highlight=False)
    print_frame(pd.DataFrame([{"direction": d, **v} for d, v in cov.by_direction.items()]), console=console,
                title="coverage by direction")
    if report.totals_ms:
        rows = [{"choice": name, "step conv ms": ms, "vs oracle": report.vs_oracle.get(name)}
                for name, ms in report.totals_ms.items()]
        print_frame(pd.DataFrame(rows), console=console,
                    title=f"summed over the {report.timed_calls} timed calls (exact matches, times per step)")
        layers = pd.DataFrame([{"layer": layer.layer, "directions": layer.directions, "calls": layer.calls,
                                **{k: v for k, v in layer.times_ms.items()}, "share": layer.share}
                               for layer in report.layers])
        print_frame(layers, console=console, title="per layer (ms per step; share: of the timed step under "
                                                   f"{report.share_of})")
    missing = [p for p in report.problems if p.match != "exact"]
    if missing:
        frame = pd.DataFrame([{"problem_id": p.problem_id, "calls": p.multiplicity, "nearest": p.nearest_id,
                               "distance": p.distance} for p in missing])
        print_frame(frame, console=console, title="not in the dataset: the nearest shape")
    for note in report.notes:
        console.print(f"[dim]note: {note}[/dim]", highlight=False)


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("model", help="your PyTorch model: trace its convolutions, report their coverage, "
                                            "tune a plan cache, bench its step (docs/model.md)")
    sub = p.add_subparsers(dest="model_command", required=True)
    t = sub.add_parser("trace", help="trace a model's convolution calls into a problems CSV (CPU)",
                       description="Run one training (or inference) step of MODEL on fake tensors on the CPU and "
                                   "record every convolution call autograd issues as kbench problems.",
                       epilog=TRACE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("model", metavar="MODEL",
                   help="torchvision:NAME, timm:NAME or module.path:factory (a callable returning an nn.Module)")
    t.add_argument("--input-shape", required=True, metavar="N,C,H,W",
                   help="the input's shape: N,C,L (1D), N,C,H,W (2D) or N,C,D,H,W (3D)")
    t.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"],
                   help="the model's and the input's dtype (default fp32)")
    t.add_argument("--autocast", default=None, choices=["fp16", "bf16"],
                   help="run the step under torch.autocast to this dtype (the model stays in --dtype)")
    t.add_argument("--memory-format", default="contiguous", choices=["contiguous", "channels_last", "channels_last_3d"],
                   help="model.to(memory_format=...) and the input's format (default contiguous)")
    t.add_argument("--mode", default="train", choices=["train", "inference"],
                   help="train: forward and backward of the outputs' sum (F, B, W); inference: forward under "
                        "no_grad, eval mode (F)")
    t.add_argument("--out", required=True, metavar="DIR", help="folder for problems.csv, calls.csv, trace.json")
    add_json_option(t, "trace.json")
    t.set_defaults(func=cmd_model_trace)

    r = sub.add_parser("report", help="coverage and times of a traced model in a dataset (CPU)",
                       description="Match a trace's problems to a kbench dataset: exact problem ids, the nearest "
                                   "shape otherwise, and the dataset's times of the oracle, PyTorch's choice, "
                                   "cuDNN modes A/B, autotune and a selector per layer and per step.",
                       epilog=REPORT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("dir", metavar="DIR", help="a folder written by `kbench model trace`")
    r.add_argument("--dataset", "-d", required=True, help="dataset name or folder (e.g. h200-pytorch)")
    r.add_argument("--selector", default=None,
                   help="an exported selector (name or folder; default: the dataset's, where one is exported)")
    r.add_argument("--html", default=None, metavar="PAGE", help="also write one self-contained HTML page")
    add_json_option(r, "the report")
    r.set_defaults(func=cmd_model_report)

    u = sub.add_parser("tune", help="fill a plan cache for a traced model: a dataset's oracle or a selector (CPU), "
                                    "or timings (GPU)",
                       description="Choose one cuDNN plan per traced problem-direction and write them as a plan "
                                   "cache for kbench.torch.use_plans.",
                       epilog=TUNE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    u.add_argument("dir", metavar="DIR", help="a folder written by `kbench model trace`")
    u.add_argument("--dataset", "-d", default=None, help="a collected NVIDIA dataset (e.g. h200-pytorch)")
    u.add_argument("--oracle", action="store_true", help="the dataset's fastest plan per problem")
    u.add_argument("--selector", default=None, metavar="NAME",
                   help="an exported plan selector (name or folder): its first choice, zero-shot")
    u.add_argument("--live", action="store_true",
                   help="with --selector: rank the lists cuDNN gives on this GPU for each problem (no dataset, no "
                        "timing)")
    u.add_argument("--time", action="store_true", help="time the plans on this GPU and keep the fastest")
    u.add_argument("--resume", action="store_true",
                   help="--time: continue the partial cache at --out (its timed problems are kept)")
    u.add_argument("--time-budget", type=float, default=None, metavar="S",
                   help="--time: start no problem after S seconds (the rest are listed as not timed yet)")
    u.add_argument("--out", required=True, metavar="CACHE", help="the plan cache file to write (JSON)")
    u.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    add_json_option(u, "the cache")
    u.set_defaults(func=cmd_model_tune)

    b = sub.add_parser("bench", help="time a model's training step and inference per mode on the GPU",
                       description="Time MODEL's training step and inference under PyTorch's default, autotune "
                                   "and plan caches, each in its own process.",
                       epilog=BENCH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("model", metavar="MODEL", help="torchvision:NAME, timm:NAME or module.path:factory")
    b.add_argument("--input-shape", required=True, metavar="N,C,H,W", help="the input's shape")
    b.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"], help="model and input dtype")
    b.add_argument("--autocast", default=None, choices=["fp16", "bf16"], help="run the step under torch.autocast")
    b.add_argument("--memory-format", default="contiguous", choices=["contiguous", "channels_last", "channels_last_3d"])
    b.add_argument("--cache", action="append", metavar="CACHE", help="a plan cache: one cache mode each (repeatable)")
    b.add_argument("--modes", default="default,autotune", help="PyTorch's modes to run (default: default,autotune)")
    b.add_argument("--step", default="train,inference", help="train, inference or both (default both)")
    b.add_argument("--warmup", type=int, default=10, help="warm-up steps after the first (default 10)")
    b.add_argument("--steps", type=int, default=30, help="timed steps (default 30)")
    b.add_argument("--allow-version-mismatch", action="store_true",
                   help="run a cache made for another GPU or library version (recorded as a warning)")
    b.add_argument("--out", required=True, metavar="JSON", help="the record, e.g. raw/models/r3d_18.json")
    b.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    b.set_defaults(func=cmd_model_bench)

    c = sub.add_parser("check", help="every convolution layer through a plan cache against PyTorch and float64 (GPU)",
                       description="Run one training step of MODEL on PyTorch's path, keep each convolution "
                                   "layer's input and output gradient, then run each layer alone in float64, on "
                                   "PyTorch's path and through CACHE's plans: the relative error of every "
                                   "direction against float64, within the collector's tolerance per dtype. Exit "
                                   "code 1 when a layer is over it.")
    c.add_argument("model", metavar="MODEL", help="torchvision:NAME, timm:NAME or module.path:factory")
    c.add_argument("--input-shape", required=True, metavar="N,C,H,W", help="the input's shape (the cache's)")
    c.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"], help="model and input dtype")
    c.add_argument("--autocast", default=None, choices=["fp16", "bf16"], help="run the step under torch.autocast")
    c.add_argument("--memory-format", default="contiguous", choices=["contiguous", "channels_last", "channels_last_3d"])
    c.add_argument("--cache", required=True, metavar="CACHE", help="the plan cache to check")
    c.add_argument("--allow-version-mismatch", action="store_true",
                   help="check a cache made for another GPU or library version")
    c.add_argument("--out", required=True, metavar="JSON", help="the record, e.g. raw/models/r3d_18.check.json")
    c.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    c.set_defaults(func=cmd_model_check)

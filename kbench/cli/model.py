"""``kbench model trace`` and ``kbench model report``: argparse wiring and output; the logic is in :mod:`kbench.model`."""

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
oracle (fastest measured plan), PyTorch's choice, cuDNN heuristic modes A and B and
autotune top-10 (the fastest of mode A's first 10 plans), as far as the dataset records
them, and for a selector's first choice where one is exported for the dataset.
"""


def cmd_model_trace(args) -> int:
    from kbench.model.spec import build_model
    from kbench.model.trace import parse_input_shape, trace_model, write_trace
    from kbench.output_files import check_output_folder
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
    p = subparsers.add_parser("model", help="your PyTorch model: trace its convolutions, report their coverage "
                                            "(docs/model.md)")
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

"""The data card of a PACT tile-size dataset (``v100-tiles``, ``rtx2080ti-tiles``): every number from the tables.

``render_data_card`` returns the Markdown; ``write_data_card`` converts and writes it. The
conversion itself is :mod:`kbench.sources.cnnopt`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kbench.sources.cnnopt import (
    CITATION,
    GPUS,
    REFERENCE_ALL,
    REFERENCE_STANDARD,
    RS_FAILED_LAUNCH_LINE,
    SOURCE_COMMIT,
    SOURCE_REPO,
    SPLIT_NAME,
    convert_tiles,
    resolve_gpu,
)
from kbench.sources.cnnopt_features import GPU_SPECS
from kbench.sources.dataset_files import REPO_ROOT
from kbench.sources.problem import parse_miopen_keys


def _fmt(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}g}"


def _schema_section(pr: pd.DataFrame, split: pd.Series) -> list[str]:
    """Data-card lines: problems per split part by the kernel schemas they list, and how the paper
    compared schemas."""
    part = split.reindex(pr["problem_id"]).to_numpy()
    combos = sorted(pr["schemas"].astype(str).unique(), key=lambda c: (c.count(","), c))
    parts = [q for q in ("train", "valid", "test") if (part == q).any()]
    tab = pd.crosstab(pd.Series(part, name="part"), pd.Series(pr["schemas"].astype(str).to_numpy(), name="s"))
    multi = {q: int(tab.loc[q, [c for c in combos if "," in c]].sum()) if q in tab.index else 0 for q in parts}
    n = {q: int((part == q).sum()) for q in parts}
    return [
        "### Kernel schemas per problem",
        "",
        "| part | " + " | ".join(combos) + " |",
        "|---|" + "---|" * len(combos),
        *[f"| {q} | " + " | ".join(str(int(tab.loc[q, c])) if c in tab.columns else "0" for c in combos) + " |"
          for q in parts],
        "",
        "A problem's candidates are the configurations of every schema it lists, and LoP is measured against",
        "the fastest of them all. The random-size problems were timed one schema at a time. Problems that",
        "list more than one schema: "
        + ", ".join(f"{q} {multi[q]} of {n[q]}" for q in parts) + ".",
        "A model trained on this split has (almost) never seen two schemas timed on one problem, and valid",
        "cannot check how it ranks one schema against another.",
        "The paper's LoP evaluation does not rank the schemas against each other: its artifact trains one",
        "model per schema (`RS3_buildML`, `S3_buildML`, `St2_buildML`) and, on a layer listed with both RS and S,",
        "scores LoP@N on the top N/2 of each schema's ranking against the faster schema's best",
        "(`lop-*/create_hfhf.py`, `ml_hybrid_half_half` and `pure_dv_half_half` in `res_processing.py`; N = 30).",
        "kbench keeps one ranking over all of a layer's configurations; a ranking that gives each schema its",
        "share of the top N, as `hybrid-rf`, `ml-rf` and `analytical` do by default",
        "(`cross_schema=\"interleave\"`), is one way to submit the paper's protocol.",
        "",
    ]


def _layer_rows(lay: pd.DataFrame, best: pd.DataFrame, std: pd.DataFrame) -> list[str]:
    """Data-card table rows of the benchmark layers: best configuration against the cuDNN reference."""
    rows = []
    for p in lay.sort_values(["network", "layer"]).itertuples():
        b = best.loc[p.problem_id]
        r = std.loc[p.problem_id] if p.problem_id in std.index else None
        speed = f"{r.time_ms / b.time_ms:.2f}x" if r is not None else "n/a"
        rows.append(f"| {p.network} | {p.layer} | `{p.problem_id}` | {p.schemas} | {p.n_listed} | "
                    f"{_fmt(b.time_ms)} | `{b.kernel}` | "
                    + (f"{_fmt(r.time_ms)} ({r.algorithm.replace('CUDNN_CONVOLUTION_FWD_ALGO_', '')})"
                       if r is not None else "n/a") + f" | {speed} |")
    return rows


def _data_quality_lines(report: dict, spec) -> list[str]:
    """Data-card sections: missing data, training/test overlap, cleaning."""
    lines: list[str] = []
    miss = report["profiled_layers_missing_tile_data"]
    s2 = report.get("random_stride2_problems_by_file_role", {})
    lines += [
        "## Missing data",
        "",
        f"- cuDNN was profiled on {report['profiled_layers']} layers; {len(miss)} of them have no tile timings "
        f"in the source: {'; '.join(miss) if miss else 'none'}.",
        "- The stride-2 training set (`train_set_c_rskernel_stride2.csv`, named by the paper's driver) is not in",
        f"  the source. The only random-size stride-2 problems are "
        f"{sum(s2.values())} from the held-out file ({', '.join(f'{k}: {v}' for k, v in s2.items()) or 'none'}),",
        f"  so the {report['layers_by_stride'].get('2', 0)} stride-2 layers have almost no training data of",
        "  their schema.",
        "- Excluded scratch files (`*_test.csv`, byte-identical in the V100 and RTX 2080 Ti folders, so not",
        f"  measurements of both GPUs): {len(report['scratch_files_excluded'])} files, "
        f"{report['scratch_rows_excluded']} rows.",
        "",
        "## Training/test overlap",
        "",
        f"{len(report['overlap_problems'])} random-size problem(s) equal a benchmark layer: "
        + (", ".join(f"`{p}`" for p in report["overlap_problems"]) or "none") + ".",
    ]
    if report["overlap_problems"]:
        lines += [
            f"Their {report['overlap_rows_dropped']} training rows were removed (the layer keeps its complete list);",
            f"median time ratio training / layer over the {report.get('overlap_shared_configs', 0)} shared "
            f"configurations: {_fmt(report.get('overlap_time_ratio_train_over_layer_median') or float('nan'))}.",
        ]
    msgs = report["rows_after_error_line_by_message"]
    lines += [
        "",
        "## Cleaning",
        "",
        f"- Source rows read: {report['source_rows']} ({report['files_identical_copies_skipped']} byte-identical",
        "  copies of a file in another folder read once).",
        f"- Rows right after an error line: {', '.join(f'{v} after `{k}`' for k, v in msgs.items()) or 'none'}.",
        f"  The RS harness prints `{RS_FAILED_LAUNCH_LINE}` and then the failed configuration's row:",
        f"  {report['failed_launch_rows_dropped']} such rows dropped "
        f"({report['failed_launch_rows_below_problem_median']} of them below their problem's median time).",
        f"  After the other harnesses' errors the next row is a different, valid configuration: "
        f"{report['rows_after_other_errors_kept']} kept.",
        f"- Times below FLOPs / peak FP32 rate ({_fmt(spec.peak_fp32_flops / 1e12)} TFLOP/s) are launches that",
        f"  did not run: {report['below_floor_rows_dropped']} dropped"
        + (f" ({', '.join(f'{k}: {v}' for k, v in report['below_floor_rows_by_file'].items())})"
           if report["below_floor_rows_by_file"] else "")
        + f"; the fastest kept row runs at {_fmt(1 / report['min_time_over_floor_kept'], 3)} of peak.",
        f"- Repeated measurements of one (problem, kernel): {report['repeated_pairs_merged']} pairs merged",
        f"  (median time; largest max/min spread {_fmt(report['repeated_pairs_max_spread'], 3)}).",
        "",
    ]
    return lines


def _reference_lines(report: dict, diff: pd.DataFrame, n_any_better: int, n_layers: int) -> list[str]:
    """Data-card section: the cuDNN reference times."""
    return [
        "## Reference times (cuDNN 8.2)",
        "",
        "Nsight Compute output of cuDNN's legacy forward algorithms on each layer, same padding-free",
        "geometry; an algorithm's time is the sum of its kernel launches (layout transforms included).",
        f"Reference `{REFERENCE_STANDARD}` (the standard one) takes the best of IMPLICIT_GEMM,",
        "IMPLICIT_PRECOMP_GEMM, GEMM and DIRECT, excluding FFT, FFT_TILING, WINOGRAD and WINOGRAD_NONFUSED",
        "as the paper did (they do less arithmetic than the direct convolution all candidates compute);",
        f"`{REFERENCE_ALL}` takes the best of all eight. Layers (of {report['profiled_layers']}) on which each",
        "algorithm ran: "
        + ", ".join(f"{k.replace('CUDNN_CONVOLUTION_FWD_ALGO_', '')} {v}"
                    for k, v in report["cudnn_layers_per_algorithm_that_ran"].items()) + ".",
        f"On {len(diff)} layer(s) cuDNN was given a larger input than the kernels read"
        + (f" (e.g. {diff.iloc[0]['layer']}: input {int(diff.iloc[0]['x_ref'])} vs {int(diff.iloc[0]['x_h'])})"
           if len(diff) else "")
        + ": same output and arithmetic, the extra rows and columns are never read; `reference_key` keeps",
        "the geometry cuDNN ran.",
        f"Best-any beats the standard reference on {n_any_better}"
        f" of {n_layers} layers.",
        "",
    ]


def _device_lines(spec) -> list[str]:
    """Data-card section: the GPU's published figures."""
    return [
        "## Device",
        "",
        f"{spec.name}: {spec.sm_count} SMs, {spec.max_warps_per_sm} warps/SM, {spec.max_blocks_per_sm} blocks/SM,",
        f"{spec.registers_per_sm} registers/SM, {spec.shared_memory_per_sm_bytes // 1024} KB shared memory/SM,",
        f"{spec.dram_bandwidth_gbs:g} GB/s DRAM, boost clock {spec.boost_clock_mhz:g} MHz. Sources:",
        *[f"- {s}" for s in spec.sources],
        "",
    ]


def _intro_lines(gpu: str, spec) -> list[str]:
    """Data-card title, what the dataset is, and its source (paper, artifact commit, license)."""
    return [
        f"# {GPUS[gpu]['dataset']}",
        "",
        f"Tile-size selection on the {spec.name}: for each convolution problem, every measured tile",
        "configuration of hand-written CUDA direct-convolution kernels and its time. Generated by",
        "`kbench.sources.cnnopt.render_data_card` from the converted tables: do not edit by hand.",
        "",
        "## Source",
        "",
        f"- Paper: {CITATION}",
        f"- Data: the paper's artifact, {SOURCE_REPO}, commit `{SOURCE_COMMIT}` "
        f"(folders `{GPUS[gpu]['tiles']}/` and `{GPUS[gpu]['cudnn']}/`).",
        "- License: **none stated** by the source repository. Cite the paper when you use or redistribute the data.",
        "",
    ]


def _problem_lines(pr: pd.DataFrame, rt: pd.DataFrame, kn: pd.DataFrame, report: dict) -> list[str]:
    """Data-card section: what a problem and a candidate are, with the counts of each kind."""
    lay = pr[pr["role"] == "layer"]
    rnd = pr[pr["role"] == "random"]
    # an example layer whose padding-free input is larger than its output ("same" padding)
    same = lay[(lay["stride_h"] == 1) & (lay["fil_h"] > 1)].sort_values(["network", "layer"])
    ex = next(same.itertuples(), None)
    sched = rnd["n_listed"]
    by_schema = rt.groupby("schema")["problem_id"].nunique()
    kschema = kn["schema"].value_counts()
    return [
        "## What a problem and a candidate are",
        "",
        "- A problem is one forward convolution, batch 1, NCHW, FP32: output channels K, input channels C,",
        "  output size H x W, filter R x R, stride. The kernels read an input that is already padded",
        "  (the kernel templates say so and run with padding 0), and the cuDNN reference was run the same way,",
        "  so `problem_id` is the MIOpen key of the padding-free convolution that was measured:",
        "  pad 0 and input size (y-1)*stride + R. A stride-1 network layer with \"same\" padding p therefore",
        "  appears with input size = its input + 2p"
        + (f" (e.g. {ex.network} {ex.layer}: `{ex.problem_id}`)." if ex is not None else "."),
        f"  All {len(pr)} problems satisfy the output-size rule "
        f"({', '.join(f'{k}: {v}' for k, v in report['output_size_status'].items())}).",
        "- A candidate (`kernel`) is a kernel schema plus a tile configuration; the id keeps the source's",
        "  column names (`RS_TK2_TH7_TW7_BK32_BH4_BW1_CM8`). Schemas: `RS` (register-tiled kernel,",
        "  stride 1), `RS2` (its stride-2 variant), `S` (shared-memory kernel, stride 1).",
        "  Typed columns with one meaning for every schema: `tile_k/h/w` outputs per thread,",
        "  `warp_k/h/w` threads per warp, `block_k/h/w` warps per block, `c_split` blocks sharing one output",
        "  tile over input channels. RS kernels: a warp is 32 threads along K (source `BK`).",
        f"- Candidates: {len(kn)} distinct ({', '.join(f'{k}: {v}' for k, v in kschema.items())});",
        f"  {len(rt)} runtime entries; problems with each schema: "
        f"{', '.join(f'{k}: {v}' for k, v in by_schema.items())}.",
        f"- Benchmark layers ({len(lay)}): every valid configuration of the schema(s) measured for the layer",
        f"  (`complete` = True; {int((lay['schemas'] == 'RS,S').sum())} layers have both RS and S",
        f"  configurations), {int(lay['n_listed'].min())} to {int(lay['n_listed'].max())} candidates per layer.",
        f"- Random-size problems ({len(rnd)}): a *sample* of configurations each (`complete` = False;",
        f"  {int(sched.min())} to {int(sched.max())} candidates, median {int(sched.median())}). `censored` is False",
        "  everywhere: no list is cut by speed.",
        "",
    ]


def _split_lines(split: pd.Series) -> list[str]:
    """Data-card section: the paper's split and the size of each part."""
    counts = split.value_counts()
    return [
        "## Splits",
        "",
        f"Split `{SPLIT_NAME}` is the paper's: `test` = the benchmark layers ({counts.get('test', 0)}),",
        f"`train` ({counts.get('train', 0)}) and `valid` ({counts.get('valid', 0)}) = the random-size problems,",
        "valid chosen by the stable geometry hash of `kbench.splits.assign_networks_split` (the AMD datasets'",
        "`networks` split, with the benchmark layers as the network layers).",
        "Network end-to-end time (`kbench evaluate` on `networks`) sums each network's benchmark layers; layer",
        "multiplicity: each layer once (the `network` and `layer` columns list every layer once).",
        "The random-size problems come from the paper's training files (`train_set_*`) and from its",
        "held-out files (`test_set_*`, random sizes the paper used to pick a random seed).",
        "",
    ]


def _benchmark_layer_lines(lay: pd.DataFrame, rt: pd.DataFrame, std: pd.DataFrame) -> list[str]:
    """Data-card section: the benchmark layers' table and the oracle's speed-up over cuDNN."""
    best = rt[rt["rank"] == 0].set_index("problem_id")
    speedups = (std["time_ms"] / best["time_ms"].reindex(std.index)).dropna()
    lines = [
        "## Benchmark layers",
        "",
        "Layer names are those of the cuDNN profile files (`cres3` -> res3). cuDNN: best of the algorithms",
        "without FFT and Winograd (the standard reference). Oracle speed-up = cuDNN time / best measured",
        "configuration.",
        "",
        "| network | layer | problem_id | schemas | candidates | best ms | best kernel "
        "| cuDNN ms (algorithm) | oracle speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
        *_layer_rows(lay, best, std),
        "",
    ]
    if len(speedups):
        lines += [f"Oracle speed-up over cuDNN: geometric mean {float(np.exp(np.log(speedups).mean())):.2f}x, "
                  f"{int((speedups > 1).sum())} of {len(speedups)} layers faster than cuDNN.", ""]
    return lines


def _reference_input_mismatches(pr: pd.DataFrame, std: pd.DataFrame) -> pd.DataFrame:
    """Reference rows whose cuDNN run read another input size (``x_ref``) than the kernels (``x_h``), by layer."""
    refx = std.reset_index()
    refx["x_ref"] = parse_miopen_keys(refx["reference_key"])["x_h"].to_numpy()
    refx["x_h"] = pr.set_index("problem_id")["x_h"].reindex(refx["problem_id"]).to_numpy()
    return refx[refx["x_ref"] != refx["x_h"]].sort_values("layer")


def render_data_card(gpu: str, tables: dict[str, pd.DataFrame], report: dict) -> str:
    """The data card of a tile dataset, every number computed from the tables and the report."""
    gpu = resolve_gpu(gpu)
    spec = GPU_SPECS[gpu]
    pr, rt, kn, sp, ref = (tables[k] for k in ("problems", "runtimes", "kernels", "splits", "references"))
    split = sp.set_index("problem_id")[SPLIT_NAME]
    std = ref[ref["reference"] == REFERENCE_STANDARD].set_index("problem_id")
    anyref = ref[ref["reference"] == REFERENCE_ALL].set_index("problem_id")
    n_any_better = int((anyref["time_ms"] < std["time_ms"].reindex(anyref.index)).sum())
    lines = [
        *_intro_lines(gpu, spec),
        *_problem_lines(pr, rt, kn, report),
        *_split_lines(split),
        *_schema_section(pr, split),
        *_benchmark_layer_lines(pr[pr["role"] == "layer"], rt, std),
        *_data_quality_lines(report, spec),
        *_reference_lines(report, _reference_input_mismatches(pr, std), n_any_better, len(anyref)),
        *_device_lines(spec),
    ]
    return "\n".join(lines)


def write_data_card(gpu: str, path: str | Path | None = None, raw_dir: str | Path | None = None) -> Path:
    """Convert and write ``data_cards/<dataset>.md`` (or ``path``)."""
    gpu = resolve_gpu(gpu)
    tables, report = convert_tiles(gpu, raw_dir)
    path = Path(path) if path is not None else (
        REPO_ROOT / "data_cards" / f"{GPUS[gpu]['dataset']}.md")
    path.write_text(render_data_card(gpu, tables, report), encoding="utf-8")
    return path

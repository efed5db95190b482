"""The data card of a PACT tile-size dataset (``v100-tiles``, ``rtx2080ti-tiles``): every number from the tables.

``render_data_card`` returns the Markdown, filling the template
``kbench/core/card_templates/tiles.md.j2`` with figures computed here; ``write_data_card``
converts and writes it. The conversion itself is :mod:`kbench.sources.cnnopt`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.card_writer import render_template
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


def _joined(counts) -> str:
    """``k: v, ...`` of a mapping or a value_counts Series."""
    return ", ".join(f"{k}: {v}" for k, v in counts.items())


def _schema_figures(pr: pd.DataFrame, split: pd.Series) -> dict:
    """Problems per split part by the kernel schemas they list: the table, and how many list several."""
    part = split.reindex(pr["problem_id"]).to_numpy()
    combos = sorted(pr["schemas"].astype(str).unique(), key=lambda c: (c.count(","), c))
    parts = [q for q in ("train", "valid", "test") if (part == q).any()]
    tab = pd.crosstab(pd.Series(part, name="part"), pd.Series(pr["schemas"].astype(str).to_numpy(), name="s"))
    multi = {q: int(tab.loc[q, [c for c in combos if "," in c]].sum()) if q in tab.index else 0 for q in parts}
    n = {q: int((part == q).sum()) for q in parts}
    table = [
        "| part | " + " | ".join(combos) + " |",
        "|---|" + "---|" * len(combos),
        *[f"| {q} | " + " | ".join(str(int(tab.loc[q, c])) if c in tab.columns else "0" for c in combos) + " |"
          for q in parts],
    ]
    return {"schema_table": "\n".join(table),
            "multi_schema_problems": ", ".join(f"{q} {multi[q]} of {n[q]}" for q in parts)}


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


def _data_quality_figures(report: dict, spec) -> dict:
    """The figures of the missing-data, training/test overlap and cleaning sections."""
    miss = report["profiled_layers_missing_tile_data"]
    s2 = report.get("random_stride2_problems_by_file_role", {})
    by_file = report["below_floor_rows_by_file"]
    return {
        "missing_layers": len(miss), "missing_layer_names": "; ".join(miss) if miss else "none",
        "stride2_problems": sum(s2.values()), "stride2_by_file": _joined(s2) or "none",
        "stride2_layers": report["layers_by_stride"].get("2", 0),
        "scratch_files": len(report["scratch_files_excluded"]),
        "overlap_count": len(report["overlap_problems"]),
        "overlap_names": ", ".join(f"`{p}`" for p in report["overlap_problems"]) or "none",
        "overlap_shared_configs": report.get("overlap_shared_configs", 0),
        "overlap_ratio": _fmt(report.get("overlap_time_ratio_train_over_layer_median") or float("nan")),
        "rows_after_errors": ", ".join(f"{v} after `{k}`" for k, v in report["rows_after_error_line_by_message"].items())
        or "none",
        "failed_launch_line": RS_FAILED_LAUNCH_LINE, "peak_tflops": _fmt(spec.peak_fp32_flops / 1e12),
        "below_floor_by_file": f" ({_joined(by_file)})" if by_file else "",
        "fastest_of_peak": _fmt(1 / report["min_time_over_floor_kept"], 3),
        "repeated_spread": _fmt(report["repeated_pairs_max_spread"], 3),
    }


def _reference_figures(report: dict, diff: pd.DataFrame) -> dict:
    """The figures of the cuDNN reference section; ``diff``: :func:`_reference_input_mismatches`."""
    return {
        "reference_standard": REFERENCE_STANDARD, "reference_all": REFERENCE_ALL,
        "algorithms_ran": ", ".join(f"{k.replace('CUDNN_CONVOLUTION_FWD_ALGO_', '')} {v}"
                                    for k, v in report["cudnn_layers_per_algorithm_that_ran"].items()),
        "input_mismatches": len(diff),
        "input_mismatch_example": (f" (e.g. {diff.iloc[0]['layer']}: input {int(diff.iloc[0]['x_ref'])} vs "
                                   f"{int(diff.iloc[0]['x_h'])})" if len(diff) else ""),
    }


def _problem_figures(pr: pd.DataFrame, rt: pd.DataFrame, kn: pd.DataFrame, report: dict) -> dict:
    """The figures of the section on what a problem and a candidate are."""
    lay = pr[pr["role"] == "layer"]
    rnd = pr[pr["role"] == "random"]
    # an example layer whose padding-free input is larger than its output ("same" padding)
    same = lay[(lay["stride_h"] == 1) & (lay["fil_h"] > 1)].sort_values(["network", "layer"])
    sched = rnd["n_listed"]
    return {
        "example": next(same.itertuples(), None), "problems": len(pr),
        "output_size_status": _joined(report["output_size_status"]),
        "candidates": len(kn), "candidates_by_schema": _joined(kn["schema"].value_counts()),
        "runtime_entries": len(rt), "problems_by_schema": _joined(rt.groupby("schema")["problem_id"].nunique()),
        "layers": len(lay), "layers_both_schemas": int((lay["schemas"] == "RS,S").sum()),
        "layer_candidates_min": int(lay["n_listed"].min()), "layer_candidates_max": int(lay["n_listed"].max()),
        "random_problems": len(rnd), "random_candidates_min": int(sched.min()),
        "random_candidates_max": int(sched.max()), "random_candidates_median": int(sched.median()),
    }


def _benchmark_layer_figures(lay: pd.DataFrame, rt: pd.DataFrame, std: pd.DataFrame) -> dict:
    """The benchmark layers' table rows and the oracle's speed-up over cuDNN."""
    best = rt[rt["rank"] == 0].set_index("problem_id")
    speedups = (std["time_ms"] / best["time_ms"].reindex(std.index)).dropna()
    return {
        "layer_rows": "\n".join(_layer_rows(lay, best, std)),
        "speedups": {"geomean": f"{float(np.exp(np.log(speedups).mean())):.2f}",
                     "faster": int((speedups > 1).sum()), "layers": len(speedups)} if len(speedups) else None,
    }


def _reference_input_mismatches(pr: pd.DataFrame, std: pd.DataFrame) -> pd.DataFrame:
    """Reference rows whose cuDNN run read another input size (``x_ref``) than the kernels (``x_h``), by layer."""
    refx = std.reset_index()
    refx["x_ref"] = parse_miopen_keys(refx["reference_key"])["x_h"].to_numpy()
    refx["x_h"] = pr.set_index("problem_id")["x_h"].reindex(refx["problem_id"]).to_numpy()
    return refx[refx["x_ref"] != refx["x_h"]].sort_values("layer")


def render_data_card(gpu: str, tables: dict[str, pd.DataFrame], report: dict) -> str:
    """The data card of a tile dataset (template ``tiles.md.j2``), every number computed from the tables
    and the report."""
    gpu = resolve_gpu(gpu)
    spec = GPU_SPECS[gpu]
    pr, rt, kn, sp, ref = (tables[k] for k in ("problems", "runtimes", "kernels", "splits", "references"))
    split = sp.set_index("problem_id")[SPLIT_NAME]
    std = ref[ref["reference"] == REFERENCE_STANDARD].set_index("problem_id")
    anyref = ref[ref["reference"] == REFERENCE_ALL].set_index("problem_id")
    counts = split.value_counts()
    return render_template(
        "tiles.md.j2", dataset=GPUS[gpu]["dataset"], spec=spec, citation=CITATION, source_repo=SOURCE_REPO,
        source_commit=SOURCE_COMMIT, tiles_folder=GPUS[gpu]["tiles"], cudnn_folder=GPUS[gpu]["cudnn"],
        split_name=SPLIT_NAME, split_counts={q: counts.get(q, 0) for q in ("test", "train", "valid")},
        report=report, any_better=int((anyref["time_ms"] < std["time_ms"].reindex(anyref.index)).sum()),
        any_layers=len(anyref), shared_memory_kb=spec.shared_memory_per_sm_bytes // 1024,
        dram_bandwidth=f"{spec.dram_bandwidth_gbs:g}", boost_clock=f"{spec.boost_clock_mhz:g}",
        **_problem_figures(pr, rt, kn, report), **_schema_figures(pr, split),
        **_benchmark_layer_figures(pr[pr["role"] == "layer"], rt, std), **_data_quality_figures(report, spec),
        **_reference_figures(report, _reference_input_mismatches(pr, std)))


def write_data_card(gpu: str, path: str | Path | None = None, raw_dir: str | Path | None = None) -> Path:
    """Convert and write ``data_cards/<dataset>.md`` (or ``path``)."""
    gpu = resolve_gpu(gpu)
    tables, report = convert_tiles(gpu, raw_dir)
    path = Path(path) if path is not None else (
        REPO_ROOT / "data_cards" / f"{GPUS[gpu]['dataset']}.md")
    path.write_text(render_data_card(gpu, tables, report), encoding="utf-8")
    return path

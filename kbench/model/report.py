"""A traced model in a kbench dataset: ``kbench model report DIR --dataset D``.

**Coverage.** A traced problem-direction (a row of ``DIR/problems.csv``) is an *exact* match where
its ``problem_id`` is a problem id of the dataset. For the others, the *nearest* problem of the
dataset with the same direction, dtype, input layout and dimensionality (2D/3D) is named, at the
Euclidean distance over the log2 of n, c, k, groups, the input sizes, filter sizes, strides and
dilations and log2(1 + pad) (:data:`DISTANCE_DOC`): 0 is the same shape, 1 one size doubled or
halved. Nearest shapes get no times: a different shape has different times.

**Times** (exact matches only) come from the dataset's scoring table as :class:`kbench.Evaluator`
builds it, on a part made of the matched problems: the oracle (the fastest measured plan) and every
reference it reads (the ``heuristics`` table: PyTorch's choice ``pytorch``, cuDNN's modes A and B and
its fallback list, and where recorded ``pytorch_autotune``, the plan PyTorch's ``benchmark = True`` settled
on; ``autotune_top10``, the idealised autotune: the best of mode A's first 10 plans, each timed exactly;
or a tile set's measured ``references``), and a selector's first applicable choice where one is exported
for the dataset.
Per call, per layer (the calls of ``DIR/calls.csv`` made by one module, each problem-direction it
issues counted once per call) and per step (every timed call: the problems weighted by their
multiplicity). The step sums run over the calls that every shown choice has a time for, so their
ratios compare like with like; a layer's *share* is its part of that step under PyTorch's choice (the
oracle where the dataset records no PyTorch choice). These are the convolutions' times alone, as
measured one problem at a time, not a model's step time.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from kbench.core.errors import KbenchInputError, read_json_object
from kbench.core.output_files import atomic_write_text, check_output, printable_path
from kbench.core.version import __version__
from kbench.data.dataset import Dataset, load
from kbench.model.trace import TRACE_FORMAT
from kbench.scoring.records import DatasetRef

REPORT_SCHEMA_VERSION = 1
#: the split the matched problems are scored as (added to the report's own copy of the splits table)
MATCHED_SPLIT = "kbench_model"
SIZE_COLUMNS = ["n", "c", "k", "groups", "x_d", "x_h", "x_w", "fil_d", "fil_h", "fil_w", "stride_d", "stride_h",
                "stride_w", "dil_d", "dil_h", "dil_w"]
PAD_COLUMNS = ["pad_d", "pad_h", "pad_w"]
#: a 2D trace's problems file has no depth columns: a 2D problem is a 3D one of depth 1
DEPTH_DEFAULTS = {"x_d": 1, "fil_d": 1, "stride_d": 1, "dil_d": 1, "pad_d": 0, "y_d": 1}
DISTANCE_DOC = ("Euclidean distance over log2 of n, c, k, groups, x_d/h/w, fil_d/h/w, stride_d/h/w, dil_d/h/w and "
                "log2(1 + pad_d/h/w), among the dataset's problems of the same direction, dtype, input layout and "
                "dimensionality")
ORACLE, SELECTOR, PYTORCH = "oracle", "selector", "pytorch"
#: the order of the time columns (a dataset's other references follow)
PREFERRED = (ORACLE, PYTORCH, "cudnn_mode_a", "cudnn_mode_b", "pytorch_autotune", "autotune_top10", "cudnn_fallback",
             SELECTOR)


class Coverage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    problem_directions: int
    exact: int
    not_exact: int
    nearest: int = Field(description="not exact, with a nearest problem of the same direction/dtype/layout/dims")
    calls: int = Field(description="calls per step (the problems' multiplicities summed)")
    calls_exact: int
    by_direction: dict[str, dict[str, int]]


class ProblemMatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    problem_id: str
    direction: str
    multiplicity: int
    layers: str
    match: Literal["exact", "nearest", "none"]
    nearest_id: str | None = None
    distance: float | None = None
    times_ms: dict[str, float | None] = Field(default_factory=dict, description="one call's time, per choice")
    selector_plan: str | None = None


class LayerTimes(BaseModel):
    model_config = ConfigDict(extra="forbid")
    layer: str
    directions: str
    calls: int
    timed: bool = Field(description="every problem-direction of the layer is in the dataset")
    times_ms: dict[str, float | None] = Field(description="the layer's calls per step, summed, per choice")
    share: float | None = Field(None, description="of the timed step under share_of")


class SelectorUse(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    loaded: bool = False
    note: str = ""


class ModelReport(BaseModel):
    """``kbench model report --json``: a traced model's coverage and times in one dataset."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int = REPORT_SCHEMA_VERSION
    record: Literal["kbench-model-report"] = "kbench-model-report"
    kbench_version: str = __version__
    trace: dict = Field(description="the trace's trace.json")
    dataset: DatasetRef
    device: str | None = None
    distance: str = DISTANCE_DOC
    coverage: Coverage
    choices: list[str] = Field(default_factory=list, description="the time columns: oracle, the references, selector")
    totals_ms: dict[str, float] = Field(default_factory=dict, description="per step over the timed calls")
    vs_oracle: dict[str, float] = Field(default_factory=dict, description="totals_ms over the oracle's")
    timed_calls: int = 0
    share_of: str | None = None
    layers: list[LayerTimes] = Field(default_factory=list)
    problems: list[ProblemMatch] = Field(default_factory=list)
    selector: SelectorUse = Field(default_factory=SelectorUse)
    notes: list[str] = Field(default_factory=list)


# ----------------------------------------------------------------------------- reading a trace
def read_trace(folder) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """(trace.json, problems, calls) of a folder ``kbench model trace`` wrote; one clear error otherwise."""
    folder = Path(folder)
    shown = printable_path(folder)
    hint = f" Write one with `kbench model trace MODEL --input-shape ... --out {shown}`."
    if not folder.is_dir():
        raise KbenchInputError(f"{shown}: no such folder; give the folder `kbench model trace --out` wrote.{hint}")
    if not (folder / "trace.json").is_file():
        raise KbenchInputError(f"{shown} is not a trace folder (no trace.json).{hint}")
    info = read_json_object(folder / "trace.json", hint=hint)
    if info.get("format") != TRACE_FORMAT:
        raise KbenchInputError(f"{shown}/trace.json: format {info.get('format')!r}, expected {TRACE_FORMAT!r}; "
                               f"trace the model again with this kbench.{hint}")
    tables = {}
    need = {"problems.csv": ["problem_id", "direction", "dtype", "layout", "multiplicity", "layers", "n", "c", "k"],
            "calls.csv": ["call", "layer", "directions", "problem_ids"]}
    for name, columns in need.items():
        path = folder / name
        try:
            df = pd.read_csv(path, keep_default_na=False, na_values=[""])
        except FileNotFoundError:
            raise KbenchInputError(f"{shown}: {name} is missing.{hint}") from None
        except Exception as exc:  # noqa: BLE001 - any parse failure is the folder's
            raise KbenchInputError(f"{shown}/{name}: cannot be read as CSV ({exc}).{hint}") from None
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise KbenchInputError(f"{shown}/{name}: missing column(s) {', '.join(missing)}.{hint}")
        tables[name] = df
    problems = tables["problems.csv"].assign(**{c: v for c, v in DEPTH_DEFAULTS.items()
                                                if c not in tables["problems.csv"]})
    problems["layers"] = problems["layers"].fillna("").astype(str)
    calls = tables["calls.csv"]
    calls["problem_ids"] = calls["problem_ids"].fillna("").astype(str)
    calls["layer"] = calls["layer"].fillna("").astype(str)
    return info, problems, calls


# ----------------------------------------------------------------------------- nearest shapes
def _log_sizes(df: pd.DataFrame) -> np.ndarray:
    sizes = np.log2(df[SIZE_COLUMNS].to_numpy(dtype=np.float64).clip(min=1))
    pads = np.log2(1.0 + df[PAD_COLUMNS].to_numpy(dtype=np.float64).clip(min=0))
    return np.hstack([sizes, pads])


def nearest_problems(traced: pd.DataFrame, dataset_problems: pd.DataFrame) -> pd.DataFrame:
    """Per traced row: the nearest dataset problem (``nearest_id``, ``distance``: :data:`DISTANCE_DOC`), NaN
    where the dataset has no problem of the row's direction, dtype, layout and dimensionality."""
    out = pd.DataFrame({"nearest_id": pd.Series(None, index=traced.index, dtype=object),
                        "distance": np.nan}, index=traced.index)
    ds = dataset_problems
    layout_col = "layout_x" if "layout_x" in ds.columns else "layout"
    if not set(SIZE_COLUMNS + PAD_COLUMNS) <= set(ds.columns):
        return out
    traced_dims = np.where(traced.get("spatial_dims", pd.Series(2, index=traced.index)) == 3, 3, 2)
    keys = pd.DataFrame({"direction": traced["direction"].astype(str), "dtype": traced["dtype"].astype(str),
                         "layout": traced["layout"].astype(str), "dims": traced_dims}, index=traced.index)
    ds_keys = pd.DataFrame({"direction": ds["direction"].astype(str), "dtype": ds["dtype"].astype(str),
                            "layout": ds[layout_col].astype(str),
                            "dims": ds["spatial_dims"].astype(int) if "spatial_dims" in ds else 2})
    ds_groups = ds_keys.groupby(list(ds_keys.columns), sort=False).indices
    # one distance matrix per (direction, dtype, layout, dims) group: a model has a handful of groups
    for key, rows in keys.groupby(list(keys.columns), sort=False).indices.items():
        candidates = ds_groups.get(key)
        if candidates is None:
            continue
        a, b = _log_sizes(traced.iloc[rows]), _log_sizes(ds.iloc[candidates])
        dist = np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2))
        best = dist.argmin(axis=1)
        out.iloc[rows, 0] = ds["problem_id"].to_numpy(dtype=object)[candidates[best]]
        out.iloc[rows, 1] = dist[np.arange(len(rows)), best]
    return out


# ----------------------------------------------------------------------------- times
def _matched_evaluator(ds: Dataset, matched_ids: np.ndarray):
    """The Evaluator of ``ds`` on a part made of ``matched_ids`` (the report's copy of the splits table)."""
    from kbench.scoring.evaluate import Evaluator
    splits = ds.tables["splits"]
    part = np.where(splits["problem_id"].isin(set(matched_ids)), "test", "train")
    tables = dict(ds.tables.items()) | {"splits": splits[["problem_id"]].assign(**{MATCHED_SPLIT: part})}
    return Evaluator(Dataset(ds.name, tables, ds.manifest, ds.path), split=MATCHED_SPLIT, part="test")


def _selector_rankings(ds: Dataset, ids: np.ndarray, selector_name) -> tuple[pd.DataFrame | None, SelectorUse]:
    """A selector's ranking per problem (``problem_id, ranking``), or None and why not."""
    import kbench.selector as selector_module
    name = str(selector_name or ds.name)
    try:
        # a shipped or exported selector only: a report trains nothing (an export takes minutes)
        sel = selector_module.load(name, export_if_missing=bool(selector_name))
    except KbenchInputError as exc:
        if selector_name:  # asked for by name: a selector that does not load is the user's input
            raise
        return None, SelectorUse(name=name, note=f"{exc} Or pass --selector NAME|FOLDER.")
    except ImportError as exc:
        return None, SelectorUse(name=name, note=f"the selector needs {exc.name}: pip install 'kbench[baselines]'")
    problems = ds.problems.set_index("problem_id").loc[ids].reset_index()
    vocab = set(ds.kernels["kernel"])
    lists: dict = {}
    if isinstance(sel, selector_module.PlanSelector):
        heur = ds.heuristics
        if heur is None:
            return None, SelectorUse(name=name, note=f"{ds.name} records no heuristic lists for a plan selector")
        heur = heur[heur["problem_id"].isin(set(ids)) & heur["heuristic"].isin(selector_module.HEURISTIC_LISTS)]
        heur = heur.sort_values(["problem_id", "heuristic", "rank"])
        lists = {key: group["kernel"].astype(str).tolist()
                 for key, group in heur.groupby(["problem_id", "heuristic"], sort=False, observed=True)}
    rankings = []
    # a selector answers one problem at a time (its deployed API); a model has tens of problems
    for row in problems.to_dict("records"):
        if isinstance(sel, selector_module.PlanSelector):
            ranking = sel.choose(row, {h: lists.get((row["problem_id"], h), [])
                                       for h in selector_module.HEURISTIC_LISTS})
        else:
            ranking = sel.choose(row)
        rankings.append(";".join(k for k in ranking if k in vocab))
    frame = pd.DataFrame({"problem_id": problems["problem_id"].astype(str), "ranking": rankings})
    return frame[frame["ranking"] != ""], SelectorUse(name=name, loaded=True, note=f"{type(sel).__name__} {name}")


def problem_times(ds: Dataset, matched_ids: np.ndarray, selector=None) -> tuple[pd.DataFrame, dict, SelectorUse]:
    """One call's time (ms) per matched problem and choice (columns: :data:`PREFERRED` order, NaN where a
    choice has none), the selector's first plan per problem, and how the selector was used."""
    ev = _matched_evaluator(ds, matched_ids)
    columns = {ORACLE: ev.table.t_best}
    for ref in ev.references:
        columns[ref.name] = ref.t
    rankings, use = _selector_rankings(ds, ev.table.problem_ids, selector)
    plans = {}
    if rankings is not None and len(rankings):
        # the reference path of the Evaluator scores a ranking as `kbench evaluate` does: the first applicable plan
        columns[SELECTOR] = ev._reference_run(SELECTOR, rankings).t
        plans = dict(zip(rankings["problem_id"], rankings["ranking"].str.split(";").str[0]))
    order = [c for c in PREFERRED if c in columns] + [c for c in columns if c not in PREFERRED]
    times = pd.DataFrame({c: columns[c] for c in order}, index=pd.Index(ev.table.problem_ids, name="problem_id"))
    return times, plans, use


# ----------------------------------------------------------------------------- the report
def model_report(trace_dir, dataset, selector=None) -> ModelReport:
    """Coverage and times of the trace in ``trace_dir`` in ``dataset`` (a name, folder or :class:`Dataset`)."""
    info, traced, calls = read_trace(trace_dir)
    ds = dataset if isinstance(dataset, Dataset) else load(str(dataset))
    if ds.task != "kernel-selection" or ds.runtimes is None:
        raise KbenchInputError(f"dataset {ds.name!r} is a {ds.task} dataset; the report needs a kernel-selection "
                               "dataset with runtimes (e.g. h200-pytorch).")
    ds_ids = ds.problems["problem_id"].astype(str)
    exact = traced["problem_id"].astype(str).isin(set(ds_ids)).to_numpy()
    near = nearest_problems(traced.loc[~exact], ds.problems)
    notes = []
    times = pd.DataFrame(index=pd.Index([], name="problem_id"))
    plans: dict = {}
    use = SelectorUse(note="no exact match to choose for")
    if exact.any():
        times, plans, use = problem_times(ds, traced.loc[exact, "problem_id"].astype(str).to_numpy(), selector)
    else:
        notes.append(f"no traced problem is in {ds.name}: time them on a GPU with `kbench collect cudnn --problems "
                     f"{printable_path(Path(trace_dir) / 'problems.csv')}`.")
    if not use.loaded and exact.any():
        notes.append(use.note)
    # one row per (call, problem-direction it issued): what per-layer and per-step sums run over
    terms = calls.assign(problem_id=calls["problem_ids"].str.split(";")).explode("problem_id")
    terms = terms[terms["problem_id"].fillna("") != ""][["call", "layer", "problem_id"]]
    terms = terms.join(times, on="problem_id")
    choices = list(times.columns)
    timed = terms[choices].notna().all(axis=1) if choices else pd.Series(False, index=terms.index)
    totals = {c: float(terms.loc[timed, c].sum()) for c in choices} if timed.any() else {}
    share_of = PYTORCH if PYTORCH in choices else (ORACLE if choices else None)
    left = int((terms["problem_id"].isin(set(times.index)) & ~timed).sum())
    if left:
        notes.append(f"{left} call(s) of matched problems are left out of the step sums: some choice has no time "
                     "for them (a reference with no plan for the problem).")
    layers = _layer_times(terms, traced, timed, choices, share_of, totals)
    by_direction = {}
    for d in ("F", "B", "W"):
        sel = traced["direction"] == d
        by_direction[d] = {"problem_directions": int(sel.sum()), "exact": int((sel & exact).sum()),
                           "calls": int(traced.loc[sel, "multiplicity"].sum()),
                           "calls_exact": int(traced.loc[sel & exact, "multiplicity"].sum())}
    coverage = Coverage(problem_directions=len(traced), exact=int(exact.sum()), not_exact=int((~exact).sum()),
                        nearest=int(near["nearest_id"].notna().sum()), calls=int(traced["multiplicity"].sum()),
                        calls_exact=int(traced.loc[exact, "multiplicity"].sum()), by_direction=by_direction)
    problems = _problem_matches(traced, exact, near, times, plans)
    return ModelReport(trace=info, dataset=DatasetRef(name=ds.name, version=ds.version, checksum=ds.checksum),
                       device=ds.info.get("device"), coverage=coverage, choices=choices, totals_ms=totals,
                       vs_oracle={c: v / totals[ORACLE] for c, v in totals.items()
                                  if totals.get(ORACLE, 0) > 0},
                       timed_calls=int(timed.sum()), share_of=share_of, layers=layers, problems=problems,
                       selector=use, notes=notes)


def _number(v) -> float | None:
    return None if v is None or not np.isfinite(v) else float(v)


def _layer_times(terms, traced, timed, choices, share_of, totals) -> list[LayerTimes]:
    direction = traced.set_index("problem_id")["direction"]
    terms = terms.assign(_direction=terms["problem_id"].map(direction), _untimed=~timed)
    grouped = terms.groupby("layer", sort=False)
    sums = grouped[choices].sum() if choices else pd.DataFrame(index=grouped.size().index)
    complete = grouped["_untimed"].sum() == 0
    calls = grouped["call"].nunique()
    directions = grouped["_direction"].agg(lambda s: "".join(d for d in "FBW" if d in set(s)))
    out = []
    total = totals.get(share_of) if share_of else None
    for layer in sums.index:
        ok = bool(complete[layer]) and bool(choices)
        values = {c: _number(sums.loc[layer, c]) if ok else None for c in choices}
        share = values.get(share_of) / total if ok and total else None
        out.append(LayerTimes(layer=str(layer) or "(model)", directions=directions[layer], calls=int(calls[layer]),
                              timed=ok, times_ms=values, share=share))
    return out


def _problem_matches(traced, exact, near, times, plans) -> list[ProblemMatch]:
    out = []
    for i, row in enumerate(traced.itertuples(index=False)):
        pid = str(row.problem_id)
        if exact[i]:
            values = times.loc[pid] if pid in times.index else pd.Series(dtype=float)
            out.append(ProblemMatch(problem_id=pid, direction=row.direction, multiplicity=int(row.multiplicity),
                                    layers=row.layers, match="exact", distance=0.0,
                                    times_ms={c: _number(v) for c, v in values.items()},
                                    selector_plan=plans.get(pid)))
        else:
            nid, dist = near.loc[traced.index[i], "nearest_id"], near.loc[traced.index[i], "distance"]
            out.append(ProblemMatch(problem_id=pid, direction=row.direction, multiplicity=int(row.multiplicity),
                                    layers=row.layers, match="nearest" if isinstance(nid, str) else "none",
                                    nearest_id=nid if isinstance(nid, str) else None, distance=_number(dist)))
    return out


# ----------------------------------------------------------------------------- the HTML page
def _plot_png(report: ModelReport) -> str | None:
    """Per-layer time, PyTorch's choice against the learned (selector) or oracle choice, as base64 PNG."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise KbenchInputError(f"--html needs matplotlib ({exc.name} is missing): pip install 'kbench[site]'.") \
            from None
    layers = [layer for layer in report.layers if layer.timed]
    base = PYTORCH if PYTORCH in report.choices else None
    other = SELECTOR if SELECTOR in report.choices else ORACLE
    if not layers or base is None and other not in report.choices:
        return None
    y = np.arange(len(layers))
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.22 * len(layers)))
    height = 0.4
    if base:
        ax.barh(y - height / 2, [layer.times_ms[base] for layer in layers], height, label="PyTorch's choice")
    ax.barh(y + height / 2, [layer.times_ms[other] for layer in layers], height,
            label="selector's choice" if other == SELECTOR else "oracle (fastest measured plan)")
    ax.set_yticks(y, [layer.layer for layer in layers], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("convolution time per step (ms)")
    ax.set_title(f"{report.trace.get('model')} on {report.dataset.name}: per-layer convolution time", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def render_html(report: ModelReport) -> str:
    """One self-contained page: the summary, the per-layer plot (embedded PNG) and the tables; every name escaped."""
    e = html.escape
    png = _plot_png(report)
    cov = report.coverage

    def cell(v):
        if v is None:
            return ""
        return f"{v:,.4f}" if isinstance(v, float) else e(str(v))

    def table(headers, rows):
        head = "".join(f"<th>{e(h)}</th>" for h in headers)
        body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in r) + "</tr>" for r in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    parts = [f"<h1>{e(str(report.trace.get('model')))} in {e(report.dataset.name)}</h1>",
             f"<p>{cov.exact} of {cov.problem_directions} traced problem-directions are in {e(report.dataset.name)} "
             f"({e(str(report.device or ''))}); {cov.calls_exact} of {cov.calls} calls per step. Input "
             f"{e(','.join(map(str, report.trace.get('input_shape', []))))}, {e(str(report.trace.get('dtype')))}"
             f"{', autocast ' + e(str(report.trace.get('autocast'))) if report.trace.get('autocast') else ''}, "
             f"{e(str(report.trace.get('memory_format')))}, {e(str(report.trace.get('mode')))}.</p>"]
    if png:
        parts.append(f'<img alt="per-layer convolution time" src="data:image/png;base64,{png}">')
    if report.totals_ms:
        parts.append(f"<h2>Per step, over {report.timed_calls} timed calls</h2>")
        parts.append(table(["choice", "ms", "vs oracle"],
                           [(c, v, report.vs_oracle.get(c)) for c, v in report.totals_ms.items()]))
        parts.append("<h2>Per layer (ms per step)</h2>")
        parts.append(table(["layer", "directions", "calls", *report.choices, "share"],
                           [(layer.layer, layer.directions, layer.calls,
                             *[layer.times_ms.get(c) for c in report.choices], layer.share)
                            for layer in report.layers]))
    parts.append("<h2>Coverage by direction</h2>")
    parts.append(table(["direction", "problem-directions", "exact", "calls", "calls exact"],
                       [(d, v["problem_directions"], v["exact"], v["calls"], v["calls_exact"])
                        for d, v in cov.by_direction.items()]))
    missing = [p for p in report.problems if p.match != "exact"]
    if missing:
        parts.append(f"<h2>Not in the dataset: the nearest shape</h2><p>{e(report.distance)}.</p>")
        parts.append(table(["problem_id", "layers", "calls", "nearest", "distance"],
                           [(p.problem_id, p.layers, p.multiplicity, p.nearest_id, p.distance) for p in missing]))
    parts += [f"<p><small>note: {e(n)}</small></p>" for n in report.notes]
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse;"
             "font-size:.85em}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}img{max-width:100%}")
    title = e(f"kbench model report: {report.trace.get('model')} in {report.dataset.name}")
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title><style>{style}</style>"
            f"</head><body>{''.join(parts)}</body></html>\n")


def write_html(report: ModelReport, page, inputs=()) -> Path:
    """Write the page; refused inside an input folder (a trace folder holds what the trace wrote, nothing else)."""
    page = check_output(page, inputs, option="--html")
    for folder in inputs:
        if Path(folder).is_dir() and page.resolve().parent == Path(folder).resolve():
            raise KbenchInputError(f"--html {printable_path(page)} is inside the input folder {printable_path(folder)}"
                                   "; inputs are never modified: write the page elsewhere.")
    atomic_write_text(page, render_html(report))
    return page


__all__ = ["ModelReport", "model_report", "nearest_problems", "read_trace", "render_html",
           "write_html"]

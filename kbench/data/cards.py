"""Data cards generated from the data: every number in a card comes from the tables or manifest.

``render_card(ds)`` returns the Markdown with Hugging Face dataset-card YAML
front matter; ``write_card`` writes ``data_cards/<name>.md``. The Hub
publisher reuses ``render_card`` with its own data-file prefix.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kbench.data.dataset import read_dataset_folder
from kbench.sources.cnnopt_card import render_data_card
from kbench.sources.dataset_files import PACKAGE_DATA
from kbench.sources.splits import batch_twin_shares


def size_category(n: int) -> str:
    for limit, label in [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                         (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M")]:
        if n < limit:
            return label
    return "n>10M"


HF_LICENSES = {"mit", "apache-2.0", "bsd-3-clause", "cc-by-4.0", "cc0-1.0"}


def _slug(text: str) -> str:
    import re
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")


def _citation(info: dict) -> list[str]:
    return ["## Citation", "```bibtex", info.get("citation", ""), "```", ""]


def _yaml_front_matter(ds, data_prefix: str) -> str:
    info = ds.info
    lic = str(info.get("license", "other")).lower()
    license_lines = [f"license: {lic}"] if lic in HF_LICENSES else [
        "license: other", f"license_name: {_slug(lic) or 'unknown'}"]
    lines = [
        "---",
        *license_lines,
        f"pretty_name: kbench {ds.name} ({info.get('device', '')})",
        "size_categories:",
        f"- {size_category(len(ds.problems))}",
        "task_categories:",
        "- tabular-classification",
        "tags:",
        "- kernel-selection",
        "- gpu",
        "- autotuning",
        f"- {_slug(info.get('library', ''))}",
        "configs:",
    ]
    for i, fname in enumerate(info.get("files", {})):
        table = fname.removesuffix(".parquet")
        lines += [f"- config_name: {table}", "  data_files:", "  - split: train",
                  f"    path: {data_prefix}{fname}"]
        if i == 0:
            lines.insert(len(lines) - 4 + 1, "  default: true")
    lines.append("---")
    return "\n".join(lines)


def _fmt(n) -> str:
    return f"{n:,}" if isinstance(n, (int,)) else str(n)


def _table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        out.append("| " + " | ".join(_fmt(v) if not isinstance(v, float) else f"{v:.3g}" for v in row) + " |")
    return "\n".join(out)


def composition_tables(ds) -> dict[str, pd.DataFrame]:
    p = ds.problems
    by = (p.groupby(["direction", "dtype"]).size().unstack(fill_value=0).reset_index()
          .rename(columns={"direction": "direction \\ dtype"}))
    layout = p.groupby("layout").size().rename("problems").reset_index()
    fam = (ds.kernels.groupby("family").agg(kernels=("kernel", "size"), listed=("n_problems", "sum"),
                                             fastest=("n_best", "sum")).reset_index())
    return {"by_direction_dtype": by, "by_layout": layout, "kernel_families": fam}


def render_tuning_card(ds, data_prefix: str = "") -> str:
    """Card of a tuning dataset (perf-db optima: no runtimes)."""
    info = ds.info
    src = info.get("source", {})
    clean = info.get("cleaning", {})
    t = ds.targets
    per_solver = t.groupby("solver").size().rename("targets").sort_values(ascending=False).reset_index()
    split_rows = pd.DataFrame([{"split": s, **sizes} for s, sizes in info.get("splits", {}).items()])
    key_src = ds.problems["key_source"].value_counts().rename_axis("key_source").rename("problems").reset_index() \
        if "key_source" in ds.problems else pd.DataFrame()
    scalar_report = {k: v for k, v in clean.items() if isinstance(v, (int, float, str))}
    return "\n".join([
        _yaml_front_matter(ds, data_prefix),
        f"# kbench `{ds.name}`: MIOpen tuning parameters on {info.get('device')}",
        "",
        f"Given a convolution problem and a tunable solver, predict the solver's optimal tuning parameters. "
        f"{len(ds.problems):,} problems, {len(t):,} (problem, solver) optima from MIOpen's perf-db. "
        f"Dataset version {ds.version}, checksum `{ds.checksum[:16]}`. Load it with `kbench.load(\"{ds.name}\")`.",
        "",
        "## Motivation",
        "Exhaustive tuning of a kernel's parameters is slow; models that predict the optimum (e.g. sequence "
        "models with constrained decoding) skip it. This dataset gives the recorded optima with standard splits.",
        "",
        "## Composition",
        "Optima per solver:",
        "",
        _table(per_solver),
        "",
        "How each problem key was resolved (perf-db configs do not store the output size of strided backward "
        "problems; it is taken from the same device's find-db where possible):",
        "",
        _table(key_src) if len(key_src) else "",
        "",
        "Tables: `problems` (canonical columns, ids shared with the kernel-selection sets), `targets` "
        "(problem_id, solver, typed parameter columns, raw `params`), `splits`.",
        "",
        "## Censoring",
        info.get("censoring", {}).get("text", ""),
        "",
        "## Collection process",
        f"MIOpen's perf-db for this device from {src.get('repository', '')} at commit `{src.get('commit', '')}`, "
        "written by exhaustive tuning runs. kbench did not re-measure.",
        "",
        "## Preprocessing and cleaning",
        "\n".join(f"- {k}: {_fmt(v)}" for k, v in scalar_report.items()),
        "",
        "## Splits",
        "Grouped by geometry and assigned by a stable hash, exactly as for the kernel-selection sets "
        "(`random` ~ 70/10/20; `networks`: test = real-network layer geometries; `shapes` ~ 70/10/20 by the "
        "geometry with the batch size ignored).",
        "",
        _table(split_rows) if len(split_rows) else "",
        "",
        "## Uses and out-of-scope uses",
        "Predicting tuning parameters (seq2seq, classifiers per parameter); not runtime prediction (no times).",
        "",
        "## Distribution and maintenance",
        f"Shipped in the kbench package; license {info.get('license')}. Rebuilt by `kbench build-data {ds.name}`.",
        "",
        *_citation(info),
    ])


def render_card(ds, data_prefix: str = "") -> str:
    shipped = Path(ds.path) / "card.md" if ds.path else None
    if shipped is not None and shipped.exists():  # rendered at build time from the raw measurements
        return with_batch_twins(_yaml_front_matter(ds, data_prefix) + "\n" + shipped.read_text(), ds)
    if ds.task == "tuning":
        return with_batch_twins(render_tuning_card(ds, data_prefix), ds)
    if ds.task == "tile-selection":
        body = render_data_card(ds.name.removesuffix("-tiles"), ds.tables, ds.info.get("cleaning", {}))
        return _yaml_front_matter(ds, data_prefix) + "\n" + body
    return with_batch_twins(_finddb_card(ds, data_prefix), ds)


def batch_twin_lines(ds) -> list[str]:
    """The card's "Batch twins" paragraph: per split, the test problems with a same-shape, other-batch
    problem in train (:func:`kbench.sources.splits.batch_twins`), counted from the tables."""
    shares = batch_twin_shares(ds.problems, ds.tables["splits"])
    rows = pd.DataFrame([{"split": s, "test problems": v["test"], "with a batch twin in train": v["with_twin"],
                          "share": f"{100 * v['share']:.1f}%"} for s, v in shares.items()])
    return [
        "### Batch twins",
        "A test problem has a *batch twin* when the same convolution at another batch size (the geometry with "
        "the batch left out, `kbench.sources.splits.batch_free_geometry_id`) is in `train`. A split grouped by "
        "the geometry with its batch keeps such twins on both sides, and a model can read a twin's label off "
        "its training data; a split grouped without the batch (`networks`, `shapes`, and `random` on the 3D "
        "sets) has "
        "none. The leaderboard shows every `random` board's figures on the twin-free part of test as well.",
        "",
        _table(rows),
        "",
    ]


def with_batch_twins(card: str, ds) -> str:
    """``card`` with :func:`batch_twin_lines` at the end of its splits section (else at its end)."""
    lines = "\n".join(batch_twin_lines(ds)).rstrip("\n") + "\n"
    head, found, rest = card.partition("\n## Splits")
    if not found:
        return card.rstrip("\n") + "\n\n" + lines
    end = rest.find("\n## ")
    if end < 0:
        return card.rstrip("\n") + "\n\n" + lines
    return head + found + rest[:end].rstrip("\n") + "\n\n" + lines + rest[end:]


def _cleaning_lines(clean: dict) -> list[str]:
    """The find-db conversion's cleaning counts (``manifest.json``'s ``cleaning``), one Markdown item each."""
    status = clean.get("output_size_status", {})
    return [
        f"- Source lines: {_fmt(clean.get('source_lines'))}; entries: {_fmt(clean.get('source_entries'))}.",
        f"- Duplicate problem keys dropped: {_fmt(clean.get('duplicate_keys_dropped'))}.",
        f"- Entries with time <= 0: {_fmt(clean.get('entries_time_le_0'))}, of which first in their list: "
        f"{_fmt(clean.get('entries_time_le_0_first_in_list'))} (kernels: "
        + ", ".join(f"{k} {v:,}" for k, v in clean.get("entries_time_le_0_kernels", {}).items())
        + f"). Such a problem's fastest kernel is unknown, so the problem is dropped: "
        f"{_fmt(clean.get('problems_dropped_time_le_0'))} problems.",
        f"- Duplicate solvers within one problem dropped: {_fmt(clean.get('duplicate_solver_entries_dropped'))}.",
        f"- Lines not sorted fastest first (re-sorted): {_fmt(clean.get('lines_resorted'))}.",
        f"- Problems with an exact tie for the fastest (kept; either kernel counts as fastest): "
        f"{_fmt(clean.get('problems_with_exact_tie_for_fastest'))}.",
        f"- Entries at least 1000x slower than the fastest of their problem (extreme outliers; kept, they are "
        f"real measurements of slow kernels): {_fmt(clean.get('entries_ge_1000x_fastest'))}; largest ratio "
        f"{clean.get('max_ratio_to_fastest', 0):,.0f}x; most frequent kernels among them: "
        + ", ".join(f"{k} {v:,}" for k, v in clean.get("entries_ge_1000x_fastest_kernels", {}).items()) + ".",
        f"- Output-size rule floor((x + 2p - d(f-1) - 1)/s) + 1: holds for {_fmt(status.get('ok', 0))} problems; "
        f"{_fmt(status.get('clamped', 0))} problems have a filter larger than the padded input, where the rule "
        "gives a size <= 0 and MIOpen records 1 (its output-size computation takes max(1, rule)); flagged "
        f"`output_size_status = clamped`; {_fmt(status.get('same_padding', 0))} have y = ceil(x / stride), the "
        "output size of MIOpen's `miopenPaddingSame` mode (the key keeps the user's pad, not the padding that "
        f"mode computes), flagged `same_padding`; {_fmt(status.get('mismatch', 0))} other mismatches.",
        f"- 3D (NCDHW) source lines: {_fmt(clean.get('source_lines_3d'))}, of which depth 1: "
        f"{_fmt(clean.get('source_lines_3d_depth1'))}, and with a 2D twin in this file: "
        f"{_fmt(clean.get('source_lines_3d_depth1_with_2d_twin'))}. A depth-1 problem and its 2D twin share a "
        "geometry and always land in the same split part.",
    ]


def _finddb_intro_lines(ds) -> list[str]:
    """Title, one-paragraph summary and motivation of a find-db card."""
    info = ds.info
    return [
        f"# kbench `{ds.name}`: {info.get('library')} kernel selection on {info.get('device')}",
        "",
        f"Given a convolution problem, pick the fastest {info.get('library')} kernel (solver). "
        f"{len(ds.problems):,} problems (a convolution in one direction), {len(ds.kernels)} kernels, "
        f"{len(ds.runtimes):,} measured (problem, kernel) times. Dataset version {ds.version}, "
        f"checksum `{ds.checksum[:16]}`. Load it with `kbench.load(\"{ds.name}\")`.",
        "",
        "## Motivation",
        "Deep-learning libraries hold dozens of kernels for one convolution, and the fastest one depends on "
        "the shapes, data type, layout, direction and GPU. Hand-written heuristics often pick a kernel several "
        "times slower than the best. This dataset lets learned selectors be trained and compared on real "
        "measurements with standard splits and censoring-aware metrics (`kbench evaluate`).",
        "",
    ]


def _finddb_composition_lines(ds) -> list[str]:
    """Composition section of a find-db card: problem counts and the tables by direction, layout, kernel."""
    p = ds.problems
    comp = composition_tables(ds)
    best_counts = (ds.kernels.sort_values("n_best", ascending=False).head(10)
                   [["kernel", "family", "n_best", "n_problems"]])
    return [
        "## Composition",
        f"- Problems: {len(p):,} ({int((p['spatial_dims'] == 2).sum()):,} 2D, "
        f"{int((p['spatial_dims'] == 3).sum()):,} 3D), {int((p['groups'] > 1).sum()):,} grouped.",
        f"- Complete lists: {int((~p['censored']).sum()):,}; censored lists: {int(p['censored'].sum()):,}.",
        "",
        "Problems by direction (F forward, B backward data, W backward weights) and data type:",
        "",
        _table(comp["by_direction_dtype"]),
        "",
        "Problems by layout:",
        "",
        _table(comp["by_layout"]),
        "",
        "Kernel families (`listed`: problems listing a kernel of the family; `fastest`: problems where it is fastest):",
        "",
        _table(comp["kernel_families"]),
        "",
        "Kernels most often fastest:",
        "",
        _table(best_counts),
        "",
        "Tables: `problems` (canonical columns in true x/w/y terms, the original MIOpen key as `problem_id`), "
        "`runtimes` (problem_id, kernel, time_ms, workspace_bytes, algorithm, rank), `kernels`, `splits`. "
        "See docs/data_model.md.",
        "",
    ]


def _finddb_split_lines(info: dict) -> list[str]:
    """Splits section of a find-db card: how `random`, `shapes` and `networks` are drawn, and their sizes."""
    nl = info.get("cleaning", {}).get("network_layers", {})
    split_rows = pd.DataFrame([{"split": s, **sizes} for s, sizes in info.get("splits", {}).items()])
    return [
        "## Splits",
        "The splits are grouped by geometry (batch, channels, groups, spatial sizes, filter, padding, stride, "
        "dilation; direction, data type and layout excluded) and assigned by a stable hash, so adding problems "
        "never moves existing ones.",
        "- `random`: train/valid/test ~ 70/10/20 by the geometry hash.",
        "- `shapes`: train/valid/test ~ 70/10/20 by the hash of the geometry with the batch size ignored: every "
        "batch size of one convolution lands in one part, so no test problem has a batch twin in train.",
        f"- `networks`: test = every problem whose geometry, batch size ignored, is a layer of a real network "
        f"in MITuna's lists ({_fmt(nl.get('distinct_geometries_batch_ignored'))} distinct layer geometries from "
        f"{_fmt(nl.get('driver_lines'))} MIOpenDriver conv lines: AlexNet, GoogLeNet, Inception v3/v4, "
        "ResNet-50/152, ResNeXt-101, VGG-16 and others); valid/train ~ 1:7 from the rest by the geometry hash.",
        "- Network end-to-end time (`kbench evaluate` on `networks`): each MITuna list that is one whole network "
        "(`kbench/sources/network_layers.csv`), at one data type and layout, sums the chosen kernels' times over "
        "its layers at the batch size the list gives. Layer multiplicity: a layer counts as often as lines of its "
        "list name it (most lists name each distinct layer once; resnext101_pytorch repeats them).",
        "",
        _table(split_rows) if len(split_rows) else "",
        "",
    ]


def _finddb_usage_lines(ds) -> list[str]:
    """Uses, out-of-scope uses, distribution and maintenance sections of a find-db card."""
    info = ds.info
    return [
        "## Uses",
        "Training and evaluating kernel selectors (classification or ranking), studying heuristics, transfer "
        "across GPUs (`kbench.load(...).align(...)`).",
        "",
        "## Out-of-scope uses",
        "Absolute performance claims about the GPU (times are from one library version's tuning runs); choosing "
        "among kernels never listed for a censored problem (their times are unknown); other library versions "
        "without re-measurement.",
        "",
        "## Distribution",
        f"Shipped inside the `kbench` Python package (parquet); license {info.get('license')} "
        f"(the source's license, {info.get('source', {}).get('license', '')}).",
        "",
        "## Maintenance",
        "Rebuilt from the raw files by `kbench build-data " + ds.name + "`; the manifest records the sha256 of "
        "every file. Issues and fixes go through the kbench repository.",
        "",
    ]


def _finddb_card(ds, data_prefix: str) -> str:
    """The card of a dataset converted from MIOpen's find-db (the AMD kernel-selection sets)."""
    info = ds.info
    src = info.get("source", {})
    return "\n".join([
        _yaml_front_matter(ds, data_prefix),
        *_finddb_intro_lines(ds),
        *_finddb_composition_lines(ds),
        "## Censoring",
        info.get("censoring", {}).get("text", ""),
        "",
        "## Collection process",
        f"The times come from {info.get('library')}'s find-db for this device, shipped in {src.get('repository', '')} "
        f"at commit `{src.get('commit', '')}` (folder `{src.get('folder', '')}`), produced by AMD's tuning "
        "infrastructure (MITuna) and exported keeping the fastest solvers per problem. kbench did not re-measure.",
        "",
        "## Preprocessing and cleaning",
        *_cleaning_lines(info.get("cleaning", {})),
        "",
        *_finddb_split_lines(info),
        *_finddb_usage_lines(ds),
        *_citation(info),
    ])


def write_card(name: str, out_dir: str | Path, data_root: Path = PACKAGE_DATA) -> Path:
    ds = read_dataset_folder(Path(data_root) / name, name)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.md"
    path.write_text(render_card(ds))
    return path

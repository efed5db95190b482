"""Data cards generated from the data: every number in a card comes from the tables or manifest.

``render_card(ds)`` returns the Markdown with Hugging Face dataset-card YAML
front matter; ``write_card`` writes ``data_cards/<name>.md``. The Hub
publisher reuses ``render_card`` with its own data-file prefix. The wording
is in the templates of ``kbench/core/card_templates/`` (``front_matter``,
``finddb``, ``tuning``, ``batch_twins``, ``citation``); this module computes
the figures and tables that fill them.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kbench.core.card_writer import render_template
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


def _yaml_front_matter(ds, data_prefix: str) -> str:
    """The Hugging Face dataset-card YAML front matter: license, size, tags and one config per table file."""
    info = ds.info
    lic = str(info.get("license", "other")).lower()
    return render_template(
        "front_matter.yaml.j2", license=lic,
        license_name=None if lic in HF_LICENSES else (_slug(lic) or "unknown"),
        name=ds.name, device=info.get("device", ""), size_category=size_category(len(ds.problems)),
        library_tag=_slug(info.get("library", "")),
        configs=[(fname.removesuffix(".parquet"), f"{data_prefix}{fname}") for fname in info.get("files", {})])


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
    clean = info.get("cleaning", {})
    t = ds.targets
    per_solver = t.groupby("solver").size().rename("targets").sort_values(ascending=False).reset_index()
    split_rows = pd.DataFrame([{"split": s, **sizes} for s, sizes in info.get("splits", {}).items()])
    key_src = ds.problems["key_source"].value_counts().rename_axis("key_source").rename("problems").reset_index() \
        if "key_source" in ds.problems else pd.DataFrame()
    scalar_report = {k: v for k, v in clean.items() if isinstance(v, (int, float, str))}
    body = render_template(
        "tuning.md.j2", name=ds.name, info=info, source=info.get("source", {}), problems=f"{len(ds.problems):,}",
        targets=f"{len(t):,}", version=ds.version, checksum=ds.checksum[:16], per_solver_table=_table(per_solver),
        key_source_table=_table(key_src) if len(key_src) else "",
        censoring=info.get("censoring", {}).get("text", ""),
        cleaning_lines="\n".join(f"- {k}: {_fmt(v)}" for k, v in scalar_report.items()),
        splits_table=_table(split_rows) if len(split_rows) else "", citation=info.get("citation", ""))
    return _yaml_front_matter(ds, data_prefix) + "\n" + body


def render_card(ds, data_prefix: str = "") -> str:
    """The card of ``ds`` with its YAML front matter: the shipped ``card.md`` of a collected set, else the
    tuning, tile-selection or find-db card rendered from the tables."""
    shipped = Path(ds.path) / "card.md" if ds.path else None
    if shipped is not None and shipped.exists():  # rendered at build time from the raw measurements
        return with_batch_twins(_yaml_front_matter(ds, data_prefix) + "\n" + shipped.read_text(), ds)
    if ds.task == "tuning":
        return with_batch_twins(render_tuning_card(ds, data_prefix), ds)
    if ds.task == "tile-selection":
        body = render_data_card(ds.name.removesuffix("-tiles"), ds.tables, ds.info.get("cleaning", {}))
        return _yaml_front_matter(ds, data_prefix) + "\n" + body
    return with_batch_twins(_finddb_card(ds, data_prefix), ds)


def batch_twins_paragraph(ds) -> str:
    """The card's "Batch twins" paragraph: per split, the test problems with a same-shape, other-batch
    problem in train (:func:`kbench.sources.splits.batch_twins`), counted from the tables."""
    shares = batch_twin_shares(ds.problems, ds.tables["splits"])
    rows = pd.DataFrame([{"split": s, "test problems": v["test"], "with a batch twin in train": v["with_twin"],
                          "share": f"{100 * v['share']:.1f}%"} for s, v in shares.items()])
    return render_template("batch_twins.md.j2", twins_table=_table(rows))


def with_batch_twins(card: str, ds) -> str:
    """``card`` with :func:`batch_twins_paragraph` at the end of its splits section (else at its end)."""
    lines = batch_twins_paragraph(ds)
    head, found, rest = card.partition("\n## Splits")
    if not found:
        return card.rstrip("\n") + "\n\n" + lines
    end = rest.find("\n## ")
    if end < 0:
        return card.rstrip("\n") + "\n\n" + lines
    return head + found + rest[:end].rstrip("\n") + "\n\n" + lines + rest[end:]


class _FormattedCounts(dict):
    """Counts formatted for a card (:func:`_fmt`); a count the manifest lacks reads as ``_fmt(None)``."""

    def __missing__(self, key):
        return _fmt(None)


def _finddb_card(ds, data_prefix: str) -> str:
    """The card of a dataset converted from MIOpen's find-db (the AMD kernel-selection sets)."""
    info = ds.info
    p = ds.problems
    comp = composition_tables(ds)
    best_counts = (ds.kernels.sort_values("n_best", ascending=False).head(10)
                   [["kernel", "family", "n_best", "n_problems"]])
    clean = info.get("cleaning", {})
    status = clean.get("output_size_status", {})
    network_layers = clean.get("network_layers", {})
    split_rows = pd.DataFrame([{"split": s, **sizes} for s, sizes in info.get("splits", {}).items()])
    body = render_template(
        "finddb.md.j2", name=ds.name, info=info, source=info.get("source", {}), problems=f"{len(p):,}",
        kernels=len(ds.kernels), runtimes=f"{len(ds.runtimes):,}", version=ds.version,
        checksum=ds.checksum[:16], problems_2d=f"{int((p['spatial_dims'] == 2).sum()):,}",
        problems_3d=f"{int((p['spatial_dims'] == 3).sum()):,}", grouped=f"{int((p['groups'] > 1).sum()):,}",
        complete=f"{int((~p['censored']).sum()):,}", censored=f"{int(p['censored'].sum()):,}",
        by_direction_dtype=_table(comp["by_direction_dtype"]), by_layout=_table(comp["by_layout"]),
        kernel_families=_table(comp["kernel_families"]), most_often_fastest=_table(best_counts),
        censoring=info.get("censoring", {}).get("text", ""), clean=_FormattedCounts({k: _fmt(v) for k, v in clean.items()}),
        time_le_0_kernels=", ".join(f"{k} {v:,}" for k, v in clean.get("entries_time_le_0_kernels", {}).items()),
        max_ratio=f"{clean.get('max_ratio_to_fastest', 0):,.0f}",
        slow_kernels=", ".join(f"{k} {v:,}" for k, v in clean.get("entries_ge_1000x_fastest_kernels", {}).items()),
        output_size={k: _fmt(status.get(k, 0)) for k in ("ok", "clamped", "same_padding", "mismatch")},
        network_geometries=_fmt(network_layers.get("distinct_geometries_batch_ignored")),
        network_driver_lines=_fmt(network_layers.get("driver_lines")),
        splits_table=_table(split_rows) if len(split_rows) else "", citation=info.get("citation", ""))
    return _yaml_front_matter(ds, data_prefix) + "\n" + body


def write_card(name: str, out_dir: str | Path, data_root: Path = PACKAGE_DATA) -> Path:
    ds = read_dataset_folder(Path(data_root) / name, name)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.md"
    path.write_text(render_card(ds))
    return path

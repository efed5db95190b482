"""The data card's figures that differ between 2D and 3D sets: whether a set is 3D, the 3D composition,
and the first version's target size (used by :mod:`kbench.collect.packaging.card`)."""

from __future__ import annotations

import pandas as pd

# The size the first published version of a collected dataset must reach ("at least 5,000
# problem-directions with every plan timed"); below it the card says it is a draft.
FIRST_VERSION_PROBLEM_DIRECTIONS = 5000
# the 3D set's first version: at least 6,000 problem-directions, half with input and filter depth over 1
FIRST_VERSION_PROBLEM_DIRECTIONS_3D = 6000


def first_version_target(ok: pd.DataFrame) -> int:
    """The problem-directions the set's first version must reach before its card stops saying draft."""
    return FIRST_VERSION_PROBLEM_DIRECTIONS_3D if is_3d(ok) else FIRST_VERSION_PROBLEM_DIRECTIONS


def is_3d(problems: pd.DataFrame) -> bool:
    """Whether the measured problems are 3D convolutions (their records carry ``spatial_dims`` 3)."""
    return "spatial_dims" in problems and bool(len(problems)) and bool((problems["spatial_dims"] == 3).all())


def network_composition(ok: pd.DataFrame) -> tuple[dict[str, str], pd.DataFrame]:
    """The 3D card's composition: the depth and network-layer shares (formatted for the card's
    sentence), and the problem-directions of each network's layers (a geometry shared by several
    networks counts for each)."""
    deep = (ok["x_d"] > 1) & (ok["fil_d"] > 1)
    networks = (ok.loc[ok["kind"] == "network", "sources"].astype(str).str.split(";").explode()
                .str.split("/").str[0])
    per_network = networks.groupby(networks.index).unique().explode().value_counts().sort_index()
    table = per_network.rename_axis("network").reset_index(name="problem-directions")
    network = ok["kind"] == "network"
    figures = {"deep": f"{int(deep.sum()):,}", "measured_3d": f"{len(ok):,}", "deep_share": f"{deep.mean():.1%}",
               "network_layers": f"{int(network.sum()):,}", "network_share": f"{network.mean():.1%}"}
    return figures, table

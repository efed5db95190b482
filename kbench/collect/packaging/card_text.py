"""The data card's paragraphs that differ between 2D and 3D sets: the corpus, the 3D composition, the
split rules, and the first version's target size (used by :mod:`kbench.collect.packaging.card`)."""

from __future__ import annotations

import pandas as pd

from kbench.sources.splits import HELD_OUT_NETWORKS_3D

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


CORPUS_2D_TEXT = """Corpus: {corpus} from `kbench collect corpus` (MITuna network layers at their batch
sizes, torchvision layers at batch 1/16/64/256, random geometries), in a seeded order in which the
three kinds take turns; the collector measures it from the top and resumes where it stopped.
"""
CORPUS_3D_TEXT = """Corpus: {corpus} from `kbench collect corpus3d` (the 3D convolution calls of the networks traced in
`kbench/collect/measure/network_layers_3d.csv`, video models at batch 1/4/16 and volumetric ones at 1/2/4,
and random neighbours of them; NCDHW depthwise left out, as PyTorch runs it without cuDNN;
docs/three_d.md), in a seeded order in which the two kinds take turns; the collector measures it from
the top and resumes where it stopped.
"""


def network_composition(ok: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """The 3D card's composition: depth shares, and the problem-directions of each network's layers (a
    geometry shared by several networks counts for each)."""
    deep = (ok["x_d"] > 1) & (ok["fil_d"] > 1)
    networks = (ok.loc[ok["kind"] == "network", "sources"].astype(str).str.split(";").explode()
                .str.split("/").str[0])
    per_network = networks.groupby(networks.index).unique().explode().value_counts().sort_index()
    table = per_network.rename_axis("network").reset_index(name="problem-directions")
    sentence = (f"{int(deep.sum()):,} of the {len(ok):,} problem-directions ({deep.mean():.1%}) have input and filter "
                f"depth above 1; {int((ok['kind'] == 'network').sum()):,} ({(ok['kind'] == 'network').mean():.1%}) "
                "are layers of real networks, by network:")
    return sentence, table


def split_rule(problems: pd.DataFrame) -> str:
    """How the set's standard splits are made, in one paragraph."""
    if (problems["spatial_dims"] == 3).all():
        return ("`random`: by the hash of the geometry with the batch size ignored (a layer at batch 4 and at "
                "batch 16 sit in one part), ~70/10/20. `networks`: test = every layer (batch size ignored) of the "
                f"held-out networks {', '.join(HELD_OUT_NETWORKS_3D)}; train/valid from the rest (docs/three_d.md).")
    return ("`random`: by geometry hash, ~70/10/20. `networks`: test = geometries of MITuna's network layers\n"
            "(batch size ignored), as in the AMD datasets. `shapes`: by the hash of the geometry with the batch\n"
            "size ignored, ~70/10/20, so that no test problem has a batch twin in train.")

"""The standard splits, shipped with the data and identical for everyone.

The splits are *grouped by geometry* (:data:`kbench.sources.problem.GEOMETRY_COLUMNS`):
every problem of one geometry (all directions, data types and layouts, and a
depth-1 3D problem together with its 2D twin) lands in the same part. Parts
are assigned by a stable hash of the geometry, so adding problems later never
moves existing ones.

* ``random``: train/valid/test ~ 70/10/20 by the hash of the geometry.
* ``networks``: test = every problem whose geometry, batch size ignored, is a
  layer of a real network (MITuna's lists); valid/train from the rest by the
  same hash (~ 1/8 of the rest to valid).
* ``shapes``: train/valid/test ~ 70/10/20 by the hash of the geometry *with the batch size
  ignored* (:func:`assign_shapes_split`), so that no ``shapes`` test problem has a batch twin
  (the same convolution at another batch size) in train; ``random`` keeps such twins on both
  sides (:func:`batch_twin_shares` counts them). Every 2D kernel-selection and tuning dataset holds it.

The 3D datasets group both splits by the geometry *with the batch size ignored*
(:func:`batch_free_geometry_id`), so that one layer at batch 4 and at batch 16 never
sit on both sides, and hold out whole networks: their ``networks`` test part is every
problem whose geometry, batch size ignored, is a layer of one of
:data:`HELD_OUT_NETWORKS_3D` (:func:`assign_held_out_networks_split`); the other
networks' layers and the random neighbours are train and valid. Their ``random`` already
ignores the batch, so they have no ``shapes`` split.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kbench.sources.problem import geometry_key, stable_hash

PARTS = ("train", "valid", "test")
#: the standard split rules (the 3D sets have no ``shapes``, the tile sets only ``networks``)
SPLIT_NAMES = ("random", "networks", "shapes")
#: the ``--split`` help of the commands that take one
SPLIT_HELP = "standard split (default %s; `kbench info NAME` lists the dataset's splits)"
RANDOM_FRACTIONS = {"train": 0.7, "valid": 0.1, "test": 0.2}
#: Columns of a geometry with the batch size left out (the networks split matches on these).
NETWORK_GEOMETRY = ["c", "k", "groups"] + [
    f"{p}_{s}" for p in ("x", "fil", "pad", "stride", "dil") for s in ("d", "h", "w")
]


#: the 3D networks whose every layer is ``networks`` test in the 3D datasets: two video models
#: (a full-3D and a (2+1)D ResNet), two volumetric segmentation networks and one efficient video
#: model; the others (mc3_18, s3d, MViT, Swin3D, nnU-Net, I3D, SlowFast, X3D-M) train
HELD_OUT_NETWORKS_3D = ("r3d_18", "r2plus1d_18", "unet3d", "vnet", "x3d_s")


def batch_free_geometry_id(problems: pd.DataFrame) -> pd.Series:
    """A stable id of each problem's geometry with the batch size left out (:data:`NETWORK_GEOMETRY`)."""
    return stable_hash(geometry_key(problems, NETWORK_GEOMETRY), salt="batch-free")


def batch_twins(problems: pd.DataFrame, parts: pd.Series, of: str = "train") -> pd.Series:
    """Per problem: whether a problem of part ``of`` has its geometry with the batch size left out
    (:func:`batch_free_geometry_id`), a *batch twin*. ``parts`` gives each problem's part (aligned with
    ``problems``). A split grouped by the geometry with its batch (``random`` on most datasets) keeps
    the same convolution at another batch size on both sides; one grouped without it has no twins."""
    free = batch_free_geometry_id(problems)
    seen = pd.Index(free[np.asarray(parts == of)].unique())
    return pd.Series(seen.get_indexer(free) >= 0, index=problems.index)


def batch_twin_shares(problems: pd.DataFrame, splits: pd.DataFrame) -> dict[str, dict[str, int | float]]:
    """For every split column of ``splits`` (problem_id + one column per split): how many test problems
    have a batch twin in ``train`` (:func:`batch_twins`), and their share."""
    aligned = splits.set_index("problem_id").reindex(problems["problem_id"].to_numpy())
    out = {}
    for split in [c for c in splits.columns if c != "problem_id"]:
        parts = pd.Series(aligned[split].to_numpy(), index=problems.index)
        test = np.asarray(parts == "test")
        twins = batch_twins(problems, parts).to_numpy() & test
        out[split] = {"test": int(test.sum()), "with_twin": int(twins.sum()),
                      "share": float(twins.sum() / test.sum()) if test.sum() else 0.0}
    return out


def hash_unit(geometry_id: pd.Series, salt: str) -> np.ndarray:
    """A number in [0, 1) per geometry, from a salted stable hash: same on every machine."""
    hexes = stable_hash(geometry_id.astype(str), salt=salt)
    return np.array([int(h[:13], 16) for h in hexes.unique()], dtype=np.float64)[
        pd.factorize(hexes)[0]] / 16.0**13 if len(hexes) else np.zeros(0)


def _parts_from_unit(u: np.ndarray, fractions: dict[str, float]) -> np.ndarray:
    edges = np.cumsum([fractions[p] for p in PARTS])
    return np.array(PARTS, dtype=object)[np.searchsorted(edges, u, side="right").clip(0, 2)]


def assign_random_split(problems: pd.DataFrame, salt: str = "kbench-random-v1",
                        fractions: dict[str, float] = RANDOM_FRACTIONS, ignore_batch: bool = False) -> pd.Series:
    """``train``/``valid``/``test`` per problem, grouped by ``geometry_id`` (by the geometry with the batch
    size left out, :func:`batch_free_geometry_id`, with ``ignore_batch``)."""
    groups = batch_free_geometry_id(problems) if ignore_batch else problems["geometry_id"]
    return pd.Series(_parts_from_unit(hash_unit(groups, salt), fractions), index=problems.index, dtype=str)


#: the salt of the ``shapes`` split's hash: its own, so that its parts are not ``random``'s regrouped
SHAPES_SALT = "kbench-shapes-v1"


def assign_shapes_split(problems: pd.DataFrame) -> pd.Series:
    """The ``shapes`` split: ``train``/``valid``/``test`` ~ 70/10/20 per problem by a stable hash of the
    geometry with the batch size left out (:func:`batch_free_geometry_id`): every batch size of one shape
    lands in one part, and adding problems later never moves existing ones."""
    return assign_random_split(problems, salt=SHAPES_SALT, ignore_batch=True)


def network_geometry_match(problems: pd.DataFrame, layers: pd.DataFrame) -> pd.Series:
    """True where a problem's geometry (batch size ignored) is one of the network layers."""
    layers = layers[layers.get("mode", "conv") == "conv"] if "mode" in layers else layers
    wanted = set(geometry_key(layers, NETWORK_GEOMETRY))
    return geometry_key(problems, NETWORK_GEOMETRY).isin(wanted)


def assign_networks_split(problems: pd.DataFrame, layers: pd.DataFrame,
                          salt: str = "kbench-networks-v1") -> pd.Series:
    """Test = real-network geometries; the rest ~ 7:1 train/valid by the geometry hash."""
    is_test = network_geometry_match(problems, layers).to_numpy()
    rest = _parts_from_unit(hash_unit(problems["geometry_id"], salt),
                            {"train": 0.875, "valid": 0.125, "test": 0.0})
    return pd.Series(np.where(is_test, "test", rest), index=problems.index, dtype=str)


def assign_held_out_networks_split(problems: pd.DataFrame, layers: pd.DataFrame,
                                   held_out=HELD_OUT_NETWORKS_3D, salt: str = "kbench-networks-v1") -> pd.Series:
    """Test = every problem whose geometry (batch size ignored) is a layer of a ``held_out`` network (a
    ``network`` column of ``layers``); the rest ~ 7:1 train/valid, grouped by the batch-free geometry.
    A layer shared by a held-out and another network is test: no held-out layer is trained on."""
    unknown = sorted(set(held_out) - set(layers["network"].astype(str)))
    if unknown:
        raise ValueError(f"held-out networks {unknown} have no layer in the network layer list")
    is_test = network_geometry_match(problems, layers[layers["network"].isin(held_out)]).to_numpy()
    rest = _parts_from_unit(hash_unit(batch_free_geometry_id(problems), salt),
                            {"train": 0.875, "valid": 0.125, "test": 0.0})
    return pd.Series(np.where(is_test, "test", rest), index=problems.index, dtype=str)

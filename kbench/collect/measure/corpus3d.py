"""The 3D problem corpus that ``kbench collect cudnn`` measures: deterministic.

Two kinds of 3D convolution geometry, each crossed with the data types FP16, BF16 and FP32 and the
layouts NCDHW and NDHWC (directions are chosen at collection time, ``--directions``):

* ``network``: the 3D convolution calls of real networks (``network_layers_3d.csv``, traced from the
  modules themselves by ``tools/collect/trace_3d_networks.py``: torchvision's video models, 3D U-Net,
  nnU-Net, V-Net, I3D, SlowFast, X3D), at the batch sizes :data:`BATCHES` of their kind (video models
  1, 4 and 16 clips; volumetric models 1, 2 and 4 patches). ``sources`` names every
  ``network/layer`` a geometry comes from. A transposed convolution is the convolution whose data
  gradient it computes (its forward is that convolution's direction B).
* ``random``: geometries drawn around the network layers from a seeded generator: a network layer's
  channels, sizes and batch scaled by random factors, its filter, stride and padding kept or
  replaced by one of the common 3D forms (:data:`RANDOM_FILTERS`), grouped and depthwise included.

A depthwise problem (``groups`` = ``c`` > 1, ``k`` a multiple of ``c``) is left out in NCDHW: PyTorch
runs a 5-D contiguous depthwise convolution with its own kernel, not cuDNN (``use_cudnn_depthwise`` in
``aten/src/ATen/native/Convolution.cpp`` takes cuDNN for channels-last depthwise only, "5-D contiguous
depthwise is not supported yet"), so no cuDNN plan is what a user's step runs. On the H200 the first
probe bore it out: cuDNN's API log held no descriptor of the contiguous depthwise case
(``tools/collect/stride_rules_3d.py``), and PyTorch's choice matched a cuDNN plan on 54 of the probe's
60 problem-directions, the other 6 being exactly its NCDHW depthwise ones.

Rows are ordered so that any prefix is a balanced sample: the kinds take turns, and inside a kind the
order is a seeded permutation, so a collection that stops early still covers both kinds, every data
type and layout, and every network. Problems over :data:`MAX_FLOP` or with a tensor over
:data:`MAX_TENSOR_BYTES` are left out (the report says how many).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.collect.measure.corpus import DTYPES, _gzip_csv, _norm, add_output_size, conv_flop, tensor_bytes
from kbench.core.errors import KbenchInputError
from kbench.core.output_files import atomic_write_bytes, check_output
from kbench.sources.problem import expected_output_size

NETWORK_LAYERS_3D = Path(__file__).with_name("network_layers_3d.csv")
LAYOUTS_3D = ("NCDHW", "NDHWC")
#: batch sizes per kind of network: clips for video models, patches for volumetric ones
BATCHES = {"video": (1, 4, 16), "volumetric": (1, 2, 4)}
RANDOM_BATCHES = (1, 2, 4, 8, 16)
MAX_FLOP = 4e12  # one direction's multiply-adds x 2
MAX_TENSOR_BYTES = 4 << 30
SPATIAL = ("d", "h", "w")
GEOMETRY_3D = ["n", "c", "k", "groups"] + [f"{p}_{s}" for p in ("x", "fil", "pad", "stride", "dil") for s in SPATIAL]
CORPUS_COLUMNS_3D = ["order", "kind", "dtype", "layout", *GEOMETRY_3D, "y_d", "y_h", "y_w", "flop", "sources"]
#: (filter, stride) forms a random problem may take instead of its layer's: full 3D, the (2+1)D
#: factorisations, pointwise, large stems, and the 2x2x2 stride-2 down/up-sampling of U-Nets
RANDOM_FILTERS = [((3, 3, 3), (1, 1, 1)), ((3, 3, 3), (2, 2, 2)), ((1, 3, 3), (1, 1, 1)), ((3, 1, 1), (1, 1, 1)),
                  ((1, 1, 1), (1, 1, 1)), ((5, 5, 5), (1, 1, 1)), ((3, 7, 7), (1, 2, 2)), ((2, 2, 2), (2, 2, 2)),
                  ((1, 3, 3), (1, 2, 2)), ((5, 1, 1), (1, 1, 1))]
RANDOM_FILTER_WEIGHTS = [34, 10, 8, 10, 8, 5, 4, 8, 4, 6]


def read_network_layers_3d(path: str | Path = NETWORK_LAYERS_3D) -> pd.DataFrame:
    """The traced 3D network layers, one row per convolution call."""
    path = Path(path)
    if not path.exists():
        raise KbenchInputError(f"{path}: traced 3D network layer list not found "
                               "(make it with python tools/collect/trace_3d_networks.py).")
    return pd.read_csv(path)


def contiguous_depthwise(rows: pd.DataFrame) -> pd.Series:
    """Depthwise NCDHW rows (PyTorch's ``is_depthwise``: groups equal to the input channels, more than one,
    output channels a multiple of them): PyTorch runs them with its own kernel, not cuDNN."""
    depthwise = (rows["groups"] > 1) & (rows["groups"] == rows["c"]) & (rows["k"] % rows["c"] == 0)
    return depthwise & (rows["layout"] == "NCDHW")


def network_geometries(layers: pd.DataFrame, batches: dict = BATCHES) -> pd.DataFrame:
    """One row per (geometry, batch size) of the network layers; ``sources`` = the sorted distinct
    ``network/layer`` names it comes from, joined with ';'."""
    batch = layers["kind"].map({kind: list(sizes) for kind, sizes in batches.items()})
    if batch.isna().any():
        unknown = sorted(layers.loc[batch.isna(), "kind"].astype(str).unique())
        raise KbenchInputError(f"network layers of unknown kind {unknown}; expected one of {sorted(batches)}")
    rows = layers.assign(n=batch).explode("n")
    rows["sources"] = rows["network"].astype(str) + "/" + rows["layer"].astype(str)
    rows = rows[GEOMETRY_3D + ["sources"]].astype({c: np.int64 for c in GEOMETRY_3D})
    return rows.groupby(GEOMETRY_3D, sort=True)["sources"].agg(lambda s: ";".join(sorted(set(s)))).reset_index()


def random_geometries(layers: pd.DataFrame, count: int, seed: int = 0) -> pd.DataFrame:
    """``count`` random valid 3D geometries around the network layers, from a seeded generator."""
    rng = np.random.Generator(np.random.PCG64(seed))
    base = layers[GEOMETRY_3D[1:]].astype(np.int64).drop_duplicates().reset_index(drop=True)
    forms = _norm(RANDOM_FILTER_WEIGHTS)
    rows = []
    while len(rows) < count:
        layer = base.iloc[int(rng.integers(len(base)))]

        def scaled(v, low, high, multiple=1):
            out = int(round(v * np.exp(rng.uniform(np.log(0.5), np.log(2.0)))))
            out = int(round(out / multiple)) * multiple if multiple > 1 else out
            return int(np.clip(out, low, high))
        c = scaled(layer["c"], 1, 1024, 8 if layer["c"] >= 8 else 1)
        k = scaled(layer["k"], 1, 1024, 8 if layer["k"] >= 8 else 1)
        u = rng.random()
        groups = 1
        if u < 0.08:  # depthwise, as X3D's and MViT's
            k, groups = c, c
        elif u < 0.14:
            options = [g for g in (2, 4, 8, 16, 32) if c % g == 0 and k % g == 0]
            groups = int(rng.choice(options)) if options else 1
        if rng.random() < 0.4:  # the layer's own filter; else a common form, most with a filter depth over 1
            fil = tuple(int(layer[f"fil_{s}"]) for s in SPATIAL)
            stride = tuple(int(layer[f"stride_{s}"]) for s in SPATIAL)
        else:
            fil, stride = RANDOM_FILTERS[int(rng.choice(len(RANDOM_FILTERS), p=forms))]
        size = {s: scaled(layer[f"x_{s}"], 1, 256) for s in SPATIAL}
        same = rng.random() < 0.85
        pad = tuple(f // 2 if same else int(rng.integers(0, f // 2 + 1)) for f in fil)
        row = dict(n=int(rng.choice(RANDOM_BATCHES)), c=c, k=k, groups=groups,
                   **{f"x_{s}": size[s] for s in SPATIAL}, **{f"fil_{s}": f for s, f in zip(SPATIAL, fil)},
                   **{f"pad_{s}": p for s, p in zip(SPATIAL, pad)},
                   **{f"stride_{s}": st for s, st in zip(SPATIAL, stride)}, **{f"dil_{s}": 1 for s in SPATIAL})
        y = [expected_output_size(size[s], f, p, st, 1) for s, f, p, st in zip(SPATIAL, fil, pad, stride)]
        flop = 2.0 * row["n"] * k * (c // groups) * float(np.prod(fil)) * float(np.prod(y))
        if min(y) >= 1 and flop <= MAX_FLOP:
            rows.append(row)
    df = pd.DataFrame(rows, columns=GEOMETRY_3D).astype(np.int64).assign(sources="random")
    return df.drop_duplicates(GEOMETRY_3D).reset_index(drop=True)


def build_corpus_3d(layers: pd.DataFrame | None = None, n_random: int = 6000, seed: int = 0, dtypes=DTYPES,
                    layouts=LAYOUTS_3D, report: dict | None = None) -> pd.DataFrame:
    """The whole 3D corpus as a DataFrame with :data:`CORPUS_COLUMNS_3D`, in collection order."""
    layers = read_network_layers_3d() if layers is None else layers
    parts = {"network": network_geometries(layers), "random": random_geometries(layers, n_random, seed)}
    rng = np.random.Generator(np.random.PCG64(seed + 1))
    frames = []
    for kind, geo in parts.items():
        geo = add_output_size(geo)
        valid = (geo[[f"y_{s}" for s in SPATIAL]] >= 1).all(axis=1)
        valid &= (geo["c"] % geo["groups"] == 0) & (geo["k"] % geo["groups"] == 0)
        geo = geo[valid]
        variants = pd.DataFrame([(d, lay) for d in dtypes for lay in layouts], columns=["dtype", "layout"])
        rows = geo.merge(variants, how="cross").assign(kind=kind)
        rows["flop"] = conv_flop(rows)
        keep = (rows["flop"] <= MAX_FLOP) & (tensor_bytes(rows) <= MAX_TENSOR_BYTES)
        not_cudnn = contiguous_depthwise(rows)
        if report is not None:
            report[kind] = {"geometries": int(len(geo)), "rows": int((keep & ~not_cudnn).sum()),
                            "left_out_too_large": int((~keep).sum()),
                            "left_out_not_cudnn": int((keep & not_cudnn).sum())}
        keep &= ~not_cudnn
        rows = rows[keep].reset_index(drop=True)
        # a seeded permutation inside the kind; position t of every kind gets turn t, so the kinds alternate
        rows["_turn"] = rng.permutation(len(rows))
        frames.append(rows)
    corpus = pd.concat(frames, ignore_index=True)
    corpus["_kind_rank"] = corpus["kind"].map({k: i for i, k in enumerate(parts)})
    corpus = corpus.sort_values(["_turn", "_kind_rank"], kind="stable").reset_index(drop=True)
    corpus["order"] = np.arange(len(corpus), dtype=np.int64)
    return corpus[CORPUS_COLUMNS_3D]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", required=True, help="CSV to write (.csv or .csv.gz)")
    ap.add_argument("--layers", default=str(NETWORK_LAYERS_3D), help="traced 3D network layers (CSV)")
    ap.add_argument("--n-random", type=int, default=6000, help="random geometries (default 6000)")
    ap.add_argument("--seed", type=int, default=0)


def run(args) -> int:
    if args.n_random < 0:
        raise KbenchInputError("--n-random must be >= 0")
    check_output(args.out, [args.layers], option="--out")
    report: dict = {}
    corpus = build_corpus_3d(read_network_layers_3d(args.layers), n_random=args.n_random, seed=args.seed,
                             report=report)
    atomic_write_bytes(args.out, _gzip_csv(corpus) if str(args.out).endswith(".gz")
                       else corpus.to_csv(index=False).encode("utf-8"))
    for kind, r in report.items():
        print(f"{kind}: {r['geometries']} geometries -> {r['rows']} rows ({r['left_out_too_large']} left out "
              f"as too large, {r['left_out_not_cudnn']} as NCDHW depthwise, which PyTorch runs without cuDNN)")
    print(f"{len(corpus)} problems -> {args.out}")
    return 0

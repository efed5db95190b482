"""The problem corpus that ``kbench collect cudnn`` measures: deterministic.

Three kinds of 2D convolution geometry, each crossed with the data types
FP16, BF16 and FP32 and the layouts NCHW and NHWC (directions are chosen at
collection time, ``--directions``):

* ``mituna``: the layers of MITuna's network lists (AlexNet, GoogLeNet,
  Inception v3/v4, ResNet-50/152, ResNeXt-101, VGG-16, ...) at the batch size
  each line gives, so these problems carry the same MIOpen keys as the AMD
  datasets.
* ``torchvision``: the conv layers of current torchvision architectures
  (ResNet, ResNeXt, Wide ResNet, RegNet, MobileNet v2/v3, EfficientNet v1/v2,
  ConvNeXt, DenseNet, Inception v3, GoogLeNet, VGG, ShuffleNet, MNASNet,
  SqueezeNet, AlexNet; grouped and depthwise layers included), traced by
  :mod:`tools/collect/trace_torchvision.py` into ``torchvision_layers.csv``, at
  batch sizes :data:`TORCHVISION_BATCHES`.
* ``random``: geometries drawn from ranges such tuning corpora use (channels
  1..2048 log-uniform, mostly multiples of 8; spatial 7..256; filters 1x1 to
  11x11 incl. 1xn / nx1; strides 1-4; dilation 1-3; grouped and depthwise),
  batch sizes 1..256, from a seeded generator.

Rows are ordered so that any prefix is a balanced sample: the three kinds take
turns, and inside a kind the order is a seeded permutation. A collection run
that stops early therefore still covers all kinds, data types and layouts.
Problems over :data:`MAX_FLOP` or with a tensor over :data:`MAX_TENSOR_BYTES`
are left out (say how many in the report).
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench.core.output_files import atomic_write_bytes, check_output
from kbench.sources.mituna import read_network_layers
from kbench.sources.problem import expected_output_size

TORCHVISION_LAYERS = Path(__file__).with_name("torchvision_layers.csv")
DTYPES = ("FP16", "BF16", "FP32")
LAYOUTS = ("NCHW", "NHWC")
TORCHVISION_BATCHES = (1, 16, 64, 256)
RANDOM_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MAX_FLOP = 2e12  # one direction's multiply-adds x 2
MAX_TENSOR_BYTES = 4 << 30
GEOMETRY = ["n", "c", "k", "groups", "x_h", "x_w", "fil_h", "fil_w", "pad_h", "pad_w",
            "stride_h", "stride_w", "dil_h", "dil_w"]
CORPUS_COLUMNS = ["order", "kind", "dtype", "layout", *GEOMETRY, "y_h", "y_w", "flop", "sources"]
DTYPE_BYTES = {"FP16": 2, "BF16": 2, "FP32": 4}


def spatial_of(df: pd.DataFrame) -> tuple[str, ...]:
    """The spatial dimensions a geometry table holds: ``h, w``, and ``d`` first when it has depth columns."""
    return ("d", "h", "w") if "x_d" in df else ("h", "w")


def add_output_size(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    for s in spatial_of(df):
        df[f"y_{s}"] = expected_output_size(df[f"x_{s}"], df[f"fil_{s}"], df[f"pad_{s}"],
                                            df[f"stride_{s}"], df[f"dil_{s}"])
    return df


def conv_flop(df: pd.DataFrame) -> pd.Series:
    """2 x multiply-adds of one direction (the same count for F, B and W), 2D or 3D (exact: integer
    products far below 2**53, so the order of the factors changes no bit)."""
    flop = 2.0 * df["n"] * df["k"] * (df["c"] // df["groups"])
    for s in spatial_of(df):
        flop = flop * df[f"fil_{s}"] * df[f"y_{s}"]
    return flop


def mituna_geometries(folder: str | Path) -> pd.DataFrame:
    """Distinct 2D conv geometries (with their batch size) of MITuna's network lists."""
    layers = read_network_layers(folder)
    layers = layers[(layers["mode"] == "conv") & (layers["spatial_dims"] == 2)]
    src = "mituna:" + layers["network"].astype(str)
    out = layers[GEOMETRY].astype(np.int64).assign(sources=src.to_numpy())
    return _merge_sources(out)


def torchvision_geometries(path: str | Path = TORCHVISION_LAYERS,
                           batches=TORCHVISION_BATCHES) -> pd.DataFrame:
    """The traced torchvision layers, one row per (geometry, batch size)."""
    path = Path(path)
    if not path.exists():
        raise KbenchInputError(f"{path}: traced torchvision layer list not found "
                               "(make it with python tools/collect/trace_torchvision.py).")
    layers = pd.read_csv(path)
    rows = []
    for n in batches:
        part = layers.assign(n=n)
        rows.append(part[GEOMETRY].astype(np.int64).assign(
            sources=("torchvision:" + part["network"].astype(str)).to_numpy()))
    return _merge_sources(pd.concat(rows, ignore_index=True))


def _merge_sources(df: pd.DataFrame) -> pd.DataFrame:
    """One row per geometry; ``sources`` = sorted distinct sources joined with ';'."""
    grouped = df.groupby(GEOMETRY, sort=True)["sources"].agg(lambda s: ";".join(sorted(set(s))))
    return grouped.reset_index()


def random_geometries(count: int, seed: int = 0) -> pd.DataFrame:
    """``count`` random valid geometries from a seeded generator (same on every machine)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    filters = [(1, 1), (3, 3), (5, 5), (7, 7), (1, 3), (3, 1), (1, 7), (7, 1), (2, 2), (4, 4), (11, 11)]
    fweights = np.array([30, 36, 6, 6, 3, 3, 3, 3, 3, 4, 1], dtype=float)
    rows = []
    while len(rows) < count:
        n = int(rng.choice(RANDOM_BATCHES, p=_norm([12, 8, 8, 10, 12, 14, 14, 12, 10])))

        def channels():
            v = int(round(np.exp(rng.uniform(np.log(1), np.log(2048)))))
            return max(8, int(round(v / 8)) * 8) if rng.random() < 0.8 else max(1, v)
        c, k = channels(), channels()
        u = rng.random()
        if u < 0.10:  # depthwise
            k = c
            groups = c
        elif u < 0.22:
            g = [g for g in (2, 4, 8, 16, 32, 64) if c % g == 0 and k % g == 0]
            groups = int(rng.choice(g)) if g else 1
        else:
            groups = 1
        fh, fw = filters[int(rng.choice(len(filters), p=_norm(fweights)))]
        h = int(round(np.exp(rng.uniform(np.log(7), np.log(256)))))
        w = h if rng.random() < 0.8 else int(round(np.exp(rng.uniform(np.log(7), np.log(256)))))
        stride = int(rng.choice([1, 2, 3, 4], p=_norm([66, 28, 2, 4])))
        dil = int(rng.choice([1, 2, 3], p=_norm([88, 9, 3])))
        same = rng.random() < 0.7
        ph = dil * (fh - 1) // 2 if same else int(rng.integers(0, fh // 2 + 1))
        pw = dil * (fw - 1) // 2 if same else int(rng.integers(0, fw // 2 + 1))
        rows.append(dict(n=n, c=c, k=k, groups=groups, x_h=h, x_w=w, fil_h=fh, fil_w=fw, pad_h=ph,
                         pad_w=pw, stride_h=stride, stride_w=stride, dil_h=dil, dil_w=dil))
        yh = expected_output_size(h, fh, ph, stride, dil)
        yw = expected_output_size(w, fw, pw, stride, dil)
        if yh < 1 or yw < 1 or 2.0 * n * k * (c // groups) * fh * fw * yh * yw > MAX_FLOP:
            rows.pop()
    df = pd.DataFrame(rows).astype(np.int64).assign(sources="random")
    return df.drop_duplicates(GEOMETRY).reset_index(drop=True)


def _norm(w):
    w = np.asarray(w, dtype=float)
    return w / w.sum()


def tensor_bytes(df: pd.DataFrame) -> pd.Series:
    """Bytes of the largest of x, w, y for each row's data type."""
    el = df["dtype"].map(DTYPE_BYTES).astype(float)
    x, y, w = df["n"] * df["c"], df["n"] * df["k"], df["k"] * (df["c"] // df["groups"])
    for s in spatial_of(df):
        x, y, w = x * df[f"x_{s}"], y * df[f"y_{s}"], w * df[f"fil_{s}"]
    return np.maximum(np.maximum(x, y), w) * el


def build_corpus(mituna_folder: str | Path | None, n_random: int = 4000, seed: int = 0,
                 dtypes=DTYPES, layouts=LAYOUTS, torchvision_path: str | Path = TORCHVISION_LAYERS,
                 report: dict | None = None) -> pd.DataFrame:
    """The whole corpus as a DataFrame with :data:`CORPUS_COLUMNS`, in collection order."""
    parts = {}
    if mituna_folder is not None:
        parts["mituna"] = mituna_geometries(mituna_folder)
    parts["torchvision"] = torchvision_geometries(torchvision_path)
    parts["random"] = random_geometries(n_random, seed)
    rng = np.random.Generator(np.random.PCG64(seed + 1))
    frames = []
    for kind, geo in parts.items():
        geo = add_output_size(geo)
        geo = geo[(geo["y_h"] >= 1) & (geo["y_w"] >= 1) & (geo["c"] % geo["groups"] == 0)
                  & (geo["k"] % geo["groups"] == 0)]
        var = pd.DataFrame([(d, lay) for d in dtypes for lay in layouts], columns=["dtype", "layout"])
        rows = geo.merge(var, how="cross").assign(kind=kind)
        rows["flop"] = conv_flop(rows)
        keep = (rows["flop"] <= MAX_FLOP) & (tensor_bytes(rows) <= MAX_TENSOR_BYTES)
        if report is not None:
            report[kind] = {"geometries": int(len(geo)), "rows": int(keep.sum()),
                            "left_out_too_large": int((~keep).sum())}
        rows = rows[keep].reset_index(drop=True)
        # A seeded permutation inside the kind; position k of every kind gets
        # turn k, so kinds alternate in the final order.
        rows["_turn"] = rng.permutation(len(rows))
        frames.append(rows)
    corpus = pd.concat(frames, ignore_index=True)
    kind_rank = {k: i for i, k in enumerate(parts)}
    corpus["_kind_rank"] = corpus["kind"].map(kind_rank)
    corpus = corpus.sort_values(["_turn", "_kind_rank"], kind="stable").reset_index(drop=True)
    corpus["order"] = np.arange(len(corpus), dtype=np.int64)
    return corpus[CORPUS_COLUMNS]


def _gzip_csv(frame: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.to_csv(buf, index=False, compression={"method": "gzip", "mtime": 0})
    return buf.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="write the kbench cuDNN problem corpus")
    add_arguments(ap)
    return run(ap.parse_args(argv))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", required=True, help="CSV to write (.csv or .csv.gz)")
    ap.add_argument("--mituna", default="../shared/data/mituna",
                    help="folder of MITuna network lists ('none' to leave them out)")
    ap.add_argument("--n-random", type=int, default=4000, help="random geometries (default 4000)")
    ap.add_argument("--seed", type=int, default=0)


def run(args) -> int:
    mituna = None if str(args.mituna).lower() == "none" else args.mituna
    if args.n_random < 0:
        raise KbenchInputError("--n-random must be >= 0")
    report: dict = {}
    check_output(args.out, [mituna], option="--out")
    corpus = build_corpus(mituna, n_random=args.n_random, seed=args.seed, report=report)
    atomic_write_bytes(args.out, corpus.to_csv(index=False, compression=None).encode("utf-8")
                       if not str(args.out).endswith(".gz") else _gzip_csv(corpus))
    for kind, r in report.items():
        print(f"{kind}: {r['geometries']} geometries -> {r['rows']} rows "
              f"({r['left_out_too_large']} left out as too large)")
    print(f"{len(corpus)} problems -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

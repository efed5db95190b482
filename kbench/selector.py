"""A deployable kernel selector: one call from a convolution problem to ranked kernel names.

>>> import kbench.selector
>>> sel = kbench.selector.load("mi100")                        # doctest: +SKIP
>>> sel.choose({"direction": "F", "dtype": "FP32", "n": 32, "c": 64, "k": 64, ...})   # doctest: +SKIP
['ConvBinWinograd3x3U', 'ConvOclDirectFwd', ...]

A selector folder holds ``selector.json`` (kernel names, the feature columns, the
classes and prior order per direction) and ``trees.safetensors`` (every tree of
the boosted model as flat node arrays). Scoring needs numpy and ``safetensors``
only: no xgboost, no pandas. The folder is written by
:func:`export` from a fitted ``xgboost``-family model (``python -m kbench.selector
export mi100`` trains ``xgboost-compact`` on mi100's train part and exports it); ``load(name)`` looks for it under
``$KBENCH_CACHE/selectors/<name>`` (default ``~/.cache/kbench``), or takes a path.

``problem`` is a mapping with kbench's canonical problem columns
(``docs/data_model.md``: direction, dtype, layout_x/w/y, spatial_dims, n, c, k,
groups and the x/y/fil/pad/stride/dil sizes per spatial dim; bias optional).
:func:`problem_vector` computes the same features as the baselines' vectorised
feature table, for one problem, in plain Python.

Ranking: the model's class kernels by their summed tree margins (the
multi-class model's softmax order), then the other kernels seen in training
for the problem's (direction, dtype) in the prior order, then the remaining
kernels that run in the direction; the same order the ``xgboost`` family of
baselines produces.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import numpy as np

from kbench.errors import KbenchInputError

FORMAT = "kbench-selector-1"
DTYPE_BYTES = {"FP64": 8, "FP32": 4, "TF32": 4, "INT32": 4, "FP16": 2, "BF16": 2,
               "INT8": 1, "FP8": 1, "BF8": 1, "INT8x4": 1}
ONE_HOT_DTYPES = ("FP32", "FP16", "BF16", "INT8")
SPATIAL = ("d", "h", "w")
_DTYPE_RE = re.compile("|".join(sorted(map(re.escape, DTYPE_BYTES), key=len, reverse=True)))
REQUIRED = ["direction", "dtype", "layout_x", "layout_w", "layout_y", "spatial_dims", "n", "c", "k", "groups"] + [
    f"{p}_{s}" for p in ("x", "y", "fil", "pad", "stride", "dil") for s in SPATIAL]


def _tz(v: float, cap: int = 8) -> float:
    v = int(round(v))
    if v <= 0:
        return 0.0
    return float(min((v & -v).bit_length() - 1, cap))


def problem_vector(problem) -> dict[str, float]:
    """The feature columns of one problem (the same values as ``kbench_baselines.features.problem_features``)."""
    missing = [c for c in REQUIRED if c not in problem]
    if missing:
        raise KbenchInputError(f"selector: the problem lacks {', '.join(missing)} (kbench's canonical problem "
                               "columns, docs/data_model.md)")
    g = {c: float(problem[c]) for c in REQUIRED[5:]}
    direction, dtype = str(problem["direction"]), str(problem["dtype"])
    n, c, k, groups = g["n"], g["c"], g["k"], max(g["groups"], 1.0)
    cg, kg = c / groups, k / groups
    xi, yo = g["x_d"] * g["x_h"] * g["x_w"], g["y_d"] * g["y_h"] * g["y_w"]
    fs = g["fil_d"] * g["fil_h"] * g["fil_w"]
    if dtype in DTYPE_BYTES:
        tin = tw = tout = dtype
    else:
        parts = _DTYPE_RE.findall(dtype)
        tin, tw, tout = parts if len(parts) == 3 and "".join(parts) == dtype else (dtype, dtype, dtype)
    b_in, bw, b_out = (DTYPE_BYTES.get(t, 4) for t in (tin, tw, tout))
    bx, by = (b_in, b_out) if direction == "F" else (b_out, b_in)  # "in" is dy for B and W
    f = {f"dir_{d}": float(direction == d) for d in ("F", "B", "W")}
    for t in ONE_HOT_DTYPES:
        f[f"dtype_{t}"] = float(dtype == t)
    f["dtype_other"] = float(dtype not in ONE_HOT_DTYPES)
    f["dtype_unknown"] = float(any(t not in DTYPE_BYTES for t in (tin, tw, tout)))
    f["dtype_mixed"] = float(bx != bw or bw != by or dtype not in DTYPE_BYTES)
    lx = str(problem["layout_x"])
    f["layout_nhwc"] = float(lx.upper().endswith("C"))
    f["layout_mixed"] = float(lx != str(problem["layout_w"]) or lx != str(problem["layout_y"]))
    f["is_3d"] = float(float(problem["spatial_dims"]) == 3)
    for col in REQUIRED[6:]:
        f[col] = g[col]
    f["bias"] = float(problem.get("bias", 0.0) or 0.0) if hasattr(problem, "get") else 0.0
    f["c_per_group"], f["k_per_group"] = cg, kg
    flops = 2.0 * n * k * yo * cg * fs
    bytes_x, bytes_w, bytes_y = n * c * xi * bx, k * cg * fs * bw, n * k * yo * by
    f.update(flops=flops, bytes_x=bytes_x, bytes_w=bytes_w, bytes_y=bytes_y,
             arith_intensity=flops / max(bytes_x + bytes_w + bytes_y, 1.0),
             out_pixels=n * yo, in_pixels=n * xi, filter_size=fs)
    f["gemm_m"] = cg if direction == "B" else kg
    f["gemm_n"] = n * yo if direction == "F" else (n * xi if direction == "B" else cg * fs)
    f["gemm_k"] = cg * fs if direction == "F" else (kg * fs if direction == "B" else n * yo)
    f["is_1x1"] = float(g["fil_d"] == 1 and g["fil_h"] == 1 and g["fil_w"] == 1)
    f["is_3x3"] = float(g["fil_d"] == 1 and g["fil_h"] == 3 and g["fil_w"] == 3)
    f["stride1"] = float(all(g[f"stride_{s}"] == 1 for s in SPATIAL))
    f["pad0"] = float(all(g[f"pad_{s}"] == 0 for s in SPATIAL))
    f["dil1"] = float(all(g[f"dil_{s}"] == 1 for s in SPATIAL))
    f["square_filter"] = float(g["fil_h"] == g["fil_w"])
    f["grouped"] = float(groups > 1)
    f["depthwise"] = float(groups > 1 and groups == c)
    for name, v in (("cg", cg), ("kg", kg), ("n", n), ("hw", g["y_h"] * g["y_w"]),
                    ("gemm_m", f["gemm_m"]), ("gemm_n", f["gemm_n"]), ("gemm_k", f["gemm_k"])):
        f[f"tz_{name}"] = _tz(v)
    for col in ["n", "c", "k", "groups", "c_per_group", "k_per_group", "x_d", "x_h", "x_w", "y_d", "y_h", "y_w",
                "fil_d", "fil_h", "fil_w", "flops", "bytes_x", "bytes_w", "bytes_y", "arith_intensity",
                "out_pixels", "in_pixels", "filter_size", "gemm_m", "gemm_n", "gemm_k"]:
        f[f"log_{col}"] = math.log2(1.0 + max(f[col], 0.0))
    return f


class Forest:
    """The trees of one booster as flat node arrays; ``margins(x)`` sums the leaves per output group."""

    def __init__(self, left, right, feature, threshold, default_left, roots, group, base, depth: int):
        self.left, self.right = np.asarray(left, np.int32), np.asarray(right, np.int32)
        self.feature, self.threshold = np.asarray(feature, np.int32), np.asarray(threshold, np.float32)
        self.default_left = np.asarray(default_left, bool)
        self.roots, self.group = np.asarray(roots, np.int64), np.asarray(group, np.int64)
        self.base = np.asarray(base, np.float64)
        self.depth = int(depth)

    def margins(self, x: np.ndarray) -> np.ndarray:
        """Raw margin per group for one feature vector (float32 comparisons, as xgboost makes them)."""
        x = np.asarray(x, np.float32)
        node = self.roots.copy()
        for _ in range(self.depth):  # every tree walks one level per step
            leaf = self.left[node] < 0
            value = x[self.feature[node]]
            go_left = np.where(np.isnan(value), self.default_left[node], value < self.threshold[node])
            node = np.where(leaf, node, np.where(go_left, self.left[node], self.right[node]))
        return self.base + np.bincount(self.group, weights=self.threshold[node].astype(np.float64),
                                       minlength=len(self.base))

    @classmethod
    def from_xgboost_json(cls, model: dict) -> Forest:
        """From xgboost's JSON model (``Booster.save_raw("json")``, parsed): leaves keep their value in
        ``split_conditions`` and have no children."""
        learner = model["learner"]
        trees = learner["gradient_booster"]["model"]["trees"]
        info = learner["gradient_booster"]["model"]["tree_info"]
        n_groups = max(int(learner["learner_model_param"].get("num_class", "0")), 1)
        base = json.loads(learner["learner_model_param"]["base_score"].replace("E", "e"))
        base = np.broadcast_to(np.asarray(base, np.float64), (n_groups,)).copy()
        left, right, feat, thr, dleft, roots = [], [], [], [], [], []
        offset, depth = 0, 0
        for t in trees:
            lc, rc = np.asarray(t["left_children"]), np.asarray(t["right_children"])
            roots.append(offset)
            left.append(np.where(lc < 0, -1, lc + offset))
            right.append(np.where(rc < 0, -1, rc + offset))
            feat.append(np.asarray(t["split_indices"]))
            thr.append(np.asarray(t["split_conditions"], np.float32))
            dleft.append(np.asarray(t["default_left"], bool))
            parents = np.asarray(t["parents"])
            level = np.zeros(len(lc), int)
            for i in range(1, len(lc)):  # a child comes after its parent in xgboost's node order
                level[i] = level[parents[i]] + 1
            depth = max(depth, int(level.max()) if len(level) else 0)
            offset += len(lc)
        def cat(parts, dt):
            return (np.concatenate(parts).astype(dt) if parts else np.zeros(0, dt))
        return cls(cat(left, np.int32), cat(right, np.int32), cat(feat, np.int32), cat(thr, np.float32),
                   cat(dleft, bool), roots, info, base, depth)

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}.left": self.left, f"{prefix}.right": self.right, f"{prefix}.feature": self.feature,
                f"{prefix}.threshold": self.threshold, f"{prefix}.default_left": self.default_left.astype(np.uint8),
                f"{prefix}.roots": self.roots, f"{prefix}.group": self.group, f"{prefix}.base": self.base}

    @classmethod
    def from_arrays(cls, arrays: dict, prefix: str, depth: int) -> Forest:
        a = {k[len(prefix) + 1:]: v for k, v in arrays.items() if k.startswith(prefix + ".")}
        return cls(a["left"], a["right"], a["feature"], a["threshold"], a["default_left"].astype(bool),
                   a["roots"], a["group"], a["base"], depth)


class Selector:
    """Ranked kernel names for one problem at a time (``choose``), from an exported selector folder."""

    def __init__(self, meta: dict, forests: dict[str, Forest]):
        self.meta = meta
        self.kernels = list(meta["kernels"])
        self.columns = list(meta["columns"])
        self.classes = {d: list(v) for d, v in meta["classes"].items()}
        self.directions = {d: list(v) for d, v in meta["directions"].items()}
        self.prior = {key: np.asarray(v, np.float64) for key, v in meta["prior"].items()}
        self.forests = forests

    def choose(self, problem) -> list[str]:
        """Every kernel that runs in the problem's direction, best first."""
        f = problem_vector(problem)
        direction, dtype = str(problem["direction"]), str(problem["dtype"])
        names = self.directions.get(direction, [])
        prior = self.prior.get(f"{direction}|{dtype}", self.prior.get(direction))
        index = {k: i for i, k in enumerate(self.kernels)}
        prior_of = (lambda k: prior[index[k]]) if prior is not None else (lambda k: 0.0)
        score = {k: (1.0 if prior_of(k) > 0 else 0.0) + prior_of(k) / ((prior.max() if prior is not None else 0) + 1.0)
                 for k in names}
        forest = self.forests.get(direction)
        classes = self.classes.get(direction, [])
        if classes:
            margin = forest.margins(np.array([f[c] for c in self.columns])) if forest is not None else np.zeros(1)
            prob = np.exp(margin - margin.max())
            prob /= prob.sum()
            for k, p in zip(classes, prob):
                if k in score and score[k] >= 1.0:  # a class kernel never seen for this dtype stays masked
                    score[k] = 2.0 + float(p)
        # ties keep the vocabulary order (the order of the baselines' stable sort)
        return sorted(names, key=lambda k: (-score[k], index[k]))

    def size_bytes(self) -> int:
        return int(self.meta.get("size_bytes", 0))


def _root() -> Path:
    return Path(os.environ.get("KBENCH_CACHE", Path.home() / ".cache" / "kbench")) / "selectors"


def save(folder: str | Path, meta: dict, forests: dict[str, Forest]) -> Path:
    """Write a selector folder (``selector.json`` + ``trees.safetensors``)."""
    from safetensors.numpy import save_file
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for d, forest in forests.items():
        arrays.update(forest.arrays(d))
    save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(folder / "trees.safetensors"))
    meta = dict(meta, format=FORMAT, depth={d: f.depth for d, f in forests.items()})
    (folder / "selector.json").write_text(json.dumps(meta, sort_keys=True))
    return folder


def load(name_or_path: str | Path) -> Selector:
    """A selector by dataset name (exported under ``$KBENCH_CACHE/selectors/<name>``) or folder path."""
    from safetensors.numpy import load_file
    folder = Path(name_or_path)
    if not (folder / "selector.json").is_file():
        folder = _root() / str(name_or_path)
    if not (folder / "selector.json").is_file():
        raise KbenchInputError(f"no selector {str(name_or_path)!r}: no selector.json at {name_or_path} or {folder}; "
                               f"export one with `python -m kbench.selector export {name_or_path}`.")
    meta = json.loads((folder / "selector.json").read_text())
    if meta.get("format") != FORMAT:
        raise KbenchInputError(f"{folder / 'selector.json'}: format {meta.get('format')!r}, expected {FORMAT!r}; "
                               "re-export it with this kbench version.")
    arrays = load_file(str(folder / "trees.safetensors"))
    forests = {d: Forest.from_arrays(arrays, d, depth) for d, depth in meta["depth"].items()}
    meta["size_bytes"] = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    return Selector(meta, forests)


def export(model, folder: str | Path) -> Path:
    """Write a fitted multi-class ``xgboost``-family baseline (``xgboost``, ``xgboost-compact``) as a
    selector folder."""
    if model.params.get("decision", "probability") != "probability":
        raise KbenchInputError("only decision='probability' models can be exported")
    forests = {d: Forest.from_xgboost_json(json.loads(b.save_raw("json")))
               for d, b in model.boosters.items() if b is not None}
    meta = {"kernels": model.space.names, "columns": model.columns, "classes": model.classes,
            "directions": model.space.directions, "prior": {k: v.tolist() for k, v in model.space.prior.items()},
            "model": model.name, "params": model.params, "seed": model.seed, "fit_info": model.fit_info}
    return save(folder, meta, forests)


def main(argv=None) -> None:
    import argparse

    # the export command's own needs: loading a selector (this module) is numpy-only
    from kbench.dataset import load as load_dataset
    from kbench_baselines import get_baseline
    ap = argparse.ArgumentParser(prog="python -m kbench.selector",
                                 description="train a compact model on a dataset's train part and export it")
    sub = ap.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="train xgboost-compact (or --model) and write a selector folder")
    e.add_argument("dataset")
    e.add_argument("--model", default="xgboost-compact")
    e.add_argument("--split", default="random")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--out", default=None, help="selector folder (default $KBENCH_CACHE/selectors/<dataset>)")
    a = ap.parse_args(argv)
    ds = load_dataset(a.dataset)
    parts = ds.split(a.split)
    model = get_baseline(a.model).fit(ds, parts["train"], parts["valid"], seed=a.seed)
    folder = export(model, a.out or _root() / ds.name)
    print(f"exported {folder} ({sum(p.stat().st_size for p in Path(folder).iterdir()):,} bytes)")


if __name__ == "__main__":
    main()

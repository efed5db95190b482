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
export mi100`` trains the dataset's compact model, :func:`model_for`, on its train part and exports it);
``load(name)`` takes a path, or looks under ``$KBENCH_CACHE/selectors/<name>`` (default ``~/.cache/kbench``),
then in the package (mi100, h100-pytorch and h200-pytorch ship, trained on their random split's train part, and
h200-3d-pytorch, on its networks split's: r3d_18, r2plus1d_18, unet3d, vnet and x3d_s held out; each
``selector.json``'s ``training`` says which), and else trains and caches one on first use.

Every problem is checked against the vocabulary of the selector's dataset (:func:`check_problem`): a
PyTorch-style value (``dtype="half"``, ``layout_x="channels_last"``, ``direction="forward"``) is refused
with the value it means, never ranked as something else.

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

**cuDNN plans** (a collected NVIDIA set): a :class:`PlanSelector`, exported from an
``xgboost-plans`` model (``python -m kbench.selector export h200-pytorch --model
xgboost-plans-compact``; ``model_for`` picks it for the collected NVIDIA sets), re-ranks the plans
cuDNN's heuristics propose, so ``choose`` needs them (``lists_from_raw`` reads them from a
``kbench collect cudnn`` run on your own problems):

>>> sel = kbench.selector.load("h200-pytorch")                 # doctest: +SKIP
>>> sel.choose(problem, {"cudnn_mode_a": [...], "cudnn_mode_b": [...], "cudnn_fallback": [...]})  # doctest: +SKIP
['eng0_k2=1', ...]

Each list is the heuristic's plans in its order after the candidate set's filter (for the
``pytorch`` variant, the plans PyTorch's ``filterEngineConfigs`` keeps), as the dataset's
``heuristics`` table records them. Each row is scored with the problem's features, the plan's
engine and knobs (:func:`plan_vector`) and its position in each list; the best-scored plans come
first, ties in the heuristics' order, and with the model's ``safe_margin`` mode A's first plan
stays first unless another is predicted faster by more than the margin: the order
``xgboost-plans-safe`` produces.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import stat
import sys
from pathlib import Path

import numpy as np

from kbench.core.errors import KbenchInputError, read_json_object
from kbench.core.identifiers import path_under
from kbench.selector_inputs import (
    DEFAULT_VOCABULARY,
    DIRECTIONS,
    DTYPE_BYTES,
    REQUIRED,
    SPATIAL,
    _checked,
    _size,
    check_structure,
    vocabulary_of,
)

FORMAT = "kbench-selector-1"
ONE_HOT_DTYPES = ("FP32", "FP16", "BF16", "INT8")
_DTYPE_RE = re.compile("|".join(sorted(map(re.escape, DTYPE_BYTES), key=len, reverse=True)))
#: cuDNN heuristic lists a plans selector reads, in tie-break order (as ``kbench_baselines.xgb_plans``)
HEURISTIC_LISTS = ("cudnn_mode_a", "cudnn_mode_b", "cudnn_fallback")
#: the value of a knob that a plan does not set (as ``kbench_baselines.features.KNOB_ABSENT``)
KNOB_ABSENT = -1000.0
_PLAN = re.compile(r"^eng(\d+)((?:_k\d+=-?\d+)*)$")
_KNOB = re.compile(r"_k(\d+)=(-?\d+)")
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
    g = {c: _size(problem[c], c) for c in REQUIRED[5:]}
    direction, dtype = str(problem["direction"]), str(problem["dtype"])
    if direction not in DIRECTIONS:
        raise KbenchInputError(f"selector: direction {direction[:40]!r} is not one of {', '.join(DIRECTIONS)}")
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


def plan_vector(name: str) -> dict[str, float]:
    """The engine and knob features of one cuDNN plan name (the ``engine_knobs`` encoding of
    ``kbench_baselines.features.kernel_features``): ``engine=eng<id>`` 1 and ``knob_k<id>`` its value.

    >>> plan_vector("eng4_k2=3_k13=-1")
    {'engine=eng4': 1.0, 'knob_k2': 3.0, 'knob_k13': -1.0}
    """
    m = _PLAN.fullmatch(str(name))
    if not m:
        raise KbenchInputError(f"selector: {name!r} is not a cuDNN engine configuration name "
                               "(eng<id>_k<knob>=<value>...)")
    return {f"engine=eng{m.group(1)}": 1.0, **{f"knob_k{k}": float(v) for k, v in _KNOB.findall(m.group(2))}}


class Forest:
    """The trees of one booster as flat node arrays; ``margins(x)`` sums the leaves per output group."""

    def __init__(self, left, right, feature, threshold, default_left, roots, group, base, depth: int):
        self.left, self.right = np.asarray(left, np.int32), np.asarray(right, np.int32)
        self.feature, self.threshold = np.asarray(feature, np.int32), np.asarray(threshold, np.float32)
        self.default_left = np.asarray(default_left, bool)
        self.roots, self.group = np.asarray(roots, np.int64), np.asarray(group, np.int64)
        self.base = np.asarray(base, np.float64)
        self.depth = int(depth)
        self._padded = None  # the complete-tree arrays, built on first use

    def margins(self, x: np.ndarray) -> np.ndarray:
        """Raw margin per group for one feature vector (float32 comparisons, as xgboost makes them)."""
        return self.margins_rows(np.asarray(x, np.float32)[None, :])[0]

    def margins_rows(self, x: np.ndarray) -> np.ndarray:
        """Raw margins (rows x groups) of a feature matrix: every tree of every row walks one level per step.

        The trees are walked as complete binary trees of the forest's depth (:meth:`_complete`), so a
        node's children are found by arithmetic, not by looking them up: half the numpy work per level."""
        feature, threshold, default_left, leaves = self.complete()
        n_trees, inner = len(self.roots), 2 ** self.depth - 1
        x = np.ascontiguousarray(x, np.float32)
        flat = x.ravel()
        row_offset = (np.arange(len(x)) * x.shape[1])[:, None]
        tree_offset = (np.arange(n_trees) * inner)[None, :]
        where = np.zeros((len(x), n_trees), np.intp)  # the node's place within its level
        has_nan = bool(np.isnan(flat).any())
        for level in range(self.depth):
            node = tree_offset + (2 ** level - 1) + where
            value = flat[row_offset + feature[node]]
            go_left = value < threshold[node]
            if has_nan:  # a missing value takes the node's default direction
                go_left |= np.isnan(value) & default_left[node]
            where = 2 * where + 1 - go_left
        leaf = leaves[(np.arange(n_trees) * 2 ** self.depth)[None, :] + where]
        return self.base + leaf @ (self.group[:, None] == np.arange(len(self.base))[None, :])

    def on_device(self, device):
        """The same trees evaluated with torch on ``device`` (a GPU beside the convolutions it picks for):
        a :class:`kbench.selector_device.DeviceForest`."""
        from kbench.selector_device import DeviceForest
        return DeviceForest(self, device)

    def complete(self):
        """:meth:`_complete`'s arrays, built on first use and kept."""
        if self._padded is None:
            self._padded = self._complete()
        return self._padded

    def _complete(self):
        """Every tree as a complete binary tree of depth ``self.depth``, flat, in level order: a leaf above
        the last level becomes a split that always goes left (threshold +inf, missing left) down to copies
        of its value. Returns (feature, threshold, default_left, leaves)."""
        node = self.roots[:, None].astype(np.intp)
        feature, threshold, default_left = [], [], []
        for _ in range(self.depth):
            leaf = self.left[node] < 0
            feature.append(np.where(leaf, 0, self.feature[node]))
            threshold.append(np.where(leaf, np.inf, self.threshold[node]).astype(np.float32))
            default_left.append(np.where(leaf, True, self.default_left[node]))
            children = (np.where(leaf, node, self.left[node]), np.where(leaf, node, self.right[node]))
            node = np.stack(children, axis=2).reshape(len(self.roots), -1)
        def levels(parts: list, dt) -> np.ndarray:  # level-order arrays, flat (none for depth 0)
            return np.concatenate(parts, axis=1).astype(dt).ravel() if parts else np.zeros(0, dt)
        return (levels(feature, np.intp), levels(threshold, np.float32), levels(default_left, bool),
                self.threshold[node].astype(np.float64).ravel())

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
        # feature indices fit int16 (a few hundred columns): 2 bytes a node less keeps a plans selector
        # under 6 MB, small enough to ship in the package
        feature = self.feature.astype(np.int16) if self.feature.size and self.feature.max() < 2 ** 15 else self.feature
        return {f"{prefix}.left": self.left, f"{prefix}.right": self.right, f"{prefix}.feature": feature,
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
        self.vocabulary = meta.get("vocabulary") or DEFAULT_VOCABULARY
        self.dataset = str(meta.get("dataset") or "the selector's dataset")

    def choose(self, problem, candidates=None) -> list[str]:
        """Every kernel that runs in the problem's direction, best first; with ``candidates`` (kernel names:
        the ones your MIOpen build offers, say), those of them only, in the same order."""
        problem = _checked(problem, self.vocabulary, self.dataset)
        ranking = self._rank(problem)
        if candidates is None:
            return ranking
        wanted = [candidates] if isinstance(candidates, str) else [str(k) for k in candidates]
        if not wanted:
            raise KbenchInputError("selector: the candidate set is empty; give the kernel names to rank, or "
                                   "candidates=None for every kernel of the direction")
        known = set(self.kernels)
        unknown = [k for k in wanted if k not in known]
        if unknown:
            upper = {k.upper(): k for k in self.kernels}
            hints = {k: [upper[k.upper()]] if k.upper() in upper else difflib.get_close_matches(k, self.kernels, n=1)
                     for k in unknown}
            raise KbenchInputError("selector: unknown kernel(s) " + ", ".join(
                f"{k!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for k, h in hints.items())
                + f"; {self.dataset}'s kernels are in kbench.load({self.dataset!r}).kernels")
        chosen = [k for k in ranking if k in set(wanted)]
        if not chosen:
            raise KbenchInputError(f"selector: none of the {len(wanted)} candidate kernel(s) runs in direction "
                                   f"{problem['direction']!r} on {self.dataset}")
        return chosen

    def _rank(self, problem) -> list[str]:
        f = problem_vector(problem)
        direction, dtype = str(problem["direction"]), str(problem["dtype"])
        if direction not in self.directions:  # an error, not an empty ranking
            raise KbenchInputError(f"selector: it ranks no kernel for direction {direction!r} (it knows "
                                   f"{', '.join(sorted(self.directions))})")
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


class PlanSelector:
    """cuDNN plans re-ranked for one problem at a time (``choose``), from an exported ``xgboost-plans`` model."""

    def __init__(self, meta: dict, forest: Forest):
        self.meta = meta
        self.forest = forest
        self.columns = list(meta["columns"])
        self.margin = float(meta["params"].get("safe_margin", 0.0))
        self.max_ranking = int(meta["params"].get("max_ranking", 30))
        self.lower_is_better = meta["params"].get("objective", "log_ratio") == "log_ratio"
        self._col = {c: i for i, c in enumerate(self.columns)}
        self._plan_rows: dict[str, np.ndarray] = {}  # plan name -> its engine/knob part of a row
        self.vocabulary = meta.get("vocabulary") or DEFAULT_VOCABULARY
        self.dataset = str(meta.get("dataset") or "the selector's dataset")
        self._scorer = forest  # a Forest, or its DeviceForest after to(device)

    def to(self, device) -> PlanSelector:
        """Score on ``device`` from now on (``"cuda"``: the trees walked on the GPU,
        :class:`kbench.selector_device.DeviceForest`; ``"cpu"``: numpy again). Returns the selector."""
        self._scorer = self.forest if str(device) == "cpu" else self.forest.on_device(device)
        return self

    def _plan_row(self, name: str) -> np.ndarray:
        """The plan's engine/knob columns (an engine or knob the model never saw is dropped, as in training)."""
        row = self._plan_rows.get(name)
        if row is None:
            row = np.full(len(self.columns), np.nan, np.float32)
            for c in self.meta["kernel_columns"]:
                row[self._col[c]] = KNOB_ABSENT if c.startswith("knob_") else 0.0
            for c, v in plan_vector(name).items():
                if c in self._col:
                    row[self._col[c]] = v
            self._plan_rows[name] = row
        return row

    def _candidates(self, names: list[str], ranks: dict) -> list[str]:
        """The plans the model ranks: all, or those of the first ``top_k`` places of mode A (and mode B),
        unless none is there (as ``kbench_baselines.xgb_plans.plan_candidates``)."""
        which, k = self.meta["params"].get("candidates", "all"), int(self.meta["params"].get("top_k", 0))
        if which == "all":
            return names
        lists = ("cudnn_mode_a",) if which == "mode_a_top_k" else ("cudnn_mode_a", "cudnn_mode_b")
        top = [n for n in names if any(ranks[h].get(n, math.inf) < k for h in lists)]
        return top or names

    def choose(self, problem, candidates=None) -> list[str]:
        """The plans of ``candidates`` (cuDNN's lists: list name -> plan names in the heuristic's order, or
        one ';'-separated string as the collector records it), best first.

        The model re-ranks what cuDNN's heuristics propose for this very problem (their places are among
        its features), so it needs the lists: :func:`lists_from_raw` reads them from a collection of your
        own problems (``kbench collect cudnn`` on a GPU; docs/pooled.md, "Your own convolution")."""
        problem = _checked(problem, self.vocabulary, self.dataset)
        if candidates is None:
            raise KbenchInputError(
                f"selector: the {self.dataset} selector re-ranks cuDNN's plan lists for the problem and needs "
                f"them: choose(problem, {{'cudnn_mode_a': [...], 'cudnn_mode_b': [...], 'cudnn_fallback': [...]}}) "
                "(plan names in each heuristic's order). On a GPU, `kbench collect cudnn` records them and "
                "kbench.selector.lists_from_raw(RAW) reads them (docs/pooled.md, \"Your own convolution\").")
        if not hasattr(candidates, "items"):
            raise KbenchInputError(f"selector: the candidates of a plans selector are cuDNN's lists as a mapping "
                                   f"{{{', '.join(map(repr, HEURISTIC_LISTS))}: [plan names]}}, not "
                                   f"{type(candidates).__name__}")
        unknown = sorted(set(candidates) - set(HEURISTIC_LISTS))
        if unknown:
            raise KbenchInputError(f"selector: unknown heuristic list(s) {', '.join(unknown)}; give "
                                   f"{', '.join(HEURISTIC_LISTS)} (each the plan names in its order)")
        ranks = {h: {} for h in HEURISTIC_LISTS}
        for h in HEURISTIC_LISTS:
            plans = candidates.get(h) or []
            for i, name in enumerate(p for p in (plans.split(";") if isinstance(plans, str) else plans) if p):
                ranks[h].setdefault(str(name), float(i))
        names = sorted({n for r in ranks.values() for n in r},
                       key=lambda n: tuple(ranks[h].get(n, math.inf) for h in HEURISTIC_LISTS) + (n,))
        if not names:
            raise KbenchInputError(f"selector: the candidate set is empty (every list of {', '.join(HEURISTIC_LISTS)} "
                                   "is empty or missing); give cuDNN's plans for the problem")
        names = self._candidates(names, ranks)
        x = np.stack([self._plan_row(n) for n in names])
        for c, v in problem_vector(problem).items():
            if c in self._col:
                x[:, self._col[c]] = v
        for h in HEURISTIC_LISTS:
            r = np.array([ranks[h].get(n, np.nan) for n in names])
            length = float(np.sum(~np.isnan(r)))  # the list's plans among the candidates
            for c, v in ((f"rank_{h}", r), (f"len_{h}", length), (f"relrank_{h}", r / max(length, 1.0))):
                if c in self._col:
                    x[:, self._col[c]] = v
        if "n_candidates" in self._col:
            x[:, self._col["n_candidates"]] = float(len(names))
        pred = self._scorer.margins_rows(x)[:, 0]
        score = -pred if self.lower_is_better else pred
        first_a = ranks["cudnn_mode_a"]
        a = next((i for i, n in enumerate(names) if first_a.get(n) == 0.0), None)
        if self.margin > 0 and a is not None and score.max() - score[a] <= self.margin:
            score[a] = score.max() + 1.0  # the safe rule: mode A's first plan stays unless beaten by the margin
        order = np.lexsort((np.arange(len(names)), -score))
        return [names[i] for i in order[: self.max_ranking]]

    def size_bytes(self) -> int:
        return int(self.meta.get("size_bytes", 0))


def lists_from_raw(raw, variant: str = "pytorch") -> dict[str, dict[str, list[str]]]:
    """cuDNN's plan lists per problem id, read from a raw folder of ``kbench collect cudnn`` (which records
    each heuristic mode's list as ``heur_a``, ``heur_b`` and ``heur_fallback``), kept to the plans of the
    variant's candidate set and in each list's order, as a dataset's ``heuristics`` table holds them: the
    ``candidates`` a plans selector takes. Needs pandas (the collector's reader)."""
    from kbench.collect.packaging.package import HEURISTICS, candidate_runtimes, heuristics_table, load_raw
    problems, plans, _ = load_raw(raw)
    runtimes = candidate_runtimes(problems, plans, variant)
    ok = problems[problems["status"] == "ok"].set_index("key")
    table = heuristics_table(ok, runtimes.rename(columns={"key": "problem_id", "plan": "kernel"}))
    table = table[table["heuristic"].isin(list(HEURISTICS))].sort_values(["problem_id", "heuristic", "rank"])
    lists: dict[str, dict[str, list[str]]] = {}
    for (problem_id, heuristic), kernels in table.groupby(["problem_id", "heuristic"], sort=False)["kernel"]:
        lists.setdefault(str(problem_id), {})[str(heuristic)] = kernels.astype(str).tolist()
    return lists


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


#: the selectors shipped inside the package (``python -m kbench.selector export NAME --out kbench/selectors/NAME``)
SHIPPED = Path(__file__).resolve().parent / "selectors"


def model_for(dataset: str) -> str:
    """The compact model a dataset's selector is exported from: ``xgboost-plans-compact`` (re-ranks cuDNN's
    lists) on a cuDNN set of kbench's collector, ``xgboost-compact`` on an AMD kernel-selection set."""
    from kbench.data.registry import DATASETS, resolve_name
    name = resolve_name(dataset)
    spec = DATASETS.get(name) if name else None
    if spec is None:
        raise KbenchInputError(f"no dataset {dataset!r}: `kbench datasets` lists them.")
    if spec.task == "kernel-selection" and spec.collected:
        return "xgboost-plans-compact"
    if spec.task == "kernel-selection" and spec.vendor == "AMD":
        return "xgboost-compact"
    raise KbenchInputError(f"{name}: no selector for a {spec.task} dataset of {spec.vendor}; selectors rank "
                           "MIOpen solvers (the AMD sets) and cuDNN plans (the collected NVIDIA sets).")


def _folder_of(name_or_path: str | Path) -> Path | None:
    """The selector folder for a path, or a dataset name: the user's cache first, then the shipped one."""
    folder = Path(name_or_path)
    if (folder / "selector.json").is_file():
        return folder
    if any(sep in str(name_or_path) for sep in ("/", os.sep)):  # a path without a selector: no name to look up
        return None
    from kbench.data.registry import resolve_name
    names = dict.fromkeys([str(name_or_path), resolve_name(str(name_or_path)) or str(name_or_path)])
    for root in (_root(), SHIPPED):
        for name in names:
            folder = path_under(root, ("selector", name))  # a dataset name: an identifier, kept under root
            if (folder / "selector.json").is_file():
                return folder
    return None


def load(name_or_path: str | Path, export_if_missing: bool = True) -> Selector | PlanSelector:
    """A selector by dataset name or folder path: the user's export under ``$KBENCH_CACHE/selectors/<name>``,
    else the one shipped in the package (mi100, h100-pytorch, h200-pytorch, h200-3d-pytorch), else (``export_if_missing``)
    trained now with the dataset's compact model (:func:`model_for`; a minute or two, said on stderr) and
    cached there."""
    from safetensors.numpy import load_file
    folder = _folder_of(name_or_path)
    if folder is None:
        is_path = any(sep in str(name_or_path) for sep in ("/", os.sep))
        if is_path or not export_if_missing:
            raise KbenchInputError(f"no selector {str(name_or_path)!r}: no selector.json there, in {_root()} or "
                                   f"in {SHIPPED}; export one with `python -m kbench.selector export NAME`.")
        model = model_for(str(name_or_path))
        from kbench.data.registry import resolve_name
        name = resolve_name(str(name_or_path))
        print(f"kbench.selector: no {name} selector shipped or cached; training {model} on {name}'s random "
              f"train part (a minute or two), then caching it in {_root() / name}", file=sys.stderr, flush=True)
        folder = export_dataset(name, model=model)
        print(f"kbench.selector: cached {folder}", file=sys.stderr, flush=True)
    meta = read_json_object(folder / "selector.json", hint=" Export it again with `python -m kbench.selector export`.")
    if meta.get("format") != FORMAT:
        raise KbenchInputError(f"{folder / 'selector.json'}: format {meta.get('format')!r}, expected {FORMAT!r}; "
                               "re-export it with this kbench version.")
    by_name = not (Path(name_or_path) / "selector.json").is_file()
    recorded = meta.get("dataset")
    recorded = recorded.get("name") if isinstance(recorded, dict) else recorded
    from kbench.data.registry import resolve_name
    if by_name and recorded not in (str(name_or_path), resolve_name(str(name_or_path))):
        # a selector copied under another dataset's name
        raise KbenchInputError(f"{folder / 'selector.json'}: exported for dataset {recorded!r}, not "
                               f"{str(name_or_path)!r}; export one for it with `python -m kbench.selector export "
                               f"{name_or_path}`.")
    trees = folder / "trees.safetensors"
    if not trees.is_file() or not stat.S_ISREG(os.stat(trees).st_mode):
        raise KbenchInputError(f"{trees}: missing or not a regular file; export the selector again.")
    try:
        arrays = load_file(str(trees))
    except Exception as exc:  # safetensors raises its own error types for a damaged file
        raise KbenchInputError(f"{trees}: not a readable safetensors file ({type(exc).__name__}: "
                               f"{str(exc)[:200]}); export the selector again.") from None
    check_structure(meta, arrays, folder)
    forests = {d: Forest.from_arrays(arrays, d, depth) for d, depth in meta["depth"].items()}
    meta["size_bytes"] = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    return PlanSelector(meta, forests["plans"]) if meta.get("kind") == "plans" else Selector(meta, forests)


def export(model, folder: str | Path, dataset: str | None = None, vocabulary: dict | None = None,
           training: dict | None = None) -> Path:
    """Write a fitted multi-class ``xgboost``-family baseline (``xgboost``, ``xgboost-compact``) or an
    ``xgboost-plans``-family one (a :class:`PlanSelector`) as a selector folder; ``dataset`` and its
    ``vocabulary`` (:func:`vocabulary_of`) let ``choose`` check a problem's fields against them, ``training``
    (:func:`training_record`) says what it was trained on and what was held out."""
    known = {"dataset": dataset, "vocabulary": vocabulary} if dataset else {}
    if training is not None:
        known["training"] = training
    if hasattr(model, "kernel_columns"):  # the xgboost-plans family: one regression or ranking booster
        meta = {"kind": "plans", "columns": model.columns, "kernel_columns": model.kernel_columns,
                "model": model.name, "params": model.params, "seed": model.seed, "fit_info": model.fit_info, **known}
        return save(folder, meta, {"plans": Forest.from_xgboost_json(json.loads(model.booster.save_raw("json")))})
    if model.params.get("decision", "probability") != "probability":
        raise KbenchInputError("only decision='probability' models can be exported")
    forests = {d: Forest.from_xgboost_json(json.loads(b.save_raw("json")))
               for d, b in model.boosters.items() if b is not None}
    meta = {"kernels": model.space.names, "columns": model.columns, "classes": model.classes,
            "directions": model.space.directions, "prior": {k: v.tolist() for k, v in model.space.prior.items()},
            "model": model.name, "params": model.params, "seed": model.seed, "fit_info": model.fit_info, **known}
    return save(folder, meta, forests)


def training_record(ds, split: str, parts: dict, model: str, seed: int) -> dict:
    """What a selector exported from ``ds``'s ``split`` was trained on and what it never saw: the dataset
    and version, the split, the problem-directions of each part (fitted on ``train``, early-stopped on
    ``valid``, ``test`` held out), and for a ``networks`` split the networks its test part holds."""
    record = {"dataset": ds.name, "version": str(ds.manifest.get("version", "")), "split": split, "model": model,
              "seed": int(seed), "fitted_on": "train", "early_stopping_on": "valid", "held_out": "test",
              "problems": {part: int(len(ids)) for part, ids in parts.items()}}
    if split == "networks":
        from kbench.sources.splits import HELD_OUT_NETWORKS_3D
        dims = set(ds.problems["spatial_dims"].astype(int)) if "spatial_dims" in ds.problems else {2}
        record["held_out_networks"] = (list(HELD_OUT_NETWORKS_3D) if dims == {3} else
                                       "every layer of MITuna's network lists (kbench.sources.mituna)")
    return record


def export_dataset(dataset: str, model: str | None = None, split: str = "random", seed: int = 0,
                   out: str | Path | None = None) -> Path:
    """Train ``model`` (default :func:`model_for`) on the dataset's ``split`` train part (early stopping on its
    valid part; the test part is never seen) and export it to ``out`` (default
    ``$KBENCH_CACHE/selectors/<dataset>``), with :func:`training_record` in its ``selector.json``. Needs the
    baselines (``pip install kbench[baselines]``)."""
    from kbench.data.dataset import load as load_dataset
    try:
        from kbench_baselines import get_baseline
    except ImportError as exc:
        raise KbenchInputError(f"exporting a selector trains a model and needs the baselines' packages ({exc}); "
                               "pip install 'kbench[baselines]'") from None
    ds = load_dataset(dataset)
    parts = ds.split(split)
    name = model or model_for(ds.name)
    fitted = get_baseline(name).fit(ds, parts["train"], parts["valid"], seed=seed)
    return export(fitted, out or _root() / ds.name, dataset=ds.name, vocabulary=vocabulary_of(ds.problems),
                  training=training_record(ds, split, parts, name, seed))


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m kbench.selector",
                                 description="train a compact model on a dataset's train part and export it")
    sub = ap.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="train the dataset's compact model (or --model) and write a selector folder")
    e.add_argument("dataset")
    e.add_argument("--model", default=None, help="default: xgboost-plans-compact on a collected cuDNN set, "
                                                 "xgboost-compact on an AMD set")
    e.add_argument("--split", default="random", help="fit on this split's train part, early-stop on its valid "
                                                  "part, never see its test part (default random; networks holds "
                                                  "whole networks out)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--out", default=None, help="selector folder (default $KBENCH_CACHE/selectors/<dataset>)")
    a = ap.parse_args(argv)
    try:
        folder = export_dataset(a.dataset, a.model, a.split, a.seed, a.out)
    except KbenchInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"exported {folder} ({sum(p.stat().st_size for p in Path(folder).iterdir()):,} bytes)")


if __name__ == "__main__":
    main()

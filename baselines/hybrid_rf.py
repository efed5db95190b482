"""``hybrid-rf``, ``ml-rf`` and ``analytical``: the tile-size paper's hybrid model and its two ablations.

The method of Xu et al., "Effective Performance Modeling and Domain-Specific
Compiler Optimization of CNNs for GPUs", PACT 2022: a scikit-learn
``RandomForestRegressor`` predicts the runtime of a (problem, configuration)
pair, and a problem's candidates are ranked by predicted time (fastest first).

``hybrid-rf`` (tile-selection datasets: ``v100-tiles``, ``rtx2080ti-tiles``)
    Inputs: the three feature groups of
    :func:`kbench.sources.cnnopt_features.feature_groups`: problem sizes
    (K, C, H, W, R, stride), tile sizes (schema one-hot and the ten typed tile
    columns) and the analytic features of the kernel model (data movement at
    the global and shared levels, registers, shared memory, threads/warps per
    block, blocks, occupancy and its limits, waves, FLOPs, ...), computed with
    the dataset's GPU specification.
``ml-rf``
    The same forest without the analytic group (problem + tile sizes only).
``analytical``
    No learning: rank by the bandwidth-scaled data movement alone
    (:func:`kbench.sources.cnnopt_features.analytical_ranking_score`: the max of
    global-level bytes over DRAM bandwidth and shared-level bytes over
    shared-memory bandwidth), lowest first.
``hybrid-rf`` on kernel-selection datasets (``mi100`` ..., the NVIDIA engine set)
    Inputs: the generic features of :mod:`kbench_baselines.features` (every column of
    ``problem_features``: sizes, FLOPs, bytes, intensity, GEMM M/N/K, flags)
    plus the kernel's features (``kernel_encoding``, see
    :func:`kbench_baselines.features.kernel_features`): ``auto`` gives a one-hot of the kernel
    on a kernel library's named solvers, and on cuDNN engine configurations (the
    NVIDIA engine set, thousands of names, most measured on a handful of problems)
    the engine one-hot plus one numeric column per knob, which identifies a
    configuration as exactly in tens of columns and lets the forest share what it
    learns between configurations of one engine; one row per measured (problem, kernel);
    candidates at prediction time: every kernel that runs in the problem's
    direction (:class:`kbench_baselines.base.KernelSpace`). On this 2-core machine the
    training problems are subsampled (``max_train_problems``, default 10,000
    problems drawn with the seed: about 33,000 rows on mi100) and so are the valid
    problems used for selection (``max_valid_problems``, default 2,000).

Target and selection. The forest predicts a log time. The target is a
hyper-parameter chosen on valid, as are the forest's leaf size:

* ``log_time``: log(time in ms);
* ``log_time_per_flop``: log(time / FLOPs), FLOPs = 2·K·C·H·W·R·S of the
  problem (a function of the problem sizes only, so both forests may use it;
  it does not change the order of one problem's candidates, it only puts
  problems of different sizes on one scale);
* ``log_ratio`` (kernel selection only): log(time / the problem's best listed
  time). Not offered for tiles: a random-size training problem lists one
  schema only, so a per-problem reference would erase the RS-vs-S level.

``fit`` trains one small forest (``search_trees`` trees) per grid point on
``train``, ranks the ``valid`` problems' candidates with it, and keeps the grid
point with the lowest mean of LoP@1, @5, @10 and @30 on valid (the kbench
scorer, :func:`kbench.scoring.metrics.score_rankings`); the final forest
(``n_trees`` trees, same seed) is then trained on ``train`` alone. ``test`` is
never read in ``fit``. Forests use ``n_jobs=2`` (``KBENCH_THREADS`` overrides it) and
``random_state=seed``: a fixed seed reproduces the predictions, for any thread count.

Ordering across kernel schemas (``cross_schema``; tile datasets; the same option and
default in ``hybrid-rf``, ``ml-rf`` and ``analytical``). Most benchmark layers list the
configurations of two kernel schemas (RS and S), but the random-size problems were timed one
schema at a time: a handful of training problems list two schemas, no valid problem does (data
card, "Kernel schemas per problem"). A forest trained on them has (almost) never seen two
schemas timed on one problem, so whether its RS and S predictions are on one scale is an
extrapolation that valid cannot check. The paper does not compare the schemas' predictions
either: its artifact trains one forest per schema (``RS3_buildML``, ``S3_buildML``,
``St2_buildML``) and, for a layer with both schemas, benchmarks the top N/2 of each schema's
ranking and keeps the fastest (``ml_hybrid_half_half``, and ``pure_dv_half_half`` for the
analytical ranking; ``lop-v100/create_hfhf.py`` and ``res_processing.py``, N = 30). Our
choice follows from that, not from the test layers:

* ``interleave`` (default): each schema's candidates stay in predicted order, and the schemas
  take turns (:func:`interleave_key`), the one holding the overall predicted-best candidate
  first. The top-1 is the plain ranking's; the first 2m candidates hold m of each of two schemas
  (all of one that lists fewer), which is the paper's half-half split at N = 30 generalised to
  every N. A layer with one schema gets the plain ranking.
* ``plain``: every candidate ranked by its predicted score, across schemas.

Selection on valid scores the same ordering, which on valid (one schema per problem) equals
the plain one, so the grid choice and the forest do not depend on this option.
``experiments/tiles_cross_schema.py`` scores both orderings of the same fitted models, 5 seeds, on
valid and test, and ``tools/tiles_report.py`` shows them side by side.

Candidates of a tile problem: the configurations the dataset lists for it
(tile datasets list every valid configuration of a benchmark layer, so this is
the layer's configuration space; only the ``kernel`` and typed tile columns are
read, never ``time_ms``). Rows are put in kernel-name order before ranking, so
ties never follow the runtimes table's storage order. A problem with no listed
configuration gets every configuration of the kernels table whose schema
matches its stride (``RS2`` for stride 2, else ``RS`` and ``S``).

Saving, without pickle. A fitted forest is exported to flat arrays
(:class:`TreeEnsemble`: per node the split feature, threshold, left and right
child and the leaf value, from sklearn's ``tree_`` arrays) written to
``arrays.safetensors``; configuration, columns and selection record go to
``baseline.json``. Predictions always come from the numpy predictor of those
arrays, before and after saving, so a loaded model predicts bit-identically.
It reproduces sklearn's decisions exactly: sklearn compares float32 inputs
with float64 thresholds; for float32 ``x``, ``x <= t`` holds exactly when ``x``
is at most the largest float32 not above ``t``, which is what is stored. We
chose this over xgboost's ``XGBRFRegressor`` (native JSON) because the paper's
model is scikit-learn's ``RandomForestRegressor`` (bootstrap samples, exact
CART splits on every row, mean of fully grown trees); xgboost's forest mode
fits histogram-binned, depth-limited, second-order trees, a different model.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench.scoring.environment import tree_threads
from kbench.scoring.metrics import build_scoring_table, score_rankings
from kbench.sources.cnnopt import DATASET_TO_GPU
from kbench.sources.cnnopt_features import (
    GPU_SPECS,
    TILE_COLUMNS,
    GpuSpec,
    analytical_ranking_score,
    feature_groups,
    tile_features,
)
from kbench_baselines.base import (
    Baseline,
    KernelSpace,
    as_id_index,
    dataset_task,
    predictions_frame,
    problems_of,
    rank_by_scores,
)
from kbench_baselines.features import KERNEL_ENCODINGS, is_engine_space, kernel_features, problem_features

N_JOBS = 2
#: LoP@n values averaged into the selection criterion on valid
SELECT_LOP_AT = (1, 5, 10, 30)
#: rows the numpy predictor handles at once (bounds its memory)
PREDICT_ROWS = 262_144
#: inputs of at least this many rows are predicted on several threads (a batch-1 call stays on one)
THREADED_ROWS = 4_096
#: feature-matrix cells (rows x columns) of kernel-selection candidates built at once
PREDICT_CELLS = 40_000_000

TILE_GRID = [{"target": t, "min_samples_leaf": m, "max_features": 1 / 3}
             for t in ("log_time", "log_time_per_flop") for m in (1, 5)]
KERNEL_GRID = [{"target": t, "min_samples_leaf": m, "max_features": 1 / 3}
               for t in ("log_time_per_flop", "log_ratio") for m in (1, 5)]
TARGETS = ("log_time", "log_time_per_flop", "log_ratio")
#: how a tile problem's candidates of different kernel schemas are ordered (see the module docstring)
CROSS_SCHEMA = ("interleave", "plain")


# ============================================================================ forest as arrays
def floor_float32(t: np.ndarray) -> np.ndarray:
    """The largest float32 not above each float64 ``t`` (so ``x32 <= t`` iff ``x32 <= floor_float32(t)``)."""
    t = np.asarray(t, dtype=np.float64)
    f = t.astype(np.float32)
    over = f.astype(np.float64) > t
    f[over] = np.nextafter(f[over], np.float32(-np.inf))
    return f


class TreeEnsemble:
    """A regression forest as flat numpy arrays, with a vectorised predictor.

    Nodes of all trees are concatenated; ``offsets[i]`` is tree i's first node.
    Per node: ``feature`` (-1 at a leaf), ``threshold`` (float32, go left when
    ``x <= threshold``), ``left`` / ``right`` (child index inside the tree, -1 at
    a leaf) and ``value`` (the node's mean target; used at leaves). The
    prediction is the mean over trees of the leaf values, summed in tree order.
    """

    def __init__(self, feature, threshold, left, right, value, offsets, n_features: int):
        self.feature = np.asarray(feature, dtype=np.int32)
        self.threshold = np.asarray(threshold, dtype=np.float32)
        self.left = np.asarray(left, dtype=np.int32)
        self.right = np.asarray(right, dtype=np.int32)
        self.value = np.asarray(value, dtype=np.float64)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.n_features = int(n_features)
        n = len(self.feature)
        if not (len(self.threshold) == len(self.left) == len(self.right) == len(self.value) == n):
            raise KbenchInputError("TreeEnsemble: node arrays of different lengths")
        if len(self.offsets) < 2 or self.offsets[0] != 0 or self.offsets[-1] != n:
            raise KbenchInputError("TreeEnsemble: offsets must run from 0 to the node count")
        # global child indices; a leaf points to itself
        tree_of = np.repeat(np.arange(self.n_trees), np.diff(self.offsets))
        base = self.offsets[:-1][tree_of]
        self._leaf = self.left < 0
        idx = np.arange(n, dtype=np.int64)
        # children[2*i] = left, children[2*i + 1] = right (global)
        self._children = np.stack([np.where(self._leaf, idx, self.left + base),
                                   np.where(self._leaf, idx, self.right + base)], axis=1).ravel()
        self._feat = np.where(self._leaf, 0, self.feature).astype(np.int64)
        if n and (self._feat.max() >= self.n_features):
            raise KbenchInputError("TreeEnsemble: a split feature is out of range")

    @property
    def n_trees(self) -> int:
        return len(self.offsets) - 1

    @property
    def n_nodes(self) -> int:
        return len(self.feature)

    @classmethod
    def from_sklearn(cls, forest) -> TreeEnsemble:
        parts = {"feature": [], "threshold": [], "left": [], "right": [], "value": []}
        sizes = []
        for est in forest.estimators_:
            t = est.tree_
            if t.n_outputs != 1:
                raise KbenchInputError("TreeEnsemble: single-output regression forests only")
            leaf = t.children_left < 0
            parts["feature"].append(np.where(leaf, -1, t.feature))
            parts["threshold"].append(floor_float32(np.where(leaf, 0.0, t.threshold)))
            parts["left"].append(t.children_left)
            parts["right"].append(t.children_right)
            parts["value"].append(t.value[:, 0, 0])
            sizes.append(t.node_count)
        cat = {k: np.concatenate(v) for k, v in parts.items()}
        return cls(offsets=np.r_[0, np.cumsum(sizes)], n_features=forest.n_features_in_, **cat)

    def to_arrays(self, prefix: str = "forest.") -> dict[str, np.ndarray]:
        return {f"{prefix}feature": self.feature, f"{prefix}threshold": self.threshold,
                f"{prefix}left": self.left, f"{prefix}right": self.right, f"{prefix}value": self.value,
                f"{prefix}offsets": self.offsets}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], n_features: int, prefix: str = "forest.") -> TreeEnsemble:
        try:
            return cls(*(arrays[f"{prefix}{k}"] for k in ("feature", "threshold", "left", "right", "value",
                                                           "offsets")), n_features=n_features)
        except KeyError as exc:
            raise KbenchInputError(f"saved forest: array {exc} missing") from None

    def apply(self, X: np.ndarray) -> np.ndarray:
        """(rows x trees) global index of the leaf each row reaches in each tree.

        Tree by tree (one tree's nodes stay in cache), one level per pass over the
        rows still at an inner node. Large inputs spread the trees over
        ``tree_threads`` threads (numpy's indexing runs without the GIL); each tree's
        column is computed the same way on any thread, so the result does not change.
        """
        x = np.ascontiguousarray(np.asarray(X, dtype=np.float32))
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise KbenchInputError(f"TreeEnsemble: expected {self.n_features} features, got shape {x.shape}")
        n, t = x.shape[0], self.n_trees
        out = np.empty((n, t), dtype=np.int64)
        threads = min(tree_threads(N_JOBS), t) if n >= THREADED_ROWS else 1
        for a in range(0, n, PREDICT_ROWS):
            b = min(n, a + PREDICT_ROWS)
            flat = x[a:b].ravel()
            xbase = np.arange(b - a, dtype=np.int64) * self.n_features

            def leaves(trees, a=a, b=b, flat=flat, xbase=xbase):
                for i in trees:
                    root = self.offsets[i]
                    node = np.full(b - a, root, dtype=np.int64)
                    active = np.zeros(0, dtype=np.int64) if self._leaf[root] else np.arange(b - a)
                    while active.size:
                        nd = node[active]
                        right = flat[xbase[active] + self._feat[nd]] > self.threshold[nd]
                        nxt = self._children[2 * nd + right]
                        node[active] = nxt
                        active = active[~self._leaf[nxt]]
                    out[a:b, i] = node

            if threads == 1:
                leaves(range(t))
            else:
                with ThreadPoolExecutor(threads) as pool:
                    list(pool.map(leaves, np.array_split(np.arange(t), threads)))
        return out

    def predict(self, X: np.ndarray) -> np.ndarray:
        leaves = self.apply(X)
        return self.value[leaves].sum(axis=1) / self.n_trees


# ============================================================================ shared helpers
def gpu_spec_of(dataset):
    """The dataset's GPU specification (manifest ``gpu_spec``, else by dataset name), or None."""
    info = getattr(dataset, "info", None) or {}
    spec = info.get("gpu_spec") if isinstance(info, dict) else None
    if isinstance(spec, dict):
        names = {f.name for f in fields(GpuSpec)}
        kw = {k: (tuple(v) if k == "sources" else v) for k, v in spec.items() if k in names}
        if names <= set(kw):
            return GpuSpec(**kw)
    gpu = DATASET_TO_GPU.get(getattr(dataset, "name", None))
    return GPU_SPECS[gpu] if gpu else None


def spec_from_dict(d: dict):
    names = {f.name for f in fields(GpuSpec)}
    return GpuSpec(**{k: (tuple(v) if k == "sources" else v) for k, v in d.items() if k in names})


def spec_to_dict(spec) -> dict:
    from dataclasses import asdict
    d = asdict(spec)
    d["sources"] = list(d["sources"])
    return d


def rank_long(pos: np.ndarray, names: np.ndarray, score: np.ndarray, n_problems: int) -> np.ndarray:
    """Ranking strings from long rows (problem position, kernel name, score; lower score first).

    Rows must come grouped in kernel-name order inside a problem; ties keep that order.
    Problems without rows get an empty ranking.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    order = np.lexsort((np.arange(len(pos)), score, pos))
    counts = np.bincount(pos, minlength=n_problems)
    offsets = np.r_[0, np.cumsum(counts)].astype(np.int32)
    lists = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.asarray(names, dtype=object)[order].astype(str),
                                                                type=pa.string()))
    return np.asarray(pc.binary_join(lists, ";").to_numpy(zero_copy_only=False), dtype=object)


def interleave_key(pos: np.ndarray, group: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Sort key that deals each problem's ranking out round-robin over its groups (kernel schemas).

    Within a problem and a group, rows keep the order of ``score`` (lower first, ties by row
    order, as in :func:`rank_long`). The groups of a problem take turns, one row each, in the
    order of their best row in that plain order: the plain ranking's first row stays first, and
    among the first ``n`` rows every group that still has rows holds ``floor(n/g)`` or
    ``ceil(n/g)`` of them (``g`` groups). A group that runs out leaves the turns to the others.
    With one group per problem the key gives the plain order back.

    Returns integer keys (``rank in group * groups + turn``), unique within a problem; sorting
    a problem's rows by them (e.g. ``rank_long(pos, names, key)``) gives the interleaved ranking.
    """
    pos = np.asarray(pos, dtype=np.int64)
    score = np.asarray(score, dtype=np.float64)
    n = len(pos)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    code = pd.factorize(np.asarray(group, dtype=object))[0].astype(np.int64)
    plain = np.lexsort((np.arange(n), score, pos))
    prank = np.empty(n, dtype=np.int64)
    prank[plain] = np.arange(n)                      # place in the plain order (increasing within a problem)
    o = np.lexsort((prank, code, pos))               # rows by (problem, group, plain place)
    first = np.r_[True, (pos[o][1:] != pos[o][:-1]) | (code[o][1:] != code[o][:-1])]
    gid_sorted = np.cumsum(first) - 1
    start = np.flatnonzero(first)                    # first (best) row of each (problem, group)
    gid = np.empty(n, dtype=np.int64)
    gid[o] = gid_sorted
    within = np.empty(n, dtype=np.int64)
    within[o] = np.arange(n) - start[gid_sorted]     # rank inside the group
    gpos, lead = pos[o][start], prank[o][start]      # per group: its problem, its best row's plain place
    go = np.lexsort((lead, gpos))
    gfirst = np.r_[True, gpos[go][1:] != gpos[go][:-1]]
    gstart = np.flatnonzero(gfirst)
    turn = np.empty(len(go), dtype=np.int64)
    turn[go] = np.arange(len(go)) - gstart[np.cumsum(gfirst) - 1]
    groups = int(turn.max()) + 1
    return within * groups + turn[gid]


def selection_score(table, prob_idx: np.ndarray, kern_idx: np.ndarray, score: np.ndarray) -> dict:
    """LoP@n (mean over the table's problems) of rankings given as long rows ordered by ``score``."""
    order = np.lexsort((np.arange(len(prob_idx)), score, prob_idx))
    ch = score_rankings(table, prob_idx[order], kern_idx[order])
    tb = table.t_best
    ok = ch.predicted
    out = {f"lop_at_{n}": float(((ch.best_at[n][ok] - tb[ok]) / tb[ok]).mean()) for n in SELECT_LOP_AT}
    out["top1"] = float(ch.top[1][ok].mean())
    out["criterion"] = float(np.mean([out[f"lop_at_{n}"] for n in SELECT_LOP_AT]))
    return out


def problem_flops(problems: pd.DataFrame) -> np.ndarray:
    """2·N·K·(Do·Ho·Wo)·(C/G)·(T·R·S) per problem (the forward arithmetic of the convolution)."""
    g = lambda c: problems[c].to_numpy(dtype=np.float64) if c in problems else np.ones(len(problems))  # noqa: E731
    groups = np.maximum(g("groups"), 1.0)
    return (2.0 * g("n") * g("k") * g("y_d") * g("y_h") * g("y_w") * g("c") / groups
            * g("fil_d") * g("fil_h") * g("fil_w"))


# ============================================================================ tile rows
def tile_candidates(dataset, problems: pd.DataFrame, with_time: bool = False) -> pd.DataFrame:
    """One row per (problem, candidate configuration), problems in the given order, kernels by name.

    Columns: ``pos`` (the problem's position in ``problems``), ``problem_id``, ``kernel``,
    the typed tile columns, and ``time_ms`` only when ``with_time`` (training).
    """
    ids = as_id_index(problems["problem_id"])
    rt = dataset.runtimes
    cols = ["problem_id", "kernel"] + TILE_COLUMNS + (["time_ms"] if with_time else [])
    listed = rt.loc[rt["problem_id"].isin(ids), cols]
    listed = listed.assign(problem_id=listed["problem_id"].astype(str), kernel=listed["kernel"].astype(str))
    missing = ~ids.isin(listed["problem_id"].unique())
    if missing.any() and not with_time:  # problems with no listed configuration: every one of their schemas
        k = dataset.kernels
        if k is None or not set(TILE_COLUMNS) <= set(k.columns):
            raise KbenchInputError(f"dataset {dataset.name!r}: {int(missing.sum())} problem(s) list no "
                                   "configuration and the kernels table has no tile columns")
        k = k[["kernel"] + TILE_COLUMNS].assign(kernel=lambda d: d["kernel"].astype(str))
        p = problems[missing].assign(problem_id=ids[missing])
        schemas = np.where(p["stride_h"].to_numpy() == 2, "RS2", "RS,S")
        extra = []
        for sch in np.unique(schemas):
            kk = k[k["schema"].isin(sch.split(","))]
            pp = p.loc[schemas == sch, ["problem_id"]]
            extra.append(pp.merge(kk, how="cross"))
        listed = pd.concat([listed] + extra, ignore_index=True)
    pos = pd.Index(ids).get_indexer(listed["problem_id"])
    listed = listed.assign(pos=pos).sort_values(["pos", "kernel"], kind="stable").reset_index(drop=True)
    return listed


def _check_params(name: str, params: dict, defaults: dict) -> dict:
    unknown = set(params) - set(defaults)
    if unknown:
        raise KbenchInputError(f"{name}: unknown parameter(s) {sorted(unknown)}; known: {sorted(defaults)}")
    cfg = {**defaults, **params}
    if "cross_schema" in cfg and cfg["cross_schema"] not in CROSS_SCHEMA:
        raise KbenchInputError(f"{name}: cross_schema must be one of {CROSS_SCHEMA}, got {cfg['cross_schema']!r}")
    if "kernel_encoding" in cfg and cfg["kernel_encoding"] not in KERNEL_ENCODINGS:
        raise KbenchInputError(f"{name}: kernel_encoding must be one of {KERNEL_ENCODINGS}, "
                               f"got {cfg['kernel_encoding']!r}")
    return cfg


def tile_order(rows: pd.DataFrame, score: np.ndarray, cross_schema: str) -> np.ndarray:
    """The sort key of tile candidates: ``score`` itself (``plain``) or the schema round-robin
    of :func:`interleave_key` (``interleave``); rows need ``pos`` and ``schema``."""
    if cross_schema == "plain":
        return np.asarray(score, dtype=np.float64)
    return interleave_key(rows["pos"].to_numpy(), rows["schema"].astype(str).to_numpy(), score)


# ============================================================================ the forest baselines
class _ForestBaseline(Baseline):
    """Shared code of ``hybrid-rf`` and ``ml-rf`` (the feature groups differ)."""

    stochastic = True
    #: minutes of CPU per seed (a model selection on valid, then 100 trees): run it by name,
    #: e.g. ``kbench run --dataset v100-tiles --split networks --baselines hybrid-rf ml-rf analytical``
    benchmark = False
    #: tile feature groups this model uses
    TILE_GROUPS: tuple[str, ...] = ()
    KERNEL_SELECTION = False
    paper = "https://doi.org/10.1145/3559009.3569674"

    DEFAULTS = {"n_trees": 100, "search_trees": 25, "grid": None, "max_train_problems": 10000,
                "max_valid_problems": 2000, "cross_schema": "interleave", "kernel_encoding": "auto"}

    def __init__(self, **params):
        super().__init__(**params)
        self.cfg = _check_params(self.name, params, self.DEFAULTS)
        self.forest: TreeEnsemble | None = None
        self.state: dict = {}

    # -- which datasets --------------------------------------------------------------
    def supports(self, dataset) -> bool:
        task = dataset_task(dataset)
        if task == "tile-selection":
            return gpu_spec_of(dataset) is not None
        return self.KERNEL_SELECTION and task == "kernel-selection"

    def _mode(self, dataset) -> str:
        if not self.supports(dataset):
            raise KbenchInputError(f"baseline {self.name!r} does not support dataset {dataset.name!r} "
                                   f"(task {dataset_task(dataset)!r})")
        return "tile" if dataset_task(dataset) == "tile-selection" else "kernel"

    # -- features ----------------------------------------------------------------------
    def _tile_matrix(self, dataset, rows: pd.DataFrame, problems: pd.DataFrame, spec) -> tuple[np.ndarray, list]:
        X, groups = feature_groups(rows, problems, spec)
        cols = [c for g in self.TILE_GROUPS for c in groups[g]]
        self._groups = {g: list(groups[g]) for g in self.TILE_GROUPS}
        return X[cols].to_numpy(dtype=np.float32), cols

    def _kernel_table(self, names) -> pd.DataFrame:
        """Kernel features of the fitted space (``kbench_baselines.features.kernel_features``), cached."""
        key = (self._encoding, tuple(names))
        if getattr(self, "_kernel_cache", (None,))[0] != key:
            self._kernel_cache = (key, kernel_features(names, self._encoding))
        return self._kernel_cache[1]

    def _kernel_matrix(self, problems: pd.DataFrame, pos: np.ndarray, kidx: np.ndarray,
                       names) -> np.ndarray:
        pf = problem_features(problems).to_numpy(dtype=np.float32)
        kf = self._kernel_table(names).to_numpy(dtype=np.float32)
        X = np.empty((len(pos), pf.shape[1] + kf.shape[1]), dtype=np.float32)
        X[:, :pf.shape[1]] = pf[pos]
        X[:, pf.shape[1]:] = kf[kidx]
        return X

    def _kernel_columns(self, problems: pd.DataFrame, names) -> list[str]:
        return list(problem_features(problems.head(1)).columns) + list(self._kernel_table(names).columns)

    # -- targets -----------------------------------------------------------------------
    @staticmethod
    def _targets(time_ms: np.ndarray, flops: np.ndarray, pos: np.ndarray) -> dict[str, np.ndarray]:
        lt = np.log(time_ms)
        best = np.full(pos.max() + 1 if len(pos) else 0, np.inf)
        np.minimum.at(best, pos, time_ms)
        return {"log_time": lt, "log_time_per_flop": lt - np.log(flops),
                "log_ratio": lt - np.log(best[pos])}

    # -- data of a part ------------------------------------------------------------------
    def _tile_part(self, dataset, ids, spec, with_time: bool):
        problems = problems_of(dataset, ids)
        rows = tile_candidates(dataset, problems, with_time=with_time)
        X, cols = self._tile_matrix(dataset, rows, problems, spec)
        return problems, rows, X, cols

    def _kernel_train(self, dataset, ids, space: KernelSpace):
        """Measured (problem, kernel) rows of ``ids``: problems, positions, kernel indices, X, times."""
        problems = problems_of(dataset, ids)
        rt = dataset.runtimes
        rt = rt.loc[rt["problem_id"].isin(as_id_index(problems["problem_id"])), ["problem_id", "kernel", "time_ms"]]
        kidx = rt["kernel"].astype(str).map(space.index)
        ok = kidx.notna().to_numpy()
        rt = rt[ok]
        pos = pd.Index(problems["problem_id"].astype(str)).get_indexer(rt["problem_id"].astype(str))
        kidx = kidx[ok].to_numpy(dtype=np.int64)
        X = self._kernel_matrix(problems, pos, kidx, space.names)
        return problems, pos, kidx, X, rt["time_ms"].to_numpy(dtype=np.float64)

    def _kernel_scores(self, forest: TreeEnsemble, problems: pd.DataFrame,
                       space: KernelSpace) -> tuple[np.ndarray, np.ndarray]:
        """(allowed, predicted target) as (problems x kernels) matrices (NaN where not allowed).

        Candidates are built and predicted a chunk of problems at a time (bounded memory)."""
        allowed = space.allowed(problems)
        pred = np.full(allowed.shape, np.nan)
        per_problem = max(1, len(space.names) * forest.n_features)
        step = max(1, PREDICT_CELLS // per_problem)
        for a in range(0, len(problems), step):
            pos, kidx = np.nonzero(allowed[a:a + step])
            if len(pos):
                X = self._kernel_matrix(problems.iloc[a:a + step], pos, kidx, space.names)
                pred[a + pos, kidx] = forest.predict(X)
        return allowed, pred

    # -- fit -------------------------------------------------------------------------------
    def _forest(self, n_trees: int, cfg: dict, seed: int):
        from sklearn.ensemble import RandomForestRegressor
        return RandomForestRegressor(n_estimators=n_trees, max_features=cfg["max_features"],
                                     min_samples_leaf=cfg["min_samples_leaf"], n_jobs=tree_threads(N_JOBS), random_state=seed)

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        t0 = time.perf_counter()
        self.seed = int(seed)
        mode = self._mode(dataset)
        grid = self.cfg["grid"] or (TILE_GRID if mode == "tile" else KERNEL_GRID)
        for g in grid:
            if g.get("target") not in TARGETS or (mode == "tile" and g["target"] == "log_ratio"):
                raise KbenchInputError(f"{self.name}: target {g.get('target')!r} not available in {mode} mode")
        rng = np.random.default_rng(self.seed)
        train_ids = as_id_index(train_ids)
        valid_ids = as_id_index(valid_ids if valid_ids is not None else [])
        state: dict = {"mode": mode}
        if mode == "tile":
            spec = gpu_spec_of(dataset)
            state["gpu_spec"] = spec_to_dict(spec)
            ptr, rtr, Xtr, cols = self._tile_part(dataset, train_ids, spec, with_time=True)
            ytr = self._targets(rtr["time_ms"].to_numpy(dtype=np.float64),
                                problem_flops(ptr)[rtr["pos"].to_numpy()], rtr["pos"].to_numpy())
            state["groups"] = self._groups
            n_train_problems = len(ptr)
            if len(valid_ids):
                pva, rva, Xva, _ = self._tile_part(dataset, valid_ids, spec, with_time=False)
                table = build_scoring_table(pva, dataset.runtimes, dataset.kernels, dataset.problems)
                vp = rva["pos"].to_numpy()
                vk = pd.Index(table.kernels).get_indexer(rva["kernel"])
        else:
            space = KernelSpace.fit(dataset, train_ids)
            state["space"] = space.to_dict()
            enc = self.cfg["kernel_encoding"]
            self._encoding = enc if enc != "auto" else ("engine_knobs" if is_engine_space(space.names) else "onehot")
            state["kernel_encoding"] = self._encoding
            if len(train_ids) > self.cfg["max_train_problems"]:
                train_ids = train_ids[np.sort(rng.choice(len(train_ids), self.cfg["max_train_problems"],
                                                         replace=False))]
            ptr, pos, kidx, Xtr, ttr = self._kernel_train(dataset, train_ids, space)
            ytr = self._targets(ttr, problem_flops(ptr)[pos], pos)
            cols = self._kernel_columns(ptr, space.names)
            n_train_problems = len(ptr)
            if len(valid_ids):
                if len(valid_ids) > self.cfg["max_valid_problems"]:
                    valid_ids = valid_ids[np.sort(rng.choice(len(valid_ids), self.cfg["max_valid_problems"],
                                                             replace=False))]
                pva = problems_of(dataset, valid_ids)
                table = build_scoring_table(pva, dataset.runtimes, dataset.kernels, dataset.problems)
                # valid candidates: every allowed kernel; columns of the table in space order
                vcol = pd.Index(table.kernels).get_indexer(np.asarray(space.names, dtype=object))
        state["columns"] = cols
        selection = []
        if len(valid_ids) and len(grid) > 1:
            for g in grid:
                ts = time.perf_counter()
                rf = self._forest(self.cfg["search_trees"], g, self.seed).fit(Xtr, ytr[g["target"]])
                ens = TreeEnsemble.from_sklearn(rf)
                del rf
                if mode == "tile":
                    keep = vk >= 0
                    sc = selection_score(table, vp[keep], vk[keep],
                                         tile_order(rva[keep], ens.predict(Xva[keep]), self.cfg["cross_schema"]))
                else:
                    allowed, pred = self._kernel_scores(ens, pva, space)
                    vp, kk = np.nonzero(allowed & (vcol >= 0)[None, :])
                    sc = selection_score(table, vp, vcol[kk], pred[vp, kk])
                selection.append({**g, **sc, "seconds": time.perf_counter() - ts})
            best = min(range(len(grid)), key=lambda i: (selection[i]["criterion"], i))
        else:
            best = 0
        chosen = dict(grid[best])
        rf = self._forest(self.cfg["n_trees"], chosen, self.seed).fit(Xtr, ytr[chosen["target"]])
        self.forest = TreeEnsemble.from_sklearn(rf)
        del rf
        state.update({"chosen": chosen, "selection": selection, "n_train_rows": int(len(Xtr)),
                      "n_train_problems": int(n_train_problems), "n_valid_problems_scored": int(len(valid_ids)),
                      "n_features": int(Xtr.shape[1])})
        self.state = state
        self.fit_info = {"chosen": chosen, "selection": selection, "n_train_rows": int(len(Xtr)),
                         "n_parameters": int(self.forest.n_nodes), "fit_time_s": time.perf_counter() - t0}
        return self

    # -- predict ------------------------------------------------------------------------------
    def _check_fitted(self):
        if self.forest is None:
            raise KbenchInputError(f"{self.name}: call fit (or load a saved model) before predict")

    def predict_rows(self, dataset, ids):
        """(rows, predicted target) of every candidate of ``ids``; rows carry ``pos`` and ``kernel``."""
        self._check_fitted()
        problems = problems_of(dataset, ids)
        if self.state["mode"] == "tile":
            spec = spec_from_dict(self.state["gpu_spec"])
            rows = tile_candidates(dataset, problems)
            X, cols = self._tile_matrix(dataset, rows, problems, spec)
            if cols != self.state["columns"]:
                raise KbenchInputError(f"{self.name}: feature columns differ from the fitted model's")
            return problems, rows, self.forest.predict(X)
        space = KernelSpace.from_dict(self.state["space"])
        allowed, pred = self._kernel_scores(self.forest, problems, space)
        pos, kidx = np.nonzero(allowed)
        rows = pd.DataFrame({"pos": pos, "kernel": np.asarray(space.names, dtype=object)[kidx]})
        return problems, rows, pred[pos, kidx]

    def predict(self, dataset, ids) -> pd.DataFrame:
        self._check_fitted()
        problems = problems_of(dataset, ids)
        if self.state["mode"] == "kernel":
            space = KernelSpace.from_dict(self.state["space"])
            allowed, pred = self._kernel_scores(self.forest, problems, space)
            score = np.where(allowed, -pred, -np.inf)  # rank_by_scores: higher first, ties by kernel order
            return predictions_frame(problems["problem_id"], rank_by_scores(score, space.names, allowed))
        _, rows, pred = self.predict_rows(dataset, problems["problem_id"])
        key = tile_order(rows, pred, self.cfg["cross_schema"])
        return predictions_frame(problems["problem_id"],
                                 rank_long(rows["pos"].to_numpy(), rows["kernel"].to_numpy(), key, len(problems)))

    # -- persistence -----------------------------------------------------------------------------
    def get_state(self):
        self._check_fitted()
        return dict(self.state), self.forest.to_arrays()

    def set_state(self, state, arrays, path):
        self.state = dict(state)
        self.forest = TreeEnsemble.from_arrays(arrays, n_features=state["n_features"])
        self._encoding = state.get("kernel_encoding", "onehot")  # models saved before the option: one-hot
        if state.get("groups"):
            self._groups = state["groups"]

    def n_parameters(self) -> int | None:
        return None if self.forest is None else int(self.forest.n_nodes)


class HybridRF(_ForestBaseline):
    name = "hybrid-rf"
    description = ("random forest on problem sizes + tile sizes + analytic kernel features (PACT 2022), kernel "
                   "schemas taking turns in the ranking; generic features + kernel features (one-hot, or engine + knobs "
                   "on cuDNN engine sets) on kernel-selection sets")
    TILE_GROUPS = ("problem", "tile", "analytic")
    KERNEL_SELECTION = True


class MLRF(_ForestBaseline):
    name = "ml-rf"
    description = ("ablation of hybrid-rf: the same forest on problem and tile sizes only (no analytic features), "
                   "kernel schemas taking turns in the ranking")
    TILE_GROUPS = ("problem", "tile")


class Analytical(Baseline):
    """Rank a tile problem's configurations by the analytic model's bandwidth-scaled data movement."""

    name = "analytical"
    description = ("ablation of hybrid-rf: rank tile configurations by max(global bytes / DRAM bandwidth, "
                   "shared bytes / shared bandwidth), no learning; kernel schemas taking turns in the ranking")
    stochastic = False
    paper = "https://doi.org/10.1145/3559009.3569674"
    DEFAULTS = {"cross_schema": "interleave"}

    def __init__(self, **params):
        super().__init__(**params)
        self.cfg = _check_params(self.name, params, self.DEFAULTS)
        self.spec = None

    def supports(self, dataset) -> bool:
        return dataset_task(dataset) == "tile-selection" and gpu_spec_of(dataset) is not None

    def fit(self, dataset, train_ids=None, valid_ids=None, seed: int = 0):
        if not self.supports(dataset):
            raise KbenchInputError(f"baseline {self.name!r} needs a tile-selection dataset with a GPU "
                                   f"specification; {dataset.name!r} is not one")
        self.seed = int(seed)
        self.spec = gpu_spec_of(dataset)
        return self

    def scores(self, dataset, problems: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
        rows = tile_candidates(dataset, problems)
        feats = tile_features(rows, problems, self.spec)
        return rows, analytical_ranking_score(feats).to_numpy(dtype=np.float64)

    def predict(self, dataset, ids) -> pd.DataFrame:
        if self.spec is None:
            raise KbenchInputError(f"{self.name}: call fit (or load a saved model) before predict")
        problems = problems_of(dataset, ids)
        rows, score = self.scores(dataset, problems)
        key = tile_order(rows, score, self.cfg["cross_schema"])
        return predictions_frame(problems["problem_id"],
                                 rank_long(rows["pos"].to_numpy(), rows["kernel"].to_numpy(), key, len(problems)))

    def get_state(self):
        return {"gpu_spec": spec_to_dict(self.spec)}, {}

    def set_state(self, state, arrays, path):
        self.spec = spec_from_dict(state["gpu_spec"])

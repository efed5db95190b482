"""``reformer``: the Reformer kernel-selection network (Γ-blocks, runtime-ratio labels), PyTorch on CPU.

The network
-----------
A reformer of depth L is

    Γ(x) = Ξ(Γ_L(... Γ_1(Υ(x)))),

* Υ: z-score normalisation of the input features with the mean and standard
  deviation of the *training* part (:class:`kbench_baselines.features.Standardizer`;
  stored in the network as buffers, so the network takes raw features);
* Γ_l: the Γ-block, width d_{l-1} -> d_l,

      x_l = ReLU( A1·x_{l-1} + b1 + A3·T(x_{l-1}) + b3 ),
      T(x) = Dropout(ReLU(Norm(W·x + c))),   W: d_{l-1} -> d'_l, Norm = batch- or layer-norm,

  three matmuls (A1, W, A3) and two learnable layers deep;
* Ξ: a linear layer d_L -> C followed by a softmax over the C kernels of the
  dataset's vocabulary (``ds.kernels``).

L = 3 and every block uses d_l = d'_l = h, with h chosen so that the
parameter count is the closest to the paper's 80,978 for the dataset's input
width and vocabulary (:func:`choose_gamma_width`; the count formula is
:func:`gamma_param_count`). ``fit`` prints the count and stores it in
``fit_info["n_parameters"]`` (the leaderboard runner copies it into the
record's ``extra``).

Inputs are the shared features of :mod:`kbench_baselines.features`: every column of
``problem_features`` except the raw sizes that have a ``log_`` twin (the
log-scaled sizes, the one-hot categories, the shape flags, pad/stride/dilation
and the alignment features; :func:`reformer_columns`).

Labels from runtimes
--------------------
For a problem with runtimes t (t_i = ∞ for a kernel not measured) the target
of the default ``labels="ratio"`` is

    p_i = (max(t)/t_i) / Σ_k (max(t)/t_k)   (= (1/t_i) / Σ_k 1/t_k; max and ∞ over measured kernels),

so p_i / p_j = t_j / t_i for every two measured kernels, and the loss is the
cross-entropy H(p, y) = -Σ_i p_i log y_i with y = softmax(Γ logits).

**Censoring.** On find-db data most lists are censored (only the fastest 4
kept, ``problems.censored``): an unlisted kernel is "slower than the 4th or
inapplicable", its time is unknown, and it gets p = 0 exactly like a kernel
that cannot run. The ratio label is therefore the ratio distribution over the
*listed* kernels only; it over-states the listed kernels' share where unlisted
ones would have run.

Ablations (``labels=``): ``"onehot"`` (p = 1 on the fastest measured kernel,
exact ties share the mass equally) and ``"softmax"`` (p = softmax(-t_i / t_min)
over the measured kernels: the softmax of the runtimes in units of the best
time, so the target does not depend on the problem's absolute size; unmeasured
kernels p = 0). Registered as ``reformer-onehot`` and ``reformer-softmax``.

Ranking
-------
The kernels in softmax order, with the top of the ranking masked to the
kernels measured in training for the problem's (direction, data type) (or its
direction if that data type was not in training); the other kernels that run
in the direction follow, in softmax order (``mask="tail"``, the default), so
that a complete list whose seen kernels are all inapplicable still gets a
choice. ``mask="drop"`` leaves them out; ``mask="none"`` is the plain softmax
order over the direction's kernels.

Transformer-block variant
-------------------------
``transformer-block``: the same Υ and Ξ, the three Γ-blocks replaced by three
standard post-norm transformer encoder blocks (``nn.TransformerEncoderLayer``
with ``norm_first=False``: x = LN(x + MHA(x)); x = LN(x + FFN(x))) over
*feature tokens*: feature j of Υ(x) becomes the token Υ(x)_j·e_j + f_j (one
learned embedding e_j and bias f_j per feature), a learned [CLS] token is
prepended, and Ξ reads the [CLS] output. d_model is chosen (4 heads, FFN width
2·d_model) to bring the parameter count closest to the Γ network's
(:func:`transformer_param_count`).

Training and model selection
----------------------------
Adam, batch 512, dropout 0.1 in T, cosine learning-rate decay over
``max_epochs``. Γ network: lr 3e-3, 30 epochs over every training problem (a
few seconds per epoch on one thread, so a fit takes a few minutes); these
settings were picked on the *valid* part of mi100's random split, seed 0
(``experiments/reformer_sweep.py``, results in ``experiments/results/reformer_sweep.jsonl``:
lr 1e-3 / 3e-3 / 1e-2, constant vs cosine decay, dropout 0 vs 0.1). Transformer-block: lr 1e-3, and,
because one of its epochs over all 127k mi100 training problems takes many
minutes on this 2-core machine (``bench/bench_reformer_latency.py`` measures
the rate), 12 epochs of 8,192 problems drawn at random, with model selection
on a fixed 4,096 problems of the valid part (``valid_rows``): it sees fewer
training problems than the Γ network (``fit_info`` records how many, and the
time). ``rows_per_epoch`` draws that many training
problems per epoch without replacement (None: all).

After every epoch the valid part is scored; the kept weights are those of the
epoch with the best valid top-1 (ties: lower valid loss), and training stops
after ``patience`` epochs without improvement or at ``max_epochs``. The test
part is never read. Valid top-1 is computed with the evaluator's rule: on a
complete list the first ranked kernel that was measured, on a censored list
the first ranked kernel. The seed fixes the initial weights, the epoch
samples, the batch order and dropout; with the same seed, thread count and
machine the predictions are identical. ``threads`` (default 1) sets
``torch.set_num_threads`` for the duration of fit and predict only.

Lean inference
--------------
:class:`NumpyReformer` is the trained Γ network in plain numpy (float32): Υ is
folded into the first block's matrices, eval-mode batch-norm into T's linear
layer, and biases ride on a constant 1 appended to each block's input; one
problem (a 1-D feature vector) goes through ``logits_row``: two matrix-vector
products and two ReLUs per block, into buffers allocated once. Its logits equal the PyTorch model's within float32 tolerance
(tested); ``predict(..., backend="numpy")`` ranks with it. :class:`OnnxReformer`
runs the same folded network as an ONNX graph (``NumpyReformer.to_onnx``) in
ONNX Runtime on one thread, with I/O binding for batch 1 (``backend="onnx"``;
the ``onnx`` extra). Latencies:
``bench/bench_reformer_latency.py`` -> ``bench/results/reformer_latency.json``.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
import weakref
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench_baselines.base import (
    Baseline,
    KernelSpace,
    as_id_index,
    dataset_task,
    predictions_frame,
    problems_of,
    rank_by_scores,
    runtime_matrix,
    seen_kernels,
    train_runtimes,
)
from kbench_baselines.features import Standardizer, features_for, problem_features

PAPER_N_PARAMETERS = 80_978
LABEL_KINDS = ("ratio", "onehot", "softmax")
MASKS = ("tail", "drop", "none")
NORMS = ("batch", "layer")
SCHEDULES = ("cosine", "constant")


# ----------------------------------------------------------------------------- features
def reformer_columns(columns) -> list[str]:
    """The input columns: every shared feature except raw sizes that have a ``log_`` twin."""
    cols = list(columns)
    present = set(cols)
    return [c for c in cols if f"log_{c}" not in present]


#: problems table (by id) -> (weak reference to it, its problem_id index): looking one problem up
#: should not rebuild a 182k-entry hash index on every call (batch-1 latency)
_ID_INDEX: dict[int, tuple] = {}


def problem_rows(dataset, ids) -> pd.DataFrame:
    """``kbench_baselines.base.problems_of`` with the problem-id index cached per problems table."""
    problems = dataset.problems
    hit = _ID_INDEX.get(id(problems))
    if hit is None or hit[0]() is not problems:
        index = pd.Index(problems["problem_id"].astype(str).to_numpy(dtype=object))
        if not index.is_unique:
            return problems_of(dataset, ids)
        for key in [k for k, (ref, _) in _ID_INDEX.items() if ref() is None]:
            del _ID_INDEX[key]
        hit = _ID_INDEX[id(problems)] = (weakref.ref(problems), index)
    ids = as_id_index(ids)
    pos = hit[1].get_indexer(ids.to_numpy(dtype=object))
    if (pos < 0).any():
        return problems_of(dataset, ids)  # raises its KbenchInputError naming the unknown ids
    return problems.iloc[pos].reset_index(drop=True)


# ----------------------------------------------------------------------------- labels
def runtime_labels(times: np.ndarray, kind: str = "ratio", temperature: float = 1.0) -> np.ndarray:
    """Target distributions (problems x kernels) from measured times (NaN or inf = not measured).

    ``ratio``: p_i ∝ max(t)/t_i over the measured kernels (p_i/p_j = t_j/t_i);
    ``onehot``: the fastest measured kernel (exact ties share equally);
    ``softmax``: p_i ∝ exp(-(t_i/t_min)/temperature) over the measured kernels.
    Unmeasured kernels (censored-away or inapplicable) get p = 0. A row with no
    measured kernel is all zeros.
    """
    if kind not in LABEL_KINDS:
        raise KbenchInputError(f"unknown label kind {kind!r}; use one of {', '.join(LABEL_KINDS)}")
    t = np.asarray(times, dtype=np.float64)
    if t.ndim != 2:
        raise KbenchInputError(f"runtime_labels: expected a (problems x kernels) matrix, got shape {t.shape}")
    measured = np.isfinite(t)
    if (t[measured] <= 0).any():
        raise KbenchInputError("runtime_labels: measured times must be > 0")
    if not temperature > 0:
        raise KbenchInputError(f"runtime_labels: temperature must be > 0, got {temperature}")
    any_row = measured.any(axis=1, keepdims=True)
    tmax = np.where(any_row, np.max(np.where(measured, t, -np.inf), axis=1, keepdims=True), 1.0)
    tmin = np.where(any_row, np.min(np.where(measured, t, np.inf), axis=1, keepdims=True), 1.0)
    if kind == "ratio":
        w = np.where(measured, tmax / np.where(measured, t, 1.0), 0.0)
    elif kind == "onehot":
        w = (measured & (t <= tmin)).astype(np.float64)
    else:
        z = np.where(measured, -(np.where(measured, t, 1.0) / tmin) / temperature, -np.inf)
        w = np.where(measured, np.exp(z - np.where(any_row, z.max(axis=1, keepdims=True), 0.0)), 0.0)
    s = w.sum(axis=1, keepdims=True)
    return np.where(s > 0, w / np.where(s > 0, s, 1.0), 0.0)


# ----------------------------------------------------------------------------- parameter counts
def gamma_block_param_count(d_in: int, d_out: int, d_inner: int) -> int:
    """A1 (+b1), T's linear layer (+bias), its norm (scale and shift), A3 (+b3)."""
    return (d_in + 1) * d_out + (d_in + 1) * d_inner + 2 * d_inner + (d_inner + 1) * d_out


def gamma_param_count(d_in: int, widths, inner, n_classes: int) -> int:
    """Learned parameters of Γ = Ξ∘Γ_L∘...∘Γ_1∘Υ (Υ's statistics are not learned)."""
    total, d = 0, d_in
    for w, wi in zip(widths, inner):
        total += gamma_block_param_count(d, w, wi)
        d = w
    return total + (d + 1) * n_classes


def choose_gamma_width(d_in: int, n_classes: int, depth: int = 3, target: int = PAPER_N_PARAMETERS) -> int:
    """The width h (d_l = d'_l = h for every block) whose parameter count is closest to ``target``."""
    return min(range(4, 1025),
               key=lambda h: (abs(gamma_param_count(d_in, [h] * depth, [h] * depth, n_classes) - target), h))


def transformer_param_count(n_features: int, d_model: int, d_ff: int, n_classes: int, depth: int = 3) -> int:
    """Feature tokenizer (e_j, f_j per feature, [CLS]) + post-norm encoder blocks + Ξ."""
    tokens = 2 * n_features * d_model + d_model
    block = (3 * d_model * d_model + 3 * d_model) + (d_model * d_model + d_model) \
        + (d_model * d_ff + d_ff) + (d_ff * d_model + d_model) + 4 * d_model
    return tokens + depth * block + (d_model + 1) * n_classes


def choose_transformer_width(n_features: int, n_classes: int, target: int, depth: int = 3,
                             heads: int = 4) -> int:
    """d_model (a multiple of ``heads``, FFN width 2·d_model) with the count closest to ``target``."""
    return min(range(heads, 513, heads),
               key=lambda d: (abs(transformer_param_count(n_features, d, 2 * d, n_classes, depth) - target), d))


# ----------------------------------------------------------------------------- torch modules
def _torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a baselines dependency
        raise KbenchInputError("the reformer baselines need PyTorch (pip install torch)") from exc
    return torch


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run with ``torch.set_num_threads(n)``, restoring the previous count afterwards."""
    torch = _torch()
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def build_network(config: dict):
    """The PyTorch module described by ``config`` (see :meth:`Reformer._config`)."""
    torch = _torch()
    nn = torch.nn

    class GammaBlock(nn.Module):
        """x_l = ReLU(A1·x + b1 + A3·T(x) + b3), T = Dropout(ReLU(Norm(W·x + c)))."""

        def __init__(self, d_in, d_out, d_inner, norm, dropout):
            super().__init__()
            self.a1 = nn.Linear(d_in, d_out)
            self.t_linear = nn.Linear(d_in, d_inner)
            self.t_norm = nn.BatchNorm1d(d_inner) if norm == "batch" else nn.LayerNorm(d_inner)
            self.t_dropout = nn.Dropout(dropout)
            self.a3 = nn.Linear(d_inner, d_out)

        def transform(self, x):
            return self.t_dropout(torch.relu(self.t_norm(self.t_linear(x))))

        def forward(self, x):
            return torch.relu(self.a1(x) + self.a3(self.transform(x)))

    class Upsilon(nn.Module):
        """z-score normalisation with fixed (training-part) statistics."""

        def __init__(self, n):
            super().__init__()
            self.register_buffer("mean", torch.zeros(n))
            self.register_buffer("std", torch.ones(n))

        def forward(self, x):
            return (x - self.mean) / self.std

    class GammaNet(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.upsilon = Upsilon(c["n_features"])
            blocks, d = [], c["n_features"]
            for w, wi in zip(c["widths"], c["inner"]):
                blocks.append(GammaBlock(d, w, wi, c["norm"], c["dropout"]))
                d = w
            self.blocks = nn.ModuleList(blocks)
            self.xi = nn.Linear(d, c["n_classes"])

        def forward(self, x):  # logits; Ξ's softmax is applied by the loss / at prediction
            x = self.upsilon(x)
            for b in self.blocks:
                x = b(x)
            return self.xi(x)

    class TokenTransformerNet(nn.Module):
        def __init__(self, c):
            super().__init__()
            f, d = c["n_features"], c["d_model"]
            self.upsilon = Upsilon(f)
            self.token_weight = nn.Parameter(torch.randn(f, d) / math.sqrt(d))
            self.token_bias = nn.Parameter(torch.zeros(f, d))
            self.cls = nn.Parameter(torch.randn(1, 1, d) / math.sqrt(d))
            self.blocks = nn.ModuleList([
                nn.TransformerEncoderLayer(d, c["heads"], c["d_ff"], c["dropout"], activation="relu",
                                           batch_first=True, norm_first=False)
                for _ in range(c["depth"])])
            self.xi = nn.Linear(d, c["n_classes"])

        def forward(self, x):
            z = self.upsilon(x)
            tok = z.unsqueeze(-1) * self.token_weight + self.token_bias
            h = torch.cat([self.cls.expand(len(x), -1, -1), tok], dim=1)
            for b in self.blocks:
                h = b(h)
            return self.xi(h[:, 0])

    return GammaNet(config) if config["kind"] == "gamma" else TokenTransformerNet(config)


# ----------------------------------------------------------------------------- numpy path
class NumpyReformer:
    """The trained Γ network as plain float32 numpy (eval mode: no dropout, batch-norm folded).

    ``logits(x)`` takes raw features (n x F, or one row of F) like the PyTorch
    module; ``proba`` adds Ξ's softmax.
    """

    def __init__(self, blocks: list[dict], head_w: np.ndarray, head_b: np.ndarray):
        self.blocks, self.head_w, self.head_b = blocks, head_w, head_b
        self._plan = None

    @classmethod
    def from_state(cls, config: dict, state: dict[str, np.ndarray]) -> NumpyReformer:
        if config["kind"] != "gamma":
            raise KbenchInputError("NumpyReformer exports the Γ network only")
        f64 = lambda a: np.ascontiguousarray(np.asarray(a, dtype=np.float64))  # noqa: E731
        mean, std = f64(state["upsilon.mean"]), f64(state["upsilon.std"])
        blocks = []
        for i, (w, _inner) in enumerate(zip(config["widths"], config["inner"])):
            p = f"blocks.{i}."
            a1, b1 = f64(state[p + "a1.weight"]), f64(state[p + "a1.bias"])
            tw, tb = f64(state[p + "t_linear.weight"]), f64(state[p + "t_linear.bias"])
            a3, b3 = f64(state[p + "a3.weight"]), f64(state[p + "a3.bias"])
            g, beta = f64(state[p + "t_norm.weight"]), f64(state[p + "t_norm.bias"])
            ln = None
            if config["norm"] == "batch":  # eval mode: an affine map, folded into T's linear layer
                scale = g / np.sqrt(f64(state[p + "t_norm.running_var"]) + config.get("bn_eps", 1e-5))
                tb = (tb - f64(state[p + "t_norm.running_mean"])) * scale + beta
                tw = tw * scale[:, None]
            else:
                ln = (g.astype(np.float32), beta.astype(np.float32), np.float32(config.get("ln_eps", 1e-5)))
            m = np.concatenate([a1, tw], axis=0)  # (w + wi) x d_in: the block's two input matmuls in one
            c = np.concatenate([b1 + b3, tb])
            if i == 0:  # fold Υ: (x - mean)/std · Mᵀ = x · (M/std)ᵀ - (mean/std) · Mᵀ
                m = m / std[None, :]
                c = c - m @ mean
            blocks.append({"m": np.ascontiguousarray(m.T, dtype=np.float32), "c": c.astype(np.float32),
                           "a3": np.ascontiguousarray(a3.T, dtype=np.float32), "w": w, "ln": ln})
        return cls(blocks, np.ascontiguousarray(f64(state["xi.weight"]).T, dtype=np.float32),
                   f64(state["xi.bias"]).astype(np.float32))

    def _row_plan(self):
        """Buffers and matrices of the batch-1 path, built once (no allocation per call).

        Each block reads one buffer ``v = [x | 1 | t]``: T's linear layer is
        ``[x | 1] @ [W; b]`` written straight into ``v``'s tail, and after T's ReLU
        the block's output is ``v @ [A1; b1 + b3; A3]`` in one product, written
        into the next block's buffer. Biases ride on the constant 1, so a block is
        two matrix-vector products and two ReLUs: 13 numpy calls in all.
        """
        if getattr(self, "_plan", None) is None:
            d = self.blocks[0]["m"].shape[0]
            bufs = []
            for b in self.blocks:
                v = np.zeros(d + 1 + b["m"].shape[1] - b["w"], np.float32)
                v[d] = 1.0
                bufs.append((v, d))
                d = b["w"]
            head = np.zeros(d + 1, np.float32)
            head[d] = 1.0
            plan = []
            for i, (b, (v, d)) in enumerate(zip(self.blocks, bufs)):
                w, m, c = b["w"], b["m"], b["c"]
                t_mat = np.ascontiguousarray(np.vstack([m[:, w:], c[None, w:]]))
                out_mat = np.ascontiguousarray(np.vstack([m[:, :w], c[None, :w], b["a3"]]))
                nxt = bufs[i + 1][0] if i + 1 < len(bufs) else head
                t = v[d + 1:]
                plan.append((v[:d + 1], t_mat, t, np.zeros_like(t), v, out_mat, nxt[:w], np.zeros(w, np.float32)))
            self._plan = plan
            self._row_in = bufs[0][0][:bufs[0][1]]
            self._head_in = head
            self._head_mat = np.ascontiguousarray(np.vstack([self.head_w, self.head_b[None]]))
            self._out = np.empty(len(self.head_b), np.float32)
        return self._plan

    def logits_row(self, x: np.ndarray) -> np.ndarray:
        """Logits of one problem (1-D float32 features), the batch-1 fast path (batch-norm models).

        Reuses per-instance buffers (not thread-safe: one instance per thread) and returns a copy.
        """
        dot, relu = np.dot, np.maximum
        plan = self._row_plan()
        self._row_in[:] = x
        for x_aug, t_mat, t, t_zero, v, out_mat, nxt, nxt_zero in plan:
            dot(x_aug, t_mat, out=t)
            relu(t, t_zero, out=t)  # an array operand: cheaper than broadcasting the scalar 0
            dot(v, out_mat, out=nxt)
            relu(nxt, nxt_zero, out=nxt)
        return dot(self._head_in, self._head_mat, out=self._out).copy()

    def to_onnx(self):
        """The same network as an ONNX model (``onnx.ModelProto``; needs the ``onnx`` package).

        Input ``x`` (batch x features, raw: Υ is folded in), output ``logits``
        (batch x kernels). Per block: ``Gemm`` for T's linear layer, ``Relu``
        (``LayerNormalization`` first for layer-norm models), ``Gemm`` for A1 with
        both biases, ``Gemm`` adding A3·T(x) to it, ``Relu``; then Ξ's linear layer.
        """
        try:
            import onnx
            from onnx import TensorProto, helper, numpy_helper
        except ImportError as exc:  # pragma: no cover - the [onnx] extra installs it
            raise KbenchInputError("the ONNX export needs the 'onnx' package: pip install 'kbench[onnx]'") from exc
        nodes, inits = [], []

        def const(name, a):
            inits.append(numpy_helper.from_array(np.ascontiguousarray(a, dtype=np.float32), name))
            return name

        cur = "x"
        for i, b in enumerate(self.blocks):
            w, m, c = b["w"], b["m"], b["c"]
            t = f"t{i}"
            nodes.append(helper.make_node("Gemm", [cur, const(f"t_w{i}", m[:, w:]), const(f"t_b{i}", c[w:])], [t]))
            if b["ln"] is not None:
                g, beta, eps = b["ln"]
                nodes.append(helper.make_node("LayerNormalization", [t, const(f"ln_g{i}", g), const(f"ln_b{i}", beta)],
                                              [f"tn{i}"], axis=-1, epsilon=float(eps)))
                t = f"tn{i}"
            nodes += [helper.make_node("Relu", [t], [f"tr{i}"]),
                      helper.make_node("Gemm", [cur, const(f"a1_w{i}", m[:, :w]), const(f"a1_b{i}", c[:w])], [f"u{i}"]),
                      helper.make_node("Gemm", [f"tr{i}", const(f"a3_w{i}", b["a3"]), f"u{i}"], [f"s{i}"]),
                      helper.make_node("Relu", [f"s{i}"], [f"x{i + 1}"])]
            cur = f"x{i + 1}"
        nodes.append(helper.make_node("Gemm", [cur, const("xi_w", self.head_w), const("xi_b", self.head_b)], ["logits"]))
        n_in, n_out = self.blocks[0]["m"].shape[0], len(self.head_b)
        graph = helper.make_graph(
            nodes, "reformer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", n_in])],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", n_out])], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="kbench")
        model.ir_version = 8  # readable by every ONNX Runtime since 1.10
        onnx.checker.check_model(model)
        return model

    def logits(self, x: np.ndarray) -> np.ndarray:
        """Logits (n x C) of raw features (n x F); one problem (F,) gives (C,)."""
        x = np.asarray(x, dtype=np.float32)
        if x.ndim == 1 and all(b["ln"] is None for b in self.blocks):
            return self.logits_row(np.ascontiguousarray(x))
        for b in self.blocks:
            y = x @ b["m"]
            y += b["c"]
            w = b["w"]
            t = y[..., w:]
            if b["ln"] is not None:
                g, beta, eps = b["ln"]
                mu = t.mean(axis=-1, keepdims=True)
                var = ((t - mu) ** 2).mean(axis=-1, keepdims=True)
                t = (t - mu) / np.sqrt(var + eps) * g + beta
            np.maximum(t, 0.0, out=t)
            x = y[..., :w]
            x += t @ b["a3"]
            np.maximum(x, 0.0, out=x)
        out = x @ self.head_w
        out += self.head_b
        return out

    def proba(self, x: np.ndarray) -> np.ndarray:
        z = self.logits(x)
        z = z - z.max(axis=-1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=-1, keepdims=True)


class OnnxReformer:
    """The trained Γ network run by ONNX Runtime on one CPU thread (needs ``onnxruntime``).

    ``logits(x)`` takes raw features (n x F, or one row of F) like the other paths;
    one row goes through ``logits_row``, which binds preallocated input and output
    buffers once (ONNX Runtime's I/O binding), so a call copies the features in
    and runs the graph, with no allocation.
    """

    def __init__(self, model_bytes: bytes, threads: int = 1):
        try:
            import onnxruntime as ort
        except ImportError as exc:  # pragma: no cover - the [onnx] extra installs it
            raise KbenchInputError("the ONNX path needs 'onnxruntime': pip install 'kbench[onnx]'") from exc
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no busy threads between calls
        self.ort_model = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
        self._ort = ort
        self._binding = None

    @classmethod
    def from_numpy(cls, lean: NumpyReformer, threads: int = 1) -> OnnxReformer:
        return cls(lean.to_onnx().SerializeToString(), threads)

    def _bind(self, n_in: int, n_out: int):
        ort = self._ort
        self._x = np.zeros((1, n_in), np.float32)
        self._y = np.zeros((1, n_out), np.float32)
        self._binding = self.ort_model.io_binding()
        self._binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(self._x))
        self._binding.bind_output("logits", "cpu", 0, np.float32, [1, n_out], self._y.ctypes.data)
        self._run_options = ort.RunOptions()

    def logits_row(self, x: np.ndarray) -> np.ndarray:
        """Logits of one problem: the batch-1 fast path (not thread-safe: one instance per thread)."""
        if self._binding is None:
            self._bind(len(x), int(self.ort_model.get_outputs()[0].shape[1]))
        self._x[0] = x
        self.ort_model.run_with_iobinding(self._binding, self._run_options)
        return self._y[0].copy()

    def logits(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32)
        if x.ndim == 1:
            return self.logits_row(x)
        return self.ort_model.run(None, {"x": np.ascontiguousarray(x)})[0]


# ----------------------------------------------------------------------------- the baseline
class Reformer(Baseline):
    """The Reformer network (3 Γ-blocks, ~80k parameters) trained on runtime-ratio labels."""

    name = "reformer"
    description = "Reformer: 3 Γ-blocks (~81k parameters) on runtime-ratio labels, PyTorch CPU"
    stochastic = True
    # float32 training over up to 30 epochs amplifies a last-bit difference of one matrix product into another
    # fit: the thread count is fixed (``threads``), the PyTorch build and the CPU's kernels are not
    machine_dependent = ("its float32 training depends on the PyTorch build and the CPU's vector "
                         "instructions (it trains on 1 thread, so not on the core count), and up to 30 epochs "
                         "turn a last-bit difference into another fit of the same seed")
    kind = "gamma"
    #: lr, schedule and epochs were chosen on mi100 random's *valid* part (seed 0; see the module docstring)
    DEFAULTS = dict(labels="ratio", norm="batch", depth=3, width=None, dropout=0.1, lr=3e-3, weight_decay=0.0,
                    schedule="cosine", batch_size=512, max_epochs=30, patience=10, rows_per_epoch=None,
                    valid_rows=None, mask="tail", threads=1, softmax_temperature=1.0,
                    target_parameters=PAPER_N_PARAMETERS, verbose=True)

    def __init__(self, **params):
        unknown = set(params) - set(self.DEFAULTS)
        if unknown:
            raise KbenchInputError(f"{self.name}: unknown parameter(s) {sorted(unknown)}; "
                                   f"known: {sorted(self.DEFAULTS)}")
        merged = {**self.DEFAULTS, **params}
        if merged["labels"] not in LABEL_KINDS:
            raise KbenchInputError(f"{self.name}: labels must be one of {LABEL_KINDS}, got {merged['labels']!r}")
        if merged["mask"] not in MASKS:
            raise KbenchInputError(f"{self.name}: mask must be one of {MASKS}, got {merged['mask']!r}")
        if merged["schedule"] not in SCHEDULES:
            raise KbenchInputError(f"{self.name}: schedule must be one of {SCHEDULES}, got {merged['schedule']!r}")
        if merged["norm"] not in NORMS:
            raise KbenchInputError(f"{self.name}: norm must be one of {NORMS}, got {merged['norm']!r}")
        super().__init__(**merged)
        self.net = None
        self.config: dict | None = None
        self.columns: list[str] | None = None
        self.space: KernelSpace | None = None
        self.seen: dict[str, list[str]] = {}
        self._numpy: NumpyReformer | None = None
        self._onnx: OnnxReformer | None = None

    def supports(self, dataset) -> bool:
        """Kernel-selection datasets only: a tile-selection vocabulary (tens of thousands of tile
        configurations) would leave Ξ most of the ~81k parameters and the Γ-blocks almost none."""
        return dataset_task(dataset) == "kernel-selection"

    # -- architecture -------------------------------------------------------------
    def _config(self, n_features: int, n_classes: int) -> dict:
        p = self.params
        depth = int(p["depth"])
        h = int(p["width"] or choose_gamma_width(n_features, n_classes, depth, p["target_parameters"]))
        return {"kind": "gamma", "n_features": n_features, "n_classes": n_classes, "widths": [h] * depth,
                "inner": [h] * depth, "norm": p["norm"], "dropout": float(p["dropout"]), "bn_eps": 1e-5,
                "ln_eps": 1e-5}

    def n_parameters(self) -> int | None:
        if self.net is None:
            return None
        return int(sum(t.numel() for t in self.net.parameters()))

    def formula_parameters(self) -> int:
        c = self.config
        if c["kind"] == "gamma":
            return gamma_param_count(c["n_features"], c["widths"], c["inner"], c["n_classes"])
        return transformer_param_count(c["n_features"], c["d_model"], c["d_ff"], c["n_classes"], c["depth"])

    def describe(self) -> str:
        c = self.config
        if c["kind"] == "gamma":
            arch = (f"{len(c['widths'])} Γ-blocks, d_l = {c['widths']}, d'_l = {c['inner']}, "
                    f"{c['norm']}-norm")
        else:
            arch = (f"{c['depth']} post-norm transformer blocks over {c['n_features']} feature tokens, "
                    f"d_model {c['d_model']}, {c['heads']} heads, FFN {c['d_ff']}")
        return (f"{self.name}: {c['n_features']} features -> {arch} -> {c['n_classes']} kernels; "
                f"{self.n_parameters():,} parameters (paper: {PAPER_N_PARAMETERS:,})")

    # -- data ---------------------------------------------------------------------
    def _features(self, dataset, problems: pd.DataFrame) -> np.ndarray:
        """The input columns of the shared features of these problem rows (raw: Υ is in the network)."""
        return problem_features(problems)[self.columns].to_numpy(dtype=np.float32)

    def _seen_mask(self, problems: pd.DataFrame) -> np.ndarray:
        """(problems x kernels): kernel measured in training for the (direction, dtype), else direction."""
        out = np.zeros((len(problems), len(self.space.names)), dtype=bool)
        key = (problems["direction"].astype(str) + "|" + problems["dtype"].astype(str)).to_numpy()
        for k in pd.unique(key):  # a handful of (direction, dtype) groups
            row = np.zeros(len(self.space.names), dtype=bool)
            names = self.seen.get(k)
            if names is None:
                names = self.seen.get(k.split("|", 1)[0], [])
            row[[self.space.index[n] for n in names if n in self.space.index]] = True
            out[key == k] = row
        return out

    def _label_matrix(self, dataset, problems):
        t = runtime_matrix(dataset, problems, self.space)
        p = runtime_labels(t, self.params["labels"], self.params["softmax_temperature"])
        return t, p

    # -- training -----------------------------------------------------------------
    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        torch = _torch()
        self.seed = int(seed)
        with torch_threads(self.params["threads"]):
            return self._fit(dataset, train_ids, valid_ids, torch)

    def _fit(self, dataset, train_ids, valid_ids, torch):
        """:meth:`fit` inside its thread setting: data, network, training epochs, then the best epoch's weights."""
        p = self.params
        t_start = time.perf_counter()
        train = problems_of(dataset, train_ids)
        if len(train) == 0:
            raise KbenchInputError(f"{self.name}: no training problems")
        x_tr, y_tr, std = self._training_arrays(dataset, train)
        valid = self._valid_problems(dataset, valid_ids)
        self._init_network(std, torch)
        if p["verbose"]:
            print(self.describe(), file=sys.stderr)
        valid_part = self._valid_part(dataset, valid) if valid is not None else None
        n = len(x_tr)
        per_epoch = n if not p["rows_per_epoch"] else min(n, int(p["rows_per_epoch"]))
        history, best, best_state, epoch_times = self._train_epochs(x_tr, y_tr, per_epoch, valid_part, torch)
        self.net.load_state_dict(best_state)
        self.net.eval()
        self._numpy = self._onnx = None
        self.fit_info = {"n_parameters": self.n_parameters(), "paper_n_parameters": PAPER_N_PARAMETERS,
                         "architecture": self.describe(), "n_train": int(n), "rows_per_epoch": int(per_epoch),
                         "epochs_run": len(history), "best_epoch": best[0],
                         "valid_top1": best[1] if valid is not None else None,
                         "valid_loss": best[2] if valid is not None else None,
                         "epoch_time_s_mean": float(np.mean(epoch_times)) if epoch_times else None,
                         "fit_time_s": time.perf_counter() - t_start, "threads": p["threads"],
                         "history": history}
        return self

    def _training_arrays(self, dataset, train: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, Standardizer]:
        """Fix the kernel space, the seen kernels and the input columns on the training problems; return
        their inputs and float32 labels (problems with no measured kernel left out) and Υ's statistics."""
        self.space = KernelSpace.fit(dataset, train["problem_id"])
        rt = train_runtimes(dataset, train["problem_id"])
        self.seen = {"|".join(k): v for k, v in seen_kernels(rt, ("direction", "dtype")).items()}
        self.seen.update({k[0]: v for k, v in seen_kernels(rt, ("direction",)).items()})
        feats = features_for(dataset, train["problem_id"].to_numpy())
        self.columns = reformer_columns(feats.columns)
        std = Standardizer().fit(feats, self.columns)
        x_tr = feats[self.columns].to_numpy(dtype=np.float32)
        _, y_tr = self._label_matrix(dataset, train)
        keep = y_tr.sum(axis=1) > 0
        return x_tr[keep], y_tr[keep].astype(np.float32), std

    def _valid_problems(self, dataset, valid_ids) -> pd.DataFrame | None:
        """The problems that model selection scores each epoch (None: no valid part), at most ``valid_rows``."""
        valid = problems_of(dataset, valid_ids) if valid_ids is not None and len(valid_ids) else None
        if valid is not None and self.params["valid_rows"] and len(valid) > int(self.params["valid_rows"]):
            # a fixed subsample (the same for every seed) keeps per-epoch scoring cheap
            pick = np.sort(np.random.default_rng(0).permutation(len(valid))[:int(self.params["valid_rows"])])
            valid = valid.iloc[pick].reset_index(drop=True)
        return valid

    def _init_network(self, std: Standardizer, torch) -> None:
        """A new network, initialised from the seed, whose Υ standardises with the training statistics."""
        self.config = self._config(len(self.columns), len(self.space.names))
        torch.manual_seed(self.seed)
        self.net = build_network(self.config)
        with torch.no_grad():
            self.net.upsilon.mean.copy_(torch.as_tensor(std.mean, dtype=torch.float32))
            self.net.upsilon.std.copy_(torch.as_tensor(std.std, dtype=torch.float32))

    def _valid_part(self, dataset, valid: pd.DataFrame) -> _ValidPart:
        """What each epoch's model selection needs of the valid problems, computed once."""
        x = self._features(dataset, valid)
        times, labels = self._label_matrix(dataset, valid)
        rank_allowed = self._rank_allowed(valid)
        complete = ~valid["censored"].to_numpy(dtype=bool) if "censored" in valid else np.ones(len(valid), bool)
        return _ValidPart(x=x, times=times, labels=labels, rank_allowed=rank_allowed, complete=complete)

    def _train_epochs(self, x_tr: np.ndarray, y_tr: np.ndarray, per_epoch: int, valid: _ValidPart | None, torch):
        """Train up to ``max_epochs`` epochs of ``per_epoch`` shuffled rows, keeping the best epoch's weights
        (valid top-1, then valid loss; without a valid part the last epoch's) and stopping after ``patience``
        epochs without a better one. Returns ``(history, best, best_state, epoch_times)`` with ``best`` =
        (epoch, valid top-1, valid loss)."""
        p = self.params
        gen = torch.Generator().manual_seed(self.seed)
        opt = torch.optim.Adam(self.net.parameters(), lr=p["lr"], weight_decay=p["weight_decay"])
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=int(p["max_epochs"])) \
            if p["schedule"] == "cosine" else None
        xt, yt = torch.from_numpy(x_tr), torch.from_numpy(y_tr)
        history, best, best_state, bad = [], None, None, 0
        epoch_times = []
        for epoch in range(int(p["max_epochs"])):
            t0 = time.perf_counter()
            self.net.train()
            perm = torch.randperm(len(xt), generator=gen)[:per_epoch]
            total = self._train_epoch(opt, perm, xt, yt, torch)
            if sched is not None:
                sched.step()
            epoch_times.append(time.perf_counter() - t0)
            row = {"epoch": epoch, "train_loss": total / per_epoch, "epoch_s": epoch_times[-1]}
            if valid is None:
                history.append(row)
                best_state = {k: v.detach().clone() for k, v in self.net.state_dict().items()}
                best = (epoch, 0.0, 0.0)
                continue
            vloss, vtop1 = self._valid_loss_top1(valid, torch)
            row.update(valid_loss=vloss, valid_top1=vtop1)
            history.append(row)
            if best is None or (vtop1, -vloss) > (best[1], -best[2]):
                best, bad = (epoch, vtop1, vloss), 0
                best_state = {k: v.detach().clone() for k, v in self.net.state_dict().items()}
            else:
                bad += 1
                if bad >= int(p["patience"]):
                    break
        return history, best, best_state, epoch_times

    def _train_epoch(self, opt, perm, xt, yt, torch) -> float:
        """One pass over the training rows in the order ``perm``, in mini-batches of cross-entropy
        against the soft labels: the summed loss (each batch's mean loss times its size)."""
        bs = int(self.params["batch_size"])
        total = 0.0
        for i in range(0, len(perm), bs):
            idx = perm[i:i + bs]
            if len(idx) < 2 and self.config.get("norm") == "batch":
                continue  # batch-norm needs two rows
            logits = self.net(xt[idx])
            loss = -(yt[idx] * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        return total

    def _valid_loss_top1(self, valid: _ValidPart, torch) -> tuple[float, float]:
        """Cross-entropy against the valid labels, and the share of valid problems whose choice is fastest."""
        logits = self._logits_torch(valid.x, torch)
        logp = logits - logits.max(axis=1, keepdims=True)
        logp = logp - np.log(np.exp(logp).sum(axis=1, keepdims=True))
        vloss = float(-(valid.labels * logp).sum(axis=1).mean())
        return vloss, _top1(logits, valid.times, valid.rank_allowed, valid.complete)

    def _logits_torch(self, x: np.ndarray, torch, batch: int = 8192) -> np.ndarray:
        self.net.eval()
        out = []
        with torch.inference_mode():
            for i in range(0, len(x), batch):
                out.append(self.net(torch.from_numpy(np.array(x[i:i + batch], dtype=np.float32))).numpy())
        return np.concatenate(out) if out else np.zeros((0, self.config["n_classes"]), np.float32)

    # -- prediction -----------------------------------------------------------------
    def _check_fitted(self):
        if self.net is None:
            raise KbenchInputError(f"{self.name}: call fit(...) (or load a saved model) before predict")

    def _rank_allowed(self, problems):
        """(allowed in the ranking, kernels that come first) per the ``mask`` option."""
        allowed = self.space.allowed(problems)
        seen = self._seen_mask(problems)
        mode = self.params["mask"]
        if mode == "drop":
            return allowed & seen, seen
        if mode == "none":
            return allowed, np.zeros_like(seen)
        return allowed, seen

    def scores(self, dataset, ids) -> pd.DataFrame:
        """Ξ's softmax (problems x kernels), indexed by problem_id."""
        self._check_fitted()
        problems = problem_rows(dataset, ids)
        torch = _torch()
        with torch_threads(self.params["threads"]):
            z = self._logits_torch(self._features(dataset, problems), torch)
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return pd.DataFrame(z / z.sum(axis=1, keepdims=True), columns=self.space.names,
                            index=pd.Index(problems["problem_id"].to_numpy(), name="problem_id"))

    def predict(self, dataset, ids, backend: str = "torch") -> pd.DataFrame:
        """``problem_id, ranking``; ``backend="numpy"`` or ``"onnx"`` runs a lean path instead of PyTorch."""
        self._check_fitted()
        problems = problem_rows(dataset, ids)
        x = self._features(dataset, problems)
        if backend == "numpy":
            logits = self.numpy_model().logits(x)
        elif backend == "onnx":
            logits = self.onnx_model().logits(x)
        elif backend == "torch":
            torch = _torch()
            with torch_threads(self.params["threads"]):
                logits = self._logits_torch(x, torch)
        else:
            raise KbenchInputError(f"unknown backend {backend!r}; use torch, numpy or onnx")
        return predictions_frame(problems["problem_id"], self._rankings(logits, problems))

    def _rankings(self, logits: np.ndarray, problems) -> np.ndarray:
        allowed, first = self._rank_allowed(problems)
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        prob = z / z.sum(axis=1, keepdims=True)
        return rank_by_scores(prob + 2.0 * first, self.space.names, allowed)

    def numpy_model(self) -> NumpyReformer:
        self._check_fitted()
        if self._numpy is None:
            self._numpy = NumpyReformer.from_state(self.config, self._state_arrays())
        return self._numpy

    def onnx_model(self) -> OnnxReformer:
        """The network under ONNX Runtime (one thread); needs the ``onnx`` extra."""
        if self._onnx is None:
            self._onnx = OnnxReformer.from_numpy(self.numpy_model(), threads=self.params["threads"])
        return self._onnx

    # -- persistence ----------------------------------------------------------------
    def _state_arrays(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy().copy() for k, v in self.net.state_dict().items()}

    def get_state(self):
        self._check_fitted()
        info = {k: v for k, v in self.fit_info.items()}
        state = {"config": self.config, "columns": self.columns, "space": self.space.to_dict(),
                 "seen": self.seen, "fit_info": info}
        return state, self._state_arrays()

    def set_state(self, state, arrays, path):
        torch = _torch()
        self.config, self.columns = state["config"], state["columns"]
        self.space = KernelSpace.from_dict(state["space"])
        self.seen = state["seen"]
        self.fit_info = state.get("fit_info", {})
        self.net = build_network(self.config)
        self.net.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in arrays.items()})
        self.net.eval()
        self._numpy = self._onnx = None


@dataclass(frozen=True)
class _ValidPart:
    """The valid problems' inputs, runtimes (problems x kernels, NaN: not measured), soft labels,
    ranking mask (allowed, first) and which problems list every kernel (not censored)."""

    x: np.ndarray
    times: np.ndarray
    labels: np.ndarray
    rank_allowed: tuple[np.ndarray, np.ndarray]
    complete: np.ndarray


def _top1(logits: np.ndarray, t: np.ndarray, allowed_first, complete: np.ndarray) -> float:
    """Share of problems whose choice is a fastest kernel, choosing as the evaluator does."""
    allowed, first = allowed_first
    measured = ~np.isnan(t)
    score = np.where(allowed, logits.astype(np.float64), -np.inf) + np.where(first, 1e6, 0.0)
    score = np.where(complete[:, None] & ~measured, -np.inf, score)
    choice = np.argmax(score, axis=1)
    tc = t[np.arange(len(t)), choice]
    tbest = np.nanmin(np.where(measured, t, np.inf), axis=1)
    return float(np.mean(np.isfinite(score.max(axis=1)) & (tc <= tbest)))


class ReformerOneHot(Reformer):
    name = "reformer-onehot"
    description = "Reformer label ablation: one-hot (fastest kernel) labels"
    benchmark = False
    DEFAULTS = {**Reformer.DEFAULTS, "labels": "onehot"}


class ReformerSoftmax(Reformer):
    name = "reformer-softmax"
    description = "Reformer label ablation: softmax(-t/t_min) labels"
    benchmark = False
    DEFAULTS = {**Reformer.DEFAULTS, "labels": "softmax"}


class TransformerBlock(Reformer):
    """The Reformer with its Γ-blocks replaced by post-norm transformer encoder blocks over feature tokens."""

    name = "transformer-block"
    description = "Reformer with post-norm transformer blocks over feature tokens instead of Γ-blocks"
    benchmark = False
    kind = "transformer"
    #: one epoch over all 127k mi100 training problems takes ~10 min on this 2-core machine, so each
    #: epoch samples 8,192 problems and model selection scores a fixed 4,096 of the valid part
    DEFAULTS = {**Reformer.DEFAULTS, "lr": 1e-3, "rows_per_epoch": 8192, "max_epochs": 12, "patience": 12,
                "valid_rows": 4096, "heads": 4, "d_model": None}

    def _config(self, n_features: int, n_classes: int) -> dict:
        p = self.params
        depth = int(p["depth"])
        h = int(p["width"] or choose_gamma_width(n_features, n_classes, depth, p["target_parameters"]))
        target = gamma_param_count(n_features, [h] * depth, [h] * depth, n_classes)  # the Γ network's count
        d = int(p["d_model"] or choose_transformer_width(n_features, n_classes, target, depth, int(p["heads"])))
        return {"kind": "transformer", "n_features": n_features, "n_classes": n_classes, "d_model": d,
                "d_ff": 2 * d, "heads": int(p["heads"]), "depth": depth, "dropout": float(p["dropout"])}

    def numpy_model(self):
        raise KbenchInputError("transformer-block has no numpy export; use predict(..., backend='torch')")


__all__ = ["Reformer", "ReformerOneHot", "ReformerSoftmax", "TransformerBlock", "NumpyReformer", "OnnxReformer",
           "runtime_labels", "gamma_param_count", "gamma_block_param_count", "choose_gamma_width",
           "transformer_param_count", "choose_transformer_width", "reformer_columns", "build_network",
           "PAPER_N_PARAMETERS"]

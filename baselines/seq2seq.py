"""``seq2seq``: an encoder-decoder that translates a problem descriptor into a parameter sequence.

The task: for a tunable solver (ConvAsm1x1U) predict the tuple of
tuning parameters that won MIOpen's exhaustive tuning, one parameter per
decoder step, and at inference keep only tuples the solver accepts. The same
model and search serve *sequence-valued* kernel selection (``v100-tiles``:
a tile configuration is a sequence of schema and tile sizes).

Pieces (all used by the other tuning baselines too)
---------------------------------------------------
Descriptor (:func:`descriptor`)
    The problem's fields, one sequence position each: ``direction``,
    ``dtype`` (categorical) and ``n, c, k, x_h, x_w, y_h, y_w, fil_h, fil_w,
    stride_h, stride_w, pad_h, pad_w`` (numeric, kbench's true x/w/y terms),
    plus the solver's own direction-relative inputs when the space has a
    grammar (ConvAsm1x1U: ``in_channels, out_channels, img_hw``, see
    :func:`kbench.sources.tuning_grammar.asm1x1u_problem_inputs`).
Token encoding (:class:`DescriptorEncoder`, fitted on the training part)
    Fields that take a single value in training are dropped. Position ``j``
    gets a field id (a learned embedding = one-hot times a matrix), a value
    token (the value itself if it occurs in that field in training, else the
    field's UNK token; categorical values the same way), and for numeric
    fields ``log2(1 + v)`` z-normalised per field plus the one-hot of
    ``min(tz(v), 7)`` (trailing zero bits: the divisibility that the
    constraints test).
Sequence spaces (:class:`GrammarSpace`, :class:`CandidateSpace`)
    The output positions, each position's legal values, and the validity of
    a prefix for a problem: a tuning grammar's prefix predicates
    (``kbench.sources.tuning_grammar``) or "some candidate of this problem starts with
    this prefix" (the measured tile configurations of a problem).
Search (:func:`beam_search`, :func:`greedy_decode`)
    Model-agnostic: a *scorer* gives per-step log-probabilities. With
    ``constrained=True`` a prefix is only extended by values that keep it
    valid. A row whose beams all reach a dead end (every beam valid so far,
    no valid continuation) is searched again with wider beams (64, 512,
    4096) and, if those die too, by scoring every valid tuple of the problem
    (enumerated through the prefix predicates) and taking the best; so a
    constrained search returns a valid tuple whenever one exists.

Network (:class:`Seq2SeqNet`, PyTorch, CPU)
    Encoder: field/value embeddings + numeric extras -> ``conv_layers`` Conv1D
    layers (kernel 3, ReLU, same padding) over the descriptor positions ->
    one bidirectional LSTM layer. Decoder: an LSTM cell, initialised from the
    encoder's final states; at every step Bahdanau additive attention
    ``a_j = softmax_j(v^T tanh(W_e e_j + W_h h_{t-1}))`` over the encoder
    outputs, input = [embedding of the previous parameter token; context];
    output layer over the joint token vocabulary (every position's values)
    restricted to the current position's values. Loss: cross-entropy of
    every step with teacher forcing. ``use_conv=False`` is the plain
    encoder-decoder ablation (BiLSTM directly on the embeddings).

Training and selection
    Adam (lr 3e-3, constant; ``lr_schedule="cosine"`` decays it per step
    over ``max_epochs``), label smoothing 0.1, gradient clipping 1.0,
    mini-batches of 128 shuffled by a seeded numpy generator,
    ``torch.manual_seed(seed)``; after every epoch greedy decoding
    of the *valid* problems; the epoch with the best valid perfect
    prediction (ties: average accuracy) is kept; training stops after
    ``patience`` epochs without improvement or at ``max_epochs``.
    ``max_seconds`` is a safety cap only (it would make the epoch count
    machine-dependent; ``fit_info['stopped_by']`` says which rule stopped).
    Threads: ``torch.set_num_threads(threads)`` (default 1: on the shared 2-core
    development machine a batch-128 training step took 0.06 s of CPU with one
    thread and 2.5 s with two, through contention). The defaults (label
    smoothing 0.1, constant lr, 25 epochs) were picked on the valid part of
    ``mi50-tuning`` (random split) among a few variants (dropout 0.3, cosine
    decay, smaller widths), by valid perfect prediction.

Saving: ``baseline.json`` (configuration, vocabularies, normaliser, fit info)
plus ``arrays.safetensors`` (the network's weights); never pickle.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError, read_json_object
from kbench.core.version import __version__
from kbench.sources.tuning_grammar import SOLVER_PARAMS, get_grammar
from kbench_baselines.base import (
    Baseline,
    as_id_index,
    dataset_library,
    dataset_task,
    join_rankings,
    load_safetensors,
    predictions_frame,
    problems_of,
    save_safetensors,
)
from kbench_baselines.features import ENGINE_NAME, KNOB

SAVE_FORMAT = 1

CATEGORICAL_FIELDS = ("direction", "dtype")
NUMERIC_FIELDS = ("n", "c", "k", "x_h", "x_w", "y_h", "y_w", "fil_h", "fil_w",
                  "stride_h", "stride_w", "pad_h", "pad_w")
TZ_CAP = 7  # trailing-zero one-hot has TZ_CAP + 1 entries


# =============================================================================== descriptor
def descriptor(problems: pd.DataFrame, space=None) -> pd.DataFrame:
    """The descriptor fields of each problem (same order), categorical as str, numeric as int64.

    Adds the space's solver inputs (``space.extra_fields``) when it has any.
    """
    missing = [c for c in CATEGORICAL_FIELDS + NUMERIC_FIELDS if c not in problems.columns]
    if missing:
        raise KbenchInputError(f"problem table lacks descriptor column(s) {missing}")
    out = {c: problems[c].astype(str).to_numpy(dtype=object) for c in CATEGORICAL_FIELDS}
    for c in NUMERIC_FIELDS:
        out[c] = pd.to_numeric(problems[c], errors="coerce").fillna(-1).to_numpy(np.int64)
    if space is not None and getattr(space, "extra_fields", ()):
        extra = space.extra_inputs(problems)
        for c in space.extra_fields:
            out[c] = extra[c].to_numpy(np.int64)
    return pd.DataFrame(out)


def trailing_zeros(v: np.ndarray, cap: int = TZ_CAP) -> np.ndarray:
    """Trailing zero bits of positive integers, capped (0 for v <= 0)."""
    v = np.asarray(v, dtype=np.int64)
    out = np.zeros(v.shape, dtype=np.int64)
    for b in range(cap):
        out += (v > 0) & (v % (2 ** (b + 1)) == 0)
    return out


def numeric_matrix(desc: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Plain numeric features of a descriptor (for trees): raw values, log2(1+v), tz, one-hots."""
    cols, names = [], []
    for c in desc.columns:
        if c in CATEGORICAL_FIELDS:
            continue
        v = desc[c].to_numpy(np.float64)
        cols += [v, np.log2(1.0 + np.maximum(v, 0.0)), trailing_zeros(desc[c].to_numpy()).astype(float)]
        names += [c, f"log_{c}", f"tz_{c}"]
    for c, levels in (("direction", ("F", "B", "W")), ("dtype", ("FP32", "FP16", "BF16"))):
        for lv in levels:
            cols.append((desc[c].to_numpy() == lv).astype(float))
            names.append(f"{c}_{lv}")
    return np.column_stack(cols), names


class DescriptorEncoder:
    """Token / one-hot encoding of descriptor fields, fitted on training problems (JSON state)."""

    def __init__(self, fields=None, vocab=None, mean=None, std=None):
        self.fields = list(fields) if fields is not None else None
        self.vocab: dict[str, list[str]] = vocab or {}
        self.mean = dict(mean or {})
        self.std = dict(std or {})

    def fit(self, desc: pd.DataFrame) -> DescriptorEncoder:
        """Vocabularies and normalisers from training descriptors; fields with one value in
        training (e.g. the filter size of a 1x1-only solver) carry nothing and are dropped."""
        varying = [c for c in desc.columns if desc[c].nunique(dropna=False) > 1]
        self.fields = varying or list(desc.columns[:1])
        self.vocab = {c: sorted(pd.unique(desc[c].astype(str))) for c in self.fields}
        for c in self.fields:
            if c not in CATEGORICAL_FIELDS:
                lv = np.log2(1.0 + np.maximum(desc[c].to_numpy(np.float64), 0.0))
                self.mean[c], s = float(lv.mean()), float(lv.std())
                self.std[c] = s if s > 1e-12 else 1.0
        return self

    @property
    def n_tokens(self) -> int:
        # per field: UNK then its values
        return sum(len(v) + 1 for v in self.vocab.values())

    n_numeric = 2 + TZ_CAP + 1  # is_numeric flag, standardised log2, tz one-hot

    def transform(self, desc: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(tokens (N, F) int64, numeric (N, F, n_numeric) float32)."""
        missing = [c for c in self.fields if c not in desc.columns]
        if missing:
            raise KbenchInputError(f"descriptor lacks field(s) {missing}")
        n, f = len(desc), len(self.fields)
        tokens = np.zeros((n, f), dtype=np.int64)
        numeric = np.zeros((n, f, self.n_numeric), dtype=np.float32)
        base = 0
        for j, c in enumerate(self.fields):
            vocab = pd.Index(self.vocab[c])
            pos = vocab.get_indexer(desc[c].astype(str))
            tokens[:, j] = base + 1 + pos  # pos -1 (unseen) -> the field's UNK token `base`
            base += len(vocab) + 1
            if c not in CATEGORICAL_FIELDS:
                v = desc[c].to_numpy(np.float64)
                numeric[:, j, 0] = 1.0
                numeric[:, j, 1] = (np.log2(1.0 + np.maximum(v, 0.0)) - self.mean[c]) / self.std[c]
                numeric[np.arange(n), j, 2 + trailing_zeros(desc[c].to_numpy())] = 1.0
        return tokens, numeric

    def to_dict(self) -> dict:
        return {"fields": self.fields, "vocab": self.vocab, "mean": self.mean, "std": self.std}

    @classmethod
    def from_dict(cls, d: dict) -> DescriptorEncoder:
        return cls(d["fields"], d["vocab"], d["mean"], d["std"])


# =============================================================================== sequence spaces
class GrammarSpace:
    """The output space of a tuning grammar (``kbench.sources.tuning_grammar.Grammar``)."""

    kind = "grammar"

    def __init__(self, solver: str):
        self.solver = solver
        self.grammar = get_grammar(solver)
        self.params = tuple(self.grammar.params)
        self.values = [np.asarray(self.grammar.legal_values[p], dtype=np.int64) for p in self.params]
        self.extra_fields = ("in_channels", "out_channels", "img_hw")

    def extra_inputs(self, problems: pd.DataFrame) -> pd.DataFrame:
        return self.grammar.problem_inputs(problems.reset_index(drop=True))

    def context(self, problems: pd.DataFrame) -> pd.DataFrame:
        """Per-row data the validity checks read (aligned with ``problems``)."""
        return self.grammar.problem_inputs(problems.reset_index(drop=True)).reset_index(drop=True)

    def _rows(self, ctx: pd.DataFrame, rows: np.ndarray) -> dict:
        sub = ctx.iloc[np.asarray(rows, dtype=np.int64)]
        return {c: sub[c].to_numpy() for c in sub.columns}

    def valid_next(self, ctx, rows: np.ndarray, prefix: np.ndarray) -> np.ndarray:
        """(N, V_L) bool: which values of position L = prefix.shape[1] keep each prefix valid."""
        prefix = np.asarray(prefix, dtype=np.int64)
        n, L = prefix.shape
        if n == 0:
            return np.zeros((0, len(self.values[L])), dtype=bool)
        v = len(self.values[L])
        vals = {p: np.repeat(prefix[:, i], v) for i, p in enumerate(self.params[:L])}
        vals[self.params[L]] = np.tile(self.values[L], n)
        inp = self._rows(ctx, np.repeat(np.asarray(rows, dtype=np.int64), v))
        return self.grammar.prefix_valid(vals, inp, L + 1).reshape(n, v)

    def is_valid(self, ctx, rows: np.ndarray, tuples: np.ndarray) -> np.ndarray:
        tuples = np.asarray(tuples, dtype=np.int64)
        if len(tuples) == 0:
            return np.zeros(0, dtype=bool)
        vals = {p: tuples[:, i] for i, p in enumerate(self.params)}
        return self.grammar.prefix_valid(vals, self._rows(ctx, rows), None)

    def enumerate_valid(self, ctx, row: int) -> np.ndarray:
        """Every valid tuple (value indices, (M, P)) of one problem, by prefix expansion."""
        pref = np.zeros((1, 0), dtype=np.int64)
        idx = np.zeros((1, 0), dtype=np.int64)
        for L in range(len(self.params)):
            m = self.valid_next(ctx, np.full(len(pref), row), pref)
            r, c = np.nonzero(m)
            pref = np.column_stack([pref[r], self.values[L][c]])
            idx = np.column_stack([idx[r], c])
            if not len(pref):
                break
        return idx

    def decode(self, idx: np.ndarray) -> np.ndarray:
        """Value indices (N, P) -> parameter values (N, P)."""
        idx = np.asarray(idx, dtype=np.int64)
        if idx.shape[1] == 0:
            return np.zeros(idx.shape, dtype=np.int64)
        return np.column_stack([self.values[t][idx[:, t]] for t in range(idx.shape[1])])

    def encode(self, values: np.ndarray) -> np.ndarray:
        """Parameter values (N, P) -> value indices; -1 where a value is not legal."""
        values = np.asarray(values, dtype=np.int64)
        out = np.empty(values.shape, dtype=np.int64)
        for t in range(len(self.params)):
            out[:, t] = pd.Index(self.values[t]).get_indexer(values[:, t])
        return out

    def to_dict(self) -> dict:
        return {"kind": self.kind, "solver": self.solver}


class CandidateSpace:
    """Sequences whose validity is "the problem lists a candidate with this prefix".

    ``values[t]`` are integer codes (``labels[t]`` their printable values);
    the per-problem candidate sets are given at :meth:`context` time as a
    frame ``problem_id`` + the position columns (codes or labels).
    """

    kind = "candidates"
    extra_fields = ()

    def __init__(self, params, labels):
        self.params = tuple(params)
        self.labels = [np.asarray(lv, dtype=object) for lv in labels]
        self.values = [np.arange(len(lv), dtype=np.int64) for lv in self.labels]
        self.radix = np.array([len(v) for v in self.values], dtype=np.int64)

    def encode_labels(self, frame: pd.DataFrame) -> np.ndarray:
        """Label columns -> code matrix (N, P); -1 for unknown labels."""
        out = np.empty((len(frame), len(self.params)), dtype=np.int64)
        for t, p in enumerate(self.params):
            out[:, t] = pd.Index(self.labels[t].astype(str)).get_indexer(frame[p].astype(str))
        return out

    def _key(self, rows, codes):
        key = np.asarray(rows, dtype=np.int64).copy()
        for t in range(codes.shape[1]):
            key = key * self.radix[t] + codes[:, t]
        return key

    def context(self, problems: pd.DataFrame, candidates: pd.DataFrame) -> dict:
        """Prefix key sets of each problem's candidates (rows = positions in ``problems``)."""
        row = pd.Index(problems["problem_id"].astype(str)).get_indexer(candidates["problem_id"].astype(str))
        codes = self.encode_labels(candidates)
        ok = (row >= 0) & (codes >= 0).all(axis=1)
        row, codes = row[ok], codes[ok]
        keys = [np.unique(self._key(row, codes[:, :L])) for L in range(len(self.params) + 1)]
        return {"keys": keys, "rows": row, "codes": codes, "n": len(problems)}

    def valid_next(self, ctx, rows, prefix) -> np.ndarray:
        prefix = np.asarray(prefix, dtype=np.int64)
        n, L = prefix.shape
        v = len(self.values[L])
        base = self._key(rows, prefix) * self.radix[L]
        cand = (base[:, None] + self.values[L][None, :]).ravel()
        keys = ctx["keys"][L + 1]
        pos = np.searchsorted(keys, cand)
        hit = (pos < len(keys)) & (keys[np.minimum(pos, len(keys) - 1)] == cand)
        return hit.reshape(n, v)

    def is_valid(self, ctx, rows, tuples) -> np.ndarray:
        tuples = np.asarray(tuples, dtype=np.int64)
        keys = ctx["keys"][len(self.params)]
        cand = self._key(rows, tuples)
        pos = np.searchsorted(keys, cand)
        return (pos < len(keys)) & (keys[np.minimum(pos, len(keys) - 1)] == cand)

    def enumerate_valid(self, ctx, row: int) -> np.ndarray:
        return np.unique(ctx["codes"][ctx["rows"] == row], axis=0)

    def decode(self, idx):
        return np.asarray(idx, dtype=np.int64)

    def encode(self, values):
        return np.asarray(values, dtype=np.int64)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "params": list(self.params),
                "labels": [[str(x) for x in lv] for lv in self.labels]}


def space_from_dict(d: dict):
    if d["kind"] == "grammar":
        return GrammarSpace(d["solver"])
    if d["kind"] == "candidates":
        return CandidateSpace(d["params"], d["labels"])
    raise KbenchInputError(f"unknown sequence space kind {d['kind']!r}")


# =============================================================================== search
class TableScorer:
    """A scorer with fixed per-row, per-position log-probabilities (no dependence on the prefix).

    ``logp``: list over positions of (N, V_t) arrays. Used for per-parameter
    classifiers (XGBoost) and in tests (random logits).
    """

    def __init__(self, logp: list[np.ndarray]):
        self.logp = [np.asarray(a, dtype=np.float64) for a in logp]

    def start(self, rows):
        return np.asarray(rows, dtype=np.int64)

    def step(self, state, prev, t):
        return self.logp[t][state], state

    def take(self, state, idx):
        return state[idx]


def log_softmax(x: np.ndarray, axis=-1) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


@dataclass
class SearchResult:
    """Search output for N problems: best tuple (value indices), its score, and diagnostics."""

    best: np.ndarray         # (N, P) value indices; -1 where nothing was found
    score: np.ndarray        # (N,) log-probability of ``best``
    beams: np.ndarray        # (N, W, P) final beams, best first (-1 where empty)
    beam_scores: np.ndarray  # (N, W), -inf where empty
    fallback: np.ndarray     # (N,) bool: the beams died and every valid tuple was scored
    found: np.ndarray        # (N,) bool: a tuple was returned (False: no valid tuple exists)


#: beam widths tried, in order, for rows whose beams all reached dead ends
FALLBACK_WIDTHS = (64, 512, 4096)


def score_sequences(scorer, rows: np.ndarray, seqs: np.ndarray, batch: int = 65536) -> np.ndarray:
    """Teacher-forced log-probability of each sequence (value indices) for its row."""
    rows = np.asarray(rows, dtype=np.int64)
    seqs = np.asarray(seqs, dtype=np.int64)
    out = np.zeros(len(seqs))
    for s in range(0, len(seqs), batch):
        r, q = rows[s:s + batch], seqs[s:s + batch]
        state, prev = scorer.start(r), None
        tot = np.zeros(len(q))
        for t in range(q.shape[1]):
            logp, state = scorer.step(state, prev, t)
            tot += logp[np.arange(len(q)), q[:, t]]
            prev = q[:, t]
        out[s:s + batch] = tot
    return out


def _fallback(scorer, space, ctx, rows, dead: np.ndarray, best, score, found, width: int = 1):
    """Rows whose beams all died: wider beams on those rows (widths ``FALLBACK_WIDTHS``
    above ``width``); for rows still without a valid tuple, score every valid
    tuple of the problem and keep the best (the exact constrained argmax)."""
    idx = np.flatnonzero(dead)
    for w in FALLBACK_WIDTHS:
        if not len(idx):
            return
        if w <= width:
            continue
        wide = beam_search(scorer, space, ctx, rows[idx], w, True, fallback=False)
        ok = wide.found
        best[idx[ok]], score[idx[ok]], found[idx[ok]] = wide.best[ok], wide.score[ok], True
        idx = idx[~ok]
    for i in idx:
        cands = space.enumerate_valid(ctx, int(rows[i]))
        if not len(cands):
            found[i] = False
            continue
        s = score_sequences(scorer, np.full(len(cands), rows[i]), cands)
        j = int(np.argmax(s))
        best[i], score[i], found[i] = cands[j], s[j], True


def beam_search(scorer, space, ctx, rows, width: int = 10, constrained: bool = True,
                fallback: bool = True) -> SearchResult:
    """Beam search over ``space`` for each row; see the module docstring.

    ``rows``: indices into ``ctx`` (and into whatever the scorer's ``start``
    takes). Scores are sums of per-step log-probabilities; ties keep the
    lower (beam, value) index, so width 1 is exactly :func:`greedy_decode`.
    """
    if width < 1:
        raise KbenchInputError(f"beam width must be >= 1, got {width}")
    rows = np.asarray(rows, dtype=np.int64)
    n, P = len(rows), len(space.params)
    state = scorer.start(rows)
    scores = np.zeros((n, 1))
    seq = np.zeros((n, 1, 0), dtype=np.int64)
    prev = None
    for t in range(P):
        w = scores.shape[1]
        logp, state = scorer.step(state, prev, t)
        logp = np.asarray(logp, dtype=np.float64)
        V = logp.shape[1]
        if constrained:
            flat_prefix = space.decode(seq.reshape(n * w, t)) if t else np.zeros((n * w, 0), np.int64)
            mask = space.valid_next(ctx, np.repeat(rows, w), flat_prefix)
            logp = np.where(mask, logp, -np.inf)
        total = (scores.reshape(n * w, 1) + logp).reshape(n, w * V)
        k = min(width, w * V)
        order = np.argsort(-total, axis=1, kind="stable")[:, :k]
        new_scores = np.take_along_axis(total, order, axis=1)
        parent, value = order // V, order % V
        flat_parent = (np.arange(n)[:, None] * w + parent).ravel()
        seq = np.concatenate([seq.reshape(n * w, t)[flat_parent].reshape(n, k, t), value[:, :, None]], axis=2)
        state = scorer.take(state, flat_parent)
        prev = value.ravel()
        scores = new_scores
    alive = np.isfinite(scores)
    beams = np.where(alive[:, :, None], seq, -1)
    found = alive[:, 0].copy()
    best = beams[:, 0, :].copy()
    score = np.where(found, scores[:, 0], -np.inf)
    dead = ~found
    if constrained and fallback and dead.any():
        _fallback(scorer, space, ctx, rows, dead, best, score, found, width)
    return SearchResult(best, score, beams, np.where(alive, scores, -np.inf), dead & found, found)


def greedy_decode(scorer, space, ctx, rows, constrained: bool = True, fallback: bool = True) -> SearchResult:
    """Take the most likely (valid) value at each step."""
    rows = np.asarray(rows, dtype=np.int64)
    n, P = len(rows), len(space.params)
    state = scorer.start(rows)
    seq = np.zeros((n, P), dtype=np.int64)
    score = np.zeros(n)
    prev = None
    for t in range(P):
        logp, state = scorer.step(state, prev, t)
        logp = np.asarray(logp, dtype=np.float64)
        if constrained:
            mask = space.valid_next(ctx, rows, space.decode(seq[:, :t]) if t else np.zeros((n, 0), np.int64))
            logp = np.where(mask, logp, -np.inf)
        v = np.argmax(logp, axis=1)
        seq[:, t] = v
        score += logp[np.arange(n), v]
        prev = v
    found = np.isfinite(score)
    best = np.where(found[:, None], seq, -1)
    dead = ~found
    if constrained and fallback and dead.any():
        _fallback(scorer, space, ctx, rows, dead, best, score, found)
    return SearchResult(best, score, best[:, None, :], score[:, None], dead & found, found)


# =============================================================================== network
def _data_sha256(*parts: np.ndarray) -> str:
    """The sha256 of the training (and valid) inputs and labels, shapes included: what a resumed
    training state must have been trained on."""
    h = hashlib.sha256()
    for part in parts:
        a = np.ascontiguousarray(part)
        h.update(f"{a.dtype.str}{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _whole(v, low: int, high: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _fit_state_problem(doc: dict, max_epochs: int, patience: int) -> str | None:
    """Why a training state's loop counters cannot be an interrupted fit's (a forged ``epochs_done=10**6``),
    or None."""
    loop = doc.get("loop")
    if not isinstance(loop, dict):
        return "no loop counters"
    done = loop.get("epochs_done")
    if not _whole(done, 1, max_epochs):
        return f"epochs_done {str(done)[:20]!r} is not from 1 to max_epochs {max_epochs}"
    if not _whole(loop.get("best_epoch"), 0, done - 1):
        return f"best_epoch {str(loop.get('best_epoch'))[:20]!r} is not one of the {done} epochs done"
    if not _whole(loop.get("bad"), 0, patience):
        return f"bad {str(loop.get('bad'))[:20]!r} is not from 0 to patience {patience}"
    key = loop.get("best_key")
    if not isinstance(key, list) or not key or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in key):
        return "best_key is not a list of finite numbers"
    if not isinstance(loop.get("history"), list) or len(loop["history"]) > done:
        return "its history does not list its epochs"
    elapsed = loop.get("elapsed_s")
    if not isinstance(elapsed, (int, float)) or isinstance(elapsed, bool) or not math.isfinite(elapsed) or elapsed < 0:
        return f"elapsed_s {str(elapsed)[:20]!r} is not a duration"
    resumed = loop.get("resumed_at_epochs")
    if not isinstance(resumed, list) or not all(_whole(v, 0, done) for v in resumed):
        return "resumed_at_epochs is not a list of epochs done"
    if loop.get("stopped_by") not in (None, "patience", "max_seconds"):
        return f"stopped_by {str(loop.get('stopped_by'))[:20]!r} is not a stopping rule"
    return None


def _torch():
    import torch
    return torch


def net_class():
    """The network class, :class:`kbench_baselines._seq2seq_net.Seq2SeqNet` (imported on first use: its module
    imports torch, and importing this module does not)."""
    from kbench_baselines._seq2seq_net import Seq2SeqNet
    return Seq2SeqNet


class NetScorer:
    """Scorer (see :func:`beam_search`) over a :class:`Seq2SeqNet` for a set of encoded problems."""

    def __init__(self, net, tokens: np.ndarray, numeric: np.ndarray, batch: int = 4096):
        torch = _torch()
        self.net = net
        self.torch = torch
        with torch.no_grad():
            parts = [net.encode(torch.as_tensor(tokens[s:s + batch]), torch.as_tensor(numeric[s:s + batch]))
                     for s in range(0, len(tokens), batch)]
        self.enc = torch.cat([p[0] for p in parts])
        self.keys = torch.cat([p[1] for p in parts])
        self.h0 = torch.cat([p[2] for p in parts])
        self.c0 = torch.cat([p[3] for p in parts])
        self.last_attention = None

    def start(self, rows):
        r = self.torch.as_tensor(np.asarray(rows, dtype=np.int64))
        return (r, self.h0[r], self.c0[r])

    def step(self, state, prev, t):
        torch = self.torch
        r, h, c = state
        prev_t = torch.as_tensor(np.zeros(len(r), np.int64) if prev is None else np.asarray(prev, np.int64))
        with torch.no_grad():
            logp, h, c, a = self.net.step(self.enc[r], self.keys[r], h, c, self.net.prev_token(prev_t, t), t)
        self.last_attention = a
        return logp.numpy().astype(np.float64), (r, h, c)

    def take(self, state, idx):
        i = self.torch.as_tensor(np.asarray(idx, dtype=np.int64))
        r, h, c = state
        return (r[i], h[i], c[i])


# =============================================================================== data helpers
def solver_targets(dataset, solver: str, ids: Iterable[str] | None = None) -> pd.DataFrame:
    """``problem_id`` + the solver's parameter columns (int64) of a tuning dataset, one row per problem."""
    tg = getattr(dataset, "targets", None)
    if tg is None:
        raise KbenchInputError(f"dataset {getattr(dataset, 'name', '?')!r} has no targets table (not a tuning dataset)")
    if solver not in SOLVER_PARAMS:
        raise KbenchInputError(f"no parameter list for solver {solver!r}; known: {sorted(SOLVER_PARAMS)}")
    params = list(SOLVER_PARAMS[solver])
    t = tg[tg["solver"] == solver][["problem_id"] + params]
    if ids is not None:
        t = t[t["problem_id"].isin(as_id_index(ids))]
    t = t.dropna().drop_duplicates("problem_id").reset_index(drop=True)
    for p in params:
        t[p] = t[p].astype(np.int64)
    return t


def prediction_frame(ids, space, values: np.ndarray, found: np.ndarray | None = None) -> pd.DataFrame:
    """``problem_id`` + parameter columns (nullable Int64: NA where nothing was found)."""
    out = pd.DataFrame({"problem_id": np.asarray(ids, dtype=object).astype(str)})
    values = np.asarray(values, dtype=np.int64)
    for t, p in enumerate(space.params):
        col = pd.array(values[:, t], dtype="Int64")
        if found is not None:
            col[~np.asarray(found, dtype=bool)] = pd.NA
        out[p] = col
    return out


def _tuning_problems(dataset, solver, ids):
    """(targets aligned to the problems of ``ids`` that have the solver, their problem rows)."""
    tgt = solver_targets(dataset, solver, ids)
    if tgt.empty:
        raise KbenchInputError(f"no {solver} targets among the given problems")
    return tgt, problems_of(dataset, tgt["problem_id"])


# =============================================================================== model
class TuningModel:
    """Common fit/predict/save/load frame of the tuning baselines (not kernel-selection baselines).

    ``predict(dataset, ids)`` returns ``problem_id`` + the solver's parameter
    columns for every id. ``method`` names the model (kept off the selection
    registry on purpose: ``kbench run`` scores rankings, not tuples).
    """

    method = ""

    def __init__(self, solver: str | None = "ConvAsm1x1U", space=None, **params):
        self.solver = solver
        self.params = dict(params)
        self.seed = 0
        self.fit_info: dict = {}
        # a tuning solver's grammar, or any sequence space (e.g. a CandidateSpace; solver None)
        self.space = space if space is not None else (GrammarSpace(solver) if solver is not None else None)

    def get_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        return {}, {}

    def set_state(self, state: dict, arrays: dict[str, np.ndarray], path: Path) -> None:
        pass

    def save(self, path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state, arrays = self.get_state()
        doc = {"method": self.method, "format": SAVE_FORMAT, "kbench_version": __version__,
               "solver": self.solver, "params": self.params, "seed": self.seed,
               "fit_info": self.fit_info, "state": state}
        (path / "baseline.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        if arrays:
            save_safetensors(path / "arrays.safetensors", arrays, {"method": self.method})
        self._save_files(path)
        return path

    def _save_files(self, path: Path) -> None:
        pass

    @classmethod
    def load(cls, path) -> TuningModel:
        path = Path(path)
        meta = path / "baseline.json"
        if not meta.exists():
            raise KbenchInputError(f"{path}: no saved model here (baseline.json missing)")
        doc = read_json_object(meta)
        if cls.method and doc.get("method") != cls.method:
            raise KbenchInputError(f"{path}: holds {doc.get('method')!r}, not {cls.method!r}")
        obj = cls(solver=doc.get("solver", "ConvAsm1x1U"), **doc.get("params", {}))
        obj.seed = doc.get("seed", 0)
        obj.fit_info = doc.get("fit_info", {})
        arrays = {}
        if (path / "arrays.safetensors").exists():
            arrays, _ = load_safetensors(path / "arrays.safetensors")
        obj.set_state(doc.get("state", {}), arrays, path)
        return obj


#: version of the training-state file ``fit_arrays(checkpoint=...)`` writes
FIT_STATE_FORMAT = 1

DEFAULTS = dict(beam_width=10, constrained=True, decode="beam", use_conv=True, field_dim=8, token_dim=16,
                conv_channels=64, conv_layers=2, conv_kernel=3, enc_hidden=64, dec_hidden=128, attn_dim=64,
                out_emb=16, dropout=0.1, lr=3e-3, lr_schedule="none", label_smoothing=0.1, batch_size=128,
                max_epochs=25, patience=8, max_seconds=1800.0, threads=1, weight_decay=0.0)


class Seq2Seq(TuningModel):
    """The seq2seq tuning model (module docstring). ``decode``: ``beam`` or ``greedy``."""

    method = "seq2seq"

    def __init__(self, solver: str | None = "ConvAsm1x1U", space=None, **params):
        unknown = set(params) - set(DEFAULTS)
        if unknown:
            raise KbenchInputError(f"seq2seq: unknown parameter(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}")
        super().__init__(solver, space, **{**DEFAULTS, **params})
        if self.params["decode"] not in ("beam", "greedy"):
            raise KbenchInputError(f"seq2seq: decode must be 'beam' or 'greedy', got {self.params['decode']!r}")
        self.encoder: DescriptorEncoder | None = None
        self.net = None

    # -- network ----------------------------------------------------------------
    def _build(self):
        p = self.params
        cls = net_class()
        return cls(n_fields=len(self.encoder.fields), n_tokens=self.encoder.n_tokens,
                   n_numeric=DescriptorEncoder.n_numeric, out_sizes=[len(v) for v in self.space.values],
                   field_dim=p["field_dim"], token_dim=p["token_dim"], conv_channels=p["conv_channels"],
                   conv_layers=p["conv_layers"], conv_kernel=p["conv_kernel"], enc_hidden=p["enc_hidden"],
                   dec_hidden=p["dec_hidden"], attn_dim=p["attn_dim"], out_emb=p["out_emb"],
                   dropout=p["dropout"], use_conv=p["use_conv"])

    def n_parameters(self) -> int:
        return int(sum(t.numel() for t in self.net.parameters()))

    def _inputs(self, problems):
        return self.encoder.transform(descriptor(problems, self.space))

    # -- training -----------------------------------------------------------------
    def fit_arrays(self, train_problems, train_idx, valid_problems=None, valid_idx=None, seed: int = 0,
                   log=None, selector=None, checkpoint=None):
        """Train on problem rows and target value-index matrices (N, P); ``log(record)`` per epoch.

        ``selector(model) -> dict`` (optional) replaces the default model selection: its
        ``"key"`` (a tuple, higher is better) ranks epochs; its other entries are logged.
        ``checkpoint`` (optional, a file path): the training state is written there after every
        epoch, and a fit that finds the file resumes after its last epoch with the same weights,
        optimiser, random generators and model selection, so it ends with the same model as an
        uninterrupted fit (``fit_info['resumed_at_epochs']`` lists where it resumed)."""
        torch = _torch()
        p = self.params
        torch.set_num_threads(int(p["threads"]))
        self.seed = seed
        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        t_start = time.perf_counter()
        self.encoder = DescriptorEncoder().fit(descriptor(train_problems, self.space))
        tok, num = self._inputs(train_problems)
        y = np.asarray(train_idx, dtype=np.int64)
        if (y < 0).any():
            raise KbenchInputError("training targets hold values outside the space's legal values")
        self.net = self._build()
        opt, sched = self._optimizer(len(train_problems))
        self.net.smoothing = float(p["label_smoothing"])
        tok_t, num_t, y_t = torch.as_tensor(tok), torch.as_tensor(num), torch.as_tensor(y)
        have_valid = valid_problems is not None and len(valid_problems)
        valid = None  # (tokens, numeric, targets) of the valid part, for the default model selection
        if have_valid:
            vtok, vnum = self._inputs(valid_problems)
            valid = (vtok, vnum, np.asarray(valid_idx, dtype=np.int64))
        best_key, best_state, best_epoch, bad, history = None, None, -1, 0, []
        stopped_by, start_epoch, elapsed_before, resumed_at = None, 0, 0.0, []
        state_path = Path(checkpoint) if checkpoint is not None else None
        fingerprint = (self._fit_fingerprint(seed, len(y), len(valid_problems) if have_valid else 0,
                                             _data_sha256(tok, num, y, *(valid or ())))
                       if state_path is not None else None)
        if state_path is not None and state_path.exists():
            loop, best_state = self._load_fit_state(state_path, fingerprint, opt, sched, rng)
            best_key, best_epoch, bad = tuple(loop["best_key"]), loop["best_epoch"], loop["bad"]
            history, stopped_by = loop["history"], loop["stopped_by"]
            start_epoch, elapsed_before = loop["epochs_done"], loop["elapsed_s"]
            resumed_at = [*loop["resumed_at_epochs"], start_epoch]
        t_start -= elapsed_before  # the time limit and fit_time_s count every resumed call's training
        for epoch in range(start_epoch, int(p["max_epochs"]) if stopped_by is None else start_epoch):
            self.net.train()
            perm = rng.permutation(len(y))
            tot = self._train_epoch(opt, sched, perm, tok_t, num_t, y_t)
            rec = {"epoch": epoch, "train_loss": tot / len(y)}
            self.net.eval()
            key = self._selection_key(rec, selector, valid)
            rec["elapsed_s"] = time.perf_counter() - t_start
            history.append(rec)
            if log is not None:
                log(rec)
            if best_key is None or key > best_key:
                best_key, best_epoch, bad = key, epoch, 0
                best_state = {k: v.detach().clone() for k, v in self.net.state_dict().items()}
            else:
                bad += 1
            if bad >= int(p["patience"]):
                stopped_by = "patience"
            elif time.perf_counter() - t_start > float(p["max_seconds"]):
                stopped_by = "max_seconds"
            if state_path is not None:
                self._save_fit_state(state_path, fingerprint, opt, sched, rng, best_state, {
                    "epochs_done": epoch + 1, "best_key": list(best_key), "best_epoch": best_epoch, "bad": bad,
                    "history": history, "stopped_by": stopped_by, "elapsed_s": time.perf_counter() - t_start,
                    "resumed_at_epochs": resumed_at})
            if stopped_by is not None:
                break
        stopped_by = stopped_by or "max_epochs"
        self.net.load_state_dict(best_state)
        self.net.eval()
        self.fit_info = {"best_epoch": best_epoch, "epochs_run": len(history), "stopped_by": stopped_by,
                         "resumed_at_epochs": resumed_at,
                         "fit_time_s": time.perf_counter() - t_start, "history": history,
                         "n_parameters": self.n_parameters(), "threads": int(p["threads"]),
                         "n_train": int(len(y)), "n_valid": int(len(valid_problems)) if have_valid else 0}
        return self

    # -- training state (checkpoint) -----------------------------------------------
    def _fit_fingerprint(self, seed: int, n_train: int, n_valid: int, data_sha256: str | None = None) -> dict:
        """What a training state must match to be resumed: format, parameters, seed, data sizes, and the
        sha256 of the training and valid inputs and labels (a state trained on other labels is refused)."""
        return json.loads(json.dumps({"format": FIT_STATE_FORMAT, "params": self.params, "seed": int(seed),
                                      "n_train": int(n_train), "n_valid": int(n_valid),
                                      "output_sizes": [len(v) for v in self.space.values],
                                      "data_sha256": data_sha256}))

    def _save_fit_state(self, path: Path, fingerprint: dict, opt, sched, rng, best_state, loop: dict) -> None:
        """One safetensors file: the weights, the best epoch's weights, Adam's moments and the torch
        generator as arrays; the loop's counters, the numpy generator, the optimiser's groups and
        the schedule as JSON in its metadata. Written to a temporary name and renamed: a fit
        stopped while writing leaves the last epoch's complete state."""
        torch = _torch()
        arrays = {f"net.{k}": v.detach().cpu().numpy() for k, v in self.net.state_dict().items()}
        arrays.update({f"best.{k}": v.detach().cpu().numpy() for k, v in best_state.items()})
        osd = opt.state_dict()
        for i, entry in osd["state"].items():
            for name, v in entry.items():
                arrays[f"opt.{i}.{name}"] = v.detach().cpu().numpy() if torch.is_tensor(v) else np.asarray(v)
        arrays["torch_rng"] = torch.get_rng_state().numpy()
        doc = {"fingerprint": fingerprint, "loop": loop, "optimizer_groups": osd["param_groups"],
               "schedule": sched.state_dict() if sched is not None else None,
               "numpy_rng": rng.bit_generator.state}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        save_safetensors(tmp, arrays, {"fit_state": json.dumps(doc)})
        tmp.replace(path)

    def _load_fit_state(self, path: Path, fingerprint: dict, opt, sched, rng) -> tuple[dict, dict]:
        """Restore a state written by ``_save_fit_state`` into the net, ``opt``, ``sched`` and
        ``rng``; returns (the loop's counters, the best epoch's weights)."""
        arrays, meta = load_safetensors(path)
        try:
            doc = json.loads(meta.get("fit_state", ""))
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or doc.get("fingerprint") != fingerprint:
            raise KbenchInputError(f"{path}: a training state of another configuration, seed or training "
                                   "set, or not one kbench wrote; remove the file to train from the start.")
        damaged = _fit_state_problem(doc, int(self.params["max_epochs"]), int(self.params["patience"]))
        weights = [k for k, v in arrays.items() if k.startswith(("net.", "best.")) and v.dtype.kind == "f"
                   and not np.isfinite(v).all()]
        damaged = damaged or (f"weights {weights[0]} are not finite" if weights else None)
        if damaged:
            raise KbenchInputError(f"{path}: a damaged training state ({damaged}); remove the file to train "
                                   "from the start.")
        try:
            return self._restore(arrays, doc, opt, sched, rng)
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:
            raise KbenchInputError(f"{path}: a damaged training state ({type(exc).__name__}: {str(exc)[:200]}); "
                                   "remove the file to train from the start.") from None

    def _restore(self, arrays: dict, doc: dict, opt, sched, rng) -> tuple[dict, dict]:
        """Load a checked training state's weights, optimiser, schedule and generators (:meth:`_load_fit_state`)."""
        torch = _torch()

        def tensors(prefix: str) -> dict:
            return {k[len(prefix):]: torch.tensor(v) for k, v in arrays.items() if k.startswith(prefix)}

        self.net.load_state_dict(tensors("net."))
        moments: dict[int, dict] = {}
        for key, v in tensors("opt.").items():
            index, name = key.split(".", 1)
            moments.setdefault(int(index), {})[name] = v
        opt.load_state_dict({"state": moments, "param_groups": doc["optimizer_groups"]})
        if sched is not None:
            sched.load_state_dict(doc["schedule"])
        rng.bit_generator.state = doc["numpy_rng"]
        torch.set_rng_state(torch.tensor(arrays["torch_rng"]))
        return doc["loop"], tensors("best.")

    def _optimizer(self, n_train: int):
        """Adam over the network's parameters and the learning-rate schedule (None: constant)."""
        torch = _torch()
        p = self.params
        opt = torch.optim.Adam(self.net.parameters(), lr=p["lr"], weight_decay=p["weight_decay"])
        if p["lr_schedule"] not in ("cosine", "none"):
            raise KbenchInputError(f"seq2seq: lr_schedule must be 'cosine' or 'none', got {p['lr_schedule']!r}")
        n_steps = int(p["max_epochs"]) * int(np.ceil(n_train / int(p["batch_size"])))
        sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(n_steps, 1))
                 if p["lr_schedule"] == "cosine" else None)
        return opt, sched

    def _train_epoch(self, opt, sched, perm, tok_t, num_t, y_t) -> float:
        """One pass over the training rows in the order ``perm``, in mini-batches: the summed loss
        (each batch's mean loss times its size)."""
        torch = _torch()
        bs = int(self.params["batch_size"])
        tot = 0.0
        for s in range(0, len(perm), bs):
            b = torch.as_tensor(perm[s:s + bs])
            loss = self.net(tok_t[b], num_t[b], y_t[b])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)
            opt.step()
            if sched is not None:
                sched.step()
            tot += float(loss.detach()) * len(b)
        return tot

    def _selection_key(self, rec, selector, valid) -> tuple:
        """The epoch's model-selection key (higher is better), adding what it measured to ``rec``:
        ``selector``'s, else greedy decoding of ``valid`` = (tokens, numeric, targets), else the
        training loss."""
        if selector is not None:
            sel = dict(selector(self))
            key = tuple(sel.pop("key"))
            rec.update(sel)
            return key
        if valid is not None:
            vtok, vnum, vy = valid
            pred = self._greedy_unconstrained(vtok, vnum)
            cells = pred == vy
            rec["valid_perfect"] = float(cells.all(axis=1).mean())
            rec["valid_avg_acc"] = float(cells.mean())
            return (rec["valid_perfect"], rec["valid_avg_acc"])
        return (-rec["train_loss"],)

    def _greedy_unconstrained(self, tok, num) -> np.ndarray:
        torch = _torch()
        with torch.no_grad():
            enc, keys, h, c = self.net.encode(torch.as_tensor(tok), torch.as_tensor(num))
            prev = self.net.prev_token(torch.zeros(len(tok), dtype=torch.long), 0)
            out = []
            for t in range(len(self.space.params)):
                logp, h, c, _ = self.net.step(enc, keys, h, c, prev, t)
                v = logp.argmax(dim=1)
                out.append(v.numpy())
                prev = v + self.net.offsets[t]
        return np.column_stack(out)

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0, log=None, checkpoint=None) -> Seq2Seq:
        tgt, prob = _tuning_problems(dataset, self.solver, train_ids)
        vprob = vidx = None
        if valid_ids is not None:
            vt, vprob = _tuning_problems(dataset, self.solver, valid_ids)
            vidx = self.space.encode(vt[list(self.space.params)].to_numpy())
        return self.fit_arrays(prob, self.space.encode(tgt[list(self.space.params)].to_numpy()), vprob, vidx, seed,
                               log, checkpoint=checkpoint)

    # -- inference ------------------------------------------------------------------
    def search(self, problems: pd.DataFrame, width: int | None = None, constrained: bool | None = None,
               decode: str | None = None, ctx=None) -> SearchResult:
        """Search results for problem rows (``ctx``: the space's context, default from ``problems``)."""
        if self.net is None:
            raise KbenchInputError("seq2seq: fit or load the model first")
        _torch().set_num_threads(int(self.params["threads"]))
        width = int(self.params["beam_width"] if width is None else width)
        constrained = bool(self.params["constrained"] if constrained is None else constrained)
        decode = decode or self.params["decode"]
        tok, num = self._inputs(problems)
        scorer = NetScorer(self.net, tok, num)
        ctx = self.space.context(problems) if ctx is None else ctx
        rows = np.arange(len(problems))
        if decode == "greedy":
            return greedy_decode(scorer, self.space, ctx, rows, constrained)
        return beam_search(scorer, self.space, ctx, rows, width, constrained)

    def predict(self, dataset, ids, **search) -> pd.DataFrame:
        problems = problems_of(dataset, ids)
        res = self.search(problems, **search)
        self.last_search = res
        return prediction_frame(problems["problem_id"], self.space, self.space.decode(np.maximum(res.best, 0)),
                                res.found)

    # -- persistence ------------------------------------------------------------------
    def get_state(self):
        arrays = {k: v.detach().cpu().numpy() for k, v in self.net.state_dict().items()}
        return {"encoder": self.encoder.to_dict(), "space": self.space.to_dict()}, arrays

    def set_state(self, state, arrays, path):
        torch = _torch()
        self.encoder = DescriptorEncoder.from_dict(state["encoder"])
        self.space = space_from_dict(state["space"])
        self.net = self._build()
        self.net.load_state_dict({k: torch.as_tensor(v) for k, v in arrays.items()})
        self.net.eval()


# =============================================================================== kernel selection
TILE_POSITIONS = ("schema", "tile_k", "tile_h", "tile_w", "warp_k", "warp_h", "warp_w",
                  "block_k", "block_h", "block_w", "c_split")


def _kernel_table(dataset, positions) -> pd.DataFrame:
    k = dataset.kernels
    if k is None or any(c not in k.columns for c in positions):
        raise KbenchInputError(f"dataset {dataset.name!r}: its kernels table lacks the sequence columns "
                               f"{list(positions)}")
    return k[["kernel"] + list(positions)].astype({c: str for c in positions}).reset_index(drop=True)


class Seq2SeqTiles(Baseline):
    """seq2seq for kernel selection where a kernel is a sequence (``v100-tiles`` tile configurations).

    A kernel is the sequence ``schema, tile_k, tile_h, tile_w, warp_k, warp_h,
    warp_w, block_k, block_h, block_w, c_split`` (the kernels table's columns).
    Trained with teacher forcing on each training problem's fastest measured
    configuration; the constrained beam search extends only prefixes that some
    configuration measured for the problem starts with (the candidate exists
    for the problem), and the ranking is the final beams, best first
    (``beam_width`` kernels). Model selection: the epoch whose constrained
    beam search gives the lowest geometric-mean slowdown of the top-1 over
    the valid problems (their measured configurations).
    """

    name = "seq2seq-tiles"
    description = "encoder-decoder + constrained beam search over tile configurations (sequence kernels)"
    stochastic = True
    benchmark = False  # minutes of CPU training; run it by name

    def __init__(self, **params):
        super().__init__(**params)
        self.positions = tuple(params.get("positions", TILE_POSITIONS))
        self.model: Seq2Seq | None = None

    def supports(self, dataset) -> bool:
        if dataset_task(dataset) != "tile-selection":
            return False
        k = getattr(dataset, "kernels", None)
        return k is None or all(c in k.columns for c in self.positions)

    def _space(self, kt: pd.DataFrame) -> CandidateSpace:
        labels = []
        for c in self.positions:
            u = pd.unique(kt[c])
            num = pd.to_numeric(pd.Series(u), errors="coerce")
            labels.append(list(u[np.lexsort((u.astype(str), num.fillna(np.inf).to_numpy()))]))
        return CandidateSpace(self.positions, labels)

    def _candidates(self, dataset, kt, ids) -> pd.DataFrame:
        rt = dataset.runtimes
        rt = rt[rt["problem_id"].isin(as_id_index(ids))][["problem_id", "kernel"]].drop_duplicates()
        return rt.merge(kt, on="kernel", how="inner")

    def _kernel_table(self, dataset) -> pd.DataFrame:
        """kernel name + one string column per sequence position."""
        return _kernel_table(dataset, self.positions)

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        self.seed = seed
        kt = self._kernel_table(dataset)
        space = self._space(kt)
        sp = {k: v for k, v in self.params.items() if k != "positions"}
        self.model = Seq2Seq(solver=None, space=space, **sp)

        def best_of(ids):
            rt = dataset.runtimes
            rt = rt[rt["problem_id"].isin(as_id_index(ids))]
            best = rt.loc[rt.groupby("problem_id")["time_ms"].idxmin(), ["problem_id", "kernel"]]
            best = best.merge(kt, on="kernel", how="inner")
            prob = problems_of(dataset, best["problem_id"])
            return prob, space.encode_labels(best)

        prob, y = best_of(train_ids)
        vprob = vy = selector = None
        if valid_ids is not None:
            vprob, vy = best_of(valid_ids)
            selector = self._valid_selector(dataset, kt, vprob)
        self.model.fit_arrays(prob, y, vprob, vy, seed, selector=selector, checkpoint=self.fit_checkpoint)
        self.fit_info = dict(self.model.fit_info)
        return self

    def _valid_selector(self, dataset, kt, vprob):
        """Model selection by the valid problems' geometric-mean slowdown of the top-1 (constrained beam)."""
        cands = self._candidates(dataset, kt, vprob["problem_id"])
        ctx = self.model.space.context(vprob, cands)
        rt = dataset.runtimes[dataset.runtimes["problem_id"].isin(vprob["problem_id"])]
        t_best = rt.groupby("problem_id")["time_ms"].min().reindex(vprob["problem_id"]).to_numpy()
        times = rt.groupby(["problem_id", "kernel"])["time_ms"].min()

        def selector(model):
            res = model.search(vprob, ctx=ctx)
            names, keep = self._names(res, kt)
            top = np.where(keep[:, 0], names[:, 0], "")
            t = times.reindex(pd.MultiIndex.from_arrays([vprob["problem_id"].to_numpy(), top])).to_numpy()
            slow = np.log(np.where(np.isnan(t), np.nanmax(t_best) * 1e3, t) / t_best)
            return {"key": (-float(slow.mean()),), "valid_geomean_slowdown": float(np.exp(slow.mean())),
                    "valid_top1": float(np.mean(slow <= 0))}
        return selector

    def _names(self, res, kt) -> tuple[np.ndarray, np.ndarray]:
        """Kernel names (n, w) of the final beams and which are real (alive and in the table)."""
        space = self.model.space
        n, w, P = res.beams.shape
        codes = space.encode_labels(kt)
        ok_k = (codes >= 0).all(axis=1)
        index = pd.Index(space._key(np.zeros(int(ok_k.sum()), np.int64), codes[ok_k]))
        names_k = kt["kernel"].to_numpy()[ok_k]
        flat = res.beams.reshape(n * w, P)
        pos = index.get_indexer(space._key(np.zeros(n * w, np.int64), np.maximum(flat, 0)))
        keep = ((flat >= 0).all(axis=1) & (pos >= 0)).reshape(n, w)
        return names_k[np.maximum(pos, 0)].reshape(n, w), keep

    def predict(self, dataset, ids) -> pd.DataFrame:
        if self.model is None:
            raise KbenchInputError(f"{self.name}: fit or load the model first")
        kt = self._kernel_table(dataset)
        space = self.model.space
        problems = problems_of(dataset, ids)
        ctx = space.context(problems, self._candidates(dataset, kt, problems["problem_id"]))
        res = self.model.search(problems, ctx=ctx)
        self.last_search = res
        names, keep = self._names(res, kt)
        n, w = names.shape
        ranking = join_rankings(np.arange(n * w).reshape(n, w), names.ravel(), keep)
        return predictions_frame(problems["problem_id"], ranking)

    def get_state(self):
        state, arrays = self.model.get_state()
        return {"model_params": self.model.params, "fit_info": self.fit_info, **state}, arrays

    def set_state(self, state, arrays, path):
        space = space_from_dict(state["space"])
        self.model = Seq2Seq(solver=None, space=space, **state["model_params"])
        self.model.set_state(state, arrays, path)
        self.fit_info = state.get("fit_info", {})





def engine_sequences(names, knobs: list[int] | None = None) -> pd.DataFrame:
    """Engine configurations as sequences: ``kernel``, ``engine``, then one column per knob id.

    ``eng10_k2=23_k13=0`` -> engine ``eng10``, ``k2`` = ``23``, ``k13`` = ``0``, every other
    knob column ``-`` (the engine has no such knob). ``knobs`` fixes the knob columns (the
    fitted model's); by default every knob id in ``names``, in numeric order. Names that
    are not engine configurations are left out.
    """
    names = pd.Series(list(names), dtype=object).astype(str)
    ok = names.str.match(ENGINE_NAME.pattern)
    names = names[ok].reset_index(drop=True)
    pairs = names.str.extractall(KNOB.pattern)  # one row per (name, knob)
    if knobs is None:
        knobs = sorted({int(k) for k in pairs[0]}) if len(pairs) else []
    out = pd.DataFrame({"kernel": names, "engine": "eng" + names.str.extract(r"^eng(\d+)")[0]})
    wide = (pairs.reset_index().pivot(index="level_0", columns=0, values=1) if len(pairs)
            else pd.DataFrame(index=out.index))
    for k in knobs:
        col = wide[str(k)] if str(k) in wide.columns else pd.Series(dtype=object)
        out[f"k{k}"] = col.reindex(out.index).fillna("-").astype(str).to_numpy()
    return out


class Seq2SeqEngines(Seq2SeqTiles):
    """seq2seq for the NVIDIA engine sets (``h100``, ``h200``): a kernel is the sequence engine, knob values.

    The decoder emits ``eng<id>`` and then the value of every knob id of the dataset
    (``-`` where the engine has no such knob); the constrained beam search extends only
    prefixes of configurations measured for the problem, as for tiles. Training target:
    each training problem's fastest plan; model selection on valid by the top-1's
    geometric-mean slowdown.
    """

    name = "seq2seq-engines"
    description = "encoder-decoder + constrained beam search over cuDNN engine configurations (engine, knobs)"

    #: no early stop: the valid slowdown of the first epochs swings widely on this small set
    #: (seed 4 stopped at epoch 9 with patience 8 while the training loss was still falling);
    #: the best valid epoch of all ``max_epochs`` is kept
    ENGINE_DEFAULTS = {"patience": 25, "max_epochs": 25}

    def __init__(self, **params):
        super().__init__(**{**self.ENGINE_DEFAULTS, **params})
        self.positions = tuple(params.get("positions", ()))  # () until fit reads the dataset's knob ids

    def supports(self, dataset) -> bool:
        if dataset_task(dataset) != "kernel-selection" or not str(dataset_library(dataset) or "").startswith("cuDNN"):
            return False
        k = getattr(dataset, "kernels", None)
        return k is None or bool(k["kernel"].astype(str).str.match(ENGINE_NAME.pattern).any())

    @staticmethod
    def _names_of(dataset):
        return dataset.kernels["kernel"] if dataset.kernels is not None else dataset.runtimes["kernel"].unique()

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        if not self.positions:  # the dataset's knob ids become the model's positions (saved with it)
            self.positions = tuple(engine_sequences(self._names_of(dataset)).columns[1:])
            self.params["positions"] = list(self.positions)
        return super().fit(dataset, train_ids, valid_ids, seed)

    def _kernel_table(self, dataset) -> pd.DataFrame:
        return engine_sequences(self._names_of(dataset), [int(p[1:]) for p in self.positions[1:]])


__all__ = ["descriptor", "numeric_matrix", "DescriptorEncoder", "GrammarSpace", "CandidateSpace",
           "TableScorer", "SearchResult", "beam_search", "greedy_decode", "score_sequences", "net_class",
           "NetScorer", "solver_targets", "prediction_frame", "TuningModel", "Seq2Seq", "log_softmax", "Seq2SeqTiles",
           "Seq2SeqEngines", "engine_sequences"]

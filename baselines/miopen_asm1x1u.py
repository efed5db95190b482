"""MIOpen's shipped ConvAsm1x1U tuning model (gfx908), reproduced in numpy, as a reference.

MIOpen ships an encoder-decoder per (arch, solver) for "AI kernel tuning"
(``gfx908_ConvAsm1x1U_{encoder,decoder,metadata}.ktn.model``, frugally-deep
JSON, run here with :mod:`kbench_baselines.fdeep`). Read in the ROCm/MIOpen sources
(``src/solver/conv/conv_asm_1x1u.cpp``: ``TransformFeatures``,
``RunParameterPredictionModel``, ``ModelApplyToken``, ``IsModelApplicable``,
``HeuristicInit``, ``StaticHeuristic``; ``src/conv/heuristics/ai_heuristics.cpp``:
``ai::tuning::ModelSetParams``, ``Model::Encode``/``Decode``, ``Metadata``):

Features (``TransformFeatures(problem, n = 8)``)
    An 8 x 8 matrix (row-major, fed as the encoder's (8, 8) input) of zeros
    except: ``[0, 0] = 2`` for FP32 else 1; ``[o, o] = 1`` with ``o = 1``
    for forward, 2 otherwise; ``[3, 3]`` = x's channels (``isFwd ?
    GetInChannels : GetOutChannels``), ``[4, 4]`` = y's channels, ``[5, 5]``
    = ``GetInHeight()``, ``[6, 6]`` = ``GetInWidth()``, ``[7, 7]`` = batch.
    No normalisation. MIOpen's problem description is direction-relative:
    its "in" is x for forward and dy for backward data, so ``[5, 5]``,
    ``[6, 6]`` are x's H, W for forward and y's for backward data.
Decoding (``ModelSetParams``, ``predict_type = 0``)
    ``context = encoder(features)`` (4 LSTM states); decoder input starts at
    token 0.0; for each of the ``num_tuning_params[dir]`` = 8 parameters:
    ``decoder(prev token, *context)`` -> 38 token scores + 4 new states;
    tokens are visited in descending score order (a ``std::priority_queue``
    of (score, index): equal scores -> larger index first); a token whose
    metadata decoding is ``"-1"`` ends the model run with failure; otherwise
    the first token whose value passes ``ModelApplyToken`` (sets parameter
    ``i`` and checks ``IsValidImpl(problem, i + 1)``, i.e. the prefix
    predicates of :mod:`kbench.sources.tuning_grammar`) is taken and fed back as the
    next decoder input. The token vocabulary is shared by all positions (a
    token is accepted at any step if its value fits there).
Applicability (``IsModelApplicable``) and fallback (``HeuristicInit``)
    The model runs only on gfx908 and only for ``GetKernelStrideH() == 1``
    (forward and backward data). When it fails, or does not apply, MIOpen
    uses ``StaticHeuristic`` (a fixed tuple, relaxed step by step until
    ``IsValid``), reproduced in :func:`static_heuristic`.

``MiopenAsm1x1U.predict`` gives what ``HeuristicInit`` would set on a gfx908
for every problem (model where it applies and succeeds, static heuristic
otherwise) and records per problem which one (``last_source``). mi50-tuning
is a gfx906 (MI50) perf-db: the model was trained for gfx908 (MI100), so its
scores there measure transfer to another GPU, not its accuracy at home.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench.sources.tuning_grammar import ASM1X1U_PARAMS, CONV_ASM_1X1U
from kbench_baselines.base import problems_of
from kbench_baselines.fdeep import FdeepModel
from kbench_baselines.seq2seq import TuningModel, prediction_frame

RAW_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "miopen"
FILES = {"encoder": "gfx908_ConvAsm1x1U_encoder.ktn.model",
         "decoder": "gfx908_ConvAsm1x1U_decoder.ktn.model",
         "metadata": "gfx908_ConvAsm1x1U_metadata.ktn.model"}
N_FEAT = 8

#: what produced each prediction (``last_source``)
SOURCES = ("model", "model-failed-static", "static")


def model_paths(folder=None) -> dict[str, Path]:
    folder = Path(folder) if folder is not None else RAW_DIR
    paths = {k: folder / v for k, v in FILES.items()}
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        raise KbenchInputError(f"MIOpen ConvAsm1x1U model file(s) not found: {missing}")
    return paths


def transform_features(problems: pd.DataFrame) -> np.ndarray:
    """MIOpen's ``TransformFeatures`` for canonical problem rows: (N, 8, 8) float32."""
    need = ["direction", "dtype", "n", "c", "k", "x_h", "x_w", "y_h", "y_w"]
    missing = [c for c in need if c not in problems.columns]
    if missing:
        raise KbenchInputError(f"problem table lacks column(s) {missing}")
    n = len(problems)
    fwd = (problems["direction"].astype(str) == "F").to_numpy()
    f = np.zeros((n, N_FEAT, N_FEAT), dtype=np.float32)
    r = np.arange(n)
    f[:, 0, 0] = np.where((problems["dtype"].astype(str) == "FP32").to_numpy(), 2.0, 1.0)
    o = np.where(fwd, 1, 2)
    f[r, o, o] = 1.0
    g = lambda c: problems[c].to_numpy(np.float64)  # noqa: E731
    f[:, 3, 3] = g("c")  # isFwd ? GetInChannels() : GetOutChannels() = x's channels in both
    f[:, 4, 4] = g("k")
    f[:, 5, 5] = np.where(fwd, g("x_h"), g("y_h"))  # GetInHeight(): "in" = x (F) or dy (B)
    f[:, 6, 6] = np.where(fwd, g("x_w"), g("y_w"))
    f[:, 7, 7] = g("n")
    return f


def model_applicable(problems: pd.DataFrame) -> np.ndarray:
    """``IsModelApplicable`` on a gfx908: stride_h == 1 (the device test is assumed to pass)."""
    return (problems["stride_h"].to_numpy() == 1)


def static_heuristic(problems: pd.DataFrame) -> np.ndarray:
    """MIOpen's ``StaticHeuristic`` per problem: (N, 8) values (``ASM1X1U_PARAMS`` order)."""
    inp = CONV_ASM_1X1U.problem_inputs(problems.reset_index(drop=True))
    e = inp["elements_in_dword"].to_numpy(np.int64)
    n = len(inp)
    v = {"read_size": np.full(n, 4), "k_mult": np.full(n, 16), "chunks_per_wave": 4 * e,
         "chunk_size": np.full(n, 16), "n_mult": np.full(n, 2), "c_mult": e.copy(),
         "waves_c_in_group": np.ones(n, np.int64), "waves_k_in_group": np.ones(n, np.int64)}
    v = {k: np.asarray(a, dtype=np.int64).copy() for k, a in v.items()}
    cols = {c: inp[c].to_numpy() for c in inp.columns}

    def invalid():
        return ~CONV_ASM_1X1U.prefix_valid(v, cols, None)

    bad = invalid()
    v["read_size"][bad], v["k_mult"][bad], v["chunk_size"][bad], v["n_mult"][bad] = 1, 4, 1, 1
    bad = invalid()
    v["k_mult"][bad] = np.where(e[bad] == 1, 1, 4)
    v["c_mult"][bad] = 2
    bad = invalid()
    v["chunks_per_wave"][bad] = 2
    v["c_mult"][bad] = e[bad]
    bad = invalid()
    v["chunks_per_wave"][bad] = e[bad]
    return np.column_stack([v[p] for p in ASM1X1U_PARAMS])


class MiopenTuningNet:
    """The encoder, decoder and token decodings of MIOpen's shipped model."""

    def __init__(self, folder=None):
        paths = model_paths(folder)
        self.encoder = FdeepModel.load(paths["encoder"])
        self.decoder = FdeepModel.load(paths["decoder"])
        meta = json.loads(paths["metadata"].read_text())
        if meta.get("predict_type", 0) != 0:
            raise KbenchInputError("only predict_type 0 metadata (fixed parameter count per direction) is supported")
        self.num_params = {k: int(v) for k, v in meta["num_tuning_params"].items()}
        dec = meta["decodings"]["tunings"]
        self.n_tokens = len(dec)
        self.token_value = np.array([int(dec[str(i)]) for i in range(self.n_tokens)], dtype=np.int64)

    def check_tests(self) -> dict[str, list[float]]:
        """Max abs error of the encoder's and decoder's embedded test vectors."""
        return {"encoder": self.encoder.check_tests(), "decoder": self.decoder.check_tests()}

    def decode(self, problems: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """``ModelSetParams`` for every row: ((N, 8) values, (N,) ok). Failed rows hold -1."""
        problems = problems.reset_index(drop=True)
        n = len(problems)
        P = len(ASM1X1U_PARAMS)
        dirs = problems["direction"].map({"F": "fwd", "B": "bwd", "W": "wrw"})
        steps = dirs.map(self.num_params)
        if steps.isna().any() or (steps != P).any():
            raise KbenchInputError(f"the model decodes {self.num_params} parameters per direction; "
                                   f"ConvAsm1x1U has {P} and only F/B")
        inp = CONV_ASM_1X1U.problem_inputs(problems)
        inp_rep = {c: np.repeat(inp[c].to_numpy(), self.n_tokens) for c in inp.columns}
        state = self.encoder.predict(transform_features(problems))
        values = np.full((n, P), -1, dtype=np.int64)
        ok = np.ones(n, dtype=bool)
        prev = np.zeros((n, 1), dtype=np.float32)
        idx = np.arange(self.n_tokens)
        for i in range(P):
            out = self.decoder.predict(prev, *state)
            scores, state = out[0], out[1:]
            # priority_queue<pair<float,int>>: descending score, then descending index
            order = np.lexsort((-np.broadcast_to(idx, scores.shape), -scores), axis=1)
            tok_val = self.token_value[order]                     # (n, T) values in visiting order
            cand = {p: np.repeat(values[:, j], self.n_tokens) for j, p in enumerate(ASM1X1U_PARAMS[:i])}
            cand[ASM1X1U_PARAMS[i]] = tok_val.ravel()
            valid = CONV_ASM_1X1U.prefix_valid(cand, inp_rep, i + 1).reshape(n, self.n_tokens)
            stop = (tok_val == -1) | valid
            first = np.argmax(stop, axis=1)
            hit = stop[np.arange(n), first]
            chosen_val = tok_val[np.arange(n), first]
            fail = ~hit | (chosen_val == -1)
            ok &= ~fail
            values[:, i] = np.where(ok, chosen_val, -1)
            # a failed row stops in MIOpen; here it keeps decoding harmlessly (its result is discarded)
            prev = np.where(fail, 0, order[np.arange(n), first]).astype(np.float32)[:, None]
        values[~ok] = -1
        return values, ok


class MiopenAsm1x1U(TuningModel):
    """MIOpen's ``HeuristicInit`` for ConvAsm1x1U on gfx908 (shipped model + static fallback)."""

    method = "miopen-gfx908-model"

    def __init__(self, solver: str = "ConvAsm1x1U", model_dir: str | None = None):
        if solver != "ConvAsm1x1U":
            raise KbenchInputError("MIOpen ships its tuning model for ConvAsm1x1U only")
        super().__init__(solver, model_dir=model_dir)
        self.net = MiopenTuningNet(model_dir)
        self.last_source = None

    def fit(self, dataset=None, train_ids=None, valid_ids=None, seed: int = 0):
        self.seed = seed  # nothing is fitted: the model is MIOpen's
        return self

    def predict_problems(self, problems: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """((N, 8) values, (N,) source index into :data:`SOURCES`)."""
        problems = problems.reset_index(drop=True)
        out = static_heuristic(problems)
        source = np.full(len(problems), 2)
        app = model_applicable(problems)
        if app.any():
            vals, ok = self.net.decode(problems[app])
            rows = np.flatnonzero(app)
            out[rows[ok]] = vals[ok]
            source[rows] = np.where(ok, 0, 1)
        return out, source

    def predict(self, dataset, ids) -> pd.DataFrame:
        problems = problems_of(dataset, ids)
        vals, source = self.predict_problems(problems)
        self.last_source = pd.Series(np.asarray(SOURCES)[source], index=problems["problem_id"].to_numpy())
        return prediction_frame(problems["problem_id"], self.space, vals)

    def get_state(self):
        return {"files": FILES}, {}

    def set_state(self, state, arrays, path):
        pass


__all__ = ["transform_features", "model_applicable", "static_heuristic", "MiopenTuningNet", "MiopenAsm1x1U"]

"""Metrics for tuning-parameter prediction (predict a solver's optimal tuple).

For N problems with P parameters each, ``pred`` and ``true`` are (N, P):

* **average accuracy**: the share of parameters predicted right, averaged
  over problems, ``mean_i (1/P) sum_j [pred_ij == true_ij]``. With the same P
  for every problem this equals the mean of the per-parameter accuracies and
  the share of right cells.
* **perfect prediction**: the share of problems whose whole tuple is right,
  ``mean_i prod_j [pred_ij == true_ij]``.
* **valid share**: the share of predicted tuples that pass the solver's
  validity constraints for their problem (``kbench.sources.tuning_grammar``).

A missing prediction (NaN / NA / a value that is not a number) is wrong and,
for the valid share, invalid. Everything is vectorised over rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError
from kbench.sources.tuning_grammar import GRAMMARS, SOLVER_PARAMS


def _matrix(x, params=None, what="predictions") -> np.ndarray:
    """A float (N, P) matrix; NaN for missing or non-numeric values."""
    if isinstance(x, pd.DataFrame):
        if params is not None:
            missing = [p for p in params if p not in x]
            if missing:
                raise KbenchInputError(f"{what} lack parameter column(s) {missing}")
            x = x[list(params)]
        cols = [pd.to_numeric(x[c].astype(object), errors="coerce").astype(float) for c in x]
        return np.column_stack([c.to_numpy() for c in cols]) if cols else np.empty((len(x), 0))
    a = np.asarray(x)
    if a.ndim != 2:
        raise KbenchInputError(f"{what} must be a 2-D table (problems x parameters), got shape {a.shape}")
    if a.dtype.kind in "biuf":
        return a.astype(float)
    flat = pd.to_numeric(pd.Series(a.ravel(), dtype=object), errors="coerce").to_numpy(dtype=float)
    return flat.reshape(a.shape)


def correct_cells(pred, true, params=None) -> np.ndarray:
    """Boolean (N, P): parameter j of problem i predicted right (NaN never matches)."""
    p, t = _matrix(pred, params, "predictions"), _matrix(true, params, "targets")
    if p.shape != t.shape:
        raise KbenchInputError(f"predictions have shape {p.shape} but targets {t.shape}")
    if p.shape[0] == 0 or p.shape[1] == 0:
        raise KbenchInputError("nothing to score: no problems or no parameters")
    return (p == t) & ~np.isnan(t)


def row_accuracy(pred, true, params=None) -> np.ndarray:
    """Per problem: the share of its parameters predicted right."""
    return correct_cells(pred, true, params).mean(axis=1)


def average_accuracy(pred, true, params=None) -> float:
    """Share of parameters predicted right, averaged over problems."""
    return float(row_accuracy(pred, true, params).mean())


def perfect_prediction(pred, true, params=None) -> float:
    """Share of problems whose whole parameter tuple is right."""
    return float(correct_cells(pred, true, params).all(axis=1).mean())


def parameter_accuracy(pred, true, params=None) -> np.ndarray:
    """Per parameter: the share of problems where it is right."""
    return correct_cells(pred, true, params).mean(axis=0)


def valid_share(valid) -> float:
    """Share of predictions that are valid (``valid``: bool per problem)."""
    v = np.asarray(valid)
    if v.ndim != 1 or v.size == 0:
        raise KbenchInputError("valid must be a non-empty 1-D boolean array")
    return float(np.asarray(v, dtype=bool).mean())


def tuning_metrics(pred, true, valid=None, params=None) -> dict:
    """All three metrics (``valid_share`` only when ``valid`` is given)."""
    cells = correct_cells(pred, true, params)
    out = {
        "n": int(cells.shape[0]),
        "average_accuracy": float(cells.mean(axis=1).mean()),
        "perfect_prediction": float(cells.all(axis=1).mean()),
    }
    if valid is not None:
        if len(valid) != cells.shape[0]:
            raise KbenchInputError(f"valid has {len(valid)} rows, predictions {cells.shape[0]}")
        out["valid_share"] = valid_share(valid)
    return out


def align_predictions(predictions: pd.DataFrame, targets: pd.DataFrame, params) -> tuple[pd.DataFrame, dict]:
    """Predictions reindexed to the targets' ``problem_id`` order.

    ``predictions``: ``problem_id`` plus either the parameter columns or a
    ``params`` string (comma-separated, MIOpen order). Duplicate ids are an
    error; ids not among the targets are ignored (counted as ``n_unknown``);
    targets without a prediction get NaN (counted as ``n_missing``: wrong and
    invalid). ``targets`` must have one row per ``problem_id``.
    """
    params = list(params)
    if "problem_id" not in predictions:
        raise KbenchInputError("predictions need a 'problem_id' column")
    if targets["problem_id"].duplicated().any():
        raise KbenchInputError("targets have several rows per problem_id: filter to one solver first")
    pred = predictions
    if not all(p in pred for p in params):
        if "params" not in pred:
            missing = [p for p in params if p not in pred]
            raise KbenchInputError(
                f"predictions need the parameter columns {missing} or a 'params' string column"
            )
        parts = pred["params"].astype(str).str.split(",", expand=True)
        parts = parts.reindex(columns=range(len(params))).astype(object)
        # A params string with the wrong field count is wrong in every field.
        wrong_count = (pred["params"].astype(str).str.count(",") + 1).to_numpy() != len(params)
        parts.loc[wrong_count] = np.nan
        parts.columns = params
        pred = pd.concat([pred[["problem_id"]].reset_index(drop=True), parts.reset_index(drop=True)], axis=1)
    dup = pred["problem_id"].duplicated()
    if dup.any():
        ex = pred.loc[dup, "problem_id"].head(3).tolist()
        raise KbenchInputError(f"predictions list {int(dup.sum())} problem_id(s) twice, e.g. {ex}")
    known = pred["problem_id"].isin(targets["problem_id"])
    aligned = (pred.loc[known, ["problem_id"] + params].set_index("problem_id")
               .reindex(targets["problem_id"].to_numpy()).reset_index())
    n_missing = int(len(targets) - known.sum())
    return aligned, {"n_missing": n_missing, "n_unknown": int((~known).sum())}


def score_tuning(predictions: pd.DataFrame, targets: pd.DataFrame, solver: str,
                 problems: pd.DataFrame | None = None) -> dict:
    """Score predictions of ``solver``'s tuples against a tuning dataset.

    ``targets``: the dataset's targets table (filtered here to ``solver`` and
    to the problems in ``problems`` when given, e.g. a test split);
    ``problems``: canonical problem rows, needed for the valid share (only
    for solvers with a grammar).
    """
    if solver not in SOLVER_PARAMS:
        raise KbenchInputError(f"no parameter list for solver {solver!r}; known: {sorted(SOLVER_PARAMS)}")
    params = list(SOLVER_PARAMS[solver])
    tgt = targets[targets["solver"] == solver]
    if problems is not None:
        tgt = tgt[tgt["problem_id"].isin(problems["problem_id"])]
    tgt = tgt.reset_index(drop=True)
    if tgt.empty:
        raise KbenchInputError(f"no targets for solver {solver!r} in the selected problems")
    aligned, counts = align_predictions(predictions, tgt, params)
    valid = None
    if problems is not None and solver in GRAMMARS:
        prob = problems.drop_duplicates("problem_id").set_index("problem_id").loc[tgt["problem_id"]]
        prob = prob.reset_index()
        vals = {p: _matrix(aligned[[p]])[:, 0] for p in params}
        vals = {p: np.where(np.isnan(v), -1, v).astype(np.int64) for p, v in vals.items()}
        valid = GRAMMARS[solver].is_valid(vals, prob)
    out = tuning_metrics(aligned[params], tgt[params], valid)
    out.update(counts)
    out["solver"] = solver
    out["parameter_accuracy"] = dict(zip(params, parameter_accuracy(aligned[params], tgt[params]).tolist()))
    return out

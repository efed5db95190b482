"""Baselines of the cross-device transfer track (``docs/transfer.md``), built on the standard baselines.

A transfer method is fitted on a :class:`kbench.data.transfer_task.Transfer` task and
predicts target problems from ``task.target_inputs()`` (every target problem's
description, measured times of the k drawn shots only)::

    method = get_transfer_method("xgboost-finetuned")
    method.fit(task, seed=0)
    preds = method.predict(task.target_inputs(), task.target_split()["test"])

Rankings are put in the target's kernel vocabulary (the library's list of
solvers is known without measuring anything): source kernels the target does
not have are dropped, target kernels the model never ranked follow in the
target kernels table's order, only kernels that run in the problem's direction
are listed, and at most :data:`MAX_CANDIDATES` are kept.

Methods
-------
``source-oracle`` (reference, zero-shot)
    Each target problem gets the source device's measured ranking of the same
    problem id (the source's fastest kernel first), the naive "reuse the old
    GPU's find-db" strategy. A problem the source never measured gets the source
    ``single-best`` ranking for its direction, data type and layout (fitted on
    the leak-free source train part). Reads source measurements of the test ids,
    never target labels; it is a reference row, not a learned method.
``source-xgboost`` (zero-shot)
    The ``xgboost`` baseline fitted on the leak-free source train part, early
    stopping on the leak-free source valid part.
``xgboost-finetuned`` (k = 100, 1000)
    The same source model (one fit per seed, shared by every k), then
    :data:`FINETUNE_ROUNDS` more boosting rounds per direction on the k target
    shots (learning rate :data:`FINETUNE_LEARNING_RATE`, depth
    :data:`FINETUNE_DEPTH`, min_child_weight :data:`FINETUNE_MIN_CHILD_WEIGHT`;
    fixed, not tuned: there is no target valid part in the track). A shot
    whose fastest kernel is not one of the source model's classes is not used
    (the booster's classes are fixed).
``kshot-single-best`` (k = 100, 1000)
    ``single-best`` fitted on the k target shots alone: what k measurements buy
    without any source data.
``target-xgboost`` (ceiling, not a transfer method)
    The target's own ``xgboost`` trained on its full train part with its valid
    part for early stopping: the in-domain number a transfer method aims at.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError, suggest
from kbench_baselines.base import join_rankings, kernel_directions, predictions_frame, problems_of
from kbench_baselines.features import features_for
from kbench_baselines.oracle import Oracle
from kbench_baselines.single_best import SingleBest
from kbench_baselines.xgb import DIRECTIONS, XGBoostMulticlass, _xgb

#: longest ranking written (keeps the prediction files small; LoP@30 still defined)
MAX_CANDIDATES = 30
FINETUNE_ROUNDS = 20
FINETUNE_LEARNING_RATE = 0.1
FINETUNE_DEPTH = 4
#: xgboost gives a leaf no weight when its hessian sum is below min_child_weight, and the softmax
#: hessians p(1 - p) of k shots over thousands of classes sum to far below the source model's 1.0:
#: with it every fine-tuning tree on h100 -> h200 (3,000+ plans) was zero and the rankings stayed
#: the source's. 0 lets the shots move the model; reg_lambda still bounds each leaf.
FINETUNE_MIN_CHILD_WEIGHT = 0.0


def finetune_params(source_params: dict, num_class: int) -> dict:
    """The xgboost parameters of the fine-tuning rounds: the source model's, with the fine-tuning
    learning rate, depth and min_child_weight."""
    return dict(source_params, objective="multi:softprob", num_class=num_class,
                learning_rate=FINETUNE_LEARNING_RATE, max_depth=FINETUNE_DEPTH,
                min_child_weight=FINETUNE_MIN_CHILD_WEIGHT)

TRANSFER_METHODS: dict[str, type] = {}


def target_rankings(rankings, target, problems: pd.DataFrame) -> np.ndarray:
    """Rankings re-expressed in the target's kernel vocabulary (see the module doc), vectorised.

    ``rankings[i]`` (``;``-joined kernel names) belongs to ``problems.iloc[i]``.
    """
    names = target.kernels["kernel"].astype(str).tolist()
    index = {k: j for j, k in enumerate(names)}
    n, m = len(problems), len(names)
    long = pd.Series(np.asarray(rankings, dtype=object)).str.split(";").explode()
    row = long.index.to_numpy()
    pos = long.groupby(level=0).cumcount().to_numpy()
    col = long.map(index)
    ok = col.notna().to_numpy()
    # ranked kernels: score m + (length - position); unranked target kernels: table order below them
    score = np.tile(-np.arange(m, dtype=np.float64), (n, 1))
    score[row[ok], col[ok].to_numpy(dtype=np.int64)] = 10.0 * m - pos[ok]
    kdirs = kernel_directions(target)
    direction = problems["direction"].astype(str).to_numpy()
    allowed = np.zeros((n, m), dtype=bool)
    for d in DIRECTIONS:
        allowed[direction == d] = [d in kdirs.get(k, set()) for k in names]
    order = np.argsort(-score, axis=1, kind="stable")[:, :MAX_CANDIDATES]
    return join_rankings(order, np.asarray(names, dtype=object), np.take_along_axis(allowed, order, axis=1))


class TransferMethod:
    """Base class: ``fit(task, seed)`` then ``predict(target_inputs, ids)``.

    ``budgets``: the k values the method is run at; ``role``: entry, reference or ceiling.
    """

    name = ""
    description = ""
    role = "entry"
    budgets: tuple[int, ...] = (0,)
    stochastic = True
    code = "baselines/transfer.py"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            TRANSFER_METHODS[cls.name] = cls

    def fit(self, task, seed: int = 0) -> TransferMethod:
        raise NotImplementedError

    def rank(self, target, problems: pd.DataFrame) -> np.ndarray:
        raise NotImplementedError

    def predict(self, target, ids) -> pd.DataFrame:
        problems = problems_of(target, ids)
        return predictions_frame(problems["problem_id"],
                                 target_rankings(self.rank(target, problems), target, problems))


class SourceOracle(TransferMethod):
    name = "source-oracle"
    description = ("zero-shot reference: the source device's measured ranking of the same problem id; "
                   "source single-best where the source never measured it")
    role = "reference"
    stochastic = False

    def fit(self, task, seed: int = 0):
        ids = task.source_ids()
        self.source = task.source_measurements()
        self.measured = Oracle().fit(task.source_train(), ids["train"], seed=seed)
        self.fallback = SingleBest().fit(task.source_train(), ids["train"], seed=seed)
        return self

    def rank(self, target, problems):
        ids = problems["problem_id"].astype(str)
        on_source = ids.isin(self.source.runtimes["problem_id"].astype(str)).to_numpy()
        out = np.empty(len(ids), dtype=object)
        if on_source.any():
            out[on_source] = self.measured.predict(self.source, ids[on_source])["ranking"].to_numpy()
        if (~on_source).any():
            out[~on_source] = self.fallback.predict(target, ids[~on_source])["ranking"].to_numpy()
        self.coverage = float(on_source.mean()) if len(ids) else 0.0
        return out


class SourceXGBoost(TransferMethod):
    name = "source-xgboost"
    description = "zero-shot: the xgboost baseline trained on the source's leak-free train part"
    budgets = (0,)
    #: (source name, seed) -> fitted source model, shared with xgboost-finetuned in one process
    _fitted: dict = {}

    def source_model(self, task, seed: int) -> XGBoostMulticlass:
        key = (task.source.name, task.source.checksum, task.target.name, seed)
        if key not in SourceXGBoost._fitted:
            ids = task.source_ids()
            model = XGBoostMulticlass()
            model.progress = False
            SourceXGBoost._fitted.clear()  # one source model in memory at a time
            SourceXGBoost._fitted[key] = model.fit(task.source_train(), ids["train"], ids["valid"], seed=seed)
        return SourceXGBoost._fitted[key]

    def fit(self, task, seed: int = 0):
        self.model = self.source_model(task, seed)
        return self

    def rank(self, target, problems):
        return self.model.predict(target, problems["problem_id"])["ranking"].to_numpy()


class FinetunedXGBoost(SourceXGBoost):
    name = "xgboost-finetuned"
    description = (f"source xgboost + {FINETUNE_ROUNDS} boosting rounds per direction on the k target shots "
                   f"(learning rate {FINETUNE_LEARNING_RATE}, depth {FINETUNE_DEPTH}, "
                   f"min_child_weight {FINETUNE_MIN_CHILD_WEIGHT:g})")
    budgets = (100, 1000)

    def fit(self, task, seed: int = 0):
        import copy
        xgb = _xgb()
        source = self.source_model(task, seed)
        model = copy.copy(source)
        model.boosters = dict(source.boosters)
        shots = task.target_shots()
        ids = pd.Index(task.shot_ids())
        best = shots.best.drop_duplicates("problem_id").set_index("problem_id")["kernel"].astype(str)
        direction = shots.problems.set_index("problem_id")["direction"].astype(str).reindex(ids)
        feats = XGBoostFeatures.of(shots, ids, model.columns)
        self.used = {}
        for d, classes in model.classes.items():
            booster = source.boosters.get(d)
            rows = (direction == d).to_numpy()
            label = best.reindex(ids[rows]).map({k: i for i, k in enumerate(classes)})
            ok = label.notna().to_numpy()
            self.used[d] = int(ok.sum())
            if booster is None or not ok.any():
                continue
            dtrain = xgb.DMatrix(feats[rows][ok], label=label[ok].to_numpy(), feature_names=model.columns)
            params = finetune_params(model.xgb_params(seed), len(classes))
            model.boosters[d] = xgb.train(params, dtrain, FINETUNE_ROUNDS, xgb_model=booster.copy(),
                                          verbose_eval=False)
        self.model = model
        return self


class XGBoostFeatures:
    """The xgboost feature matrix of some problems, in the fitted model's column order."""

    @staticmethod
    def of(dataset, ids, columns) -> np.ndarray:
        return features_for(dataset, ids)[columns].to_numpy(np.float32)


class KShotSingleBest(TransferMethod):
    name = "kshot-single-best"
    description = "single-best fitted on the k target shots alone (no source data)"
    budgets = (100, 1000)
    stochastic = True  # the shots depend on the seed

    def fit(self, task, seed: int = 0):
        self.model = SingleBest().fit(task.target_shots(), task.shot_ids(), seed=seed)
        return self

    def rank(self, target, problems):
        return self.model.predict(target, problems["problem_id"])["ranking"].to_numpy()


class TargetXGBoost(TransferMethod):
    name = "target-xgboost"
    description = "ceiling, not a transfer method: the target's own xgboost on its full train part"
    role = "ceiling"
    budgets = (None,)  # the full target train part, outside the k-shot budget

    def fit(self, task, seed: int = 0):
        parts = task.target_split()
        self.model = XGBoostMulticlass()
        self.model.progress = False
        self.model.fit(task.target, parts["train"], parts["valid"], seed=seed)
        return self

    def rank(self, target, problems):
        return self.model.predict(target, problems["problem_id"])["ranking"].to_numpy()


def get_transfer_method(name: str) -> TransferMethod:
    if name not in TRANSFER_METHODS:
        known = sorted(TRANSFER_METHODS)
        raise KbenchInputError(f"unknown transfer method {name!r}. Available: {', '.join(known)}."
                               f"{suggest(name, known)}")
    return TRANSFER_METHODS[name]()

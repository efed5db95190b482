"""Issue 45 item 5 (NVIDIA): how small can ``xgboost-plans-safe`` get and keep its gain over cuDNN mode A?

Each setting is ``xgboost-plans-safe`` (regression of log(t / t_best) over (problem, plan) rows, the
safe rule at margin 0.01) with shallower trees and fewer rounds, fitted on the ``random`` train part
(early stopping on valid) and scored by kbench's Evaluator on the **valid** part only. The size is the
tree nodes (each a learned number), and for each compact setting the bytes of its exported selector
folder (:func:`kbench.selector.export`); the full model is the reference row ``full`` (the entry's own
defaults). ``bench/bench_compact_selector.py`` measures the chosen setting's latency.

    python experiments/compact_plans_trial.py --dataset h200-pytorch [--settings d6r100 d8r200 full]
    # -> experiments/results/compact_plans_trial_<dataset>.json (one row per setting, merged on re-run)

A setting ``d<depth>r<rounds>`` means max_depth, max_rounds, at learning rate 0.1 (0.05 for ``full``);
``d<depth>r<rounds>ab<k>`` ranks only the plans of the first k places of mode A or mode B
(``candidates="modes_ab_top_k"``: fewer rows per problem, so a faster selector). Suffixes:
``lr<digits>`` sets the learning rate to 0.<digits> (``lr05`` = 0.05); ``all`` (after ``ab<k>``) trains
on the rows of every proposed plan, with the heuristic features (list lengths, relative places, number
of candidates) taken over all of them, and scores only the first k places (:class:`AllRowsPlans`).

``--restrict-entry`` asks how much of the gain the deployable candidate set itself costs: it re-ranks the
board entry's stored test predictions (``leaderboard/<dataset>/<split>/xgboost-plans-safe``, every seed)
within the plans of the first k places of mode A or mode B, k = 4, 8, 16, and scores them
(``entry_restricted`` in the results; the test part, since the predictions are the entry's test ones).

``distil<pct>`` (last) distils: the train rows' target is ``pct`` % the teacher's predicted log(t / t_best)
and the rest the measured one (valid, for early stopping, keeps the measured one). The teacher is the
full recipe pooled over the variant's GPUs, ``xgboost-plans-pooled`` (level with ``xgboost-plans-safe`` on
h200-pytorch ``random``), at ``--teacher-seed``; its fit is taken from the pooled cache when a board
run made it, and its training never saw the target's valid or test problems.

``positions<k>`` is the other design tried: one row per problem instead of one per plan. A multi-class
XGBoost (:class:`XGBoostPositions`, defined here) predicts which of the first k places of mode A's and
mode B's lists holds the fastest plan, from the problem's features and the engine of each place's plan;
the places come first by probability, then every other plan in the heuristics' order. It scores one row
whatever the number of plans, but sees no plan's knobs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import kbench  # noqa: E402
from kbench import selector  # noqa: E402
from kbench.core.errors import KbenchInputError  # noqa: E402
from kbench.leaderboard.store import read_seed_predictions  # noqa: E402
from kbench.scoring.evaluate import Evaluator  # noqa: E402
from kbench_baselines import get_baseline  # noqa: E402
from kbench_baselines.base import as_id_index, predictions_frame, problems_of  # noqa: E402
from kbench_baselines.features import problem_features  # noqa: E402
from kbench_baselines.xgb import _xgb, _XGBBase  # noqa: E402
from kbench_baselines.xgb_plans import XGBoostPlansSafe, plan_candidates  # noqa: E402

SETTING = re.compile(r"^d(\d+)r(\d+)(?:ab(\d+)(all)?)?(?:lr(\d+))?(?:distil(\d+))?$")
POSITIONS = re.compile(r"^positions(\d+)$")


def params_of(setting: str) -> dict:
    if setting == "full":
        return {}
    if m := POSITIONS.fullmatch(setting):
        return {"positions": int(m.group(1))}
    m = SETTING.fullmatch(setting)
    if not m:
        raise SystemExit(f"setting {setting!r} is none of full, d<depth>r<rounds>[ab<k>[all]][lr<digits>], "
                         "positions<k>")
    out = {"max_depth": int(m.group(1)), "max_rounds": int(m.group(2)),
           "learning_rate": float(f"0.{m.group(5)}") if m.group(5) else 0.1}
    if m.group(3):
        out.update(candidates="modes_ab_top_k", top_k=int(m.group(3)))
    if m.group(6):
        out["distil"] = int(m.group(6)) / 100
    return out


def model_of(setting: str, teacher_seed: int = 0):
    if POSITIONS.fullmatch(setting):
        return XGBoostPositions(**params_of(setting))
    m = SETTING.fullmatch(setting)
    params = params_of(setting)
    if m and m.group(6):
        share = params.pop("distil")
        return DistilledPlans(share, teacher_seed, **params)
    if m and m.group(4):
        return AllRowsPlans(**params)
    return get_baseline("xgboost-plans-safe", **params)


class DistilledPlans(XGBoostPlansSafe):
    """``xgboost-plans-safe`` whose train rows learn ``share`` of the teacher's predicted log(t / t_best)."""

    def __init__(self, share: float, teacher_seed: int, **params):
        super().__init__(**params)
        self.share, self.teacher_seed = float(share), int(teacher_seed)
        self._train_ids: pd.Index | None = None
        self._valid_ids: pd.Index | None = None

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        # the teacher is fitted (or loaded from the pooled cache) on the same parts as a board run's
        self._train_ids, self._valid_ids = as_id_index(train_ids), as_id_index([] if valid_ids is None else valid_ids)
        try:
            return super().fit(dataset, train_ids, valid_ids, seed)
        finally:
            self._train_ids = self._valid_ids = None

    def _labelled(self, dataset, ids: pd.Index):
        problems, rows, ratio = super()._labelled(dataset, ids)
        if self._train_ids is None or not ids.equals(self._train_ids):
            return problems, rows, ratio  # valid keeps the measured target
        teacher = get_baseline("xgboost-plans-pooled").fit(dataset, ids, self._valid_ids, seed=self.teacher_seed)
        _, trows, tscore = teacher.row_scores(dataset, ids)
        predicted = pd.Series(-tscore, index=pd.MultiIndex.from_frame(trows[["problem_id", "kernel"]].astype(str)))
        log_t = predicted.reindex(pd.MultiIndex.from_frame(rows[["problem_id", "kernel"]].astype(str))).to_numpy()
        if np.isnan(log_t).any():
            raise KbenchInputError(f"the teacher scored no row for {int(np.isnan(log_t).sum())} student rows")
        target = (1 - self.share) * np.log(ratio) + self.share * log_t
        self.fit_info_teacher = teacher.fit_info
        return problems, rows, np.exp(target)


class AllRowsPlans(XGBoostPlansSafe):
    """``xgboost-plans-safe`` fitted on the rows of every proposed plan, scoring only its candidate set.

    The heuristic features are taken over every proposed plan in fit and predict alike, so a row's
    features do not depend on the candidate filter; the filter (``candidates``, ``top_k``) only drops rows
    before they are scored."""

    def _candidates(self, dataset, ids: pd.Index) -> pd.DataFrame:
        return plan_candidates(dataset.heuristics, ids, "all", 0)

    def row_scores(self, dataset, ids):
        problems, rows, score = super().row_scores(dataset, ids)
        kept = plan_candidates(dataset.heuristics, as_id_index(problems["problem_id"]), self.params["candidates"],
                               int(self.params["top_k"]))[["problem_id", "kernel"]]
        keep = pd.MultiIndex.from_frame(rows[["problem_id", "kernel"]]).isin(pd.MultiIndex.from_frame(kept))
        return problems, rows[keep].reset_index(drop=True), score[keep]


def entry_restricted(ds, split: str, ks=(4, 8, 16)) -> dict:
    """The board entry's stored test rankings re-ranked within the first k places of mode A or mode B, per seed:
    speed-up over the reference and geomean slowdown (the entry's own, unrestricted, under k = "all")."""
    path = ROOT / f"leaderboard/{ds.name}/{split}/xgboost-plans-safe/preds.parquet"
    evaluator = Evaluator(ds, split, part="test")
    ids = as_id_index(ds.split(split)["test"])
    allowed = {str(k): plan_candidates(ds.heuristics, ids, "modes_ab_top_k", k)[["problem_id", "kernel"]] for k in ks}
    out: dict = {"predictions": str(path.relative_to(ROOT)), "part": "test", "per_seed": {}}
    for seed, preds in read_seed_predictions(path).items():
        long = preds.assign(kernel=preds["ranking"].str.split(";"))[["problem_id", "kernel"]].explode("kernel")
        long["place"] = long.groupby("problem_id").cumcount()
        row = {}
        for k, plans in [("all", None), *allowed.items()]:
            kept = long if plans is None else long.merge(plans, on=["problem_id", "kernel"])
            ranked = kept.sort_values(["problem_id", "place"]).groupby("problem_id")["kernel"].agg(";".join)
            # a problem none of whose ranked plans is in the set keeps its ranking (as plan_candidates does)
            ranking = preds["problem_id"].map(ranked).fillna(preds["ranking"])
            o = evaluator(predictions_frame(preds["problem_id"], ranking.to_numpy())).overall
            row[k] = {"speedup_geomean": o["speedup_geomean"], "geomean_slowdown": o["geomean_slowdown"]}
        out["per_seed"][str(seed)] = row
    out["n_seeds"] = len(out["per_seed"])
    for k in allowed:
        out[f"kept_gain_top{k}"] = round(float(np.mean([(r[k]["speedup_geomean"] - 1) / (r["all"]["speedup_geomean"] - 1)
                                                         for r in out["per_seed"].values()])), 4)
    return out


#: the classes of ``xgboost-positions``: the first ``POSITIONS`` places of cuDNN mode A's and mode B's lists,
#: interleaved (A0, B0, A1, B1, ...), so that ties go to the earlier place and to mode A first
POSITION_LISTS = ("cudnn_mode_a", "cudnn_mode_b")


def position_classes(positions: int) -> list[tuple[str, int]]:
    return [(h, i) for i in range(positions) for h in POSITION_LISTS]


def position_plans(heuristics: pd.DataFrame, ids: pd.Index, classes: list[tuple[str, int]]) -> np.ndarray:
    """(problems x classes) plan names at each class's place of its list ("" where the list is shorter).
    The classes are :func:`position_classes`: place i of list l is column i * len(POSITION_LISTS) + l."""
    out = np.full((len(ids), len(classes)), "", dtype=object)
    h = heuristics[heuristics["heuristic"].isin(POSITION_LISTS) & heuristics["problem_id"].isin(ids)]
    h = h[h["rank"].to_numpy() < len(classes) // len(POSITION_LISTS)]
    which = pd.Index(POSITION_LISTS).get_indexer(h["heuristic"].astype(str))
    out[ids.get_indexer(h["problem_id"].astype(str)), h["rank"].to_numpy(dtype=np.int64) * len(POSITION_LISTS) + which] = \
        h["kernel"].astype(str).to_numpy()
    return out


def position_features(problems: pd.DataFrame, plans: np.ndarray, classes: list[tuple[str, int]]) -> pd.DataFrame:
    """The problem's features, then per class place the engine number of its plan and whether it is mode
    A's first plan (NaN where the list is shorter), and the number of places filled per list."""
    f = problem_features(problems).reset_index(drop=True)
    extra = {}
    for j, (h, i) in enumerate(classes):
        name = pd.Series(plans[:, j])
        engine = name.str.extract(r"^eng(\d+)")[0].astype(float)
        extra[f"engine_{h}_{i}"] = engine.to_numpy()
        extra[f"is_a0_{h}_{i}"] = np.where(name == "", np.nan, (name == pd.Series(plans[:, 0])).astype(float))
    for h in POSITION_LISTS:
        cols = [j for j, (hh, _) in enumerate(classes) if hh == h]
        extra[f"places_{h}"] = (plans[:, cols] != "").sum(axis=1).astype(float)
    return pd.concat([f, pd.DataFrame(extra)], axis=1)


class XGBoostPositions(_XGBBase):
    name = "xgboost-positions"
    description = ("XGBoost multi-class over the first places of cuDNN mode A's and mode B's lists: one row per "
                   "problem, small and fast enough to ship on top of the heuristic")
    benchmark = False  # tried here only, not a package baseline
    DEFAULTS = {"positions": 4, "max_depth": 6, "learning_rate": 0.1, "max_bin": 256, "subsample": 0.8,
                "colsample_bytree": 0.8, "min_child_weight": 1.0, "reg_lambda": 1.0, "max_rounds": 300,
                "early_stopping": 20, "n_jobs": 2, "margin_weight": 0.05, "max_ranking": 30}

    def __init__(self, **params):
        super().__init__(**params)
        if int(self.params["positions"]) < 1:
            raise KbenchInputError(f"{self.name}: positions must be at least 1, got {self.params['positions']!r}")
        self.classes = position_classes(int(self.params["positions"]))
        self.booster = None
        self.columns: list[str] = []

    def _table(self, dataset, ids: pd.Index):
        problems = problems_of(dataset, ids)
        plans = position_plans(dataset.heuristics, ids, self.classes)
        return problems, plans, position_features(problems, plans, self.classes)

    def _labels(self, dataset, ids: pd.Index, plans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(class of the fastest place, weight) per problem: weight = the log margin of the fastest plan over
        the fastest other plan among the places, / ``margin_weight``, clipped to [0.1, 1] (near-ties count
        less); class -1 where no place has a time."""
        rt = dataset.runtimes[dataset.runtimes["problem_id"].isin(ids)]
        t = rt.astype({"problem_id": str, "kernel": str}).groupby(["problem_id", "kernel"])["time_ms"].min()
        key = pd.MultiIndex.from_arrays([np.repeat(ids.to_numpy(), plans.shape[1]), plans.ravel()])
        times = t.reindex(key).to_numpy(dtype=np.float64).reshape(plans.shape)
        filled = np.isfinite(times)
        label = np.where(filled.any(axis=1), np.argmin(np.where(filled, times, np.inf), axis=1), -1)
        rows = np.arange(len(ids))
        best_t = times[rows, np.maximum(label, 0)]
        other = np.where(filled & (plans != plans[rows, np.maximum(label, 0)][:, None]), times, np.inf).min(axis=1)
        margin = np.log(other / best_t)
        weight = np.clip(np.where(np.isfinite(margin), margin / self.params["margin_weight"], 1.0), 0.1, 1.0)
        return label, weight

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        xgb = _xgb()
        t0 = time.perf_counter()
        self.seed = int(seed)
        train_ids = as_id_index(train_ids)
        valid_ids = as_id_index([] if valid_ids is None else valid_ids)
        _, plans, ftr = self._table(dataset, train_ids)
        self.columns = list(ftr.columns)
        ytr, wtr = self._labels(dataset, train_ids, plans)
        ok = ytr >= 0
        dtr = xgb.DMatrix(ftr.to_numpy(np.float32)[ok], label=ytr[ok], weight=wtr[ok], feature_names=self.columns)
        params = dict(self.xgb_params(self.seed), objective="multi:softprob", num_class=len(self.classes),
                      eval_metric="mlogloss")
        evals, es = [], None
        if len(valid_ids):
            _, pva, fva = self._table(dataset, valid_ids)
            yva, wva = self._labels(dataset, valid_ids, pva)
            okv = yva >= 0
            evals = [(xgb.DMatrix(fva.to_numpy(np.float32)[okv], label=yva[okv], weight=wva[okv],
                                  feature_names=self.columns), "valid")]
            es = self.params["early_stopping"]
        booster = xgb.train(params, dtr, self.params["max_rounds"], evals=evals, early_stopping_rounds=es,
                            verbose_eval=False)
        self.fit_info = {"problems": int(ok.sum())}
        if es is not None:
            self.fit_info["valid_mlogloss"] = round(float(booster.best_score), 5)
            booster = booster[: booster.best_iteration + 1]
        self.booster = booster
        self.fit_info.update(rounds=booster.num_boosted_rounds(), fit_time_s=round(time.perf_counter() - t0, 2))
        return self

    def predict(self, dataset, ids) -> pd.DataFrame:
        if self.booster is None:
            raise KbenchInputError(f"{self.name}: call fit (or load a saved model) before predict")
        ids = as_id_index(ids)
        problems, plans, feats = self._table(dataset, ids)
        prob = self.booster.inplace_predict(feats[self.columns].to_numpy(np.float32)).reshape(len(ids), -1)
        rows = plan_candidates(dataset.heuristics, as_id_index(problems["problem_id"]))
        # the places by probability (an empty place never), then every candidate in the heuristics' order
        prob = np.where(plans != "", prob, -1.0)
        order = np.lexsort((np.tile(np.arange(plans.shape[1]), (len(ids), 1)), -prob), axis=1)
        ranked = np.take_along_axis(plans, order, axis=1)
        ranked = np.where(np.take_along_axis(prob, order, axis=1) >= 0, ranked, "")
        lead = pd.DataFrame({"pos": np.repeat(np.arange(len(ids)), ranked.shape[1]), "kernel": ranked.ravel(),
                             "key": np.tile(np.arange(ranked.shape[1]), len(ids))})
        rest = rows[["pos", "kernel"]].assign(key=ranked.shape[1] + rows.groupby("pos").cumcount().to_numpy())
        both = pd.concat([lead[lead["kernel"] != ""], rest]).sort_values(["pos", "key"], kind="stable")
        both = both.drop_duplicates(["pos", "kernel"])
        both = both[both.groupby("pos").cumcount().to_numpy() < int(self.params["max_ranking"])]
        joined = both.groupby("pos")["kernel"].agg(";".join)
        out = np.full(len(ids), "", dtype=object)
        out[joined.index.to_numpy()] = joined.to_numpy()
        return predictions_frame(problems["problem_id"], out)

    def n_parameters(self) -> int | None:
        return None if self.booster is None else int(sum(d.count("\n") for d in self.booster.get_dump()))


def selector_size(model) -> int:
    """Bytes of the model exported as a selector folder (:func:`kbench.selector.export`)."""
    with tempfile.TemporaryDirectory() as tmp:
        return selector.load(selector.export(model, Path(tmp) / "sel")).size_bytes()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="h200-pytorch")
    ap.add_argument("--split", default="random")
    ap.add_argument("--settings", nargs="*", default=["d6r100", "d8r200", "d8r400", "full"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--teacher-seed", type=int, default=0, help="seed of the distil<pct> settings' teacher")
    ap.add_argument("--restrict-entry", action="store_true",
                    help="also re-rank the board entry's stored test predictions within the first k places")
    a = ap.parse_args()
    out = ROOT / f"experiments/results/compact_plans_trial_{a.dataset}.json"
    doc = json.loads(out.read_text()) if out.exists() else {"dataset": a.dataset, "split": a.split, "part": "valid",
                                                              "rows": {}}
    ds = kbench.load(a.dataset)
    parts = ds.split(a.split)
    evaluator = Evaluator(ds, a.split, part="valid")
    for setting in a.settings:
        t0 = time.perf_counter()
        model = model_of(setting, a.teacher_seed).fit(ds, parts["train"], parts["valid"], seed=a.seed)
        fit_s = time.perf_counter() - t0
        o = evaluator(model.predict(ds, parts["valid"])).overall
        params = {**params_of(setting), "seed": a.seed}
        if isinstance(model, AllRowsPlans):
            params["train_rows"] = "all"
        if isinstance(model, DistilledPlans):
            params.update(distil=model.share, teacher="xgboost-plans-pooled", teacher_seed=a.teacher_seed,
                          teacher_cache=model.fit_info_teacher.get("cache"))
        row = {"params": params, "rounds": model.fit_info["rounds"],
               "tree_nodes": model.n_parameters(), "fit_s": round(fit_s, 1),
               "geomean_slowdown": o["geomean_slowdown"], "top1": o["top1"],
               "speedup_geomean": o["speedup_geomean"]}
        if setting != "full" and not POSITIONS.fullmatch(setting):
            row["size_bytes"] = selector_size(model)
        doc["rows"][setting] = row
        print(f"{setting}: {row['tree_nodes']:,} nodes, {row['rounds']} rounds, valid slowdown "
              f"{row['geomean_slowdown']:.4f}, speed-up over the reference {row['speedup_geomean']:.4f} "
              f"({fit_s:.0f} s)", flush=True)
        out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    if a.restrict_entry:
        doc["entry_restricted"] = entry_restricted(ds, a.split)
        print("the entry's test rankings within the first k places keep "
              + ", ".join(f"{v:.1%} (k = {k[len('kept_gain_top'):]})" for k, v in doc["entry_restricted"].items()
                          if k.startswith("kept_gain_top")) + " of its gain", flush=True)
        out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    full = doc["rows"].get("full")
    if full:
        for row in doc["rows"].values():
            row["kept_gain_vs_full"] = round((row["speedup_geomean"] - 1) / (full["speedup_geomean"] - 1), 4)
        out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"-> {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

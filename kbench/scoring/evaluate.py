"""The Evaluator: validate a predictions file and score it on a dataset part.

>>> from kbench import Evaluator
>>> ev = Evaluator("mi100", split="random")          # test part
>>> print(ev.expected_format())                     # doctest: +SKIP
>>> result = ev(preds_df)                            # doctest: +SKIP
>>> result.overall["top1"], result.overall["geomean_slowdown"]   # doctest: +SKIP
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from kbench.core.errors import KbenchInputError, suggest
from kbench.core.output_files import printable_path
from kbench.core.version import __version__
from kbench.data.dataset import load
from kbench.scoring.environment import environment
from kbench.scoring.long_form import long_form_order
from kbench.scoring.metrics import LOP_AT, TOP_K, ScoringTable, build_scoring_table, index_in, score_rankings, summarize
from kbench.scoring.network_time import network_metrics, network_set
from kbench.scoring.prediction_files import (
    MAX_LISTED,
    prediction_columns,
    read_predictions,
    sha256_bytes,
    shown,
    unknown_kernels_message,
)
from kbench.scoring.records import Counts, DatasetRef, EvaluationResult, PredictionsRef, TuningResult
from kbench.scoring.selection_metrics import (
    AUTOTUNE_FROM,
    PYTORCH_AUTOTUNE,
    ReferenceRun,
    autotune_run,
    group_figures,
    ranking_quality,
)
from kbench.scoring.tuning_metrics import score_tuning

EXPECTED_FORMAT = """\
Predictions: a CSV file (or a pandas DataFrame) with a header row, comma-separated,
one row per problem, joined to the dataset by problem_id (never by row position).

Required column
  problem_id   the dataset's problem id (the MIOpen problem key), e.g.
               64-28-28-3x3-128-14-14-32-1x1-2x2-1x1-0-NCHW-FP16-F
and ONE of
  ranking      kernels in preference order separated by ';', e.g.
               ConvBinWinogradRxSf2x3g1;ConvMlirIgemmFwdXdlops;GemmFwdRest
  kernel       the top-1 kernel only (LoP@n then equals LoP@1)
or the long form, one row per (problem, kernel):
  problem_id,kernel,score   higher score = preferred; the ranking is the score order, equal scores
                            ranked by kernel name (A to Z), never by row order

Every problem of the scored part must be present (or pass --allow-partial to score
what is there). Kernel names must be in the dataset's vocabulary (ds.kernels). A kernel
listed twice for one problem counts at its first position (long form: its highest score).
Long-form scores must be finite numbers; negative ones are fine.
UTF-8 with or without BOM (UTF-16/32 with a BOM is converted), LF or CRLF line endings.
gzip-compressed files are read too (recognised by content, so `<(zcat f.gz)` and f.gz both
work); at most 2 GiB after decompression (KBENCH_MAX_PREDICTIONS_BYTES overrides).

Scoring rules
  1. The choice for a problem is the first kernel of the ranking that the library could
     run. Where the problem's measured list is complete, a kernel outside it is known to
     be inapplicable and is skipped, as the library itself would skip it; if nothing
     applicable remains the prediction is a failure (timed at the slowest listed kernel).
     Where the list is censored (find-db: the 4 fastest only), a kernel outside the list
     is "slower than the 4th or inapplicable": it is taken as the choice and its time is
     censored at the 4th time, a lower bound. A kernel never measured on a problem of the
     same direction and dimensionality (2D / 3D) anywhere in the dataset is inapplicable
     there and skipped.
  2. top-1: the choice is a fastest kernel (ties: either counts). top-k: a fastest
     kernel is among the first k applicable candidates. within 5%: t <= 1.05 t_best.
  3. LoP = (t_choice - t_best) / t_best (mean, median, p90, max); geometric-mean
     slowdown exp(mean(log(t_choice / t_best))); LoP@n: LoP of the best of the first n
     applicable candidates (n = 1, 5, 10, 30).
  4. Speed-up over the heuristic: geomean of t_heuristic / t_choice and the total-time
     ratio sum(t_heuristic) / sum(t_choice).
  5. Best-of-K (K = 1, 3, 5, 10): the first K applicable candidates are timed and the
     fastest is kept (K = 10: PyTorch's autotune limit); geomean slowdown of that time
     and its share of the oracle's performance. On a censored list the best of K is
     exact once one of the K is listed (an unlisted kernel is slower than every listed
     one); only problems whose first K are all unlisted stay lower bounds (their share
     is best_of_K_censored).
  6. Against each reference heuristic (every heuristic the dataset records, or every
     measured reference), over the problems where it has a choice: its own best-of-K
     curve; share of headroom closed sum(log(t_ref / t_choice)) / sum(log(t_ref /
     t_best)) (1: the oracle, 0: the reference); with r = t_choice / t_ref, the shares
     improved (r < 1/1.05), unchanged and regressed (r > 1.05), the p95 and worst r and
     the geomean of r over the regressed problems. Two references are autotune:
     autotune_top10, the best of mode A's first 10 plans, each timed exactly (idealised
     autotune), and where the dataset records it pytorch_autotune, the plan PyTorch's
     benchmark = True settled on (real autotune), on the problems it was recorded for.
  7. Ranking quality over the listed kernels (on censored lists the listed ones only), in
     the ranking's order among its first 30 applicable candidates (deeper or unranked:
     tied last): Kendall tau-b against the measured times (problems with fewer than two
     listed kernels left out; ties in time keep it below 1 even for the oracle), and
     NDCG@10 with gain t_best / t.
  8. Network end-to-end time (networks split): per network list at one data type and
     layout, the chosen kernels' times summed over its layers with each layer's
     multiplicity (forward, backward-data and backward-weights where the part has every
     direction, forward alone otherwise), over the oracle's sum and the reference's;
     beside each, the per-problem geomean over the same layers; geomean over networks.
  Censored choices make LoP and slowdown lower bounds and within-5% and speed-up upper
  bounds; the report shows the shares of exact, censored and failed choices.
"""

#: recorded heuristics used as a dataset's reference for speed-up, first found wins
REFERENCE_PRIORITY = ("cudnn_mode_a",)


#: rankings are exploded in chunks of about this many rows, one thread per chunk
#: (pyarrow's kernels release the GIL, so the chunks run in parallel)
EXPLODE_CHUNK_ROWS = 8192


def _explode(values, vocabulary: np.ndarray, split: bool):
    """Explode ranking strings into (row index, kernel index, names) with pyarrow.

    ``values`` is a pyarrow string array with one ranking per row (``split``) or one kernel
    name per row. Names are matched against ``vocabulary`` in C++; kernel index -1 marks a
    name outside it (after trimming surrounding whitespace). ``names`` is the flat pyarrow
    array of names, for error messages.
    """
    if isinstance(values, pa.ChunkedArray):  # the CSV reader hands over several chunks
        values = values.combine_chunks()
    vocab = pa.array(list(vocabulary), type=pa.string())

    def one(start: int, stop: int):
        part = values.slice(start, stop - start)
        if split:
            lists = pc.split_pattern(part, ";")
            names, parents = lists.flatten(), pc.list_parent_indices(lists).to_numpy() + start
        else:
            names, parents = part, np.arange(start, stop)
        kidx = pc.fill_null(pc.index_in(names, value_set=vocab), -1).to_numpy(zero_copy_only=False)
        if (kidx < 0).any():  # only then pay for trimming every name: " a ; b" is accepted
            names = pc.utf8_trim_whitespace(names)
            kidx = pc.fill_null(pc.index_in(names, value_set=vocab), -1).to_numpy(zero_copy_only=False)
        return parents, kidx, names

    n = len(values)
    bounds = list(range(0, n, EXPLODE_CHUNK_ROWS)) + [n]
    spans = list(zip(bounds[:-1], bounds[1:])) or [(0, 0)]
    workers = min(len(spans), pa.cpu_count())  # pyarrow's own thread count (1 in a process of a pool)
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            parts = list(pool.map(lambda span: one(*span), spans))
    else:
        parts = [one(*span) for span in spans]
    parents = np.concatenate([q[0] for q in parts]).astype(np.int64)
    kidx = np.concatenate([q[1] for q in parts]).astype(np.int64)
    names = pa.chunked_array([q[2] for q in parts], type=pa.string())  # combined only for error messages
    return parents, kidx, names


class Evaluator:
    """Scores kernel rankings on one part of a dataset split.

    Parameters
    ----------
    dataset : name, alias or :class:`kbench.Dataset`
    split : standard split name (``random``, ``networks``, ...)
    part : ``test`` (default), ``valid`` or ``train``
    reference : heuristic for speed-up: ``"default"`` (the dataset's reference heuristic, read
        from its ``heuristics`` table: the vendor heuristic on collected NVIDIA sets, the
        ``rules`` decision list on AMD sets; else its measured ``references``), ``None``, or a
        predictions DataFrame / CSV path. With ``"default"`` the choices are also compared with
        every other heuristic the dataset records (cuDNN mode B, ...) or every measured reference.
    """

    def __init__(self, dataset="mi100", split: str = "random", part: str = "test", reference="default"):
        self.dataset = load(dataset) if isinstance(dataset, str) else dataset
        if part not in ("train", "valid", "test"):
            raise KbenchInputError(f"unknown part {part!r}; use train, valid or test.{suggest(part, ['train', 'valid', 'test'])}")
        self.split, self.part = split, part
        self.ids = self.dataset.split(split)[part]
        ds = self.dataset
        problems = ds.problems[index_in(ds.problems["problem_id"], pd.Series(self.ids)) >= 0].reset_index(drop=True)
        self.table: ScoringTable = build_scoring_table(problems, ds.runtimes, ds.kernels, ds.problems)
        self._pindex = pd.Index(self.table.problem_ids)
        self._kindex = pd.Index(self.table.kernels)
        self.reference_name, self.references = self._resolve_reference(reference)
        self._t_ref = self.references[0].t if self.references else None
        # network end-to-end time: the networks split's layer lists, where the part holds them
        self.networks = network_set(problems) if split == "networks" else None

    # -- format ---------------------------------------------------------------
    @staticmethod
    def expected_format() -> str:
        """The predictions format and the scoring rules, as ``kbench evaluate --explain`` prints them."""
        return EXPECTED_FORMAT

    # -- reference heuristic ----------------------------------------------------
    def _resolve_reference(self, reference) -> tuple[str | None, list[ReferenceRun]]:
        """The reference for speed-up and every reference the choices are compared with (that one first)."""
        if reference is None:
            return None, []
        if isinstance(reference, str) and reference == "default":
            heur = self.dataset.heuristics
            if heur is not None and len(heur):
                names = sorted(heur["heuristic"].unique())
                # the vendor's default choice (cuDNN heuristic mode A's first plan); on the AMD sets the only
                # recorded one, the `rules` decision list written by build-data. The dataset's other recorded
                # heuristics (cuDNN mode B, its fallback list, PyTorch's choice) are compared with too.
                name = self.dataset.info.get("reference_heuristic") or next(
                    (n for n in REFERENCE_PRIORITY if n in names), names[0])
                order = [name] + [n for n in names if n != name]
                rows = {n: self._heuristic_rows(heur, n) for n in order}
                runs = [self._run(n, *rows[n]) for n in order]
                for run in runs:
                    if run.name == PYTORCH_AUTOTUNE:  # the real autotune: its measured first call's cost
                        run.first_call = self._autotune_cost()
                if AUTOTUNE_FROM in rows:  # the idealised autotune: the fastest of mode A's first 10
                    runs.append(autotune_run(self.table.times, *rows[AUTOTUNE_FROM]))
                return name, runs
            refs = self.dataset.tables.get("references")
            if refs is not None and len(refs):
                # measured reference times (tile sets: the best cuDNN algorithm per layer): no order of their own
                names = list(self.dataset.info.get("references", {})) or sorted(refs["reference"].unique())
                runs = []
                for name in names:
                    chosen = refs[refs["reference"] == name].set_index("problem_id")["time_ms"]
                    runs.append(ReferenceRun(name, chosen.reindex(self._pindex).to_numpy(dtype=np.float64)))
                return names[0], runs
            return None, []
        if isinstance(reference, (str, Path)):
            frame, _ = read_predictions(reference)
            return str(reference), [self._reference_run(str(reference), frame)]
        return "custom", [self._reference_run("custom", reference)]

    def _autotune_cost(self) -> np.ndarray:
        """Per problem of the part, PyTorch's measured tuning time on its first call (the ``autotune``
        table's ``first_call_cost_ms``; NaN where it was not recorded)."""
        table = self.dataset.tables.get("autotune")
        if table is None or not len(table):
            return np.full(len(self._pindex), np.nan)
        cost = table.astype({"problem_id": str}).set_index("problem_id")["first_call_cost_ms"]
        return cost.reindex(self._pindex).to_numpy(dtype=np.float64)

    def _heuristic_rows(self, heur: pd.DataFrame, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(problem, kernel) indices of a recorded heuristic's rows on this part, in preference order."""
        h = heur[heur["heuristic"] == name]
        prob = index_in(h["problem_id"], pd.Series(self.table.problem_ids))
        kern = index_in(h["kernel"], pd.Series(self.table.kernels))
        # rows of this part; a kernel outside the vocabulary (a dataset cut by align or subset) can never be
        # the choice, so it is skipped as scoring would skip it
        ok = (prob >= 0) & (kern >= 0)
        rank = h["rank"].to_numpy()[ok]
        order = np.lexsort((rank, prob[ok]))
        return prob[ok][order], kern[ok][order]

    def _reference_run(self, name: str, preds: pd.DataFrame) -> ReferenceRun:
        prob, kern, _ = self._to_long(preds, allow_partial=True, source="reference heuristic")
        return self._run(name, prob, kern)

    def _run(self, name: str, prob: np.ndarray, kern: np.ndarray) -> ReferenceRun:
        ch = score_rankings(self.table, prob, kern)
        return ReferenceRun(name, np.where(ch.predicted, ch.t_choice, np.nan), ch.best_at, ch.best_bound_at)

    # -- validation -----------------------------------------------------------
    def _to_long(self, preds: pd.DataFrame, allow_partial: bool, source: str = "predictions"):
        """Validate and turn predictions into (problem index, kernel index) rows in preference order.

        Collects every problem with the input and raises one KbenchInputError listing them all.
        """
        long_form, value_col = prediction_columns(preds, source)
        issues: list[str] = []
        df = preds.copy()
        df["problem_id"] = df["problem_id"].astype(str).str.strip()
        values = df[value_col].astype("string")
        # whitespace around names is trimmed later, per name, in C++ (pyarrow); emptiness is
        # read from the arrow offsets, not from Python strings
        value_arr = pa.array(values, type=pa.string())
        value_len = pc.fill_null(pc.binary_length(value_arr), 0).to_numpy(zero_copy_only=False)
        empty = df["problem_id"].isin(["", "nan", "None", "<NA>"]) | (value_len == 0)
        if long_form:
            score = pd.to_numeric(df["score"], errors="coerce")
            infinite = np.isinf(score.to_numpy(dtype=np.float64))
            if infinite.any():  # +-inf ties with itself: the order among such kernels would be arbitrary
                rows = (np.flatnonzero(infinite) + 2)[:MAX_LISTED].tolist()
                issues.append(f"{int(infinite.sum())} score(s) are infinite (file rows {rows}); "
                              "give finite numbers (negative scores are fine: higher = preferred).")
            empty |= score.isna() & ~infinite
        if empty.any():
            rows = (np.flatnonzero(empty.to_numpy()) + 2)[:MAX_LISTED].tolist()  # +2: header, 1-based
            issues.append(f"{int(empty.sum())} row(s) with an empty or NaN cell (file rows {rows}).")
        drop = empty.to_numpy() | (infinite if long_form else False)
        if drop.any():
            df, values = df[~drop], values[~drop]
            value_arr = value_arr.filter(pa.array(~drop))
            if long_form:
                score = score[~drop]
        if not long_form:
            dup = df["problem_id"].duplicated(keep=False)
            if dup.any():
                ex = shown(df.loc[dup, "problem_id"].unique()[:MAX_LISTED])
                issues.append(f"{int(df['problem_id'].duplicated().sum())} duplicated problem_id(s), e.g. {ex}; "
                              "give one row per problem.")
        pidx = self._pindex.get_indexer(df["problem_id"])
        unknown_mask = pidx < 0
        if unknown_mask.any():
            all_ids = pd.Index(self.dataset.problems["problem_id"])
            in_dataset = all_ids.get_indexer(df["problem_id"][unknown_mask]) >= 0
            other_part = int(in_dataset.sum())
            ex = shown(df["problem_id"][unknown_mask].unique()[:3])
            where = f" ({other_part} belong to other parts of split {self.split!r})" if other_part else ""
            if not allow_partial or other_part < unknown_mask.sum():
                issues.append(f"{int(unknown_mask.sum())} problem id(s) not in {self.dataset.name} "
                              f"{self.split}/{self.part}{where}, e.g. {ex}.")
        # explode the rankings into long rows
        if long_form:
            long = pd.DataFrame({"p": pidx, "kernel": values.to_numpy(), "score": score.to_numpy()})
            long = long.iloc[long_form_order(long["p"], long["score"], long["kernel"])]  # ties: by kernel name
            prob, names = long["p"].to_numpy(), long["kernel"].astype(str).to_numpy()
        else:
            prob_parent, kidx, names = _explode(value_arr, self.table.kernels, split=value_col == "ranking")
            prob = pidx[prob_parent]
        if isinstance(names, np.ndarray):
            kidx = self._kindex.get_indexer(pd.Index(names))
        bad_k = kidx < 0
        if bad_k.any():
            names_arr = (names[bad_k] if isinstance(names, np.ndarray)
                         else np.asarray(names.combine_chunks().filter(pa.array(bad_k)).to_pylist(), dtype=object))
            issues.append(unknown_kernels_message(names_arr, self.table.kernels, self.dataset.name))
        predicted = np.zeros(len(self._pindex), dtype=bool)
        predicted[pidx[pidx >= 0]] = True
        missing = int((~predicted).sum())
        if missing and not allow_partial:
            ex = self.table.problem_ids[~predicted][:3].tolist()
            issues.append(f"{missing} of {len(predicted)} problems of {self.split}/{self.part} have no prediction "
                          f"(coverage {predicted.mean():.1%}), e.g. {ex}; predict all of them or pass "
                          "--allow-partial to score what is there.")
        if issues:
            raise KbenchInputError(f"{source} is invalid:\n  - " + "\n  - ".join(issues))
        ok = (prob >= 0) & (kidx >= 0)
        return prob[ok], kidx[ok], predicted

    def validate(self, preds, allow_partial: bool = False) -> dict:
        """Check predictions without scoring; raises KbenchInputError listing every problem."""
        source = str(preds) if isinstance(preds, (str, Path)) else "predictions"
        frame = read_predictions(preds)[0] if isinstance(preds, (str, Path)) else preds
        _, _, predicted = self._to_long(frame, allow_partial, source=source)
        return {"rows": int(len(frame)), "problems_in_part": int(len(predicted)),
                "covered": int(predicted.sum()), "coverage": float(predicted.mean())}

    def ranked_rows(self, preds: pd.DataFrame, allow_partial: bool = False):
        """(problem index, kernel index, predicted) of a predictions frame on this part: its rows in
        preference order as indices into ``self.table``, and per problem of the part whether it has a
        ranking. Raises KbenchInputError listing every invalid row, as scoring does."""
        return self._to_long(preds, allow_partial)

    def choices(self, preds: pd.DataFrame, allow_partial: bool = False):
        """Problem-by-problem outcome of a predictions frame on this part (:class:`Choices`, arrays over
        ``self.table``'s problems: the chosen kernel, its time, the best of the first n, ...), by the
        same rules as :meth:`__call__`; ``predicted`` marks the problems that have a ranking."""
        prob, kern, _ = self._to_long(preds, allow_partial)
        return score_rankings(self.table, prob, kern)

    # -- scoring ----------------------------------------------------------------
    def __call__(self, preds, *, allow_partial: bool = False, method: str | None = None,
                 predictions_path: str | None = None, predictions_sha256: str | None = None) -> EvaluationResult:
        if isinstance(preds, (str, Path)):
            predictions_path = printable_path(preds)  # a file name that is not UTF-8 still goes into JSON
            preds, predictions_sha256 = read_predictions(preds)
        prob, kern, predicted = self._to_long(preds, allow_partial, source=predictions_path or "predictions")
        choices = score_rankings(self.table, prob, kern)
        scored = predicted
        tau, ndcg = ranking_quality(self.table, choices.rows)
        more = group_figures(tau, ndcg, self.references, choices.t_choice, self.table.t_best)
        metrics = summarize(self.table, choices, scored, self._t_ref, more)
        if self.networks is not None:
            metrics["networks"] = network_metrics(self.networks, choices.t_choice, self.table.t_best, self._t_ref,
                                                  scored, self.reference_name)
        n = int(scored.sum())
        counts = Counts(problems_in_part=len(predicted), predicted=int(predicted.sum()), scored=n,
                        coverage=float(predicted.mean()) if len(predicted) else 0.0,
                        choices_exact=int((choices.exact & scored).sum()),
                        choices_censored=int((choices.censored & scored).sum()),
                        failures=int((choices.failed & scored).sum()))
        bounds = {}
        if counts.choices_censored:
            bounds = {"lop_*, geomean_slowdown": "lower bound (censored choices timed at the last listed time)",
                      "within5, speedup_*": "upper bound", "top1, topk": "exact (a censored choice is never fastest)"}
        ds = self.dataset
        return EvaluationResult(
            kbench_version=__version__, method=method,
            dataset=DatasetRef(name=ds.name, version=ds.version, checksum=ds.checksum),
            split=self.split, part=self.part, reference=self.reference_name,
            predictions=PredictionsRef(path=predictions_path, sha256=predictions_sha256, rows=int(len(preds))),
            counts=counts, metrics=metrics, bounds=bounds, environment=environment())



def evaluate_tuning(dataset, preds, solver: str = "ConvAsm1x1U", split: str = "random", part: str = "test",
                    allow_partial: bool = False, method: str | None = None):
    """Score predicted parameter tuples on a tuning dataset; returns a TuningResult record."""
    ds = load(dataset) if isinstance(dataset, str) else dataset
    path = sha = None
    if isinstance(preds, (str, Path)):
        path = printable_path(preds)
        preds, sha = read_predictions(preds)
    if "problem_id" not in preds.columns:
        raise KbenchInputError(f"predictions: missing required column 'problem_id' (columns: {list(preds.columns)}).")
    ids = ds.split(split)[part]
    problems = ds.problems[index_in(ds.problems["problem_id"], pd.Series(ids)) >= 0]
    metrics = score_tuning(preds, ds.targets, solver, problems)
    if metrics.get("n_missing") and not allow_partial:
        raise KbenchInputError(
            f"predictions: {metrics['n_missing']} {solver} problems of {split}/{part} have no prediction; "
            "predict all of them or pass --allow-partial (missing ones count as wrong and invalid).")
    return TuningResult(
        kbench_version=__version__, method=method,
        dataset=DatasetRef(name=ds.name, version=ds.version, checksum=ds.checksum), split=split, part=part,
        solver=solver, predictions=PredictionsRef(path=path, sha256=sha, rows=int(len(preds))),
        metrics={k: v for k, v in metrics.items()}, environment=environment())


__all__ = ["Evaluator", "evaluate_tuning", "read_predictions", "sha256_bytes", "EXPECTED_FORMAT", "LOP_AT", "TOP_K"]

"""Where a board entry's headroom is: per direction, dtype, layout, problem kind and network.

    python tools/three_d_headroom.py --dataset h200-3d-pytorch --split random --method xgboost-plans-safe \
        [--part test] [--best-of K] [--json OUT.json]

Reads the entry's stored predictions (``leaderboard/DATASET/SPLIT/METHOD/preds.parquet``, every seed)
and scores them with kbench's own scoring (:class:`kbench.scoring.evaluate.Evaluator`, the table and
references the board uses). Per group of the part's problems it prints, over the problems where both
references have a choice:

* ``oracle/pt``: the oracle's speed-up over PyTorch's choice, geomean of t_pytorch / t_best;
* ``entry/pt``: the entry's, geomean over problems and seeds of t_pytorch / t_choice;
* ``oracle/at`` and ``entry/at``: the same over ``autotune_top10`` (mode A's first 10 plans, each
  timed exactly: idealised autotune);
* ``closed/pt`` and ``closed/at``: the share of the oracle's headroom over that reference the entry
  closes on a log scale, sum log(t_ref / t_choice) / sum log(t_ref / t_best) (seeds averaged);
* ``oracle/ra``, ``entry/ra`` and ``closed/ra``: the same over ``pytorch_autotune`` (PyTorch's real
  autotune) where the dataset records it, over the group's problems it was recorded for
  (``problems/ra`` of them).

A problem of several networks counts in each; ``random`` problems are the corpus's sampled neighbours.

``--best-of K`` (K of :data:`kbench.scoring.metrics.BEST_AT`) scores the entry's first K applicable plans
timed and the fastest kept, as autotune does with mode A's first 10 (the Evaluator's best-of-K): the
entry deployed with a first-call cost of K timed plans per new shape instead of autotune's 10.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbench import load  # noqa: E402
from kbench.core.errors import KbenchInputError  # noqa: E402
from kbench.leaderboard.store import read_seed_predictions  # noqa: E402
from kbench.scoring.evaluate import Evaluator  # noqa: E402
from kbench.scoring.metrics import BEST_AT  # noqa: E402

REFERENCES = {"pt": "pytorch", "at": "autotune_top10"}
#: references recorded for part of the problems: each scored over the problems where it has a choice
PARTIAL_REFERENCES = {"ra": "pytorch_autotune"}


def chosen_times(ev: Evaluator, preds: dict[int, pd.DataFrame], best_of: int = 1) -> np.ndarray:
    """t_choice per problem of the part (rows of ``ev.table``), one row per seed of ``preds``; with
    ``best_of`` K > 1 the time of the fastest of each ranking's first K applicable plans."""
    out = []
    for _, one in sorted(preds.items()):
        c = ev.choices(one)
        out.append(c.t_choice if best_of == 1 else c.best_at[best_of])
    return np.vstack(out)


def groups(problems: pd.DataFrame) -> pd.DataFrame:
    """(row, group kind, group value) for every problem row: direction, dtype, layout, depth, kind, network
    (``kind`` and ``network`` where ``problems`` has ``kind`` and ``sources``; rows by position)."""
    problems = problems.reset_index(drop=True)
    rows = np.arange(len(problems))
    deep = (problems["x_d"] > 1) & (problems["fil_d"] > 1)
    parts = [pd.DataFrame({"row": rows, "by": "all", "group": "all"})]
    for col in ("direction", "dtype", "layout", "kind"):
        if col in problems:
            parts.append(pd.DataFrame({"row": rows, "by": col, "group": problems[col].astype(str).to_numpy()}))
    parts.append(pd.DataFrame({"row": rows, "by": "depth", "group": np.where(deep, "input and filter depth > 1",
                                                                             "a depth of 1")}))
    if "sources" in problems:
        nets = problems["sources"].fillna("").astype(str).str.split(";").explode()
        nets = nets[nets.ne("")].str.split("/").str[0]
        parts.append(pd.DataFrame({"row": nets.index.to_numpy(), "by": "network", "group": nets.to_numpy()})
                     .drop_duplicates())
    return pd.concat(parts, ignore_index=True)


def headroom_figures(key: str, log_ref: np.ndarray, log_best: np.ndarray, log_choice: np.ndarray) -> dict:
    """``oracle/<key>``, ``entry/<key>`` (geomean speed-ups of the oracle and the choice over the reference)
    and ``closed/<key>`` (sum log(t_ref / t_choice) / sum log(t_ref / t_best)) of one group's log times."""
    head, won = log_ref - log_best, log_ref - log_choice
    return {f"oracle/{key}": float(np.exp(head.mean())), f"entry/{key}": float(np.exp(won.mean())),
            f"closed/{key}": float(won.sum() / head.sum()) if head.sum() > 0 else float("nan")}


def breakdown(dataset: str, split: str, method: str, part: str = "test", best_of: int = 1) -> pd.DataFrame:
    ds = load(dataset)
    ev = Evaluator(ds, split, part)
    preds = read_seed_predictions(ROOT / "leaderboard" / dataset / split / method / "preds.parquet")
    t_choice = chosen_times(ev, preds, best_of)
    t_best = ev.table.t_best
    refs = {key: next(r.t for r in ev.references if r.name == name) for key, name in REFERENCES.items()}
    partial = {key: r.t for key, name in PARTIAL_REFERENCES.items() for r in ev.references if r.name == name}
    order = pd.Index(ds.problems["problem_id"])
    problems = ds.problems.iloc[order.get_indexer(ev.table.problem_ids)].reset_index(drop=True)
    g = groups(problems)
    ok = np.isfinite(t_best) & np.isfinite(refs["pt"]) & np.isfinite(refs["at"]) & np.isfinite(t_choice).all(0)
    g = g[ok[g["row"].to_numpy()]]
    log_choice = np.log(t_choice).mean(0)  # per problem, the seeds' geomean choice time
    rows = []
    for (by, group), sel in g.groupby(["by", "group"], sort=False):
        r = sel["row"].to_numpy()
        rec = {"by": by, "group": group, "problems": len(r)}
        for key, t_ref in refs.items():
            rec.update(headroom_figures(key, np.log(t_ref[r]), np.log(t_best[r]), log_choice[r]))
        for key, t_ref in partial.items():
            has = r[np.isfinite(t_ref[r])]
            rec[f"problems/{key}"] = len(has)
            if len(has):
                rec.update(headroom_figures(key, np.log(t_ref[has]), np.log(t_best[has]), log_choice[has]))
        rows.append(rec)
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--split", required=True)
    ap.add_argument("--method", required=True)
    ap.add_argument("--part", default="test")
    ap.add_argument("--best-of", type=int, default=1, choices=BEST_AT,
                    help="score the fastest of the entry's first K plans, timed (default 1: its first choice)")
    ap.add_argument("--json", help="write the table as JSON records here")
    a = ap.parse_args(argv)
    try:
        table = breakdown(a.dataset, a.split, a.method, a.part, a.best_of)
    except KbenchInputError as exc:  # e.g. stored predictions of another version of the dataset
        print(f"three_d_headroom: {a.dataset} {a.split} {a.method}: {exc}", file=sys.stderr)
        return 2
    with pd.option_context("display.width", 200, "display.max_rows", 200):
        timed = "" if a.best_of == 1 else f", best of its first {a.best_of} timed"
        print(f"{a.dataset} {a.split}/{a.part}, {a.method}{timed} (seeds pooled):")
        print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if a.json:
        Path(a.json).write_text(json.dumps({"dataset": a.dataset, "split": a.split, "part": a.part,
                                            "method": a.method, "best_of": a.best_of,
                                            "groups": table.to_dict("records")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

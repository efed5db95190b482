"""The leaderboard's rules as constants: the ranking metric, the seed rule, entry roles.

In a module of their own so that every leaderboard module imports them from here, never
from the package ``__init__`` (which re-exports them).
"""

from __future__ import annotations

#: the metric entries are ranked by (overall, test part, mean over seeds) and whether lower is better
PRIMARY_METRIC = "geomean_slowdown"
PRIMARY_LOWER_IS_BETTER = True
PRIMARY_LABEL = "geomean slowdown"
PRIMARY_TEXT = ("geometric-mean slowdown of the chosen kernel against the fastest measured kernel, "
                "exp(mean(log(t_choice / t_best))) over the test problems (1 = always the fastest; lower is better)")
#: the rules: at least this many seeds per entry
MIN_SEEDS = 5
#: ``extra`` key of a record re-scored on a dataset's corrected labels from its stored predictions (rule 7)
RELABEL_KEY = "relabel"
#: entry roles: ranked entries, and the floors / ceiling shown as reference rows
ROLES = ("entry", "floor", "ceiling")
#: default roles of well-known reference baselines (a baseline class may set ``leaderboard_role`` instead)
DEFAULT_ROLES = {"oracle": "ceiling", "random": "floor", "single-best": "floor"}

RULES_MD = """\
1. **Standard splits only**: train on the split's `train` part, score its `test` part
   (`kbench evaluate --split SPLIT`); no problem of `test` may be used for training.
2. **Model selection on `valid` only** (hyper-parameters, early stopping, checkpoints).
3. **`test` is used once, for the final score.**
4. **At least 5 seeds**, reported as the mean and the unbiased (ddof=1) standard deviation over
   seeds; the per-seed scores stay in the record (`kbench.records.aggregate_seeds`).
5. **The code must reproduce the result with one command** (the `command` field of `meta.json`).
6. Submit with `kbench submit result.json --meta meta.json`: every seed is re-scored from its
   predictions and every stored figure compared, its kbench and dataset versions and checksums
   are checked, and it is added under `leaderboard/<dataset>/<split>/<method>/` with every
   seed's predictions (`preds.parquet`). A record without them is refused.
7. **Corrected labels**: when a dataset's labels are corrected (a new version of the same
   problems), its entries are re-scored from their stored predictions
   (`kbench leaderboard rescore --relabel DATASET`), every stored seed, and marked
   `extra.relabel` (the earlier dataset version, its seeds, its figures) until it is re-run on the
   new labels. An entry that stores its first seed's predictions only keeps that one seed.
"""

__all__ = ["PRIMARY_METRIC", "PRIMARY_LOWER_IS_BETTER", "MIN_SEEDS", "RELABEL_KEY", "ROLES", "DEFAULT_ROLES",
           "RULES_MD"]

"""Numerical notes remembered per engine, so the collector need not probe them on every problem.

The collector learns a plan's numerical notes (tensor cores, down-converted inputs, reduced-precision
reduction, FFT, Winograd, non-determinism) with one filter-probe graph per note
(``CudnnCollector._note_flags``): about 0.15 s of the 1.4 s a problem-direction takes on an H200.
In every problem recorded so far the notes are a function of the engine alone, for a given direction,
data type and layout: over 435,066 plan records (h100 5,522 and h200 3,229 problem-directions, 591
(direction, dtype, layout, engine) keys) no key ever had two note sets (:func:`notes_table`; the data
card recomputes it from each dataset's raw folder).

So the collector keeps what the probes said per key (:class:`NotesCache`), seeded from the raw
folder's earlier records, and takes a problem's notes from it when every plan's key is known. Every
:data:`CHECK_EVERY`-th problem served from the cache is probed anyway and compared: a key whose probe
disagrees is dropped for good (its problems are always probed), and the record counts the plans that
differed (``notes_cache_diff``), so a change in cuDNN's behaviour shows in the data card.
"""

from __future__ import annotations

import re

import pandas as pd

#: every this-many-th problem whose notes the cache could give is probed too, and compared
CHECK_EVERY = 20
_ENGINE = re.compile(r"^eng(\d+)(?:_|$)")


def engine_of(plan_name: str) -> int | None:
    """The engine id in a plan name like ``eng67_k2=5_k13=0`` (None for a name without one)."""
    m = _ENGINE.match(plan_name)
    return int(m.group(1)) if m else None


def _notes_set(value) -> frozenset:
    return frozenset(filter(None, (value or "").split(";")))


class NotesCache:
    """Notes per (direction, dtype, layout, engine): ``lookup`` a problem's plans, ``learn`` a probe."""

    def __init__(self, check_every: int = CHECK_EVERY):
        if check_every < 1:
            raise ValueError(f"check_every must be >= 1 (got {check_every})")
        self.check_every = check_every
        self.known: dict[tuple, frozenset] = {}
        self.dropped: set[tuple] = set()  # keys whose notes were seen to differ: never served
        self.served = 0  # problems whose notes the cache could give

    @staticmethod
    def key(problem: dict, plan_name: str) -> tuple | None:
        engine = engine_of(plan_name)
        if engine is None:
            return None
        return problem["direction"], problem["dtype"], problem["layout"], engine

    def lookup(self, problem: dict, names: list[str]) -> tuple[dict[str, set] | None, bool]:
        """(notes per plan name, whether to probe anyway as a check); (None, False) when a plan's key is
        unknown or dropped, or the problem has no plan."""
        keys = [self.key(problem, n) for n in names]
        if not keys or any(k is None or k in self.dropped or k not in self.known for k in keys):
            return None, False
        self.served += 1
        return {n: set(self.known[k]) for n, k in zip(names, keys)}, self.served % self.check_every == 0

    def learn(self, problem: dict, flags: dict[str, set]) -> int:
        """Remember a probe's notes; returns how many plans' notes differ from what was known (those keys
        are dropped)."""
        differ = 0
        for name, notes in flags.items():
            k = self.key(problem, name)
            if k is None or k in self.dropped:
                continue
            notes = frozenset(notes)
            if k in self.known and self.known[k] != notes:
                differ += 1
                self.dropped.add(k)
                del self.known[k]
            elif k not in self.known:
                self.known[k] = notes
        return differ

    def seed(self, problems: pd.DataFrame, plans: pd.DataFrame) -> int:
        """Learn from recorded data (``problems``: key, direction, dtype, layout; ``plans``: key, plan,
        numeric_notes, None where the notes were not read). Keys with two note sets in the data are
        dropped. Returns the number of keys known afterwards."""
        table = notes_table(problems, plans)
        for row in table.itertuples(index=False):
            k = (row.direction, row.dtype, row.layout, int(row.engine))
            if row.note_sets > 1:
                self.dropped.add(k)
                self.known.pop(k, None)
            elif k not in self.dropped:
                self.known[k] = _notes_set(row.notes)
        return len(self.known)


def notes_table(problems: pd.DataFrame, plans: pd.DataFrame) -> pd.DataFrame:
    """Per (direction, dtype, layout, engine) key: the number of distinct note sets recorded
    (``note_sets``), one of them (``notes``) and the number of plan records (``records``)."""
    cols = ["direction", "dtype", "layout", "engine", "notes", "note_sets", "records"]
    read = plans[plans["numeric_notes"].notna()]
    if not len(read):
        return pd.DataFrame(columns=cols)
    df = read[["key", "plan", "numeric_notes"]].merge(
        problems[["key", "direction", "dtype", "layout"]].drop_duplicates("key"), on="key")
    df["engine"] = df["plan"].str.extract(_ENGINE.pattern, expand=False)
    df = df[df["engine"].notna()].astype({"engine": int})
    # the same notes in another order are the same set (mapped once per distinct string, not per row)
    canonical = {v: ";".join(sorted(_notes_set(v))) for v in df["numeric_notes"].unique()}
    df["notes"] = df["numeric_notes"].map(canonical)
    g = df.groupby(["direction", "dtype", "layout", "engine"])["notes"]
    out = pd.concat([g.first(), g.nunique().rename("note_sets"), g.size().rename("records")], axis=1)
    return out.reset_index()[cols]

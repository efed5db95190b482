"""``kbench collect sample``: a stratified random sample of a dataset's problem-directions to re-measure.

The test-retest study re-measures a sample of shipped problems in
another run and packages it as the ``repeats`` table
(``kbench collect package RAW --repeats RAW2``). The sample is stratified over
kind (network layer, torchvision layer, random geometry), data type, direction
and layout with proportional allocation (largest remainders), drawn with a
seed, and written as a problems file the collector runs
(``kbench collect cudnn --problems sample.csv``): one row per problem-direction
with its ``direction``, in a seeded order so that a run stopped early still
holds a random part of the sample.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError

STRATA = ["kind", "dtype", "direction", "layout"]
CORPUS_COLUMNS = ["n", "c", "k", "groups", "x_h", "x_w", "fil_h", "fil_w", "pad_h", "pad_w",
                  "stride_h", "stride_w", "dil_h", "dil_w", "dtype", "layout", "direction"]


def allocate(sizes: pd.Series, n: int) -> pd.Series:
    """Proportional allocation of ``n`` draws over strata of ``sizes`` (largest remainders).

    Each stratum gets floor(n * size / total) or one more; the ones left over go
    to the largest fractional parts (ties: the order of ``sizes``). Never more
    than a stratum holds.
    """
    total = int(sizes.sum())
    if n > total:
        raise KbenchInputError(f"a sample of {n} asked from {total} problem-directions; ask for at most {total}.")
    quota = sizes.to_numpy(dtype=float) * n / total
    base = np.floor(quota).astype(np.int64)
    left = n - int(base.sum())
    order = np.argsort(-(quota - base), kind="stable")
    base[order[:left]] += 1
    return pd.Series(base, index=sizes.index, name="sample")


def stratified_sample(problems: pd.DataFrame, n: int, seed: int = 0, strata=STRATA) -> pd.DataFrame:
    """``n`` rows of ``problems``, stratified over ``strata`` (proportional), in a seeded random order."""
    if n < 1:
        raise KbenchInputError(f"--n must be >= 1 (got {n}).")
    missing = [c for c in strata if c not in problems]
    if missing:
        raise KbenchInputError(f"problems have no column(s) {', '.join(missing)} to stratify on.")
    rng = np.random.default_rng(seed)
    df = problems.sort_values("problem_id", kind="stable").reset_index(drop=True)  # independent of row order
    sizes = df.groupby(strata, sort=True).size()
    want = allocate(sizes, n)
    picked = []
    for key, rows in df.groupby(strata, sort=True).indices.items():
        k = int(want.loc[key])
        if k:
            picked.append(rng.choice(rows, size=k, replace=False))
    idx = np.concatenate(picked) if picked else np.array([], dtype=np.int64)
    return df.loc[rng.permutation(idx)].reset_index(drop=True)


#: the depth fields a 3D problem's row adds (kbench.collect.measure.cudnn.problems.DEPTH)
DEPTH_COLUMNS = ["x_d", "fil_d", "pad_d", "stride_d", "dil_d"]


def corpus_rows(problems: pd.DataFrame, three_d: bool | None = None) -> pd.DataFrame:
    """Canonical problem rows -> the collector's problems-file columns, one row per direction: 2D, or with
    ``three_d`` 3D rows (the depth fields added; the layout NCDHW or NDHWC); ``None``: the rows' own kind
    (their ``spatial_dims``). A file holds one kind."""
    is3d = problems.get("spatial_dims", pd.Series(2, index=problems.index)) == 3
    if is3d.any() and not is3d.all():
        raise KbenchInputError("the problems mix 2D and 3D convolutions; a problems file holds one kind: write "
                               "the 2D and the 3D ones apart (e.g. the 2D datasets' and the 3D datasets').")
    found = bool(is3d.all() and len(is3d))
    three_d = found if three_d is None else three_d
    if found != three_d:
        raise KbenchInputError(f"the problems are {'2D' if three_d else '3D'} convolutions: write them as a "
                               f"{'2D' if three_d else '3D'} problems file.")
    cols = CORPUS_COLUMNS[:-3] + (DEPTH_COLUMNS if three_d else [])
    out = pd.DataFrame({c: problems[c] for c in cols})
    out["dtype"], out["direction"] = problems["dtype"].astype(str), problems["direction"].astype(str)
    out["layout"] = problems["layout_x"].astype(str)
    out = out[cols + ["dtype", "layout", "direction"]]
    out["kind"] = problems["kind"].astype(str) if "kind" in problems else ""
    out["sources"] = problems["sources"].astype(str) if "sources" in problems else ""
    out["order"] = np.arange(len(out))
    out["problem_id"] = problems["problem_id"].astype(str).to_numpy()
    return out


def sample_corpus(ds, n: int = 500, seed: int = 0, split: str | None = "random",
                  part: str | None = "test") -> pd.DataFrame:
    """The sample of ``ds`` as collector rows (``part`` of ``split``; ``part=None``: every problem)."""
    problems = ds.problems
    if part is not None:
        ids = ds.split(split)
        if part not in ids:
            raise KbenchInputError(f"--part {part!r}: choose train, valid, test or all.")
        problems = problems[problems["problem_id"].isin(ids[part])]
    problems = problems.assign(layout=problems["layout_x"].astype(str),
                               kind=problems["kind"].astype(str) if "kind" in problems else "")
    return corpus_rows(stratified_sample(problems, n, seed))  # a dataset holds one kind: its rank, its columns


def write_sample(ds, out: str | Path, n: int = 500, seed: int = 0, split: str | None = "random",
                 part: str | None = "test") -> pd.DataFrame:
    """Write the sample to ``out`` (CSV, gzip by suffix); returns the per-stratum counts."""
    rows = sample_corpus(ds, n, seed, split, part)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows.to_csv(out, index=False)
    return rows.groupby(STRATA).size().rename("problem-directions").reset_index()

"""The ``shapes`` split: grouped by the geometry with the batch size ignored, ~70/10/20 by a stable hash,
so that no test problem has a batch twin (the same shape at another batch size) in train."""

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from kbench.sources.problem import geometry_ids
from kbench.sources.splits import (
    NETWORK_GEOMETRY,
    assign_random_split,
    assign_shapes_split,
    batch_free_geometry_id,
    batch_twin_shares,
)


def _problems(shapes, batches) -> pd.DataFrame:
    """One problem per (shape, batch): a shape is (c, k, x_h); every other geometry column fixed."""
    rows = []
    for c, k, x_h in shapes:
        for n in batches:
            row = {"n": n, "c": c, "k": k, "groups": 1, "x_d": 1, "x_h": x_h, "x_w": x_h}
            row.update({f"{p}_{a}": 1 for p in ("fil", "stride", "dil") for a in "dhw"})
            row.update({f"pad_{a}": 0 for a in "dhw"})
            rows.append(row)
    df = pd.DataFrame(rows)
    return df.assign(problem_id=[f"p{i}" for i in range(len(df))], geometry_id=geometry_ids(df))


def test_the_batch_sizes_of_one_shape_share_a_part():
    # 40 shapes at batch 1, 4, 16 and 256: each shape's four problems in one part; random (the geometry with
    # the batch) splits most of them, which is what shapes is for
    problems = _problems([(c, 2 * c, 14) for c in range(1, 41)], [1, 4, 16, 256])
    shape = problems["c"]
    shapes = assign_shapes_split(problems)
    assert (shapes.groupby(shape).nunique() == 1).all()
    assert (assign_random_split(problems).groupby(shape).nunique() > 1).sum() > 20


def test_two_problems_differing_only_in_batch():
    pair = _problems([(64, 128, 56)], [1, 32])
    assert batch_free_geometry_id(pair).nunique() == 1
    assert assign_shapes_split(pair).nunique() == 1
    # with a third shape beside them (as if added later) the pair keeps its part
    grown = pd.concat([pair, _problems([(3, 64, 224)], [8]).assign(problem_id="q0")], ignore_index=True)
    assert assign_shapes_split(grown).iloc[:2].tolist() == assign_shapes_split(pair).tolist()


def test_a_pure_function_of_the_batch_free_geometry():
    problems = _problems([(c, 96, 28) for c in range(8, 72, 8)], [2, 64])
    parts = assign_shapes_split(problems)
    # the batch, the id and the other columns (direction, dtype, ...) do not enter
    other = problems.assign(n=problems["n"] * 3, problem_id="x" + problems["problem_id"], direction="B",
                            dtype="FP16")
    assert assign_shapes_split(other).tolist() == parts.tolist()
    # each problem alone gets the part it gets among the others
    assert [assign_shapes_split(problems.iloc[[i]]).iloc[0] for i in range(len(problems))] == parts.tolist()
    # the order of the rows does not matter either
    shuffled = problems.sample(frac=1.0, random_state=3)
    assert assign_shapes_split(shuffled).tolist() == parts.loc[shuffled.index].tolist()


def test_a_geometry_column_moves_a_problem_to_its_own_group():
    # only the batch is left out: every other geometry column is part of the group
    assert "n" not in NETWORK_GEOMETRY and {"c", "k", "x_h", "fil_w", "pad_h", "stride_w", "dil_d"} <= set(
        NETWORK_GEOMETRY)
    base = _problems([(16, 16, 7)], [1])
    assert batch_free_geometry_id(base).iloc[0] != batch_free_geometry_id(base.assign(pad_h=1)).iloc[0]


@settings(max_examples=20, deadline=None)
@given(offset=st.integers(1, 10**6), n_shapes=st.integers(2000, 3000), batches=st.lists(
    st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256]), min_size=1, max_size=3, unique=True))
def test_fractions_near_70_10_20(offset, n_shapes, batches):
    # distinct shapes: one channel count each; 2,000+ of them put each fraction within ~5 standard errors
    problems = _problems([(offset + i, 32, 14) for i in range(n_shapes)], batches)
    shares = assign_shapes_split(problems).value_counts(normalize=True)
    for part, expected in {"train": 0.7, "valid": 0.1, "test": 0.2}.items():
        assert abs(shares.get(part, 0.0) - expected) < 0.05, (part, shares.to_dict())


def test_no_batch_twins_by_construction():
    problems = _problems([(c, 3 * c, 9) for c in range(1, 301)], [1, 8, 32])
    splits = pd.DataFrame({"problem_id": problems["problem_id"], "shapes": assign_shapes_split(problems),
                           "random": assign_random_split(problems)})
    shares = batch_twin_shares(problems, splits)
    assert shares["shapes"]["with_twin"] == 0 and shares["shapes"]["test"] > 0
    assert shares["random"]["with_twin"] > 0

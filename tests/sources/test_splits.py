"""Split properties: disjoint, complete, grouped, stable, networks = real layers."""

import numpy as np
import pandas as pd
import pytest

from kbench.sources.mituna import parse_driver_line, read_network_layers
from kbench.sources.splits import assign_random_split, network_geometry_match


@pytest.mark.parametrize("split", ["random", "networks"])
def test_disjoint_complete_grouped(mi100, split):
    parts = mi100.split(split)
    ids = np.concatenate(list(parts.values()))
    assert len(ids) == len(set(ids)) == len(mi100.problems)  # disjoint and complete
    part_of = pd.Series({pid: p for p, arr in parts.items() for pid in arr})
    g = mi100.problems.assign(part=part_of.loc[mi100.problems["problem_id"]].to_numpy())
    assert (g.groupby("geometry_id")["part"].nunique() == 1).all()  # grouped


def test_random_fractions_near_70_10_20(mi100):
    sizes = {k: len(v) / len(mi100.problems) for k, v in mi100.split("random").items()}
    assert abs(sizes["train"] - 0.7) < 0.03 and abs(sizes["valid"] - 0.1) < 0.03 and abs(sizes["test"] - 0.2) < 0.03


def test_stable_under_rebuild_and_additions(mi100):
    shipped = mi100.tables["splits"].set_index("problem_id")
    sample = mi100.problems.sample(3000, random_state=1)
    # recomputing on a subset (as if problems were added or removed) gives the same parts
    again = assign_random_split(sample).to_numpy()
    assert (again == shipped.loc[sample["problem_id"], "random"].to_numpy()).all()


def test_depth1_twins_land_together(mi100):
    p = mi100.problems
    twins3 = p[(p.spatial_dims == 3) & (p.x_d == 1) & (p.fil_d == 1)]
    two = p[p.spatial_dims == 2]
    shared = np.intersect1d(twins3.geometry_id.unique(), two.geometry_id.unique())
    assert len(shared) > 1000
    s = mi100.tables["splits"].set_index("problem_id")["random"]
    both = p[p.geometry_id.isin(shared[:500])]
    assert (both.assign(part=s.loc[both.problem_id].to_numpy()).groupby("geometry_id")["part"].nunique() == 1).all()


def test_driver_line_parsing_defaults_and_flags():
    row = parse_driver_line("./bin/MIOpenDriver convfp16 -n 8 -c 64 -H 56 -W 56 -k 64 -y 1 -x 1 -g 2 -F 1")
    assert (row["n"], row["c"], row["k"], row["fil_h"], row["groups"], row["dtype"]) == (8, 64, 64, 1, 2, "FP16")
    assert (row["pad_h"], row["stride_h"], row["dil_h"]) == (0, 1, 1)  # driver defaults
    assert parse_driver_line("./bin/MIOpenDriver bnorm -n 32 -c 3") is None
    row = parse_driver_line("miopenConvolutionForward: ./bin/MIOpenDriver conv -n 64 -c 3 -H 224 -W 224 "
                            "-k 64 -y 7 -x 7 -p 3 -q 3 -u 2 -v 2 -l 1 -j 1 -m conv -g 1 -t 1")
    assert (row["x_h"], row["fil_h"], row["pad_h"], row["stride_h"]) == (224, 7, 3, 2)


def test_networks_test_is_exactly_the_network_layers(mi100, raw_data):
    layers = read_network_layers(raw_data / "mituna")
    match = network_geometry_match(mi100.problems, layers).to_numpy()
    test = mi100.tables["splits"]["networks"].to_numpy() == "test"
    assert (match == test).all()
    # ResNet-50's first layer (7x7 stride 2 on 224x224x3 -> 64) is a test problem in every batch size present
    p = mi100.problems
    stem = p[(p.c == 3) & (p.k == 64) & (p.x_h == 224) & (p.fil_h == 7) & (p.stride_h == 2) & (p.pad_h == 3)
             & (p.groups == 1) & (p.spatial_dims == 2)]
    assert len(stem) > 0 and test[stem.index].all()

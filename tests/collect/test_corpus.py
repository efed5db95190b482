from pathlib import Path

import pandas as pd
import pytest

from kbench.collect.measure import corpus
from kbench.sources.problem import expected_output_size

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def test_random_geometries_deterministic_and_valid():
    a = corpus.random_geometries(200, seed=3)
    b = corpus.random_geometries(200, seed=3)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(corpus.random_geometries(200, seed=4))
    g = corpus.add_output_size(a)
    assert (g["y_h"] >= 1).all() and (g["y_w"] >= 1).all()
    assert (g["c"] % g["groups"] == 0).all() and (g["k"] % g["groups"] == 0).all()
    assert (corpus.conv_flop(g) <= corpus.MAX_FLOP).all()
    assert (g["groups"] == g["c"]).any()  # depthwise layers are drawn


def test_corpus_deterministic_and_interleaved():
    mituna = SHARED / "mituna"
    folder = mituna if mituna.exists() else None
    a = corpus.build_corpus(folder, n_random=60, seed=0)
    b = corpus.build_corpus(folder, n_random=60, seed=0)
    pd.testing.assert_frame_equal(a, b)
    assert list(a["order"]) == list(range(len(a)))
    kinds = a["kind"].unique().tolist()
    # kinds take turns: the first len(kinds) rows are one of each kind
    assert sorted(a["kind"].head(len(kinds))) == sorted(kinds)
    assert set(a["dtype"]) == {"FP16", "BF16", "FP32"} and set(a["layout"]) == {"NCHW", "NHWC"}
    # every (geometry, data type) comes in both layouts (the size cap does not depend on layout)
    assert (a.groupby(corpus.GEOMETRY + ["dtype"]).size() % 2 == 0).all()


def test_torchvision_layers_follow_the_output_size_rule():
    layers = pd.read_csv(corpus.TORCHVISION_LAYERS)
    for s in ("h", "w"):
        exp = expected_output_size(layers[f"x_{s}"], layers[f"fil_{s}"], layers[f"pad_{s}"],
                                   layers[f"stride_{s}"], layers[f"dil_{s}"])
        assert (exp == layers[f"y_{s}"]).all()
    assert {"resnet50", "mobilenet_v2", "convnext_tiny", "inception_v3"} <= set(layers["network"])
    assert (layers["groups"] > 1).any()


@pytest.mark.shared_data
def test_mituna_geometries_keep_their_batch_size():
    g = corpus.mituna_geometries(SHARED / "mituna")
    assert (g["n"] > 1).any()
    assert g["sources"].str.startswith("mituna:").all()
    assert not g.duplicated(corpus.GEOMETRY).any()


def test_corpus_cli_bad_input(tmp_path):
    from kbench.cli import main
    assert main(["collect", "corpus", "--out", str(tmp_path / "c.csv"), "--n-random", "-1",
                 "--mituna", "none"]) == 2

"""Tests of the Reformer baselines (baselines/reformer.py): labels, parameter counts, block math,
the numpy export, save/load and seed reproducibility. Tiny data only (a few hundred mi100 problems,
two epochs), so the whole file runs in seconds."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kbench.core.errors import KbenchInputError
from kbench.data.dataset import Dataset
from kbench_baselines.base import BASELINES, Baseline, KernelSpace, discover, runtime_matrix
from kbench_baselines.reformer import (
    PAPER_N_PARAMETERS,
    NumpyReformer,
    OnnxReformer,
    Reformer,
    TransformerBlock,
    build_network,
    choose_gamma_width,
    choose_transformer_width,
    gamma_param_count,
    reformer_columns,
    runtime_labels,
    transformer_param_count,
)

NAN = float("nan")


# ----------------------------------------------------------------------------- labels
def test_ratio_labels_hand_worked():
    # t = (1, 2, 4) ms, fourth kernel not measured: max(t)/t = (4, 2, 1), sum 7
    p = runtime_labels(np.array([[1.0, 2.0, 4.0, NAN]]), "ratio")
    np.testing.assert_allclose(p, [[4 / 7, 2 / 7, 1 / 7, 0.0]])
    assert p[0, 0] / p[0, 1] == pytest.approx(2.0 / 1.0)  # p_i/p_j = t_j/t_i
    assert p[0, 1] / p[0, 2] == pytest.approx(4.0 / 2.0)
    # infinity is "not measured" too
    np.testing.assert_allclose(runtime_labels(np.array([[np.inf, 3.0, 1.0]])), [[0.0, 0.25, 0.75]])


def test_onehot_and_softmax_labels_hand_worked():
    t = np.array([[2.0, 1.0, 3.0, NAN], [1.0, 1.0, 2.0, NAN]])
    np.testing.assert_allclose(runtime_labels(t, "onehot"), [[0, 1, 0, 0], [0.5, 0.5, 0, 0]])
    # softmax of -t/t_min: row 1 ratios (2, 1, 3) -> weights e^-2, e^-1, e^-3
    w = np.exp([-2.0, -1.0, -3.0])
    np.testing.assert_allclose(runtime_labels(t, "softmax")[0], np.r_[w / w.sum(), 0.0])
    w = np.exp([-1.0 / 0.5, -1.0 / 0.5, -2.0 / 0.5])
    np.testing.assert_allclose(runtime_labels(t, "softmax", temperature=0.5)[1], np.r_[w / w.sum(), 0.0])


def test_labels_from_a_censored_dataset():
    """p1 complete (A 1 ms, B 2 ms); p2 censored (4 listed of 5 kernels): the unlisted E gets p = 0."""
    problems = pd.DataFrame({"problem_id": ["p1", "p2"], "direction": ["F", "F"], "dtype": ["FP32"] * 2,
                             "layout": ["NCHW"] * 2, "censored": [False, True]})
    runtimes = pd.DataFrame([("p1", "A", 1.0), ("p1", "B", 2.0),
                             ("p2", "A", 4.0), ("p2", "B", 1.0), ("p2", "C", 2.0), ("p2", "D", 8.0)],
                            columns=["problem_id", "kernel", "time_ms"])
    kernels = pd.DataFrame({"kernel": list("ABCDE"), "directions": ["F"] * 5})
    ds = Dataset("t", {"problems": problems, "runtimes": runtimes, "kernels": kernels,
                       "splits": pd.DataFrame({"problem_id": ["p1", "p2"], "random": "train"})},
                 {"name": "t", "version": "0", "checksum": "0"})
    space = KernelSpace.fit(ds, ["p1", "p2"])
    p = runtime_labels(runtime_matrix(ds, problems, space), "ratio")
    assert space.names == list("ABCDE")
    np.testing.assert_allclose(p[0], [2 / 3, 1 / 3, 0, 0, 0])
    # p2: max 8 -> 8/4, 8/1, 8/2, 8/8 = 2, 8, 4, 1 (sum 15); E unlisted -> 0
    np.testing.assert_allclose(p[1], [2 / 15, 8 / 15, 4 / 15, 1 / 15, 0.0])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(1e-3, 1e3), min_size=2, max_size=8), st.data())
def test_ratio_property(times, data):
    t = np.array([times])
    p = runtime_labels(t)
    assert p.sum() == pytest.approx(1.0)
    i = data.draw(st.integers(0, len(times) - 1))
    j = data.draw(st.integers(0, len(times) - 1))
    assert p[0, i] / p[0, j] == pytest.approx(times[j] / times[i], rel=1e-9)


def test_label_bad_input():
    with pytest.raises(KbenchInputError):
        runtime_labels(np.array([[1.0, -2.0]]))
    with pytest.raises(KbenchInputError):
        runtime_labels(np.array([1.0, 2.0]))
    with pytest.raises(KbenchInputError):
        runtime_labels(np.array([[1.0, 2.0]]), "rank")
    np.testing.assert_array_equal(runtime_labels(np.array([[NAN, NAN]])), [[0.0, 0.0]])
    with pytest.raises(KbenchInputError):
        Reformer(labels="rank")
    with pytest.raises(KbenchInputError):
        Reformer(no_such_option=1)


# ----------------------------------------------------------------------------- parameter counts
def _gamma_config(d_in=7, widths=(5, 6, 4), inner=(3, 4, 2), classes=9, norm="batch"):
    return {"kind": "gamma", "n_features": d_in, "n_classes": classes, "widths": list(widths),
            "inner": list(inner), "norm": norm, "dropout": 0.1}


@pytest.mark.parametrize("norm", ["batch", "layer"])
def test_gamma_parameter_count_formula(norm):
    for d_in, widths, inner, classes in [(7, (5, 6, 4), (3, 4, 2), 9), (64, (93,) * 3, (93,) * 3, 70)]:
        net = build_network(_gamma_config(d_in, widths, inner, classes, norm))
        n = sum(t.numel() for t in net.parameters())
        assert n == gamma_param_count(d_in, widths, inner, classes)
        # by hand for the small one: blocks (7+1)5+(7+1)3+2*3+(3+1)5=90, (5+1)6+(5+1)4+8+(4+1)6=98,
        # (6+1)4+(6+1)2+4+(2+1)4=58, head (4+1)9=45
    assert gamma_param_count(7, (5, 6, 4), (3, 4, 2), 9) == 90 + 98 + 58 + 45


def test_width_near_paper_count():
    h = choose_gamma_width(64, 70)
    count = gamma_param_count(64, [h] * 3, [h] * 3, 70)
    for other in (h - 1, h + 1):  # the closest width
        assert abs(gamma_param_count(64, [other] * 3, [other] * 3, 70) - PAPER_N_PARAMETERS) >= \
            abs(count - PAPER_N_PARAMETERS)
    assert abs(count - PAPER_N_PARAMETERS) / PAPER_N_PARAMETERS < 0.02


def test_transformer_parameter_count_formula():
    for f, d, classes in [(5, 8, 3), (64, 52, 70)]:
        cfg = {"kind": "transformer", "n_features": f, "n_classes": classes, "d_model": d, "d_ff": 2 * d,
               "heads": 4, "depth": 3, "dropout": 0.1}
        net = build_network(cfg)
        assert sum(t.numel() for t in net.parameters()) == transformer_param_count(f, d, 2 * d, classes)
    d = choose_transformer_width(64, 70, 80_422)
    assert d % 4 == 0
    assert abs(transformer_param_count(64, d, 2 * d, 70) - 80_422) / 80_422 < 0.1


# ----------------------------------------------------------------------------- block math
def test_gamma_block_math_by_hand():
    torch.manual_seed(0)
    net = build_network(_gamma_config(norm="layer"))
    net.eval()
    b = net.blocks[0]
    x = torch.randn(3, 7)
    a1, b1 = b.a1.weight.detach(), b.a1.bias.detach()
    w, c = b.t_linear.weight.detach(), b.t_linear.bias.detach()
    a3, b3 = b.a3.weight.detach(), b.a3.bias.detach()
    u = x @ w.T + c
    u = (u - u.mean(1, keepdim=True)) / torch.sqrt(u.var(1, unbiased=False, keepdim=True) + 1e-5)
    u = u * b.t_norm.weight.detach() + b.t_norm.bias.detach()
    expected = torch.relu(x @ a1.T + b1 + torch.relu(u) @ a3.T + b3)
    torch.testing.assert_close(b(x).detach(), expected)
    # training mode: batch-norm uses the batch statistics, dropout zeroes and rescales
    netb = build_network(_gamma_config(norm="batch"))
    bb = netb.blocks[0]
    bb.train()
    bb.t_dropout.p = 0.0
    u = x @ bb.t_linear.weight.detach().T + bb.t_linear.bias.detach()
    u = (u - u.mean(0)) / torch.sqrt(u.var(0, unbiased=False) + 1e-5)
    expected = torch.relu(x @ bb.a1.weight.detach().T + bb.a1.bias.detach()
                          + torch.relu(u) @ bb.a3.weight.detach().T + bb.a3.bias.detach())
    torch.testing.assert_close(bb(x).detach(), expected)


def test_upsilon_and_xi():
    net = build_network(_gamma_config(d_in=2, widths=(3, 3, 3), inner=(2, 2, 2), classes=4))
    net.eval()
    net.upsilon.mean.copy_(torch.tensor([1.0, -2.0]))
    net.upsilon.std.copy_(torch.tensor([2.0, 4.0]))
    x = torch.tensor([[3.0, 2.0]])
    torch.testing.assert_close(net.upsilon(x), torch.tensor([[1.0, 1.0]]))
    h = net.upsilon(x)
    for b in net.blocks:
        h = b(h)
    torch.testing.assert_close(net(x), net.xi(h))


# ----------------------------------------------------------------------------- numpy export
@pytest.mark.parametrize("norm", ["batch", "layer"])
def test_numpy_path_equals_torch_random_weights(norm):
    torch.manual_seed(1)
    cfg = _gamma_config(d_in=11, widths=(16, 12, 8), inner=(6, 9, 5), classes=13, norm=norm)
    net = build_network(cfg)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():  # non-trivial Υ and batch-norm statistics
        net.upsilon.mean.copy_(torch.randn(11, generator=g) * 3)
        net.upsilon.std.copy_(torch.rand(11, generator=g) * 5 + 0.1)
        for b in net.blocks:
            b.t_norm.weight.copy_(torch.randn(b.t_norm.weight.shape, generator=g))
            b.t_norm.bias.copy_(torch.randn(b.t_norm.bias.shape, generator=g))
            if norm == "batch":
                b.t_norm.running_mean.copy_(torch.randn(b.t_norm.running_mean.shape, generator=g))
                b.t_norm.running_var.copy_(torch.rand(b.t_norm.running_var.shape, generator=g) + 0.2)
    net.eval()
    x = (torch.randn(50, 11, generator=g) * 4).numpy()
    lean = NumpyReformer.from_state(cfg, {k: v.numpy() for k, v in net.state_dict().items()})
    ref = net(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(lean.logits(x), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(lean.logits(x[3]), ref[3], rtol=1e-4, atol=1e-4)  # one problem, 1-D
    for i in (0, 7, 3):  # the batch-1 buffers are reused: calls do not leak into each other
        np.testing.assert_allclose(lean.logits(x[i]), ref[i], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(lean.proba(x).sum(axis=1), 1.0, rtol=1e-5)
    # the same folded network as an ONNX graph under ONNX Runtime
    pytest.importorskip("onnxruntime", reason="the [onnx] extra is not installed")
    ort_model = OnnxReformer.from_numpy(lean)
    np.testing.assert_allclose(ort_model.logits(x), ref, rtol=1e-4, atol=1e-4)
    for i in (0, 7, 3):
        np.testing.assert_allclose(ort_model.logits(x[i]), ref[i], rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- tiny real data
@pytest.fixture(scope="module")
def tiny(mi100):
    """400 train, 100 valid, 100 test problems of mi100's random split."""
    parts = mi100.split("random")
    ids = {"train": parts["train"][:400], "valid": parts["valid"][:100], "test": parts["test"][:100]}
    return mi100.subset(np.concatenate(list(ids.values()))), ids


FAST = dict(max_epochs=2, batch_size=64, verbose=False)


@pytest.fixture(scope="module")
def fitted(tiny):
    ds, ids = tiny
    return Reformer(**FAST).fit(ds, ids["train"], ids["valid"], seed=0)


def test_fit_predict_tiny(tiny, fitted):
    ds, ids = tiny
    preds = fitted.predict(ds, ids["test"])
    assert list(preds.columns) == ["problem_id", "ranking"]
    assert preds["problem_id"].tolist() == list(ids["test"])
    assert (preds["ranking"].str.len() > 0).all()
    assert fitted.fit_info["n_parameters"] == fitted.n_parameters() == fitted.formula_parameters()
    assert fitted.columns == reformer_columns(fitted.columns)
    # the ranking is the softmax order within the masked (seen) kernels
    probs = fitted.scores(ds, ids["test"][:1]).iloc[0]
    seen = fitted._seen_mask(ds.problems[ds.problems["problem_id"] == ids["test"][0]])[0]
    first = preds["ranking"].iloc[0].split(";")[: int(seen.sum())]
    assert first == list(probs[seen].sort_values(ascending=False, kind="stable").index)
    with pytest.raises(KbenchInputError):
        Reformer().predict(ds, ids["test"])
    with pytest.raises(KbenchInputError):
        fitted.predict(ds, ["no-such-problem"])


def test_numpy_backend_equals_torch_on_trained_model(tiny, fitted):
    ds, ids = tiny
    x = fitted._features(ds, ds.problems[ds.problems["problem_id"].isin(ids["test"])])
    np.testing.assert_allclose(fitted.numpy_model().logits(x), fitted._logits_torch(x, torch),
                               rtol=1e-4, atol=1e-4)
    pd.testing.assert_frame_equal(fitted.predict(ds, ids["test"], backend="numpy"),
                                  fitted.predict(ds, ids["test"]))
    if importlib.util.find_spec("onnxruntime") is not None:
        pd.testing.assert_frame_equal(fitted.predict(ds, ids["test"], backend="onnx"),
                                      fitted.predict(ds, ids["test"]))


def test_save_load_round_trip(tiny, fitted, tmp_path):
    ds, ids = tiny
    folder = fitted.save(tmp_path / "m")
    assert sorted(p.name for p in folder.iterdir()) == ["arrays.safetensors", "baseline.json"]
    loaded = Baseline.load(folder)
    assert isinstance(loaded, Reformer) and loaded.seed == 0
    pd.testing.assert_frame_equal(loaded.predict(ds, ids["test"]), fitted.predict(ds, ids["test"]))
    np.testing.assert_array_equal(loaded.scores(ds, ids["test"]).to_numpy(),
                                  fitted.scores(ds, ids["test"]).to_numpy())


def test_seed_reproducibility(tiny, fitted):
    ds, ids = tiny
    again = Reformer(**FAST).fit(ds, ids["train"], ids["valid"], seed=0)
    pd.testing.assert_frame_equal(again.predict(ds, ids["test"]), fitted.predict(ds, ids["test"]))
    np.testing.assert_array_equal(again.scores(ds, ids["test"]).to_numpy(),
                                  fitted.scores(ds, ids["test"]).to_numpy())
    other = Reformer(**FAST).fit(ds, ids["train"], ids["valid"], seed=1)
    assert not np.array_equal(other.scores(ds, ids["test"]).to_numpy(), fitted.scores(ds, ids["test"]).to_numpy())


def test_model_selection_uses_valid(tiny, fitted):
    hist = fitted.fit_info["history"]
    assert len(hist) == 2 and all("valid_top1" in h for h in hist)
    best = max(hist, key=lambda h: (h["valid_top1"], -h["valid_loss"]))
    assert fitted.fit_info["best_epoch"] == best["epoch"]


def test_variants_registered_and_run(tiny, tmp_path):
    discover()
    for name in ("reformer", "reformer-onehot", "reformer-softmax", "transformer-block"):
        assert name in BASELINES
    ds, ids = tiny
    tb = TransformerBlock(max_epochs=1, rows_per_epoch=128, batch_size=64, verbose=False)
    tb.fit(ds, ids["train"], ids["valid"], seed=0)
    assert tb.fit_info["n_parameters"] == tb.formula_parameters()
    preds = tb.predict(ds, ids["test"])
    loaded = Baseline.load(tb.save(tmp_path / "tb"))
    pd.testing.assert_frame_equal(loaded.predict(ds, ids["test"]), preds)
    with pytest.raises(KbenchInputError):
        tb.numpy_model()
    oh = BASELINES["reformer-onehot"](**FAST)
    assert oh.params["labels"] == "onehot"
    oh.fit(ds, ids["train"], ids["valid"], seed=0)
    assert oh.predict(ds, ids["test"])["ranking"].str.len().gt(0).all()
    assert math.isfinite(oh.fit_info["valid_loss"])


def test_supports_kernel_selection_only(mi100):
    from kbench_baselines.base import DatasetMeta
    assert Reformer().supports(mi100) and TransformerBlock().supports(mi100)
    assert not Reformer().supports(DatasetMeta("tiles", {"task": "tile-selection"}))
    assert not Reformer().supports(DatasetMeta("tuning", {"task": "tuning"}))

"""Tests of the numpy frugally-deep loader (baselines/fdeep.py).

The reference values are the ``tests`` vectors embedded in the model files:
random inputs and the outputs Keras computed for them when the model was
exported. Tolerance: absolute 1e-4 on every output value, which is exactly
the check frugally-deep itself applies to these vectors when a model is
loaded with ``verify=true`` (``fdeep::load_model``'s default
``verify_epsilon = 0.0001``, compared with ``is_in_closed_interval_around``)
and MIOpen loads its models that way. The remaining differences come from
float32 summation order (numpy/BLAS vs TensorFlow); they are of order 1e-6
here, well inside the bound.
"""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path

import numpy as np
import pytest

from kbench_baselines.fdeep import FdeepFormatError, FdeepModel, decode_floats
from kbench_baselines.tunanet import MODEL_DIR

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT.parent / "shared" / "data" / "miopen"
FDEEP_ATOL = 1e-4  # frugally-deep's verify_epsilon (see module docstring)


def _enc(values) -> list[str]:
    """Encode floats the way frugally-deep's convert_model.py does (base64 '<f4')."""
    return [base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode("ascii")]


def _shipped(arch: str) -> FdeepModel:
    return FdeepModel.load(MODEL_DIR / f"{arch}.tn.model.gz")


def _raw(name: str) -> Path:
    path = RAW / name
    if not path.exists():
        pytest.skip(f"raw data not available: {path}")
    return path


# ----------------------------------------------------------------- embedded test vectors

@pytest.mark.parametrize("arch", ["gfx90a", "gfx942"])
def test_tunanet_models_match_embedded_test_vectors(arch):
    model = _shipped(arch)
    assert len(model.tests) >= 1
    for case in model.tests:
        got = model.predict(*case.inputs)
        assert len(got) == len(case.outputs)
        for g, want in zip(got, case.outputs):
            assert g.shape == want.shape
            np.testing.assert_allclose(g, want, rtol=0, atol=FDEEP_ATOL)


@pytest.mark.parametrize("name", ["gfx908_ConvAsm1x1U_encoder.ktn.model",
                                  "gfx908_ConvAsm1x1U_decoder.ktn.model"])
def test_ktn_models_match_embedded_test_vectors(name):
    model = FdeepModel.load(_raw(name))
    assert model.tests, "the ktn models carry test vectors"
    for case in model.tests:
        got = model.predict(*case.inputs)
        # encoder: [h, c] of both LSTMs; decoder: token scores then the 4 states
        assert [g.shape for g in got] == [w.shape for w in case.outputs]
        for g, want in zip(got, case.outputs):
            np.testing.assert_allclose(g, want, rtol=0, atol=FDEEP_ATOL)
    assert max(model.check_tests()) <= FDEEP_ATOL


def test_gfx908_model_structure_and_batch_consistency():
    """gfx908 carries no test vectors: check its shapes and that batching is row-wise.

    Its layer kinds are the same as the tested gfx90a model's, so the layer
    code is covered by the test above; here a batch must give the same rows
    as one-by-one prediction (vectorisation adds no cross-row mixing). BLAS
    sums in a different order for a matrix than for one vector, so rows agree
    to float32 rounding (about 1e-6 here), not bit for bit; the bound is the
    same frugally-deep tolerance, far below any real mixing error.
    """
    m = _shipped("gfx908")
    ref = _shipped("gfx90a")
    assert m.tests == []
    assert m.input_shapes == [(24,)] and m.output_shapes == [(18,)]
    assert set(m.layer_kinds.values()) == set(ref.layer_kinds.values())
    x = np.random.default_rng(0).normal(size=(7, 24)).astype(np.float32)
    batch = m.predict(x)[0]
    assert batch.shape == (7, 18)
    one = np.concatenate([m.predict(x[i])[0] for i in range(7)])
    np.testing.assert_allclose(batch, one, rtol=0, atol=FDEEP_ATOL)


def test_chunked_prediction_equals_one_pass():
    m = _shipped("gfx942")
    x = np.random.default_rng(2).normal(size=(10, 18)).astype(np.float32)
    whole = m.predict(x, batch_size=None)[0]
    chunked = m.predict(x, batch_size=3)[0]
    assert chunked.shape == whole.shape == (10, 21)
    np.testing.assert_allclose(chunked, whole, rtol=0, atol=FDEEP_ATOL)


def test_ktn_batch_equals_single_samples():
    enc = FdeepModel.load(_raw("gfx908_ConvAsm1x1U_encoder.ktn.model"))
    x = np.random.default_rng(1).normal(size=(3, 8, 8)).astype(np.float32)
    batch = enc.predict(x)
    for i in range(3):
        single = enc.predict(x[i:i + 1])
        for b, s in zip(batch, single):
            np.testing.assert_allclose(b[i:i + 1], s, rtol=0, atol=FDEEP_ATOL)


# ----------------------------------------------------------------- format details

def test_decode_floats_concatenates_chunks_before_decoding():
    values = [1.0, -2.5, 0.0, 3.25, 1e-3]
    text = _enc(values)[0]
    # Split at positions that are not on 4-character (3-byte) boundaries:
    # decoding chunk by chunk would fail, concatenating first must not.
    chunks = [text[:5], text[5:11], text[11:]]
    np.testing.assert_array_equal(decode_floats(chunks), np.asarray(values, np.float32))
    np.testing.assert_array_equal(decode_floats(values), np.asarray(values, np.float32))


def _model(layers, inputs, outputs, params, input_shapes, output_shapes):
    return FdeepModel.from_json({
        "architecture": {"class_name": "Functional", "config": {
            "layers": layers, "input_layers": inputs, "output_layers": outputs}},
        "image_data_format": "channels_last",
        "input_shapes": input_shapes, "output_shapes": output_shapes,
        "trainable_params": params,
    })


def _input(name, shape):
    return {"class_name": "InputLayer", "name": name, "inbound_nodes": [],
            "config": {"batch_input_shape": [None, *shape], "name": name}}


def test_dense_relu_add_graph_by_hand():
    # y = relu(x @ W + b) + x, with W = [[1, 2], [3, 4]], b = [-10, 0]
    layers = [
        _input("x", [2]),
        {"class_name": "Dense", "name": "d", "config": {"units": 2, "activation": "linear", "use_bias": True},
         "inbound_nodes": [[["x", 0, 0, {}]]]},
        {"class_name": "ReLU", "name": "r", "config": {}, "inbound_nodes": [[["d", 0, 0, {}]]]},
        {"class_name": "Add", "name": "a", "config": {}, "inbound_nodes": [[["r", 0, 0, {}], ["x", 0, 0, {}]]]},
    ]
    params = {"d": {"weights": _enc([1, 2, 3, 4]), "bias": _enc([-10, 0])}}
    m = _model(layers, [["x", 0, 0]], [["a", 0, 0]], params, [[2]], [[2]])
    x = np.array([[1.0, 1.0], [5.0, 1.0]], np.float32)
    # row 0: x@W = [4, 6] + b = [-6, 6] -> relu [0, 6] + x = [1, 7]
    # row 1: x@W = [8, 14] + b = [-2, 14] -> relu [0, 14] + x = [5, 15]
    np.testing.assert_array_equal(m.predict(x)[0], [[1, 7], [5, 15]])


def test_lstm_one_step_by_hand_with_initial_state():
    # One unit, one feature, one time step; gates in Keras order i, f, c, o.
    W, U, b = [0.5, -0.25, 1.0, 0.75], [0.1, 0.2, 0.3, 0.4], [0.0, 1.0, -0.5, 0.25]
    x, h0, c0 = 2.0, 0.5, -1.0
    layers = [
        _input("x", [1, 1]), _input("h", [1]), _input("c", [1]),
        {"class_name": "LSTM", "name": "l", "inbound_nodes": [[["x", 0, 0, {}], ["h", 0, 0, {}], ["c", 0, 0, {}]]],
         "config": {"units": 1, "activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": True,
                    "return_sequences": False, "return_state": True}},
    ]
    params = {"l": {"weights": _enc(W), "recurrent_weights": _enc(U), "bias": _enc(b)}}
    m = _model(layers, [["x", 0, 0], ["h", 0, 0], ["c", 0, 0]], [["l", 0, 0], ["l", 0, 1], ["l", 0, 2]],
               params, [[1, 1], [1], [1]], [[1], [1], [1]])
    sig = lambda v: 1 / (1 + math.exp(-v))  # noqa: E731
    z = [x * W[g] + h0 * U[g] + b[g] for g in range(4)]
    c1 = sig(z[1]) * c0 + sig(z[0]) * math.tanh(z[2])
    h1 = sig(z[3]) * math.tanh(c1)
    out, h, c = m.predict(np.array([[[x]]]), np.array([[h0]]), np.array([[c0]]))
    np.testing.assert_allclose([out[0, 0], h[0, 0], c[0, 0]], [h1, h1, c1], rtol=1e-6)


def test_embedding_lookup_and_range():
    layers = [_input("t", [1]),
              {"class_name": "Embedding", "name": "e", "config": {"input_dim": 3, "output_dim": 2},
               "inbound_nodes": [[["t", 0, 0, {}]]]}]
    m = _model(layers, [["t", 0, 0]], [["e", 0, 0]], {"e": {"weights": _enc([0, 1, 10, 11, 20, 21])}},
               [[1]], [[1, 2]])
    np.testing.assert_array_equal(m.predict(np.array([[2.0], [0.0]]))[0], [[[20, 21]], [[0, 1]]])
    with pytest.raises(ValueError, match="token id"):
        m.predict(np.array([[3.0]]))


def test_unsupported_layer_is_refused_at_load():
    layers = [_input("x", [4, 4, 1]),
              {"class_name": "Conv2D", "name": "conv", "config": {}, "inbound_nodes": [[["x", 0, 0, {}]]]}]
    with pytest.raises(FdeepFormatError, match="Conv2D"):
        _model(layers, [["x", 0, 0]], [["conv", 0, 0]], {}, [[4, 4, 1]], [[4, 4, 1]])


def test_wrong_input_shape_is_reported():
    m = _shipped("gfx90a")
    with pytest.raises(ValueError, match="shape"):
        m.predict(np.zeros((2, 17), np.float32))


def test_real_file_layer_kinds_are_supported():
    kinds = set()
    for arch in ("gfx908", "gfx90a", "gfx942"):
        kinds |= set(_shipped(arch).layer_kinds.values())
    for name in ("gfx908_ConvAsm1x1U_encoder.ktn.model", "gfx908_ConvAsm1x1U_decoder.ktn.model"):
        path = RAW / name
        if path.exists():
            data = json.loads(path.read_text())
            kinds |= {layer["class_name"] for layer in data["architecture"]["config"]["layers"]}
    assert kinds <= FdeepModel.SUPPORTED_LAYERS


def test_elementwise_and_shape_layers_by_definition():
    """The extra layer kinds (none is in MIOpen's files) against their Keras definitions."""
    def lay(kind, name, ins, **config):
        return {"class_name": kind, "name": name, "config": config,
                "inbound_nodes": [[[i, 0, 0, {}] for i in ins]]}

    mean, var, gamma, beta = [1.0, -1.0], [4.0, 0.25], [2.0, 1.0], [0.5, 0.0]
    layers = [
        _input("a", [2]), _input("b", [2]),
        lay("Concatenate", "cat", ["a", "b"], axis=-1),
        lay("Multiply", "mul", ["a", "b"]),
        lay("Subtract", "sub", ["a", "b"]),
        lay("Average", "avg", ["a", "b"]),
        lay("Maximum", "max", ["a", "b"]),
        lay("Minimum", "min", ["a", "b"]),
        lay("Activation", "tanh", ["a"], activation="tanh"),
        lay("Softmax", "smax", ["a"], axis=-1),
        lay("Dropout", "drop", ["a"], rate=0.5),
        lay("LeakyReLU", "lrelu", ["a"], alpha=0.1),
        lay("Reshape", "resh", ["cat"], target_shape=[2, 2]),
        lay("Flatten", "flat", ["resh"]),
        lay("BatchNormalization", "bn", ["a"], axis=-1, epsilon=0.0),
        lay("ReLU", "relu6", ["a"], max_value=6.0),
    ]
    outs = ["cat", "mul", "sub", "avg", "max", "min", "tanh", "smax", "drop", "lrelu", "resh", "flat", "bn",
            "relu6"]
    params = {"bn": {"moving_mean": _enc(mean), "moving_variance": _enc(var),
                     "gamma": _enc(gamma), "beta": _enc(beta)}}
    m = _model(layers, [["a", 0, 0], ["b", 0, 0]], [[o, 0, 0] for o in outs], params, [[2], [2]],
               [[4], [2], [2], [2], [2], [2], [2], [2], [2], [2], [2, 2], [4], [2], [2]])
    a = np.array([[1.0, -2.0], [8.0, 0.5]], np.float32)
    b = np.array([[3.0, 4.0], [-1.0, 0.5]], np.float32)
    got = dict(zip(outs, m.predict(a, b)))
    e = np.exp(a - a.max(axis=1, keepdims=True))
    want = {
        "cat": np.concatenate([a, b], axis=1), "mul": a * b, "sub": a - b, "avg": (a + b) / 2,
        "max": np.maximum(a, b), "min": np.minimum(a, b), "tanh": np.tanh(a),
        "smax": e / e.sum(axis=1, keepdims=True), "drop": a, "lrelu": np.where(a >= 0, a, 0.1 * a),
        "resh": np.concatenate([a, b], axis=1).reshape(2, 2, 2), "flat": np.concatenate([a, b], axis=1),
        "bn": (a - np.array(mean)) / np.sqrt(np.array(var)) * np.array(gamma) + np.array(beta),
        "relu6": np.clip(a, 0, 6),
    }
    for k in outs:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-7, err_msg=k)

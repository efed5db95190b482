"""A numpy loader and batch runner for frugally-deep JSON models.

`frugally-deep <https://github.com/Dobiasd/frugally-deep>`_ is the header-only
C++ library MIOpen uses to run its shipped networks (``*.tn.model``: the
TunaNet solver selector; ``*.ktn.model``: the kernel-tuning encoder/decoder).
Its file format is what its ``keras_export/convert_model.py`` writes:

* ``architecture``: the Keras *functional* model config (``model.get_config()``
  wrapped with ``class_name``): ``config.layers`` is a list of layers, each
  with ``class_name``, ``name``, ``config`` and ``inbound_nodes``; a node is a
  list of ``[layer_name, node_index, tensor_index, kwargs]`` references.
  ``config.input_layers`` / ``config.output_layers`` name the model's inputs
  and outputs the same way.
* ``trainable_params``: per layer name, the weights as Keras stores them
  (``layer.get_weights()``: a Dense kernel is ``(in, out)``; an LSTM kernel is
  ``(in, 4*units)`` with gates in Keras' order i, f, c, o), flattened in C
  order, as little-endian float32 encoded in base64 and split into chunk
  strings of 1,024 characters. The chunks must be concatenated *before*
  decoding (a chunk boundary can fall inside a 4-byte float).
* ``tests`` (optional): random inputs and the outputs Keras computed for them,
  one sample each, encoded the same way with ``shape`` = the tensor shape
  without the batch axis. frugally-deep checks them when a model is loaded
  (``fdeep::load_model(path, verify=true)``, absolute tolerance 1e-4), and so
  does MIOpen, which loads with ``verify=true``.

This module reimplements the inference side in vectorised numpy with a
leading batch axis: :meth:`FdeepModel.predict` runs a whole batch at once.
Supported layer kinds (``FdeepModel.SUPPORTED_LAYERS``) cover every layer in
MIOpen's ``gfx908/gfx90a/gfx942.tn.model`` (InputLayer, Dense, ReLU, Add) and
``gfx908_ConvAsm1x1U_{encoder,decoder}.ktn.model`` (Embedding, LSTM with
``return_sequences``/``return_state`` and initial states), plus a few cheap
element-wise / shape layers. An unknown layer kind raises a clear error at
load time rather than computing something wrong.

>>> m = FdeepModel.load("../shared/data/miopen/gfx90a.tn.model")   # doctest: +SKIP
>>> m.predict(np.zeros((5, 18), np.float32))[0].shape                  # doctest: +SKIP
(5, 36)
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FdeepModel", "FdeepTest", "decode_floats", "FdeepFormatError"]


class FdeepFormatError(ValueError):
    """The file is not a frugally-deep model this loader understands."""


def decode_floats(chunks: Any) -> np.ndarray:
    """Decode frugally-deep float storage into a 1-D float32 array.

    ``chunks`` is a list of base64 strings (concatenated before decoding, the
    format's default) or, for files written with ``STORE_FLOATS_HUMAN_READABLE``,
    a plain list of numbers.
    """
    if isinstance(chunks, str):
        chunks = [chunks]
    if len(chunks) == 0:
        return np.zeros(0, dtype=np.float32)
    if all(isinstance(c, str) for c in chunks):
        raw = base64.b64decode("".join(chunks), validate=True)
        if len(raw) % 4:
            raise FdeepFormatError(f"base64 float data of {len(raw)} bytes is not a multiple of 4")
        return np.frombuffer(raw, dtype="<f4").astype(np.float32)
    return np.asarray(chunks, dtype=np.float32)


# --------------------------------------------------------------------------- activations

def _sigmoid(x):
    # Split by sign so that exp never overflows (float32 exp overflows at ~88).
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


def _hard_sigmoid(x):
    # Keras 2 / TF 2.x definition (also frugally-deep's): clip(0.2 x + 0.5, 0, 1).
    return np.clip(0.2 * x + 0.5, 0.0, 1.0).astype(x.dtype)


def _softmax(x, axis=-1):
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def _elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))).astype(x.dtype)


def _selu(x):
    # Constants of Klambauer et al. (2017), as in Keras.
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    return (scale * _elu(x, alpha)).astype(x.dtype)


_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "linear": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "hard_sigmoid": _hard_sigmoid,
    "softmax": _softmax,
    "elu": _elu,
    "selu": _selu,
    "softplus": lambda x: np.logaddexp(0, x).astype(x.dtype),
    "softsign": lambda x: x / (1 + np.abs(x)),
    "exponential": np.exp,
    "swish": lambda x: x * _sigmoid(x),
    "silu": lambda x: x * _sigmoid(x),
}


def _activation(name: Any) -> Callable[[np.ndarray], np.ndarray]:
    if isinstance(name, dict):  # Keras 3 serialises activations as objects
        name = name.get("config", {}).get("name", name.get("class_name"))
    if name is None:
        name = "linear"
    if name not in _ACTIVATIONS:
        raise FdeepFormatError(f"unsupported activation {name!r}; supported: {sorted(_ACTIVATIONS)}")
    return _ACTIVATIONS[name]


# --------------------------------------------------------------------------- layers
# Every layer is a callable taking the list of input tensors of one node and
# returning the list of output tensors (most layers return one).

class _Layer:
    def __init__(self, name: str, config: dict, params: dict):
        self.name = name
        self.config = config
        self.params = params

    def __call__(self, inputs: list[np.ndarray]) -> list[np.ndarray]:  # pragma: no cover
        raise NotImplementedError

    def _weights(self, key: str) -> np.ndarray:
        if key not in self.params:
            raise FdeepFormatError(f"layer {self.name!r}: missing trainable param {key!r}")
        return decode_floats(self.params[key])


class _Dense(_Layer):
    """Keras Dense: y = act(x @ W + b) over the last axis (any leading axes)."""

    def __init__(self, name, config, params):
        super().__init__(name, config, params)
        units = int(config["units"])
        w = self._weights("weights")
        if w.size % units:
            raise FdeepFormatError(f"layer {name!r}: {w.size} weights do not divide into {units} units")
        self.w = w.reshape(w.size // units, units)
        self.b = self._weights("bias") if config.get("use_bias", True) else None
        if self.b is not None and self.b.size != units:
            raise FdeepFormatError(f"layer {name!r}: bias has {self.b.size} values, want {units}")
        self.act = _activation(config.get("activation", "linear"))

    def __call__(self, inputs):
        (x,) = inputs
        y = x @ self.w
        if self.b is not None:
            y = y + self.b
        return [self.act(y)]


class _ReLU(_Layer):
    """Keras ReLU layer: max_value clip, negative_slope below threshold."""

    def __init__(self, name, config, params):
        super().__init__(name, config, params)
        self.max_value = config.get("max_value")
        self.slope = float(config.get("negative_slope", 0.0) or 0.0)
        self.threshold = float(config.get("threshold", 0.0) or 0.0)

    def __call__(self, inputs):
        (x,) = inputs
        y = np.where(x >= self.threshold, x, self.slope * (x - self.threshold)).astype(x.dtype)
        if self.max_value is not None:
            y = np.minimum(y, np.asarray(self.max_value, dtype=x.dtype))
        return [y]


class _LeakyReLU(_Layer):
    def __call__(self, inputs):
        (x,) = inputs
        alpha = float(self.config.get("alpha", self.config.get("negative_slope", 0.3)))
        return [np.where(x >= 0, x, alpha * x).astype(x.dtype)]


class _Activation(_Layer):
    def __call__(self, inputs):
        (x,) = inputs
        return [_activation(self.config.get("activation", "linear"))(x)]


class _Softmax(_Layer):
    def __call__(self, inputs):
        (x,) = inputs
        return [_softmax(x, axis=int(self.config.get("axis", -1)))]


class _Identity(_Layer):
    """Dropout and friends: the identity at inference."""

    def __call__(self, inputs):
        (x,) = inputs
        return [x]


def _merge(fn):
    class _Merge(_Layer):
        def __call__(self, inputs):
            out = inputs[0]
            for x in inputs[1:]:
                out = fn(out, x)
            return [out]
    return _Merge


class _Subtract(_Layer):
    def __call__(self, inputs):
        a, b = inputs
        return [a - b]


class _Average(_Layer):
    def __call__(self, inputs):
        return [sum(inputs[1:], inputs[0]) / np.asarray(len(inputs), dtype=inputs[0].dtype)]


class _Concatenate(_Layer):
    def __call__(self, inputs):
        return [np.concatenate(inputs, axis=int(self.config.get("axis", -1)))]


class _Flatten(_Layer):
    def __call__(self, inputs):
        (x,) = inputs
        return [x.reshape(x.shape[0], -1)]


class _Reshape(_Layer):
    def __call__(self, inputs):
        (x,) = inputs
        return [x.reshape((x.shape[0], *self.config["target_shape"]))]


class _Embedding(_Layer):
    """Keras Embedding: integer ids (given as floats) -> rows of the table.

    frugally-deep converts each input value to an index with a C++ cast,
    i.e. truncation toward zero; ids outside [0, input_dim) are an error.
    """

    def __init__(self, name, config, params):
        super().__init__(name, config, params)
        n, d = int(config["input_dim"]), int(config["output_dim"])
        w = self._weights("weights")
        if w.size != n * d:
            raise FdeepFormatError(f"layer {name!r}: {w.size} weights, want {n}x{d}")
        self.table = w.reshape(n, d)

    def __call__(self, inputs):
        (x,) = inputs
        idx = np.trunc(np.asarray(x)).astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.table.shape[0]):
            raise ValueError(f"layer {self.name!r}: token id outside [0, {self.table.shape[0]})")
        return [self.table[idx]]


class _LSTM(_Layer):
    """Keras LSTM (no peepholes), inputs (batch, time, features).

    Gates in Keras' order i, f, c, o::

        z = x_t W + h_{t-1} U + b
        i, f, o = rec_act(z_i), rec_act(z_f), rec_act(z_o)
        c_t = f * c_{t-1} + i * act(z_c)
        h_t = o * act(c_t)

    Outputs: the sequence of h (``return_sequences``) or the last h, then
    ``[h_T, c_T]`` when ``return_state``. Extra node inputs are the initial
    states ``[h_0, c_0]`` (Keras' ``initial_state=``), zeros otherwise.
    """

    def __init__(self, name, config, params):
        super().__init__(name, config, params)
        for key, bad in (("go_backwards", True), ("stateful", True), ("time_major", True)):
            if config.get(key, False) == bad:
                raise FdeepFormatError(f"layer {name!r}: LSTM with {key}=True is not supported")
        u = int(config["units"])
        self.units = u
        w = self._weights("weights")
        if w.size % (4 * u):
            raise FdeepFormatError(f"layer {name!r}: kernel of {w.size} values is not (in, 4*{u})")
        self.w = w.reshape(-1, 4 * u)
        self.u = self._weights("recurrent_weights").reshape(u, 4 * u)
        self.b = self._weights("bias").reshape(4 * u) if config.get("use_bias", True) else None
        self.act = _activation(config.get("activation", "tanh"))
        self.rec_act = _activation(config.get("recurrent_activation", "sigmoid"))
        self.return_sequences = bool(config.get("return_sequences", False))
        self.return_state = bool(config.get("return_state", False))

    def __call__(self, inputs):
        x = inputs[0]
        if x.ndim != 3:
            raise ValueError(f"layer {self.name!r}: LSTM input must be (batch, time, features), got {x.shape}")
        batch, steps, _ = x.shape
        u = self.units
        if len(inputs) == 3:
            h, c = inputs[1].astype(x.dtype), inputs[2].astype(x.dtype)
        elif len(inputs) == 1:
            h = np.zeros((batch, u), dtype=x.dtype)
            c = np.zeros((batch, u), dtype=x.dtype)
        else:
            raise FdeepFormatError(f"layer {self.name!r}: LSTM takes 1 or 3 inputs, got {len(inputs)}")
        # Input projections for every step at once; the recurrence is sequential.
        zx = x @ self.w
        if self.b is not None:
            zx = zx + self.b
        seq = np.empty((batch, steps, u), dtype=x.dtype) if self.return_sequences else None
        for t in range(steps):
            z = zx[:, t, :] + h @ self.u
            i = self.rec_act(z[:, :u])
            f = self.rec_act(z[:, u:2 * u])
            g = self.act(z[:, 2 * u:3 * u])
            o = self.rec_act(z[:, 3 * u:])
            c = f * c + i * g
            h = o * self.act(c)
            if seq is not None:
                seq[:, t, :] = h
        out = [seq if seq is not None else h]
        if self.return_state:
            out += [h, c]
        return out


class _BatchNormalization(_Layer):
    """Inference-mode batch norm over the last axis (frugally-deep's restriction)."""

    def __init__(self, name, config, params):
        super().__init__(name, config, params)
        axis = config.get("axis", -1)
        axis = axis[0] if isinstance(axis, list) and len(axis) == 1 else axis
        if axis != -1 and not isinstance(axis, int):
            raise FdeepFormatError(f"layer {name!r}: BatchNormalization axis {axis!r} unsupported")
        self.axis = axis
        self.eps = float(config.get("epsilon", 1e-3))
        self.mean = self._weights("moving_mean")
        self.var = self._weights("moving_variance")
        self.gamma = decode_floats(params["gamma"]) if "gamma" in params else None
        self.beta = decode_floats(params["beta"]) if "beta" in params else None

    def __call__(self, inputs):
        (x,) = inputs
        if self.axis not in (-1, x.ndim - 1):
            raise ValueError(f"layer {self.name!r}: only last-axis batch norm is supported")
        y = (x - self.mean) / np.sqrt(self.var + np.float32(self.eps))
        if self.gamma is not None:
            y = y * self.gamma
        if self.beta is not None:
            y = y + self.beta
        return [y.astype(x.dtype)]


_LAYERS: dict[str, type[_Layer]] = {
    "Dense": _Dense,
    "ReLU": _ReLU,
    "LeakyReLU": _LeakyReLU,
    "Activation": _Activation,
    "Softmax": _Softmax,
    "Dropout": _Identity,
    "SpatialDropout1D": _Identity,
    "GaussianNoise": _Identity,
    "GaussianDropout": _Identity,
    "AlphaDropout": _Identity,
    "Add": _merge(np.add),
    "Multiply": _merge(np.multiply),
    "Maximum": _merge(np.maximum),
    "Minimum": _merge(np.minimum),
    "Subtract": _Subtract,
    "Average": _Average,
    "Concatenate": _Concatenate,
    "Flatten": _Flatten,
    "Reshape": _Reshape,
    "Embedding": _Embedding,
    "LSTM": _LSTM,
    "BatchNormalization": _BatchNormalization,
}


# --------------------------------------------------------------------------- model

@dataclass(frozen=True)
class FdeepTest:
    """One embedded test case: inputs and Keras' outputs, each with a batch axis of 1."""

    inputs: list[np.ndarray]
    outputs: list[np.ndarray]


def _decode_tensor(t: dict) -> np.ndarray:
    shape = [int(s) for s in t["shape"]]
    values = decode_floats(t["values"])
    want = int(np.prod(shape)) if shape else 1
    if values.size != want:
        raise FdeepFormatError(f"test tensor of shape {shape} holds {values.size} values")
    return values.reshape((1, *shape))


def _node_refs(node: Any) -> list[tuple[str, int, int]]:
    """Inbound references of one node: Keras 2 lists, or Keras 3 ``args`` dicts."""
    refs: list[tuple[str, int, int]] = []
    if isinstance(node, dict):  # Keras 3: {"args": [...], "kwargs": {...}}
        def walk(obj):
            if isinstance(obj, dict) and obj.get("class_name") == "__keras_tensor__":
                h = obj["config"]["keras_history"]
                refs.append((h[0], int(h[1]), int(h[2])))
            elif isinstance(obj, dict):
                for v in obj.values():
                    walk(v)
            elif isinstance(obj, list):
                for v in obj:
                    walk(v)
        walk(node.get("args", []))
        walk(node.get("kwargs", {}))
        return refs
    for ref in node:
        refs.append((ref[0], int(ref[1]), int(ref[2])))
    return refs


class FdeepModel:
    """A frugally-deep model held as numpy arrays, run in batches.

    Build with :meth:`load` (a path, ``.gz`` accepted) or :meth:`from_json`
    (the parsed dict). :meth:`predict` takes one array per model input, each
    with a leading batch axis, and returns one array per model output.
    """

    SUPPORTED_LAYERS = frozenset(_LAYERS) | {"InputLayer"}

    def __init__(self, data: dict, source: str = "<dict>"):
        self.source = source
        if data.get("image_data_format", "channels_last") != "channels_last":
            raise FdeepFormatError(f"{source}: only channels_last models are supported")
        arch = data.get("architecture")
        if not isinstance(arch, dict) or "config" not in arch:
            raise FdeepFormatError(f"{source}: no 'architecture' with a Keras model config")
        cfg = arch["config"]
        if arch.get("class_name") not in ("Model", "Functional", None):
            raise FdeepFormatError(
                f"{source}: architecture {arch.get('class_name')!r} is not a Keras functional model")
        self.hash = data.get("hash", "")
        self.input_shapes = [tuple(s) for s in data.get("input_shapes", [])]
        self.output_shapes = [tuple(s) for s in data.get("output_shapes", [])]
        params = data.get("trainable_params", {})

        self._layers: dict[str, _Layer | None] = {}
        self._nodes: dict[str, list[list[tuple[str, int, int]]]] = {}
        self.layer_kinds: dict[str, str] = {}
        unsupported = []
        for layer in cfg["layers"]:
            kind, name = layer["class_name"], layer.get("name", layer["config"].get("name"))
            self.layer_kinds[name] = kind
            self._nodes[name] = [_node_refs(n) for n in layer.get("inbound_nodes", [])]
            if kind == "InputLayer":
                self._layers[name] = None
            elif kind in _LAYERS:
                self._layers[name] = _LAYERS[kind](name, layer["config"], params.get(name, {}))
            else:
                unsupported.append(f"{name} ({kind})")
        if unsupported:
            raise FdeepFormatError(
                f"{source}: unsupported layer kind(s): {', '.join(unsupported)}; "
                f"supported: {sorted(self.SUPPORTED_LAYERS)}")

        def refs(key):
            return [(r[0], int(r[1]), int(r[2])) for r in cfg[key]]

        self.inputs = refs("input_layers")
        self.outputs = refs("output_layers")
        for name, _, _ in self.inputs:
            if self.layer_kinds.get(name) != "InputLayer":
                raise FdeepFormatError(f"{source}: model input {name!r} is not an InputLayer")
        self.tests = [
            FdeepTest([_decode_tensor(t) for t in case["inputs"]],
                      [_decode_tensor(t) for t in case["outputs"]])
            for case in (data.get("tests") or [])
        ]

    # -- construction -------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> FdeepModel:
        """Load a ``.tn.model`` / ``.ktn.model`` / ``.json`` file (optionally gzip-compressed)."""
        path = Path(path)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as fh:
            data = json.load(fh)
        return cls(data, source=str(path))

    @classmethod
    def from_json(cls, data: dict, source: str = "<dict>") -> FdeepModel:
        return cls(data, source)

    # -- inference ----------------------------------------------------------
    def predict(self, *inputs: np.ndarray | Sequence[np.ndarray], dtype=np.float32,
                batch_size: int | None = 4096) -> list[np.ndarray]:
        """Run a batch. ``predict(x)`` or ``predict(x1, x2, ...)`` or ``predict([x1, x2])``.

        Each input is an array of shape ``(batch, *input_shape)``; a 1-sample
        input may omit the batch axis. Returns the model outputs in order.
        Computation is in ``dtype`` (float32 by default, as frugally-deep).
        Rows are processed ``batch_size`` at a time (bounded memory: every
        layer's output of a chunk is held until the chunk is done); ``None``
        runs everything at once.
        """
        if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            inputs = tuple(inputs[0])
        if len(inputs) != len(self.inputs):
            raise ValueError(f"{self.source}: model takes {len(self.inputs)} input(s), got {len(inputs)}")
        arrays = []
        for (name, _, _), x, shape in zip(self.inputs, inputs, self.input_shapes or [None] * len(inputs)):
            x = np.asarray(x, dtype=dtype)
            if shape is not None:
                if x.shape == tuple(shape):
                    x = x[None]
                if x.shape[1:] != tuple(shape):
                    raise ValueError(
                        f"{self.source}: input {name!r} must have shape (batch, {', '.join(map(str, shape))}), "
                        f"got {x.shape}")
            arrays.append(x)
        n = arrays[0].shape[0]
        if any(a.shape[0] != n for a in arrays):
            raise ValueError(f"{self.source}: inputs have different batch sizes {[a.shape[0] for a in arrays]}")
        if batch_size is None or n <= batch_size:
            return self._run(arrays)
        parts = [self._run([a[i:i + batch_size] for a in arrays]) for i in range(0, n, batch_size)]
        return [np.concatenate([p[j] for p in parts]) for j in range(len(self.outputs))]

    def _run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        cache: dict[tuple[str, int], list[np.ndarray]] = {
            (name, node): [x] for (name, node, _), x in zip(self.inputs, arrays)}

        def tensor(name: str, node: int, index: int) -> np.ndarray:
            key = (name, node)
            if key not in cache:
                if self._layers.get(name) is None:
                    raise ValueError(f"{self.source}: input layer {name!r} was not fed")
                args = [tensor(*r) for r in self._nodes[name][node]]
                cache[key] = self._layers[name](args)
            return cache[key][index]

        return [tensor(*ref) for ref in self.outputs]

    __call__ = predict

    def check_tests(self, atol: float = 1e-4) -> list[float]:
        """Run the embedded tests; return the max absolute error per test (raises if none)."""
        if not self.tests:
            raise ValueError(f"{self.source}: the file carries no test vectors")
        errs = []
        for case in self.tests:
            got = self.predict(*case.inputs)
            errs.append(max(float(np.max(np.abs(g - w))) for g, w in zip(got, case.outputs)))
        return errs

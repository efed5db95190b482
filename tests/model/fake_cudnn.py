"""A stand-in for the cuDNN frontend's Python API on the CPU, enough for ``kbench.model.use_plans``' cached path.

A graph records its one convolution node and its tensors' descriptors; ``execute_plan_at_index`` checks
that each tensor of the variant pack has the descriptor's shape and, for every dimension of size > 1,
its strides (the memory layout cuDNN would read), then computes the node with PyTorch's CPU ops.
Plans are ``eng0`` (builds, needs no workspace), ``eng1`` (does not build) and ``eng2`` (builds, needs 64
bytes of workspace); ``executed`` lists the (direction, plan) of every execution and ``counts`` the
host work done: graphs made, plan lists asked for, plans built, handles made, streams set, executions
in the ordered form (``ordered``: the buffers as a tuple with ``tensor_uids``, as frontend 1.32 takes
them) and in the dictionary form (``dict_form``). With ``ORDERED = False`` the execute takes no
``tensor_uids`` and raises the ``TypeError`` a pybind function gives for an unknown keyword, as an older
frontend would. The computation runs outside any ``TorchDispatchMode``, so a test's mode sees only
what the caller did.
"""

from __future__ import annotations

import types
from collections import Counter

import torch
from torch.utils._python_dispatch import _disable_current_modes

PLANS = ("eng0", "eng1", "eng2")
UNBUILDABLE = {"eng1"}
WORKSPACE = {"eng0": 0, "eng1": 64, "eng2": 64}
executed: list[tuple[str, str]] = []
counts: Counter = Counter()
ORDERED = True  # whether execute_plan_at_index takes the ordered form

data_type = types.SimpleNamespace(FLOAT="float", HALF="half", BFLOAT16="bfloat16")
heur_mode = types.SimpleNamespace(A="A", B="B", FALLBACK="FALLBACK")


def create_handle():
    counts["handles"] += 1
    return object()


def set_stream(handle, stream):
    counts["set_stream"] += 1


def backend_version_string():
    return "0.0.fake"


class _Tensor:
    def __init__(self, name, uid, dim=None, stride=None):
        self.name, self.uid, self.dim, self.stride = name, uid, list(dim or []), list(stride or [])

    def get_uid(self):
        return self.uid

    def set_output(self, flag):
        return self

    def set_dim(self, dim):
        self.dim = list(dim)
        return self

    def set_stride(self, stride):
        self.stride = list(stride)
        return self

    def set_data_type(self, dt):
        return self


class pygraph:  # noqa: N801 - the frontend's name
    def __init__(self, io_data_type=None, intermediate_data_type=None, compute_data_type=None, handle=None):
        self.node = None
        self.built: set[int] = set()
        self.tensors: dict[int, _Tensor] = {}
        counts["graphs"] += 1

    def _new_tensor(self, name, dim=None, stride=None):
        t = _Tensor(name, len(self.tensors) + 1, dim, stride)
        self.tensors[t.uid] = t
        return t

    def tensor(self, name, dim, stride, data_type):
        return self._new_tensor(name, dim, stride)

    def _node(self, direction, inputs, padding, stride, dilation):
        self.node = (direction, inputs, list(padding), list(stride), list(dilation))
        self.out = self._new_tensor("O")
        return self.out

    def conv_fprop(self, image, weight, padding, stride, dilation, compute_data_type=None, name=""):
        return self._node("F", (image, weight), padding, stride, dilation)

    def conv_dgrad(self, loss, filter, padding, stride, dilation, compute_data_type=None, name=""):
        return self._node("B", (loss, filter), padding, stride, dilation)

    def conv_wgrad(self, image, loss, padding, stride, dilation, compute_data_type=None, name=""):
        return self._node("W", (image, loss), padding, stride, dilation)

    def validate(self):
        return None

    def build_operation_graph(self):
        return None

    def create_execution_plans(self, modes):
        assert list(modes) == ["A", "B", "FALLBACK"]
        counts["plan_lists"] += 1

    def get_execution_plan_count(self):
        return len(PLANS)

    def get_plan_name_at_index(self, i):
        return PLANS[i]

    def build_plan_at_index(self, i):
        if PLANS[i] in UNBUILDABLE:
            raise RuntimeError("CUDNN_STATUS_NOT_SUPPORTED")
        self.built.add(i)
        counts["builds"] += 1

    def get_workspace_size_plan_at_index(self, i):
        return WORKSPACE[PLANS[i]]

    def execute_plan_at_index(self, pack, workspace, index, handle, **ordered):
        if ordered and not ORDERED:
            raise TypeError("execute_plan_at_index(): incompatible function arguments")
        if ordered:  # the buffers in the order of their uids
            assert set(ordered) == {"tensor_uids"} and isinstance(pack, tuple)
            pack = {self.tensors[uid]: t for uid, t in zip(ordered["tensor_uids"], pack, strict=True)}
        counts["ordered" if ordered else "dict_form"] += 1
        assert index in self.built and workspace.dtype == torch.uint8
        assert workspace.numel() >= max(WORKSPACE[PLANS[index]], 1)
        with _disable_current_modes():
            self._compute(pack, index)

    def _compute(self, pack, index):
        direction, (a, b), padding, stride, dilation = self.node
        for port, t in pack.items():
            assert list(t.shape) == port.dim, (port.name, t.shape, port.dim)
            assert all(s == d for s, d, n in zip(t.stride(), port.stride, t.shape) if n > 1), (port.name, t.stride())
        ta, tb, out = pack[a], pack[b], pack[self.out]
        groups = None
        if direction == "F":
            groups = ta.shape[1] // tb.shape[1]
            res = torch.ops.aten.convolution(ta, tb, None, stride, padding, dilation, False, [0] * len(padding), groups)
        else:
            if direction == "B":  # a: dy, b: w; out: dx
                dy, w, x = ta, tb, torch.zeros(out.shape, dtype=out.dtype)
            else:                 # a: x, b: dy; out: dw
                x, dy, w = ta, tb, torch.zeros(out.shape, dtype=out.dtype)
            groups = x.shape[1] // w.shape[1]
            mask = [direction == "B", direction == "W", False]
            res = torch.ops.aten.convolution_backward(dy, x, w, None, stride, padding, dilation, False,
                                                      [0] * len(padding), groups, mask)
            res = res[0] if direction == "B" else res[1]
        out.copy_(res)
        executed.append((direction, PLANS[index]))

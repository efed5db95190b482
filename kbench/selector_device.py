"""The trees of a deployable selector (:class:`kbench.selector.Forest`) walked with torch on a device.

``PlanSelector.to("cuda")`` scores with it; ``bench/bench_forest_latency.py`` times it beside the numpy walk.
"""

from __future__ import annotations

import numpy as np

from kbench.core.errors import KbenchInputError


class DeviceForest:
    """A :class:`~kbench.selector.Forest` walked with torch on a device: the walk of ``Forest.margins_rows``,
    every tree of every row one level per step, each step a few gathers over all of them at once.

    Why: on one CPU core a forest of the full ``xgboost-plans-safe`` recipe's size (millions of nodes) costs
    milliseconds per batch of candidate plans in any evaluator (``bench/bench_forest_latency.py``): the
    work is memory-bound gathers, which a GPU runs as a few kernels per level, however many trees there are.
    ``margins_rows`` takes and returns numpy arrays, as :class:`Forest`'s does; the leaves are summed in
    float64, so the margins equal the numpy walk's up to the order of summation."""

    def __init__(self, forest, device):
        try:
            import torch
        except ImportError:
            raise KbenchInputError("selector: scoring on a device walks the trees with PyTorch, which is not "
                                   "installed; pip install torch, or score with numpy (the default)") from None
        feature, threshold, default_left, leaves = forest.complete()
        self._torch, self.device, self.depth = torch, torch.device(device), forest.depth
        n_trees = len(forest.roots)
        def put(a, dtype):
            return torch.as_tensor(np.ascontiguousarray(a)).to(device=self.device, dtype=dtype)
        self.feature, self.threshold = put(feature, torch.int64), put(threshold, torch.float32)
        self.default_left, self.leaves = put(default_left, torch.bool), put(leaves, torch.float64)
        self.tree_offset = put((np.arange(n_trees) * (2 ** self.depth - 1))[None, :], torch.int64)
        self.leaf_offset = put((np.arange(n_trees) * 2 ** self.depth)[None, :], torch.int64)
        self.group = put(forest.group[:, None] == np.arange(len(forest.base))[None, :], torch.float64)
        self.base = put(forest.base, torch.float64)

    def margins_rows(self, x: np.ndarray) -> np.ndarray:
        torch = self._torch
        x = np.ascontiguousarray(x, np.float32)
        has_nan = bool(np.isnan(x).any())  # asked on the host: no device sync inside the walk
        flat = torch.as_tensor(x).to(self.device).reshape(-1)
        row_offset = (torch.arange(len(x), device=self.device) * x.shape[1])[:, None]
        where = torch.zeros((len(x), self.tree_offset.shape[1]), dtype=torch.int64, device=self.device)
        with torch.inference_mode():
            for level in range(self.depth):
                node = self.tree_offset + (2 ** level - 1) + where
                value = flat[row_offset + self.feature[node]]
                go_left = value < self.threshold[node]
                if has_nan:  # a missing value takes the node's default direction
                    go_left |= torch.isnan(value) & self.default_left[node]
                where = 2 * where + 1 - go_left.long()
            margins = self.base + self.leaves[self.leaf_offset + where] @ self.group
        return margins.cpu().numpy()

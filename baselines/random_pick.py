"""``random``: the floor. A uniformly random order of the kernels seen in training for the
problem's direction and data type (direction alone when the data type was never seen);
kernels never seen there, but able to run in the direction, follow in random order.
A fixed seed gives the same predictions for the same ids.
"""

from __future__ import annotations

import numpy as np

from kbench_baselines.base import Baseline, KernelSpace, predictions_frame, problems_of, rank_by_scores


class RandomBaseline(Baseline):
    name = "random"
    description = "floor: uniform random order over the kernels seen for the direction/dtype in training"
    stochastic = True

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        return self._fit_kernel_space(dataset, train_ids, seed)

    def predict(self, dataset, ids):
        problems = problems_of(dataset, ids)
        rng = np.random.default_rng(self.seed)
        u = rng.random((len(problems), len(self.space.names)))
        seen = self.space.prior_scores(problems) > 0
        score = u + seen  # seen kernels (1..2) before unseen ones (0..1), each uniformly shuffled
        allowed = self.space.allowed(problems)
        return predictions_frame(problems["problem_id"], rank_by_scores(score, self.space.names, allowed))

    def get_state(self):
        return {"space": self.space.to_dict()}, {}

    def set_state(self, state, arrays, path):
        self.space = KernelSpace.from_dict(state["space"])

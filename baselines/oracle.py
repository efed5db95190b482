"""``oracle``: the ceiling. Ranks the measured kernels of each problem by their measured time.

It reads the runtimes of the problems it predicts (``uses_test_labels``), so
it is a reference row, not a method: top-1 = 1 and LoP = 0 by construction.
Kernels not measured for a problem follow in the training prior order
(:class:`kbench_baselines.base.KernelSpace`).
"""

from __future__ import annotations

import numpy as np

from kbench_baselines.base import Baseline, KernelSpace, predictions_frame, problems_of, rank_by_scores, runtime_matrix


class Oracle(Baseline):
    name = "oracle"
    description = "ceiling: the measured kernels by measured time (reads the test runtimes)"
    uses_test_labels = True

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        return self._fit_kernel_space(dataset, train_ids, seed)

    def predict(self, dataset, ids):
        problems = problems_of(dataset, ids)
        t = runtime_matrix(dataset, problems, self.space)
        measured = ~np.isnan(t)
        prior = self.space.prior_scores(problems)
        # measured kernels first, fastest first; then the prior order
        pos = np.argsort(np.where(measured, t, np.inf), axis=1, kind="stable")
        time_rank = np.empty_like(pos)
        np.put_along_axis(time_rank, pos, np.arange(t.shape[1])[None, :], axis=1)
        score = np.where(measured, 1e15 - time_rank, prior)
        allowed = self.space.allowed(problems) | measured
        return predictions_frame(problems["problem_id"], rank_by_scores(score, self.space.names, allowed))

    def get_state(self):
        return {"space": self.space.to_dict()}, {}

    def set_state(self, state, arrays, path):
        self.space = KernelSpace.from_dict(state["space"])

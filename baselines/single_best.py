"""``single-best``: one fixed ranking per (direction, data type, layout).

The kernel that was fastest most often among the training problems of the
same direction, data type and layout comes first, then the others by the same
count (how often listed breaks ties); a group never seen in training falls
back to (direction, data type), then to the direction. Every kernel that can
run in the direction is ranked.
"""

from __future__ import annotations

from kbench_baselines.base import Baseline, KernelSpace, predictions_frame, problems_of, rank_by_scores

LEVELS = (("direction",), ("direction", "dtype"), ("direction", "dtype", "layout"))


class SingleBest(Baseline):
    name = "single-best"
    description = "floor: the kernel fastest most often in training, per direction/dtype/layout"

    def fit(self, dataset, train_ids, valid_ids=None, seed: int = 0):
        self.seed = seed
        self.space = KernelSpace.fit(dataset, train_ids, levels=LEVELS)
        return self

    def predict(self, dataset, ids):
        problems = problems_of(dataset, ids)
        score = self.space.prior_scores(problems)
        return predictions_frame(problems["problem_id"],
                                 rank_by_scores(score, self.space.names, self.space.allowed(problems)))

    def get_state(self):
        return {"space": self.space.to_dict()}, {}

    def set_state(self, state, arrays, path):
        self.space = KernelSpace.from_dict(state["space"])

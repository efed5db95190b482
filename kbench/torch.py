"""PyTorch integration: run a model's convolutions with a plan cache's cuDNN plans.

>>> import kbench.torch                                               # doctest: +SKIP
>>> handle = kbench.torch.use_plans(model, "r3d_18.plans.json")       # doctest: +SKIP
>>> loss = model(x).sum(); loss.backward()                            # doctest: +SKIP
>>> handle.stats()["through_cache"], handle.stats()["fallback"]       # doctest: +SKIP
>>> handle.remove()                                                   # doctest: +SKIP

The implementation is :mod:`kbench.model.use_plans` (``docs/model.md``); plan caches are written by
``kbench model tune`` (:mod:`kbench.model.plan_cache`). Importing this module imports no torch: that
happens on the first ``use_plans``.
"""

from kbench.model.plan_cache import PlanCache, load_plan_cache
from kbench.model.use_plans import FALLBACK_REASONS, PlanHandle, use_plans

__all__ = ["FALLBACK_REASONS", "PlanCache", "PlanHandle", "load_plan_cache", "use_plans"]

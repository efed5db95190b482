"""Your model in kbench: trace a PyTorch model's convolutions, report their coverage, choose a cuDNN plan for each
and run them in the model.

:mod:`.trace` runs one forward (and, for training, backward) pass of a model on fake tensors (CPU, no
GPU, no arithmetic) and records every convolution call autograd really issues; :mod:`.report` reads a
trace folder against a kbench dataset; :mod:`.tune` fills a plan cache (:mod:`.plan_cache`) from a
dataset or from timings on a GPU (the collector's); :mod:`.use_plans` runs a
model's convolutions with the cached plans (public as ``kbench.torch.use_plans``); :mod:`.bench` times
a model's step per mode. ``docs/model.md`` describes the files and the commands ``kbench model trace``,
``report``, ``tune`` and ``bench``. Nothing here is imported by ``import kbench``: torch loads only when
a command or ``use_plans`` runs.
"""

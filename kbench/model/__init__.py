"""Your model in kbench: trace a PyTorch model's convolutions into kbench problems, and report their coverage.

:mod:`.trace` runs one forward (and, for training, backward) pass of a model on fake tensors (CPU, no
GPU, no arithmetic) and records every convolution call autograd really issues; :mod:`.report` reads a
trace folder against a kbench dataset. ``docs/model.md`` describes the files and the commands
``kbench model trace`` and ``kbench model report``. Nothing here is imported by ``import kbench``:
torch loads only when a trace runs.
"""

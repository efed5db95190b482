"""Ranks that share one GPU take turns at it (``kbench collect cudnn --ranks-per-gpu R``).

A problem-direction's work is in two kinds. The *host-only* part (cuDNN's plan
lists per heuristic mode, the numerical-note probes and building every plan,
which for runtime-compiled engines is an NVRTC compilation) launches nothing on
the GPU; on the H100 it is 0.47 s of the 1.36 s a problem-direction takes
(``t_heur_s + t_notes_s + t_build_s``, ``python -m kbench.collect.studies.scaling phases
raw/h100``). The *GPU* part (the input tensors and float64 reference, then the
timing phase: first runs, captures, coarse, precise and verification replays)
is the rest. Run alone, a collector leaves the GPU idle while it builds.

With ``R`` ranks per GPU (torchrun starts ``GPUs x R`` ranks; each takes GPU
``LOCAL_RANK // R`` and its own shard), a rank holds the GPU's *turn* for its
GPU part only, so one rank builds its next problem while another times its
current one. Timings are unaffected as long as the rank that does not hold the
turn launches no GPU work: that is what the turn guarantees, and the check on
the GPU (``docs/collect_scale_out.md``, "Ranks sharing a GPU") compares timings
taken this way with single-rank timings of the same problems, against their
run-to-run repeatability.

The turn is ``fcntl.flock`` on one file per GPU in the output root
(``.gpu-turn-DEVICE.lock``): the kernel releases it when its holder dies,
however it dies, so a killed rank never blocks its siblings.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path


def turn_path(root: str | Path, device: str | None) -> Path:
    """The turn-lock file of GPU ``device`` for the ranks writing into output root ``root``."""
    name = (device or "default").replace("/", "_").replace(",", "_")
    return Path(root) / f".gpu-turn-{name}.lock"


class GpuTurn:
    """``with turn.hold(): ...`` runs the block while this process holds the GPU's turn.

    With no path (one rank per GPU) ``hold`` does nothing. ``waited_s`` adds up the
    seconds spent waiting for the turn; holds nest (an inner ``hold`` is free).
    """

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else None
        self.waited_s = 0.0
        self._depth = 0

    @property
    def shared(self) -> bool:
        return self.path is not None

    @contextmanager
    def hold(self):
        if self.path is None or self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        t0 = time.perf_counter()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self.waited_s += time.perf_counter() - t0
        self._depth = 1
        try:
            yield
        finally:
            self._depth = 0
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

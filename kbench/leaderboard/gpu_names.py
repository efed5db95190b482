"""Which GPU a re-timing must have run on: the exact device names of each dataset's GPU.

A re-timing on another GPU model measures other hardware, so it confirms nothing of a board
measured on this one. The GPU is matched exactly against :data:`GPU_NAMES` (the names
``torch.cuda.get_device_name`` and ``nvidia-smi`` report for the dataset's device), never by
prefix: ``"NVIDIA H20"`` is not an H200. A dataset whose device is not in the table (one
registered in a test) accepts its device string up to the first `` (``, exactly.
"""

from __future__ import annotations

from kbench.leaderboard.datasets import dataset_device

#: a dataset's device (as the registry names it) -> the exact GPU names a timing run on it reports
GPU_NAMES: dict[str, frozenset[str]] = {
    "NVIDIA H100 80GB HBM3 (SXM, 132 SMs)": frozenset({"NVIDIA H100 80GB HBM3"}),
    "NVIDIA H200 (132 SMs)": frozenset({"NVIDIA H200"}),
}


def accepted_gpu_names(dataset: str) -> frozenset[str] | None:
    """The GPU names a re-timing of ``dataset`` may report (None when the dataset's device is unknown)."""
    device = dataset_device(dataset)
    if not device:
        return None
    return GPU_NAMES.get(device, frozenset({device.split(" (")[0]}))


def gpu_problem(dataset: str, device: dict) -> str | None:
    """Why a timing run's ``device`` record is no re-timing on ``dataset``'s GPU, or None when it is one."""
    names = accepted_gpu_names(dataset)
    gpu = device.get("gpu") if isinstance(device, dict) else None
    if not isinstance(gpu, str) or not gpu:
        return "verification.json names no GPU (device.gpu): a re-timing must record the GPU it ran on"
    if names is not None and gpu not in names:
        return (f"verification.json was timed on an {gpu}, not on the dataset's {dataset_device(dataset)}: keep it "
                f"with the raw timings (raw/{dataset}/verify/), not beside the entry (a re-timing on that GPU "
                f"reports exactly {' or '.join(sorted(map(repr, names)))})")
    smi = device.get("smi_name")
    if names is not None and smi is not None and smi not in names:
        return f"verification.json's nvidia-smi name {smi!r} is not the dataset's GPU ({' or '.join(sorted(names))})"
    return None

"""The collector's environment record: GPU, driver, clocks, host CPU and library versions (``env.jsonl``).

:func:`environment` is what :class:`kbench.collect.measure.cudnn.collector.CudnnCollector` writes at the start of a
run; :class:`_Nvml` reads the SM clock and temperature around each problem.
"""

from __future__ import annotations

import os
import platform
import subprocess

SMI_FIELDS = ["name", "driver_version", "pci.bus_id", "clocks.sm", "clocks.mem", "clocks.max.sm",
              "clocks.max.mem", "temperature.gpu", "power.draw", "power.limit", "pstate",
              "clocks_event_reasons.active", "memory.total", "persistence_mode", "compute_mode"]


def nvidia_smi() -> dict:
    try:
        # the GPU this process times (set by kbench.collect.raw_store.shard.select_gpu under torchrun), else the first
        device = ["-i", os.environ["KBENCH_NVML_DEVICE"]] if os.environ.get("KBENCH_NVML_DEVICE") else []
        out = subprocess.run(["nvidia-smi", *device, f"--query-gpu={','.join(SMI_FIELDS)}",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=30)
        vals = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
        return {f"smi_{k.replace('.', '_')}": v for k, v in zip(SMI_FIELDS, vals)}
    except Exception as exc:  # noqa: BLE001
        return {"smi_error": str(exc)[:300]}


def environment(torch, cudnn_fe) -> dict:
    props = torch.cuda.get_device_properties(0)
    env = {
        "gpu": torch.cuda.get_device_name(0),
        "sm_count": props.multi_processor_count,
        "cc": f"{props.major}.{props.minor}",
        "gpu_memory_bytes": int(props.total_memory),
        "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_cudnn": torch.backends.cudnn.version(),
        "cudnn_backend": cudnn_fe.backend_version_string() if cudnn_fe else None,
        "cudnn_frontend": getattr(cudnn_fe, "__version__", None),
        "python": platform.python_version(),
        "host": platform.node(),
        "torch_allow_tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "env_NVIDIA_TF32_OVERRIDE": os.environ.get("NVIDIA_TF32_OVERRIDE"),
        "env_CUDNN_FRONTEND_ENABLE_FROST_ENGINES": os.environ.get("CUDNN_FRONTEND_ENABLE_FROST_ENGINES"),
    }
    env.update(host_cpu())
    env.update(nvidia_smi())
    return env


def host_cpu(cpuinfo: str = "/proc/cpuinfo") -> dict:
    """The host CPU: model name, logical CPUs usable by this process, 1-minute load average.

    Building plans, heuristic queries and note probes run on the host, so a run's
    throughput depends on it; recording it lets runs on different hosts be told apart."""
    out: dict = {"cpu_count": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    out["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError as exc:
        out["cpu_error"] = str(exc)[:200]
    try:
        out["load_1min"] = round(os.getloadavg()[0], 2)
    except OSError:
        pass
    return out


class _Nvml:
    """SM clock and temperature per problem through NVML (read only)."""

    def __init__(self):
        self.h = None
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nv = pynvml
            device = os.environ.get("KBENCH_NVML_DEVICE", "0")  # see nvidia_smi()
            self.h = (pynvml.nvmlDeviceGetHandleByIndex(int(device)) if device.isdigit()
                      else pynvml.nvmlDeviceGetHandleByUUID(device))
        except Exception:  # noqa: BLE001
            self.h = None

    def sample(self) -> dict:
        if self.h is None:
            return {}
        try:
            nv = self.nv
            return {"sm_clock_mhz": nv.nvmlDeviceGetClockInfo(self.h, nv.NVML_CLOCK_SM),
                    "temp_c": nv.nvmlDeviceGetTemperature(self.h, nv.NVML_TEMPERATURE_GPU)}
        except Exception:  # noqa: BLE001
            return {}

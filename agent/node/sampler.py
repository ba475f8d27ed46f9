"""Host and GPU readings, sampled by the agent (not the trainer, whose GIL is busy).

NVML is initialised lazily and once.  A node without an NVIDIA driver or GPU is a
normal state: it is logged once at INFO and the sampler reports host readings only.
A reading one GPU does not support (power on some boards) is skipped, not an error.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any, Callable

import psutil

log = logging.getLogger("pilothouse.sampler")

GIB = float(1 << 30)
# NVML's clock-throttle reasons that mean "too hot or over its power brake" (nvmlClocksThrottleReason
# HwSlowdown, SwThermalSlowdown, HwThermalSlowdown, HwPowerBrakeSlowdown); idle or a power cap is normal.
SLOWDOWN = 0x08 | 0x20 | 0x40 | 0x80


def _load_nvml() -> ModuleType | None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    return pynvml


class SystemSampler:
    def __init__(self, nvml: ModuleType | None | Callable[[], ModuleType | None] = _load_nvml):
        self._nvml = nvml() if callable(nvml) else nvml
        self._handles: list[Any] = []
        self._started = False
        psutil.cpu_percent(None)  # the first call only primes the counter

    @property
    def gpu_count(self) -> int:
        self._start()
        return len(self._handles)

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        nvml = self._nvml
        if nvml is None:
            log.info("no GPU readings: nvidia-ml-py is not installed")
            return
        try:
            nvml.nvmlInit()
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        except nvml.NVMLError as exc:
            log.info("no NVIDIA GPU on this node (%s)", exc)
            self._handles = []

    def sample(self) -> dict[str, float]:
        """One reading of every source, named like metrics: gpu0/util, cpu/util, ram/used_gb
        (gpu0/throttle: the slowdown reasons in effect, 0 when none)."""
        self._start()
        mem = psutil.virtual_memory()
        out = {"cpu/util": float(psutil.cpu_percent(None)), "ram/used_gb": mem.used / GIB,
               "ram/total_gb": mem.total / GIB, "ram/util": float(mem.percent)}
        for i, handle in enumerate(self._handles):
            out.update(self._gpu(i, handle))
        return out

    def _gpu(self, i: int, handle: Any) -> dict[str, float]:
        nvml = self._nvml
        readings = {
            "util": lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
            "mem_used_gb": lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used / GIB,
            "mem_total_gb": lambda: nvml.nvmlDeviceGetMemoryInfo(handle).total / GIB,
            "power_w": lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "temp_c": lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
            "throttle": lambda: nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle) & SLOWDOWN,
        }
        out = {}
        for name, read in readings.items():
            try:
                out[f"gpu{i}/{name}"] = float(read())
            except nvml.NVMLError:
                continue  # not supported on this board, or the GPU fell off the bus: skip the reading
        return out

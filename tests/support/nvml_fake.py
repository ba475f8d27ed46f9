"""A stand-in for NVML (nvidia-ml-py's ``pynvml``): this machine has no NVIDIA GPU, the one thing we lack.

``fake_nvml(count)`` answers like ``count`` GPUs (GPU h: utilization 40+h %, h+1 of 80 GB used,
250 W, 60+h °C, no throttling).  ``state`` (a callable read on every call) overrides one GPU's
readings ({index: {"util": 0, "temp": 92, "throttle": 0x40, "lost": True}}); a lost GPU answers
every query with an NVMLError, as one that fell off the bus does.  ``tests/support/fake_pynvml/pynvml.py``
puts it in a real agent subprocess, its state read from a JSON file.
"""

from __future__ import annotations

import types
from collections.abc import Callable


class FakeNVMLError(Exception):
    pass


def fake_nvml(count: int, power_supported: bool = True,
              state: Callable[[], dict] | None = None) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVMLError = FakeNVMLError
    m.NVML_TEMPERATURE_GPU = 0
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetCount = lambda: count
    m.nvmlDeviceGetHandleByIndex = lambda i: i

    def read(h: int, name: str, default: float) -> float:
        gpu = (state() if state is not None else {}).get(str(h), {})
        if gpu.get("lost"):
            raise FakeNVMLError("GPU is lost")
        return gpu.get(name, default)

    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=read(h, "util", 40 + h), memory=10)
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=int(read(h, "mem_used_gb", h + 1) * (1 << 30)),
                                                                total=80 << 30)
    m.nvmlDeviceGetTemperature = lambda h, kind: read(h, "temp", 60 + h)
    m.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: int(read(h, "throttle", 0))

    def power(h):
        if not power_supported:
            raise FakeNVMLError("Not Supported")
        return read(h, "power_mw", 250_000 + h)

    m.nvmlDeviceGetPowerUsage = power
    return m

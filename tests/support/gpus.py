"""GPUs for a machine that has none: ``start_gpu_agent`` starts a real agent whose sampler reads fake
GPUs (``fake_pynvml/``, a ``pynvml`` made of ``nvml_fake``, first on the agent's PYTHONPATH), and
``sample`` / ``reading`` give a ``GpuGrid`` the sampler's readings of a node (``NODE``) directly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pilothouse.gui.gpu_grid import GpuGrid
from pilothouse.wire.checks import SYSTEM_RUN_PREFIX

from .processes import AgentProcess
from .sockets import free_port

FAKE_PYNVML = Path(__file__).resolve().parent / "fake_pynvml"
NODE = ("tcp://127.0.0.1:1", SYSTEM_RUN_PREFIX + "node-a")


def start_gpu_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, gpus: int,
                    state: dict | None = None) -> tuple[AgentProcess, Path]:
    """A real ``pilothouse agent`` subprocess sampling ``gpus`` fake GPUs ten times a second; their
    readings follow the JSON file returned (rewrite it to change them)."""
    state_file = tmp_path / f"{name}-nvml.json"
    state_file.write_text(json.dumps(state or {}))
    with monkeypatch.context() as env:  # the subprocess inherits these; the test process keeps its own
        env.setenv("PYTHONPATH", str(FAKE_PYNVML))
        env.setenv("FAKE_NVML_GPUS", str(gpus))
        env.setenv("FAKE_NVML_STATE", str(state_file))
        agent = AgentProcess(tmp_path / name, free_port(), ["--sample-interval", "0.1"]).start()
    return agent, state_file


def reading(grid: GpuGrid, metric: str, t: float, value: float, node=NODE, heard: float | None = None) -> None:
    grid.add(node, metric, np.array([t]), np.array([value]), heard=heard)


def sample(grid: GpuGrid, t: float, gpus: int = 1, node=NODE, **values: float) -> None:
    """One sampler reading of ``gpus`` GPUs: util 50, 10 of 80 GB, 200 W, 60 °C, no throttle, unless given."""
    base = {"util": 50.0, "mem_used_gb": 10.0, "mem_total_gb": 80.0, "power_w": 200.0, "temp_c": 60.0,
            "throttle": 0.0}
    for i in range(gpus):
        for name, value in (base | values).items():
            reading(grid, f"gpu{i}/{name}", t, value, node)

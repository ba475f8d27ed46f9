"""Shared helpers for the benchmarks: a real agent subprocess, statistics, tables, results.

The agent is started through the real CLI (``python -m pilothouse agent``) so the numbers
include everything a user pays for: process boundary, ZeroMQ, SQLite commits.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from pilothouse.client import reachable

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: each socket is held until all are picked (a port closed at once may be
    handed out again: 64 calls of ``free_port`` gave two agents one port in 9 of 100 tries, and the
    agent that could not bind it was missing from every such run)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def closed_port_url() -> str:
    """A loopback URL nobody listens on (the port was free a moment ago)."""
    return f"tcp://127.0.0.1:{free_port()}"


class AgentProcess:
    """A ``pilothouse agent`` subprocess on a free loopback port with a throw-away data dir."""

    def __init__(self, profile: Path | None = None, extra: Sequence[str] = ()):
        self._tmp = tempfile.TemporaryDirectory(prefix="pilothouse-bench-")
        self.data = Path(self._tmp.name)
        self.url = f"tcp://127.0.0.1:{free_port()}"
        self.profile = profile
        self.extra = list(extra)  # more `pilothouse agent` arguments
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "AgentProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> "AgentProcess":
        prefix = ["-m", "cProfile", "-o", str(self.profile)] if self.profile else []
        cmd = [sys.executable, *prefix, "-m", "pilothouse", "agent", "--bind", self.url, "--data", str(self.data),
               "--log-level", "WARNING", *self.extra]
        self._log = open(self.data / "agent.log", "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 30
        while not self._ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"agent did not answer on {self.url}: {self.log_text()}")
        return self

    def _ready(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"agent exited: {self.log_text()}")
        return reachable(self.url, timeout=0.5)

    def log_text(self) -> str:
        return (self.data / "agent.log").read_text(errors="replace")[-4000:]

    def cpu_seconds(self) -> float:
        """User + system CPU time the agent process has used so far."""
        assert self.proc is not None
        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: the agent stops cleanly (and cProfile writes its file)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        self._tmp.cleanup()


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence."""
    index = min(len(sorted_values) - 1, max(0, round(q / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table; the first column is left-aligned, the rest right-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def environment() -> dict[str, Any]:
    """What the numbers depend on, so results from different machines are not compared blindly."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, timeout=5).stdout.strip()
    except OSError:
        commit = ""
    return {"python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "load_avg": os.getloadavg(), "commit": commit,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def write_result(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"benchmark": name, "environment": environment(), **data}, indent=2) + "\n")
    return path

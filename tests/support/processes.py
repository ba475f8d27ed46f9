"""The real processes the tests start: a ``pilothouse agent`` (``AgentProcess``), trainer scripts
(``start_trainer``, ``finish``, ``LOOP_UNTIL_STOPPED``) and the CLI (``run_cli``); and the mark of
the tests that start an agent on the one default address (``ON_THE_DEFAULT_PORT``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pilothouse.client import Client, reachable

from .paths import ROOT
from .waiting import wait_until

# The suite runs on several pytest-xdist workers (pyproject addopts); the tests that start an agent
# on the one default address run on one worker, one after the other, as they must.
ON_THE_DEFAULT_PORT = pytest.mark.xdist_group("default-port")


class AgentProcess:
    """A real ``pilothouse agent`` subprocess that tests can kill and restart."""

    def __init__(self, data: Path, port: int, extra: list[str] | None = None):
        self.data = data
        self.url = f"tcp://127.0.0.1:{port}"
        self.extra = extra or []
        self.proc: subprocess.Popen | None = None
        self.log = data / "agent-test.log"

    def start(self) -> "AgentProcess":
        self.data.mkdir(parents=True, exist_ok=True)
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pilothouse", "agent", "--bind", self.url, "--data", str(self.data), *self.extra],
            stdout=out, stderr=out, cwd=ROOT)
        out.close()
        wait_until(self.ready, timeout=20, what=f"agent on {self.url}")
        return self

    def ready(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
        return reachable(self.url, timeout=0.5)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(timeout=20)

    def client(self, timeout: float = 10.0) -> Client:
        return Client(self.url, timeout=timeout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_trainer(tmp_path: Path, body: str, url: str, *args: str, name: str = "trainer") -> subprocess.Popen:
    """Run ``body`` as a real trainer script (``URL`` and ``ARGS`` are defined for it)."""
    script = tmp_path / f"{name}.py"
    script.write_text("import sys, time, math\nimport pilothouse as ph\nURL = sys.argv[1]\nARGS = sys.argv[2:]\n"
                      + textwrap.dedent(body))
    env = dict(os.environ)
    env.pop("PILOTHOUSE_AGENT", None)
    return subprocess.Popen([sys.executable, str(script), url, *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_cli(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """``pilothouse ARGS`` as a real subprocess; $PILOTHOUSE_AGENT only when ``env`` sets it."""
    full_env = {**os.environ, **(env or {})}
    if not env or "PILOTHOUSE_AGENT" not in env:
        full_env.pop("PILOTHOUSE_AGENT", None)
    return subprocess.run([sys.executable, "-m", "pilothouse", *args], check=False, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=full_env)


def finish(proc: subprocess.Popen, timeout: float = 60) -> str:
    proc.wait(timeout=timeout)  # trainers print little, so their pipes never fill
    out, err = proc.stdout.read(), proc.stderr.read()  # read() keeps what readline() buffered
    assert proc.returncode == 0, f"trainer failed ({proc.returncode}):\n{out}\n{err}"
    return out


# A trainer that logs a loss each step until stopped (ARGS: project, name), for tests that steer one.
LOOP_UNTIL_STOPPED = """
run = ph.init(project=ARGS[0], name=ARGS[1], agent=URL, heartbeat=0.2, config={"lr": 0.1})
print(run.id, flush=True)
for step in range(100000):
    if run.sync(step).stop:
        break
    run.log({"loss": 1.0 / (step + 1)}, step=step)
    time.sleep(0.01)
run.finish()
"""

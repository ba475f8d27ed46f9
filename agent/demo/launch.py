"""``pilothouse demo``: start an agent, two trainers and (unless headless) the app; clean up after."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pilothouse.client import AgentUnavailable, Client, reachable


def _free_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def _wait_for_agent(url: str, proc: subprocess.Popen, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the demo agent exited with {proc.returncode}")
        if reachable(url, timeout=0.5):
            return
    raise RuntimeError(f"the demo agent did not answer on {url}")


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C: trainers stopped, agent ended


# the two runs compared: a name and the trainer's hyperparameter flags
RUNS = (("lr3e-3", ["--lr", "3e-3", "--kl-coef", "0.05"]), ("lr1e-2", ["--lr", "1e-2", "--kl-coef", "0.1"]))


def run_demo(steps: int, data: str | None, *, headless: bool, runs: tuple[tuple[str, list[str]], ...] = RUNS) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    folder = Path(data) if data else Path(tempfile.mkdtemp(prefix="pilothouse-demo-"))
    url = _free_url()
    procs: list[subprocess.Popen] = []
    agent = subprocess.Popen([sys.executable, "-m", "pilothouse", "agent", "--bind", url,
                              "--data", str(folder / "agent"), "--log-level", "WARNING"])
    try:
        _wait_for_agent(url, agent)
        print(f"demo agent on {url} (data in {folder})", flush=True)
        for name, extra in runs:
            procs.append(subprocess.Popen([sys.executable, "-m", "pilothouse.demo.grpo", "--agent", url, "--name", name,
                                           "--steps", str(steps), "--checkpoint-dir", str(folder / "checkpoints"),
                                           *extra], stdout=subprocess.DEVNULL))
        names = " ".join(name for name, _ in runs)
        print(f"two GRPO runs are training ({names}). Watch and steer them:\n"
              f"  pilothouse runs --agent {url}\n"
              f"  pilothouse tail {runs[0][0]} --agent {url}\n"
              f"  pilothouse pause {runs[0][0]} --agent {url}\n"
              f"  pilothouse set {runs[0][0]} lr=1e-3 temperature=0.7 --agent {url}\n"
              f"  pilothouse gui --agent {url}", flush=True)
        if headless:
            codes = [p.wait() for p in procs]
        else:
            subprocess.call([sys.executable, "-m", "pilothouse.gui", "--agent", url,
                             "--store", str(folder / "app.sqlite")])
            codes = [0]
        with Client(url) as client:
            for run in client.runs():
                if run["kind"] == "train":
                    print(f"{run['name']}: {run['status']} at step {run['last_step']}, "
                          f"reward/mean {run['summary'].get('reward/mean', float('nan')):.3f}", flush=True)
        return 0 if all(code == 0 for code in codes) else 1
    except KeyboardInterrupt:
        return 130
    finally:
        _stop_trainers(url, procs, [name for name, _ in runs])
        agent.terminate()
        agent.wait(timeout=30)


def _stop_trainers(url: str, procs: list[subprocess.Popen], names: list[str]) -> None:
    """Ask still-running trainers to stop (they finish cleanly); terminate only the deaf ones."""
    with Client(url, timeout=2) as client:
        for proc, name in zip(procs, names):
            if proc.poll() is None:
                try:
                    client.command(name, "stop", wait=10)
                except AgentUnavailable:
                    pass
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(timeout=10)

"""``pilothouse demo``: start an agent, two trainers and (where a display is) the app; clean up after.

Every way out (the app closed or failing, Ctrl+C, SIGTERM, a trainer crashing, the steps done)
goes through one ``finally``: trainers are asked to stop, then terminated, then killed; the agent
is ended; the temporary data folder is removed unless ``--keep``.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pilothouse.client import AgentError, AgentUnavailable, Client, reachable
from pilothouse.local_agents import holds, recorded
from pilothouse.security import Keyring
from pilothouse.wire.urls import DEFAULT_URL


def _free_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def _flags(url: str, name: str) -> tuple[str, str]:
    """The ``--agent`` the suggested commands need, for `runs` and for those naming run ``name``: none
    where a command without it finds the demo's agent (``local_agents.agent_for``: no other agent
    answers, or none other holds ``name``), so the user types what the README shows."""
    keys = Keyring()
    mine = [a.url for a in recorded()]
    flag = f" --agent {url}"
    if url not in mine:
        return flag, flag  # it could not record itself: only its URL finds it
    default = url != DEFAULT_URL and holds(DEFAULT_URL, None, keys)
    others = [u for u in mine if u not in (url, DEFAULT_URL)] + ([DEFAULT_URL] if default else [])
    listed = flag if default or others else ""
    named = flag if any(holds(u, name, keys) for u in others) else ""
    return listed, named


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


def no_display() -> str | None:
    """Why the app cannot open here (a GPU node reached over ssh), or None."""
    if importlib.util.find_spec("PySide6") is None:
        return "the app is not installed (pip install 'pilothouse[gui]')"
    if sys.platform.startswith("linux") and not os.environ.get("QT_QPA_PLATFORM") \
            and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        return "no display (DISPLAY and WAYLAND_DISPLAY are unset)"
    return None


# the two runs compared: a name and the trainer's hyperparameter flags
RUNS = (("lr3e-3", ["--lr", "3e-3", "--kl-coef", "0.05"]), ("lr1e-2", ["--lr", "1e-2", "--kl-coef", "0.1"]))


def run_demo(steps: int, data: str | None, *, headless: bool, keep: bool = False, pace: float = 0.2,
             runs: tuple[tuple[str, list[str]], ...] = RUNS) -> int:
    """``steps`` 0: the runs train until stopped (Ctrl+C, or ``pilothouse stop``)."""
    signal.signal(signal.SIGTERM, _interrupt)
    folder = Path(data) if data else Path(tempfile.mkdtemp(prefix="pilothouse-demo-"))
    url = _free_url()
    trainers: dict[str, subprocess.Popen] = {}  # run id -> its process
    agent: subprocess.Popen | None = None
    try:
        # sessions of their own: a Ctrl+C in the terminal reaches the demo, which stops them cleanly
        agent = subprocess.Popen([sys.executable, "-m", "pilothouse", "agent", "--bind", url,
                                  "--data", str(folder / "agent"), "--log-level", "WARNING"], start_new_session=True)
        _wait_for_agent(url, agent)
        print(f"demo agent on {url} (data in {folder})", flush=True)
        for name, extra in runs:
            run_id = "demo" + secrets.token_hex(4)
            trainers[run_id] = subprocess.Popen(
                [sys.executable, "-m", "pilothouse.demo.grpo", "--agent", url, "--name", name, "--id", run_id,
                 "--steps", str(steps), "--pace", str(pace), "--checkpoint-dir", str(folder / "checkpoints"),
                 *extra], stdout=subprocess.DEVNULL, start_new_session=True)
        first = runs[0][0]
        until = f"for {steps} steps" if steps else "until you stop them (Ctrl+C ends the demo)"
        listed, named = _flags(url, first)
        print(f"two GRPO runs are training {until}: {' and '.join(n for n, _ in runs)}. Watch and steer them:\n"
              f"  pilothouse runs{listed}\n"
              f"  pilothouse tail {first}{named}\n"
              f"  pilothouse pause {first}{named}\n"
              f"  pilothouse set {first} lr=1e-3 temperature=0.7{named}\n"
              f"  pilothouse checkpoint {first}{named}\n"
              f"  pilothouse gui{'' if url in [a.url for a in recorded()] else f' --agent {url}'}", flush=True)
        why = None if headless else no_display()
        if why:
            print(f"pilothouse demo: {why}: running headless (--headless skips this check)", flush=True)
        if not headless and not why:
            code = subprocess.call([sys.executable, "-m", "pilothouse.gui", "--agent", url,
                                    "--store", str(folder / "app.sqlite")])
            if code == 0:  # the user closed the app: the demo ends with it
                _summary(url)
                return 0
            print(f"pilothouse demo: the app exited with {code}; the runs go on headless", flush=True)
        code = _wait(trainers, runs)
        _summary(url)
        return code
    except KeyboardInterrupt:
        print("\nending the demo: stopping the runs", flush=True)
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
        _stop_trainers(url, trainers)
        if agent is not None:
            _end(agent)
        if data is None and not keep:
            shutil.rmtree(folder, ignore_errors=True)
        elif data is None:
            print(f"demo data kept in {folder}", flush=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _wait(trainers: dict[str, subprocess.Popen], runs: tuple[tuple[str, list[str]], ...]) -> int:
    """Until every trainer is done; a crash ends the demo at once (exit 1)."""
    names = dict(zip(trainers, (name for name, _ in runs)))
    while True:
        codes = {run_id: proc.poll() for run_id, proc in trainers.items()}
        crashed = [(run_id, code) for run_id, code in codes.items() if code not in (None, 0)]
        if crashed:
            run_id, code = crashed[0]
            print(f"pilothouse demo: the trainer of {names[run_id]} exited with {code}: ending the demo", flush=True)
            return 1
        if all(code == 0 for code in codes.values()):
            return 0
        time.sleep(0.2)


def _summary(url: str) -> None:
    try:
        with Client(url, timeout=2) as client:
            for run in client.runs():
                if run["kind"] == "train":
                    print(f"{run['name']}: {run['status']} at step {run['last_step']}, "
                          f"reward/mean {run['summary'].get('reward/mean', float('nan')):.3f}", flush=True)
    except (AgentUnavailable, AgentError) as exc:
        print(f"pilothouse demo: no summary ({exc})", flush=True)


def _stop_trainers(url: str, trainers: dict[str, subprocess.Popen]) -> None:
    """Ask running trainers to stop (they finish cleanly); terminate the deaf ones, kill the stuck."""
    asked = set()
    running = [run_id for run_id, proc in trainers.items() if proc.poll() is None]
    if running:
        with Client(url, timeout=2) as client:
            for run_id in running:
                try:
                    if client.command(run_id, "stop", wait=5)["state"] == "applied":
                        asked.add(run_id)
                except (AgentUnavailable, AgentError):
                    pass  # not registered yet, or the agent is gone: terminated below
    for run_id, proc in trainers.items():
        _end(proc, grace=20 if run_id in asked else 0)


def _end(proc: subprocess.Popen, grace: float = 0) -> None:
    """Wait ``grace`` s for it to exit, then SIGTERM, then SIGKILL: nothing the demo started outlives it."""
    for send in (None, proc.terminate, proc.kill):
        if send is not None:
            send()
        try:
            proc.wait(timeout=grace if send is None else 10)
            return
        except subprocess.TimeoutExpired:
            pass

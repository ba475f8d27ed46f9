"""`pilothouse demo` end to end with real processes: an agent, two real GRPO runs, and every way
out of it (steps done, no display, the app failing, Ctrl+C, SIGTERM, a trainer crashing) ending
everything it started and removing its temporary data."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from support.paths import ROOT
from support.waiting import wait_until

from pilothouse.client import Client

pytest.importorskip("torch")

HEADLESS_ENV = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}


def demo(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pilothouse", "demo", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env or HEADLESS_ENV)


def started(proc: subprocess.Popen) -> tuple[str, Path, list[psutil.Process]]:
    """The demo's agent URL and data folder, and its children once both runs train."""
    line = proc.stdout.readline()
    match = re.match(r"demo agent on (\S+) \(data in (.+)\)", line)
    assert match, line + proc.stderr.read()
    url, folder = match.group(1), Path(match.group(2))
    with Client(url) as c:
        wait_until(lambda: sum(r["kind"] == "train" and (r["last_step"] or 0) > 2 for r in c.runs()) == 2,
                   timeout=60, what="both demo runs training")
    return url, folder, psutil.Process(proc.pid).children(recursive=True)


def gone(children: list[psutil.Process]) -> list[str]:
    """The children still alive (a zombie counts as gone: it runs nothing)."""
    alive = []
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(" ".join(child.cmdline()))
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.mark.timeout(240)
def test_headless_demo_trains_two_runs_and_says_where_to_look(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pilothouse", "demo", "--headless", "--steps", "30", "--pace", "0",
                          "--data", str(tmp_path / "demo")], capture_output=True, text=True, timeout=200, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    # no other recorded agent (this test's private runtime dir) holds its runs: no --agent needed
    assert "  pilothouse pause lr3e-3\n" in out.stdout, out.stdout
    summary = [line for line in out.stdout.splitlines() if "reward/mean" in line]
    assert len(summary) == 2 and all("finished at step 29" in line for line in summary), out.stdout
    assert (tmp_path / "demo" / "agent").is_dir()  # a folder of the user's is kept


@pytest.mark.timeout(120)
def test_no_display_runs_headless_and_removes_its_temporary_data():
    proc = demo("--steps", "15", "--pace", "0")
    url, folder, children = started(proc)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, out + err
    assert "no display (DISPLAY and WAYLAND_DISPLAY are unset): running headless" in out
    assert "Traceback" not in err and "qt." not in err.lower()
    assert not folder.exists() and not gone(children)


@pytest.mark.timeout(120)
def test_a_failing_app_leaves_the_runs_going_headless():
    env = {**HEADLESS_ENV, "QT_QPA_PLATFORM": "no-such-platform"}  # Qt cannot start its window
    proc = demo("--steps", "15", "--pace", "0", "--keep", env=env)
    url, folder, children = started(proc)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, out + err
    assert re.search(r"the app exited with -?\d+; the runs go on headless", out), out
    assert folder.is_dir() and f"demo data kept in {folder}" in out  # --keep
    assert not gone(children)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl+C"])
def test_a_signal_ends_everything_the_demo_started(sig):
    proc = demo("--pace", "0.05")  # no --steps: the runs would train until stopped
    url, folder, children = started(proc)
    assert len(children) == 3, [c.cmdline() for c in children]  # the agent and two trainers
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, out + err
    assert "ending the demo: stopping the runs" in out
    assert not gone(children) and not folder.exists()


@pytest.mark.timeout(120)
def test_a_crashed_trainer_ends_the_demo():
    proc = demo("--pace", "0.05")
    url, folder, children = started(proc)
    trainer = next(c for c in children if "pilothouse.demo.grpo" in " ".join(c.cmdline()))
    trainer.kill()  # a child of the demo this test started
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 1, out + err
    assert re.search(r"the trainer of lr\S+ exited with -9: ending the demo", out), out
    assert not gone(children) and not folder.exists()


@pytest.mark.parametrize("args, message", [
    (["--steps", "-1"], "--steps: must be >= 0"),
    (["--steps", "many"], "--steps: must be a whole number"),
    (["--pace", "nan"], "--pace: must be a number of seconds in [0, 60]"),
    (["--pace", "-0.1"], "--pace: must be a number of seconds in [0, 60]"),
])
def test_bad_demo_arguments_start_nothing(args, message):
    out = subprocess.run([sys.executable, "-m", "pilothouse", "demo", *args], capture_output=True, text=True,
                         timeout=60, cwd=ROOT, env=HEADLESS_ENV)
    assert out.returncode == 2 and message in out.stderr and not out.stdout, out  # no agent was started

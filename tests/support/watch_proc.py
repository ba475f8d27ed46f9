"""A real ``pilothouse watch`` subprocess (``WatchProcess``: started, killed mid-stream, restarted,
stopped), ``pilothouse import`` of the same paths, and a run's rollouts read back per step, for the
tests that follow an RL framework's files into a real agent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from pilothouse.client import AgentError
from pilothouse.wire.rollouts import MAX_ROLLOUT_STEPS

from .paths import ROOT
from .processes import run_cli


def env_of(tmp_path: Path) -> dict:
    """The watcher's environment: its state (the offsets the agent holds) in ``tmp_path``."""
    return {**os.environ, "PILOTHOUSE_DATA": str(tmp_path / "ph-data")}


class WatchProcess:
    """``pilothouse watch PATHS --agent URL --project PROJECT``, its output in ``tmp_path/watch.log``."""

    def __init__(self, tmp_path: Path, url: str, *paths: Path, project: str):
        self.tmp_path, self.args = tmp_path, [*map(str, paths), "--agent", url, "--project", project]
        self.log = tmp_path / "watch.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> WatchProcess:
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "pilothouse", "watch", *self.args], stdout=log,
                                         stderr=log, cwd=ROOT, env=env_of(self.tmp_path))
        return self

    def kill(self) -> None:
        """SIGKILL: no goodbye, no state saved at exit (what the agent acknowledged was saved as it came)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            assert self.proc.wait(timeout=30) == 0, self.log.read_text()


def import_paths(tmp_path: Path, url: str, *paths: Path, project: str) -> subprocess.CompletedProcess:
    """``pilothouse import PATHS`` into the agent at ``url``, with its own state folder."""
    return run_cli("import", *map(str, paths), "--agent", url, "--project", project,
                   env={"PILOTHOUSE_DATA": str(tmp_path / "ph-import")})


def rows_by_step(client, run_id: str) -> dict[int, list[dict]]:
    """Every rollout row the agent holds for the run, per step, in arrival order."""
    return {r["step"]: r["rows"] for r in client.rollouts(run_id, last=MAX_ROLLOUT_STEPS)}


def row_count(client, run_id: str | None) -> int:
    """The rows the agent holds for a run (0 for no run)."""
    if run_id is None:
        return 0
    try:
        return sum(map(len, rows_by_step(client, run_id).values()))
    except AgentError as exc:
        if "has no rollouts" in str(exc):
            return 0
        raise

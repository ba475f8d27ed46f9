"""Find the local agent, or start one in the background for ``pilothouse.init``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pilothouse.client import reachable
from pilothouse.paths import default_data_dir

log = logging.getLogger("pilothouse")


def ensure_local_agent(url: str, data_dir: Path | None = None) -> None:
    """Start ``pilothouse agent`` detached (it outlives the trainer) unless one answers.

    Two trainers racing here both start one; the loser cannot bind and exits.  The
    trainer does not wait for it: records are buffered until it is up.
    """
    if reachable(url):
        return
    data_dir = data_dir or default_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    spawn_agent(url, data_dir, start_new_session=True)
    log.info("pilothouse: started a local agent on %s (data in %s)", url, data_dir)


def spawn_agent(url: str, data_dir: Path, **popen: Any) -> subprocess.Popen:
    """``pilothouse agent`` on ``url`` with its journal in ``data_dir``, its output appended to the
    owner-only ``agent.log`` there; ``popen``: how it is tied to its parent (a session of its own, or
    a parent-death signal)."""
    log_path = data_dir / "agent.log"
    with open(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as out:
        os.chmod(log_path, 0o600)
        return subprocess.Popen([sys.executable, "-m", "pilothouse", "agent", "--bind", url, "--data", str(data_dir)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, close_fds=True, **popen)

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
from pilothouse.security import SecurityError, owned_file, private_dir

log = logging.getLogger("pilothouse")


def ensure_local_agent(url: str, data_dir: Path | None = None) -> None:
    """Start ``pilothouse agent`` detached (it outlives the trainer) unless one answers.

    Two trainers racing here both start one; the loser cannot bind and exits.  The
    trainer does not wait for it: records are buffered until it is up.  A data folder or log
    that is not the user's own is refused with an error in the log, and training goes on (its
    records wait in the buffer as for an agent that is down).
    """
    if reachable(url):
        return
    data_dir = data_dir or default_data_dir()
    try:
        spawn_agent(url, data_dir, start_new_session=True)
    except SecurityError as exc:
        log.error("pilothouse: no local agent started: %s", exc)
        return
    log.info("pilothouse: started a local agent on %s (data in %s)", url, data_dir)


def spawn_agent(url: str, data_dir: Path, **popen: Any) -> subprocess.Popen:
    """``pilothouse agent`` on ``url`` with its journal in ``data_dir``, its output appended to the
    owner-only ``agent.log`` there; ``popen``: how it is tied to its parent (a session of its own, or
    a parent-death signal).  The folder and the log are the user's own or SecurityError: the log is
    never opened through a link, which would have the agent write to (and chmod) the file it
    points at."""
    private_dir(data_dir)
    log_path = data_dir / "agent.log"
    with open(owned_file(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "pilothouse", "agent", "--bind", url, "--data", str(data_dir)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, close_fds=True, **popen)

"""Starting ``pilothouse agent`` as a child process, for the trainer's launcher and the Ray node actor.

Below both: the trainer asks the Ray integration for its node's agent, so the Ray integration
must not import the trainer back.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pilothouse.security import owned_file, private_dir


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

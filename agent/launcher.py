"""Find the local agent, or start one in the background for ``agent.init``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import platformdirs

log = logging.getLogger("pilothouse")

ENV_DATA = "PILOTHOUSE_DATA"


def default_data_dir() -> Path:
    return Path(os.environ.get(ENV_DATA) or platformdirs.user_data_dir("pilothouse")) / "agent"


def reachable(url: str, timeout: float = 0.3) -> bool:
    from .client import AgentUnavailable, Client

    with Client(url, timeout=timeout) as client:
        try:
            client.ping()
            return True
        except AgentUnavailable:
            return False


def ensure_local_agent(url: str, data_dir: Path | None = None) -> None:
    """Start ``pilothouse agent`` detached (it outlives the trainer) unless one answers.

    Two trainers racing here both start one; the loser cannot bind and exits.  The
    trainer does not wait for it: records are buffered until it is up.
    """
    if reachable(url):
        return
    data_dir = data_dir or default_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / "agent.log", "ab") as out:
        subprocess.Popen([sys.executable, "-m", "agent", "agent", "--bind", url, "--data", str(data_dir)],
                         stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
                         close_fds=True)
    log.info("pilothouse: started a local agent on %s (data in %s)", url, data_dir)

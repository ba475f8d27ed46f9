"""Find the local agent, or start one in the background for ``pilothouse.init``."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from pilothouse.client import reachable
from pilothouse.paths import default_data_dir
from pilothouse.security import SecurityError
from pilothouse.spawn import spawn_agent

log = logging.getLogger("pilothouse")


def ensure_local_agent(url: str, data_dir: Path | None = None) -> None:
    """Start ``pilothouse agent`` detached (it outlives the trainer) unless one answers.

    Starting one says so once on stderr: where it listens, its data, and the command that stops it.
    Two trainers racing here both start one; the loser cannot bind and exits.  The
    trainer does not wait for it: records are buffered until it is up.  A data folder or log
    that is not the user's own is refused with an error in the log, and training goes on (its
    records wait in the buffer as for an agent that is down).
    """
    if reachable(url):
        return
    data_dir = data_dir or default_data_dir()
    try:
        proc = spawn_agent(url, data_dir, start_new_session=True)
    except SecurityError as exc:
        log.error("pilothouse: no local agent started: %s", exc)
        return
    # Said on stderr, not the log: a process that outlives the script must never be a surprise.
    print(f"pilothouse: started a background agent on {url} (pid {proc.pid}, data in {data_dir}); it keeps "
          f"running after this script, stop it with `pilothouse agents stop {proc.pid}`",
          file=sys.stderr, flush=True)


"""A full disk is a state of the agent, not a crash: reads go on, writes are refused as such.

SQLite says SQLITE_FULL when the journal cannot grow (the OS says ENOSPC to a log file).  The
agent then answers every write with ``describe()``'s text, trainers keep their records and send
them again, and the log says so once on the way in and once on the way out, not per turn.
"""

from __future__ import annotations

import errno
import logging
import shutil
import sqlite3
import time
from pathlib import Path

log = logging.getLogger("pilothouse.agent")

REMIND_EVERY = 60.0  # seconds between log lines while the disk stays full
# Free space that ends the state: small writes may fit a nearly full disk while batches do not,
# and the state must not flap with them.
CLEAR_FREE_BYTES = 32 << 20


def is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.Error):
        return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_FULL
    return isinstance(exc, OSError) and exc.errno == errno.ENOSPC


class DiskSpace:
    def __init__(self, path: Path):
        self.path = path
        self.full_since: float | None = None  # time.monotonic()
        self.refused = 0  # writes refused while full
        self._logged = 0.0

    def describe(self) -> str:
        return f"disk full: {_free(self.path) / 2 ** 20:.1f} MB free at {self.path}"

    @property
    def state(self) -> str | None:
        """What readers are told (ping, the CLI, the app's status bar): None while writes succeed."""
        return None if self.full_since is None else self.describe()

    def failed(self, writes: int = 1) -> str:
        """A write did not fit: the text to answer it with."""
        now = time.monotonic()
        text = self.describe()
        self.refused += writes
        if self.full_since is None:
            self.full_since = now
        if now - self._logged >= REMIND_EVERY:
            self._logged = now
            log.error("%s: nothing new is stored until space returns; reads go on, trainers keep their records "
                      "(%d writes refused so far)", text, self.refused)
        return text

    def stored(self) -> None:
        """A write that holds data went through: if the disk was full and has room again, it is over."""
        if self.full_since is not None and _free(self.path) >= CLEAR_FREE_BYTES:
            log.warning("space returned at %s after %.0f s: storing again (%d writes were refused; trainers "
                        "send theirs again)", self.path, time.monotonic() - self.full_since, self.refused)
            self.full_since = None
            self.refused = 0
            self._logged = 0.0


def _free(path: Path) -> int:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0

"""One agent per data folder: an exclusive lock held for the agent's whole life.

Two agents on one journal (on two ports) would each ack records the other never sees, and
``pilothouse agent --recover`` run beside a live agent moves the journal away under it: every
point it acks afterwards lands in the file set aside.  Both take this lock first, so the second
one is refused, naming the holder's pid.  ``flock`` is released by the kernel when the holder
dies however it dies, so a crashed agent never leaves a stale lock behind.  The file is opened
O_NOFOLLOW (a link planted in its place is refused, not followed) and is the owner's only.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from pilothouse.security import SecurityError, owned_file

LOCK_NAME = "agent.lock"


class DataLocked(Exception):
    """The folder is another process's: the text says whose and what to do."""


class DataLock:
    """Held from ``__init__`` until ``release`` (or the process's end)."""

    def __init__(self, data_dir: Path, purpose: str):
        """``purpose``: what the refused caller wanted, said in its error ("start", "--recover")."""
        self.path = Path(data_dir) / LOCK_NAME
        try:
            fd = owned_file(self.path, os.O_RDWR | os.O_CREAT)  # the user's own file, never a link
        except SecurityError as exc:
            raise DataLocked(f"{exc}; the agent makes its own lock file") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise DataLocked(f"{data_dir} is in use by an agent ({_holder(fd)}): stop it before {purpose}") \
                    from None
            _say_pid(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the lock
            self._fd = None


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return f"pid {text}" if text.isdigit() else "pid unknown"


def _say_pid(fd: int) -> None:
    """Our pid in the file, for the next one refused; a full disk leaves it unknown, not an error."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise

"""A full disk is a state of the agent, not a crash: reads go on, new data is refused as such.

New data (records, commands, rules) is refused once free space falls below a headroom, before
the disk is completely full: the WAL checkpoint must still fit (it grows the database by what the
WAL holds), and so must the agent's own bookkeeping (a trainer's loss counters, run statuses).
Without it a partly freed disk was taken by the WAL, the checkpoint could no longer grow the
database, and the agent stayed "disk full" for good.  While space is short the WAL is truncated
each second (not only copied back), so the space it held goes back to the data.

Another program may still fill the disk to the last byte.  For that the agent keeps a reserve
file in its data folder and gives it back when a write finds no space at all, and at start when
space is short: SQLite cannot even open a WAL journal on a full disk (it must size its -shm
file), and the agent starts, read-only, instead of refusing to.  The reserve is made again once
space has returned, and only then is new data taken again (without a restart).

Trainers keep refused records and send them again; the log says so once on the way in and once
on the way out, not per turn.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import sqlite3
import time
from pathlib import Path

from pilothouse.wire.queries import READ_OPS

log = logging.getLogger("pilothouse.agent")

REMIND_EVERY = 60.0  # seconds between log lines while the disk stays full
# New data waits while less than this is free (plus what the WAL holds: a checkpoint may grow
# the database by that much).  One turn stores at most a few MB, and the WAL is checkpointed
# every second, so this leaves the checkpoint and the bookkeeping room to spare.
HEADROOM_BYTES = 32 << 20
RESERVE_BYTES = 8 << 20  # kept in the data folder while space allows (see the module's text)
RESERVE_NAME = "space.reserve"
# Free space beyond the headroom that ends the state: it must not flap as batches come and go.
CLEAR_BYTES = 16 << 20


def is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.Error):
        return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_FULL
    return isinstance(exc, OSError) and exc.errno == errno.ENOSPC


class DiskSpace:
    """The state (``full_since``), the headroom check and the reserve of one data folder; read by the
    checkpointer thread too (``tight``, ``give_back``), changed only on the agent's loop."""

    def __init__(self, path: Path, wal: Path):
        self.path = path
        self.wal = wal  # the journal's -wal file
        self.reserve = path / RESERVE_NAME
        self.full_since: float | None = None  # time.monotonic()
        self.refused = 0  # writes refused while full
        self._logged = 0.0
        self._no_reserve = False  # making one failed (a quota, say): tried again only when space returns
        self._short = False  # low() as ``check`` found it before this turn

    def start(self) -> None:
        """Before the journal opens: short of space, the reserve goes back (the journal needs some to
        open, read-only as it will be)."""
        if self.low():
            self.give_back()

    def check(self) -> None:
        """Each second: the state begins or ends without a write waiting on it, and a reserve is made
        (after a start, or again) while space allows."""
        self._short = self.low()  # the turn's verdict: ``refuses`` reads it instead of a statvfs a message
        if not self._short and not self._no_reserve and _size(self.reserve) < RESERVE_BYTES \
                and _free(self.path) >= self._clear_at():
            self._keep_reserve()

    def describe(self) -> str:
        return (f"disk full: {_free(self.path) / 2 ** 20:.1f} MB free at {self.path} (new data is stored again "
                f"once {self._clear_at() / 2 ** 20:.0f} MB are free)")

    @property
    def state(self) -> str | None:
        """What readers are told (ping, the CLI, the app's status bar): None while new data is stored."""
        return None if self.full_since is None else self.describe()

    def refuses(self, msg: dict) -> str | None:
        """The text to refuse ``msg`` with if it brings new data or changes while space is short; None
        if it goes on (queries that only read, ``READ_OPS``, and a trainer's heartbeats, hello and
        finish: its loss counters, floor and status are what a full disk must not lose)."""
        if (msg["t"] == "q" and msg.get("op") in READ_OPS) or msg["t"] not in ("rec", "q") \
                or not (self._short or self.full_since is not None):
            return None
        text = self._refused(1)
        if msg["t"] == "rec":
            text += f"; run {msg['run']} rank {msg['rank']}: the trainer keeps these records and sends them again"
        return text

    def low(self) -> bool:
        """Whether new data must wait.  Begins the state below the headroom; ends it (the reserve made
        again first) once the headroom and CLEAR_BYTES more are free.  A statvfs and a stat: a few µs."""
        free = _free(self.path)
        if self.full_since is None:
            if free >= HEADROOM_BYTES + _size(self.wal):
                return False
            self._refused(0)
            return True
        if free < self._clear_at():
            return True
        self._keep_reserve()
        log.warning("space returned at %s after %.0f s: storing again (%d writes were refused; trainers "
                    "send theirs again)", self.path, time.monotonic() - self.full_since, self.refused)
        self.full_since = None
        self.refused = 0
        self._logged = 0.0
        return False

    def failed(self, writes: int = 1) -> str:
        """A write found no space at all (another program filled the disk): the reserve goes back, for
        the checkpoint and the bookkeeping; the text to answer the write with."""
        self.give_back()
        return self._refused(writes)

    def tight(self) -> bool:
        """Whether the WAL should be truncated (its space given back) rather than only copied back."""
        return self.full_since is not None or _free(self.path) < 2 * HEADROOM_BYTES + _size(self.wal)

    def truncate_wal(self, con: sqlite3.Connection) -> None:
        """Copy the WAL back and truncate it, so its space goes back to the data; on the agent's own
        connection, between turns (on another one, TRUNCATE and the loop's transactions wait on each
        other).  One that finds the disk full gives the reserve back and tries again."""
        try:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            if not is_disk_full(exc) or not self.give_back():
                raise
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def give_back(self) -> bool:
        """Free the reserve; whether there was one."""
        try:
            self.reserve.unlink()
        except FileNotFoundError:
            return False
        log.warning("space is short at %s: the agent's %d MB reserve was freed for its journal", self.path,
                    RESERVE_BYTES >> 20)
        return True

    def _refused(self, writes: int) -> str:
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

    def _clear_at(self) -> int:
        """Free bytes that end the state: the headroom, CLEAR_BYTES more, and the reserve if it is to be made."""
        missing = 0 if _size(self.reserve) >= RESERVE_BYTES else RESERVE_BYTES
        return HEADROOM_BYTES + _size(self.wal) + CLEAR_BYTES + missing

    def _keep_reserve(self) -> None:
        if _size(self.reserve) >= RESERVE_BYTES:
            return
        self._no_reserve = False
        try:
            fd = os.open(self.reserve, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.posix_fallocate(fd, 0, RESERVE_BYTES)
            finally:
                os.close(fd)
        except OSError as exc:  # no room after all, a quota, a link in its place: no reserve, said once
            self.reserve.unlink(missing_ok=True)
            self._no_reserve = True
            log.warning("no space reserve at %s (%s): a full disk may stop the agent from starting", self.path, exc)


def _free(path: Path) -> int:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0

"""One way to open a SQLite file, for the node's journal and the app's store alike.

WAL, so readers never block the writer; ``synchronous=NORMAL``, so a committed transaction
survives the process being killed (a power cut may lose the last moments); a busy timeout set
first, because several connections (the agent's checkpointer, the app's links and its UI) open
the same file at once; and explicit transactions only, so each caller decides what is atomic.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from pilothouse.security import (
    check_folders,
    check_owned,
    owned_file,
)

# sqlite-utils imports pandas where it is installed (as it is beside most trainers), only to map its
# Timestamp type, which we never store; pandas brings pyarrow, and the two cost every agent and app
# 67 MB of memory and 0.25 s at start.  Unless the process has pandas already, it is kept out.
if "pandas" in sys.modules:
    import sqlite_utils
else:
    sys.modules["pandas"] = None  # type: ignore[assignment]  # `import pandas` raises ImportError
    try:
        import sqlite_utils
    finally:
        del sys.modules["pandas"]

BUSY_MS = 5000
ROWS_PER_STATEMENT = 512  # rows one INSERT carries at most (its remainder goes in power-of-two pieces)


def open_db(path: str | Path) -> sqlite_utils.Database:
    """The file is 0600 before SQLite first opens it; its -wal and -shm files take the same mode.
    Its folder is the user's and only theirs to write (SQLite makes the -wal and -shm files there by
    name), and so are the file and its -wal and -shm, never links: a stranger's planted file or
    folder is refused (pilothouse.security), not used."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder = Path(os.path.realpath(path.parent))
    check_owned(folder, os.stat(folder))
    check_folders(folder.parent, path)
    os.close(owned_file(path, os.O_RDWR | os.O_CREAT))
    for file in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            os.close(owned_file(file, os.O_RDONLY))
    db = sqlite_utils.Database(path)
    db.conn.isolation_level = None
    db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
    _wal(db)
    db.execute("PRAGMA synchronous=NORMAL")
    return db


def _wal(db: sqlite_utils.Database) -> None:
    """Switch a new file to WAL.  Two connections doing it at once can get "database is locked"
    without the busy handler being called (seen when the app's link and its UI open a new store
    together), so the switch is retried for as long as the busy timeout."""
    deadline = time.monotonic() + BUSY_MS / 1000
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


@contextlib.contextmanager
def transaction(db: sqlite_utils.Database) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on an exception: the write lock is taken at the start,
    so two connections never deadlock upgrading a read to a write."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def insert_rows(conn: sqlite3.Connection, head: str, rows: Sequence[Sequence]) -> None:
    """``executemany(head + " VALUES (?, ...)", rows)`` in a few multi-row statements.

    Why: the sqlite3 module lets go of the GIL around each row's step, and takes it back only once
    the thread holding it lets go, up to the switch interval (5 ms) later: in a process with other
    busy threads (the app's UI and links) a write of thousands of rows waited seconds for the GIL,
    not for SQLite.  One statement per ROWS_PER_STATEMENT rows waits a few times per write.  The
    remainder is split in powers of two, so the statement texts are few and stay prepared."""
    if not rows:
        return
    width = len(rows[0])
    one = "(" + ", ".join("?" * width) + ")"
    at = 0
    while at < len(rows):
        size = min(ROWS_PER_STATEMENT, 1 << ((len(rows) - at).bit_length() - 1))
        conn.execute(f"{head} VALUES {', '.join([one] * size)}", [v for row in rows[at:at + size] for v in row])
        at += size

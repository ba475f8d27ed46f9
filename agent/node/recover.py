"""A damaged journal: said clearly when a read meets it, and salvaged into a new one on request.

``pilothouse agent --recover`` copies every row SQLite can still read, table by table, into a
fresh journal; where a range of rows cannot be read it narrows the range down to single rows, so
one bad page costs the rows on that page, not the run.  The damaged file is kept beside it.  The
tiers are not copied: the agent builds them again from the salvaged points, between turns.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from pilothouse.db import open_db
from pilothouse.node.journal import Store

# Tables in the order they are copied: the journal last (the biggest; the others say what it holds).
TABLES = ("meta", "runs", "commands", "streams", "last_values", "journal")
_BATCH = 4096


def is_corrupt(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.DatabaseError) and \
        (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def corrupt_message(path: Path) -> str:
    return (f"the journal {path} is damaged (SQLite: database disk image is malformed): stop the agent and run "
            f"`pilothouse agent --recover --data {path.parent}` to copy what can be read into a new journal")


@dataclass
class Salvage:
    kept: dict[str, int] = field(default_factory=dict)  # table -> rows copied
    lost: dict[str, int] = field(default_factory=dict)  # table -> rowids that could not be read
    damaged: Path | None = None  # where the old file now lies


def recover(path: Path) -> Salvage:
    """Copy what can be read of the journal at ``path`` into a new one at ``path``."""
    fresh = path.with_name(path.name + ".recovering")
    for leftover in _files(fresh):
        leftover.unlink(missing_ok=True)
    Store(fresh).db.close()
    salvage = Salvage()
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    dst = open_db(fresh)
    try:
        for table in TABLES:
            kept, lost = _copy(src, dst.conn, table)
            salvage.kept[table], salvage.lost[table] = kept, lost
        dst.execute("INSERT OR IGNORE INTO tier_marks SELECT id, 0, NULL FROM runs")  # tiers built again, between turns
    finally:
        src.close()
        dst.close()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    salvage.damaged = path.with_name(f"{path.name}.damaged-{stamp}")
    for old, suffix in zip(_files(path), ("", "-wal", "-shm")):
        if old.exists():
            shutil.move(old, salvage.damaged.with_name(salvage.damaged.name + suffix))
    for new, suffix in zip(_files(fresh), ("", "-wal", "-shm")):
        if new.exists():
            new.rename(path.with_name(path.name + suffix))
    return salvage


def _files(path: Path) -> tuple[Path, Path, Path]:
    return path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")


def _copy(src: sqlite3.Connection, dst: sqlite3.Connection, table: str) -> tuple[int, int]:
    try:
        have = [r[1] for r in src.execute(f"PRAGMA table_info({table})")]
        top = src.execute(f"SELECT MAX(rowid) FROM {table}").fetchone()[0] or 0
    except sqlite3.DatabaseError:
        return 0, 0  # the table's root is unreadable (or it never existed): nothing to copy
    want = [r[1] for r in dst.execute(f"PRAGMA table_info({table})")]
    cols = [c for c in want if c in have]
    if not cols:
        return 0, 0
    select = f"SELECT {', '.join(cols)} FROM {table} WHERE rowid BETWEEN ? AND ?"
    insert = f"INSERT OR REPLACE INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    kept = lost = 0
    dst.execute("BEGIN")
    for lo in range(1, top + 1, _BATCH):
        rows, bad = _readable(src, select, lo, min(lo + _BATCH - 1, top))
        dst.executemany(insert, rows)
        kept += len(rows)
        lost += bad
    dst.execute("COMMIT")
    return kept, lost


def _readable(src: sqlite3.Connection, select: str, lo: int, hi: int) -> tuple[list, int]:
    """Rows with rowids lo..hi that can be read, and how many rowids could not be."""
    try:
        return src.execute(select, [lo, hi]).fetchall(), 0
    except sqlite3.DatabaseError:
        if lo == hi:
            return [], 1
    mid = (lo + hi) // 2
    left, bad_left = _readable(src, select, lo, mid)
    right, bad_right = _readable(src, select, mid + 1, hi)
    return left + right, bad_left + bad_right

"""A damaged journal: said clearly when a read meets it, and salvaged into a new one on request.

``pilothouse agent --recover`` copies every row SQLite can still read, of every table the journal
has (a fixed list once left the alert rules and the key-metric choices behind, without a word),
into a fresh journal; where a range of rows cannot be read it narrows the range down to single
rows, so one bad page costs the rows on that page, not the run.  What it could not keep is said:
each table's unreadable rows, each table it could not copy at all, and each run's points against
what the run's counters said it held; a run's lost points also go into its LOST count, with an
event, as a trainer's dropped records do.  The damaged file is kept beside it.  Tables the agent
derives from the journal (tiers, the rollout search index) are not copied: it builds them again.

It takes the data folder's lock (``node.data_lock``) for its whole run: beside a live agent, on any
port, it would set the journal aside under that agent, and every point acked afterwards with it.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from pilothouse.node.data_lock import DataLock
from pilothouse.node.journal import Store
from pilothouse.store.db import open_db
from pilothouse.wire.entries import KIND_METRIC

# Built again by the agent from the journal's rows, between turns: not copied.
REBUILT = ("tiers", "tier_marks", "rollout_queue", "rollout_batches", "rollout_text")
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
    dropped: dict[str, str] = field(default_factory=dict)  # table -> why none of it could be copied
    points: dict[str, tuple[int, int]] = field(default_factory=dict)  # run -> (points kept, points it had)
    damaged: Path | None = None  # where the old file now lies


def recover(path: Path) -> Salvage:
    """Copy what can be read of the journal at ``path`` into a new one at ``path``; DataLocked while an
    agent holds its folder."""
    lock = DataLock(path.parent, "--recover")
    try:
        return _recover(path)
    finally:
        lock.release()


def _recover(path: Path) -> Salvage:
    fresh = path.with_name(path.name + ".recovering")
    for leftover in _files(fresh):
        leftover.unlink(missing_ok=True)
    Store(fresh).db.close()
    salvage = Salvage()
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    dst = open_db(fresh)
    try:
        for table, sql in _tables(src):
            try:
                salvage.kept[table], salvage.lost[table] = _copy(src, dst.conn, table, sql)
            except sqlite3.DatabaseError as exc:  # its root page, or its columns, cannot be read
                salvage.dropped[table] = str(exc)
        dst.execute("INSERT OR IGNORE INTO tier_marks SELECT id, 0, NULL FROM runs")  # tiers built again, between turns
    finally:
        src.close()
        dst.close()
    salvage.points = _count_lost_points(fresh)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    salvage.damaged = path.with_name(f"{path.name}.damaged-{stamp}")
    for old, suffix in zip(_files(path), ("", "-wal", "-shm")):
        if old.exists():
            shutil.move(old, salvage.damaged.with_name(salvage.damaged.name + suffix))
    for new, suffix in zip(_files(fresh), ("", "-wal", "-shm")):
        if new.exists():
            new.rename(path.with_name(path.name + suffix))
    return salvage


def _tables(src: sqlite3.Connection) -> list[tuple[str, str]]:
    """Every table of the journal to copy, with its CREATE statement; the journal last (the biggest;
    the others say what it holds)."""
    rows = src.execute("SELECT name, sql FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'").fetchall()
    keep = [(name, sql) for name, sql in rows if name not in REBUILT and not name.startswith("rollout_text_")]
    return sorted(keep, key=lambda row: row[0] == "journal")


def _count_lost_points(path: Path) -> dict[str, tuple[int, int]]:
    """Each run's metric points now held against its ``points`` counter from before (kept as entries
    were committed); a shortfall is added to the run's LOST count, with a ``loss`` event."""
    store = Store(path)
    try:
        held = dict(store.db.execute("SELECT run, SUM(n) FROM journal WHERE kind=? GROUP BY run", [KIND_METRIC]))
        said = store.db.execute("SELECT id, points FROM runs WHERE points IS NOT NULL AND removing IS NULL").fetchall()
        out = {}
        store.begin()
        for run, had in said:
            kept = held.get(run, 0)
            out[run] = (kept, had)
            if kept < had:  # its points and bytes are counted again from its rows at commit
                store.db.execute("UPDATE runs SET lost_records=COALESCE(lost_records, 0)+?, bytes=NULL WHERE id=?",
                                 [had - kept, run])
                store.event(run, "loss", {"records": had - kept, "points": had - kept, "detail": (
                    f"{had - kept} of its {had} points could not be read from the damaged journal "
                    "(pilothouse agent --recover); LOST counts each as a record")})
        store.commit()
    finally:
        store.db.close()
    return out


def _files(path: Path) -> tuple[Path, Path, Path]:
    return path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")


def _copy(src: sqlite3.Connection, dst: sqlite3.Connection, table: str, sql: str) -> tuple[int, int]:
    """(rows kept, rowids unreadable); the columns both journals have.  A table the fresh journal lacks
    (one a desk of the agent makes, or a newer version's) is made as it was, with its indexes."""
    name = '"' + table.replace('"', '""') + '"'
    top = src.execute(f"SELECT MAX(rowid) FROM {name}").fetchone()[0] or 0  # raises if its root is unreadable
    have = [r[1] for r in src.execute(f"PRAGMA table_info({name})")]
    want = [r[1] for r in dst.execute(f"PRAGMA table_info({name})")]
    if not want:
        dst.execute(sql)
        for (index,) in src.execute("SELECT sql FROM sqlite_master WHERE type='index' AND tbl_name=? "
                                    "AND sql IS NOT NULL", [table]):
            dst.execute(index)
        want = have
    both = [c for c in want if c in have]
    cols = ", ".join('"' + c.replace('"', '""') + '"' for c in both)
    select = f"SELECT {cols} FROM {name} WHERE rowid BETWEEN ? AND ?"
    insert = f"INSERT OR REPLACE INTO {name} ({cols}) VALUES ({', '.join('?' * len(both))})"
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

"""A journal's steering commands: the table object ``Store.commands``.

Each command the agent forwards to a trainer is a row, from ``add`` (pending) to its ``answer``
(applied, rejected, scheduled...); the audit trail a user reads lives in the journal as events
(``node.command_desk``).  Every write is in the journal's current transaction.
"""

from __future__ import annotations

from pilothouse.store.db import sqlite_utils
from pilothouse.wire.entries import unpack_blob
from pilothouse.wire.messages import pack


class Commands:
    """The ``commands`` table of one journal connection."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db

    def add(self, cid: str, run: str, cmd: str, args: dict, who: dict, now: float) -> None:
        self.db.execute("INSERT INTO commands VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                        [cid, run, cmd, pack(args), pack(who), now, "pending", None, "", pack({}), now])

    def get(self, cid: str) -> dict | None:
        """The command's row, its args, sender and applied values unpacked; None if there is none."""
        rows = list(self.db.query("SELECT * FROM commands WHERE cid=?", [cid]))
        if not rows:
            return None
        row = rows[0]
        for key in ("args", "who", "applied"):
            row[key] = unpack_blob(row[key])
        return row

    def unanswered(self, run: str) -> list[dict]:
        """Sent to the trainer but not yet answered for good (scheduled ones still count)."""
        return [self.get(cid) for (cid,) in self.db.execute(
            "SELECT cid FROM commands WHERE run=? AND state IN ('pending', 'scheduled') ORDER BY sent", [run])]

    def answer(self, cid: str, state: str, step: int | None, detail: str, applied: dict, now: float) -> None:
        self.db.execute("UPDATE commands SET state=?, step=?, detail=?, applied=?, updated=? WHERE cid=?",
                        [state, step, detail, pack(applied), now, cid])

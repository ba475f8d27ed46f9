"""Removing runs from the agent (``pilothouse rm`` and ``gc``) without stalling its loop.

A removal is marked in one transaction: from then on the run is gone from ``runs``, from reads and
from the feed, and its trainers are refused with the reason.  Its rows are deleted afterwards in
bounded batches, one per loop turn between the turns that take trainers' data, so removing a run
of millions of points never holds ingest for long; an agent stopped midway goes on at its next
start, the run hidden all along.  ``$PILOTHOUSE_REMOVE_ROWS`` sets the rows per batch (tests make
a removal span many turns with it).
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any

from pilothouse.event_text import sender
from pilothouse.node.alert_desk import AlertDesk
from pilothouse.node.command_desk import CommandDesk
from pilothouse.node.journal import Store
from pilothouse.node.liveness import Liveness, Sessions, process_gone
from pilothouse.wire.watched import USER_KINDS

log = logging.getLogger("pilothouse.agent")

REMOVE_ROWS = int(os.environ.get("PILOTHOUSE_REMOVE_ROWS", "2000"))  # journal rows deleted per batch, at most
REMOVE_BYTES = 256 * 1024  # and about this much data: a batch holds the loop for about 8 ms (docs/cli.md, "pilothouse rm")
MAX_RUNS = 10_000  # runs one request may name
LIVE = ("running", "paused")


class Retention:
    """The ``remove`` and ``gc`` ops, and the batches that delete what they hid."""

    def __init__(self, store: Store, liveness: Liveness, sessions: Sessions, commands: CommandDesk,
                 alerts: AlertDesk, system_run: str, host: str):
        self.store = store
        self.liveness = liveness
        self.sessions = sessions
        self.commands = commands
        self.alerts = alerts
        self.system_run = system_run
        self.host = host
        self._gone: set[tuple[str, str]] = set()  # (run, session): processes of a removed run, refused
        self._held_until = 0.0  # time.monotonic() before which no batch is tried
        for run in store.removing:
            liveness.forget(run)
        if store.removing:
            log.info("resuming the removal of %d run(s): %s", len(store.removing), ", ".join(store.removing))

    def pending(self) -> bool:
        """Whether a batch is due now."""
        return bool(self.store.removing) and time.monotonic() >= self._held_until

    def hold(self, seconds: float = 1.0) -> None:
        self._held_until = time.monotonic() + seconds

    def step(self) -> None:
        """One bounded batch of the oldest removal, in the caller's transaction."""
        done = self.store.remove_some(REMOVE_ROWS, REMOVE_BYTES)
        if done is not None:
            log.info("run %s is removed: every row of it is deleted", done)

    def refusal(self, msg: dict) -> str | None:
        """Why a trainer's message is not taken: its run is being removed, or was while it ran."""
        run = msg["run"]
        if run in self.store.removing or (run, msg.get("session", "")) in self._gone:
            return (f"run {run} was removed from this agent (pilothouse rm): nothing more of it is stored; "
                    "log to a new run")
        return None

    # --- ops ---------------------------------------------------------------------------------

    def op_remove(self, args: dict) -> list[dict]:
        """Remove the runs ``runs`` names (ids or names), all or none: an unknown run, or a live one
        without ``force``, refuses the whole request.  ``plan``: only say what would go."""
        refs = args.get("runs")
        if not isinstance(refs, list) or not 0 < len(refs) <= MAX_RUNS or not all(isinstance(r, str) for r in refs):
            raise TypeError(f"runs must be a list of 1 to {MAX_RUNS} run ids or names")
        force, plan = _flag(args, "force"), _flag(args, "plan")
        rows = {}
        for ref in refs:
            run = self.store.resolve(ref, live_wins=False)  # a removal names exactly one run
            rows[run] = self.store.run_row(run)
        for row in rows.values():
            why = self._kept(row, force)
            if why is not None:
                raise ValueError(why)
        if not plan:
            now = time.time()
            for row in rows.values():
                self._hide(row, args.get("who"), now)
        return [self._summary(row) for row in rows.values()]

    def op_gc(self, args: dict) -> dict:
        """Which runs to remove: those that ended ``older_than`` seconds ago or more, and the oldest
        ended ones until the journal's data is at most ``max_size`` bytes.  Changes nothing: the
        client confirms, then asks ``remove``, which checks again."""
        older, size = args.get("older_than"), args.get("max_size")
        if older is not None and (isinstance(older, bool) or not isinstance(older, (int, float))
                                  or not math.isfinite(older) or older < 0):
            raise ValueError("older_than must be a number of seconds >= 0")
        if size is not None and (type(size) is not int or size < 0):
            raise ValueError("max_size must be a number of bytes >= 0")
        if older is None and size is None:
            raise ValueError("say which runs: older_than, max_size or both")
        now = time.time()
        rows = self.store.retention_rows()
        ended = sorted(((at, row) for row in rows if (at := self._ended_at(row)) is not None), key=lambda e: e[0])
        chosen = {row["id"]: row for at, row in ended if older is not None and now - at >= older}
        total = sum(row["bytes"] or 0 for row in rows)
        left = total - sum(row["bytes"] or 0 for row in chosen.values())
        for _, row in ended:
            if size is None or left <= size:
                break
            if row["id"] not in chosen:
                chosen[row["id"]] = row
                left -= row["bytes"] or 0
        return {"runs": [self._summary(row) for row in chosen.values()], "total": total, "left": left}

    # --- helpers -----------------------------------------------------------------------------

    def _hide(self, row: dict, who: Any, now: float) -> None:
        run = row["id"]
        summary = self._summary(row)
        self.store.hide(run, now)
        self.liveness.forget(run)
        self.commands.close(run, f"run {run} was removed", now)
        self.alerts.forget(run)
        self._gone.update((run, owner.id) for (owned, _), owner in self.sessions.owners.items() if owned == run)
        self.store.event(self.system_run, "removed", {"run": run, "project": row["project"], "name": row["name"],
                                                      "points": summary["points"], "bytes": summary["bytes"],
                                                      "who": who})
        log.info("run %s (%s/%s) removed by %s: %d points, %d bytes; its rows are deleted in the background",
                 run, row["project"], row["name"], sender(who), summary["points"], summary["bytes"])

    def _kept(self, row: dict, force: bool) -> str | None:
        """Why ``row`` may not be removed, or None."""
        run, status = row["id"], self._status(row)
        if run == self.system_run:
            return (f"run {run} holds this agent's own host and GPU readings, written every second: it cannot "
                    "be removed while the agent runs")
        if force or status not in LIVE:
            return None
        live = self.liveness.get(run)
        host, pid, started = (live.host, live.pid, live.pid_started) if live is not None else \
            (row["host"], row["pid"], row["pid_started"])
        if host == self.host and process_gone(pid, started):
            return None
        return (f"run {run} ({row['project']}/{row['name']}) is {status}, its process (pid {pid} on {host}) alive: "
                "stop it first, or pass --force to remove it anyway")

    def _status(self, row: dict) -> str:
        live = self.liveness.get(row["id"])
        return live.status if live is not None and row["kind"] in USER_KINDS else row["status"]

    def _ended_at(self, row: dict) -> float | None:
        """When the run ended (a stale one: when it was last heard); None while it runs."""
        status = self._status(row)
        if row["id"] == self.system_run or status not in ("finished", "crashed", "stale"):
            return None
        ended = row["ended"] if status != "stale" else None
        return ended or row["last_seen"] or row["created"]

    def _summary(self, row: dict) -> dict:
        return {"id": row["id"], "project": row["project"], "name": row["name"], "kind": row["kind"],
                "status": self._status(row), "points": row["points"] or 0, "bytes": row["bytes"] or 0,
                "ended": self._ended_at(row)}


def _flag(args: dict, key: str) -> bool:
    value = args.get(key, False)
    if type(value) is not bool:
        raise TypeError(f"{key} must be true or false")
    return value

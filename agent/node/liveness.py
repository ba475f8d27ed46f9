"""Which trainer processes are alive: heartbeats in, verdicts out (running, paused, stale, crashed).

A run silent for ``stale_after`` seconds is crashed if its process is gone from this host, else
stale; a heartbeat brings it back.  Only a process on this host can be checked: elsewhere silence
means stale.  Every change of status is written to the journal by the caller's transaction.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import psutil

from pilothouse.node.journal import Resume, Store
from pilothouse.wire.watched import USER_KINDS, WATCHED

SILENCED = ("running", "paused", "stale")  # statuses a silence can change


@dataclass
class Trainer:
    """What the agent knows of one trainer process between heartbeats."""

    host: str
    pid: int
    pid_started: float | None
    seen: float
    status: str = "running"
    watched: bool = False  # followed from files: the watcher's exit says nothing of the training's


class Liveness:
    def __init__(self, store: Store, host: str, stale_after: float):
        self.store = store
        self.host = host
        self.stale_after = stale_after
        self.runs: dict[str, Trainer] = {}
        now = time.time()  # after a restart, runs that were running get the usual grace period, not a verdict
        marks = ", ".join("?" * len(USER_KINDS)), ", ".join("?" * len(SILENCED))
        for row in store.db.query("SELECT id, host, pid, pid_started, status, kind FROM runs WHERE kind IN "
                                  f"({marks[0]}) AND status IN ({marks[1]})", USER_KINDS + SILENCED):
            self.runs[row["id"]] = Trainer(row["host"], row["pid"], row["pid_started"], now, row["status"],
                                           row["kind"] == WATCHED)

    def get(self, run: str) -> Trainer | None:
        return self.runs.get(run)

    def __iter__(self) -> Iterator[tuple[str, Trainer]]:
        return iter(self.runs.items())

    def status(self, run: str) -> str:
        """The live status, or the journal's for a run no process has spoken for since the start."""
        live = self.runs.get(run)
        return live.status if live is not None else self.store.run_row(run)["status"]

    def started(self, run: str, host: str, pid: int, pid_started: float | None, watched: bool = False) -> None:
        """A (new) process speaks for the run."""
        self.runs[run] = Trainer(host, pid, pid_started, time.time(), watched=watched)

    def forget(self, run: str) -> None:
        """A removed run: no verdict is made on it any more."""
        self.runs.pop(run, None)

    def heard(self, run: str, now: float) -> None:
        live = self.runs.get(run)
        if live is None:
            row = self.store.run_row(run)
            live = self.runs[run] = Trainer(row["host"], row["pid"], row["pid_started"], now, row["status"],
                                            row["kind"] == WATCHED)
        live.seen = now
        if live.status in ("stale", "crashed"):
            live.status = "running"
            self.store.set_status(run, "running", now, reason="heartbeat resumed")

    def set_status(self, run: str, status: str, now: float, reason: str) -> None:
        live = self.runs.get(run)
        if live is not None:
            live.status = status
        self.store.set_status(run, status, now, reason=reason)

    def paused(self, run: str, paused: bool, now: float) -> None:
        """A heartbeat says whether the trainer holds at a pause; a running or paused run follows it."""
        live = self.runs.get(run)
        if live is not None and live.status in ("running", "paused") and (live.status == "paused") != paused:
            self.set_status(run, "paused" if paused else "running", now, "heartbeat")

    def finished(self, run: str, status: str = "finished") -> bool:
        """Mark the run's process ended (finished, or crashed as it said); False if it already was."""
        live = self.runs.get(run)
        if live is not None and live.status in ("finished", "crashed"):
            return False
        if live is not None:
            live.status = status
        return True

    def verdicts(self, now: float) -> list[tuple[str, str, float]]:
        """(run, new status, seconds silent) for every run whose silence changed its status."""
        changed = []
        for run, live in self.runs.items():
            if live.status not in SILENCED or now - live.seen < self.stale_after:
                continue
            verdict = "crashed" if not live.watched and self._process_gone(live) else "stale"
            if verdict != live.status:
                live.status = verdict
                changed.append((run, verdict, now - live.seen))
        return changed

    def _process_gone(self, live: Trainer) -> bool:
        return live.host == self.host and process_gone(live.pid, live.pid_started)


def process_gone(pid: int | None, started: float | None) -> bool:
    """Whether a process of this host ended (or its pid now names another one)."""
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        reused = isinstance(started, (int, float)) and abs(proc.create_time() - started) > 1.0
        return reused or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except (psutil.Error, ValueError, TypeError, OverflowError):
        return False


HELLO = "hello"  # Sessions.speak: open the run first


@dataclass
class Session:
    """The trainer process that speaks for one rank of a run (its Run object's session id)."""

    id: str
    pid: int | None
    started: float | None
    local: bool  # on this host, so its death can be seen
    seen: float  # time.monotonic() of its last message


def ended_as(resume: Resume, host: str) -> str:
    """How the attempt a resume follows ended: its status, or, where that still says it was live,
    crashed when its process is gone from this host, else stale (it went silent)."""
    if resume.status not in ("running", "paused"):
        return resume.status
    return "crashed" if resume.host == host and process_gone(resume.pid, resume.pid_started) else "stale"


class Sessions:
    """A run belongs to its process: once a trainer opens (run, rank), records, heartbeats and
    acknowledgements for it are taken only from that session while it lives; a new process takes
    over (a resume) once the old one is gone or silent for ``alive_for`` seconds."""

    def __init__(self, host: str, alive_for: float):
        self.host = host
        self.alive_for = alive_for
        self.owners: dict[tuple[str, int], Session] = {}

    def speak(self, run: str, rank: int, session: str, hello: dict | None = None) -> Session | str | None:
        """Note that ``session`` speaks for (run, rank).  None: it is (now) the owner; a Session: the
        live owner it must not displace; ``HELLO``: it must open the run first (only a hello, which
        names the process, takes a run over; after an agent restart every trainer says it again)."""
        now = time.monotonic()
        owner = self.owners.get((run, rank))
        if owner is not None and owner.id == session:
            owner.seen = now
            return None
        if owner is not None and now - owner.seen < self.alive_for \
                and not (owner.local and process_gone(owner.pid, owner.started)):
            return owner
        if hello is None:
            return HELLO
        self.owners[(run, rank)] = Session(session, hello.get("pid"), hello.get("pid_started"),
                                           hello.get("host") == self.host, now)
        return None

    def open_ranks(self, run: str) -> set[int]:
        return {rank for (name, rank) in self.owners if name == run}

    def put_back(self, run: str, rank: int, owner: Session | None) -> None:
        """Undo a ``speak`` whose hello was then refused: (run, rank) belongs to whom it did before."""
        if owner is None:
            self.owners.pop((run, rank), None)
        else:
            self.owners[(run, rank)] = owner

    def release(self, run: str, rank: int, session: str) -> None:
        owner = self.owners.get((run, rank))
        if owner is not None and owner.id == session:
            del self.owners[(run, rank)]

"""Which job a run belongs to: the proof a process must show to speak for a run another holds.

A run is opened by a job's rank 0 with a secret (``Run.token``) that every rank of the job knows
(torch.distributed shares it with the run id; other launchers pass it on).  The agent keeps only
its SHA-256, in the journal, so it outlives an agent restart.  The rule is the one rank 0 has
always had, applied to the run as a whole: while the run is live (a rank's process speaks for
it, or, after an agent restart, the journal says it ran and its process is not known to be
gone), a hello is welcomed only with the run's token, for any rank; once it is not live, a new
process may continue it (a resume) and its token becomes the run's.  So another process of the
same user can neither join a live run as a rank nor take it over when the agent restarts, and
every rank it could speak for answers only to its own job.
"""

from __future__ import annotations

import hashlib
import hmac
import time

import sqlite_utils

from pilothouse.node.liveness import Liveness, Session, Sessions, process_gone


def proof(token: str) -> str:
    return hashlib.sha256(token.encode("ascii")).hexdigest()


class RunOwners:
    """The journal's ``run_owners`` table (run -> proof; its rows go with the run's) and the live
    check that decides a takeover."""

    def __init__(self, db: sqlite_utils.Database, sessions: Sessions, liveness: Liveness, host: str):
        self.db = db
        self.sessions = sessions
        self.liveness = liveness
        self.host = host

    def admits(self, run: str, token: str) -> bool:
        """Whether ``token`` is the run's (or the run has no proof yet: a new run)."""
        row = self.db.execute("SELECT proof FROM run_owners WHERE run=?", [run]).fetchone()
        return row is None or hmac.compare_digest(row[0], proof(token))

    def claim(self, run: str, token: str) -> None:
        """The run is (now) this job's: a new run, or one continued after its job ended."""
        self.db.execute("INSERT OR REPLACE INTO run_owners (run, proof) VALUES (?, ?)", [run, proof(token)])

    def live_holder(self, run: str, asking: str) -> str | None:
        """Who keeps the run live, in words (None: no one, so it may be continued): a rank's process
        that speaks for it now (other than the session ``asking``), or the process the journal
        names, until it is silent or gone."""
        now = time.monotonic()
        for (name, rank), session in self.sessions.owners.items():
            if name == run and session.id != asking and self._alive(session, now):
                return f"rank {rank} (pid {session.pid or '?'})"
        live = self.liveness.get(run)
        if live is None or live.status not in ("running", "paused"):
            return None
        if time.time() - live.seen >= self.liveness.stale_after:
            return None
        if live.host == self.host and process_gone(live.pid, live.pid_started):
            return None
        return f"pid {live.pid} on {live.host}"

    def _alive(self, session: Session, now: float) -> bool:
        return now - session.seen < self.sessions.alive_for and \
            not (session.local and process_gone(session.pid, session.started))

"""A trainer's loss counters, kept until a commit holds them.

Heartbeats and finish carry what the trainer's bounded buffer dropped (records, points) and its
floor (nothing below it is held any more).  On a full disk the write of them fails with the rest of
the turn, and a trainer that then finishes and exits never says them again: the run would show
LOST 0 for points that are gone.  So they are kept here, in memory, and written again before
every commit until one succeeds.  Both writes are idempotent (the counters are maxima, a floor
already accounted is a no-op), so writing them again is harmless.
"""

from __future__ import annotations

from pilothouse.node.journal import Store, Stream


class UnsavedLosses:
    def __init__(self) -> None:
        self._runs: dict[str, tuple[float, int, int]] = {}  # run -> (heard at, dropped records, dropped points)
        self._floors: dict[Stream, int] = {}

    def heard(self, stream: Stream, now: float, records: int, points: int, floor: int) -> None:
        run = stream[0]
        _, had_records, had_points = self._runs.get(run, (now, 0, 0))
        self._runs[run] = (now, max(records, had_records), max(points, had_points))
        if floor > self._floors.get(stream, 0):
            self._floors[stream] = floor

    def waiting(self) -> bool:
        """Whether some were heard that no commit holds yet (the next turn commits for them)."""
        return bool(self._runs or self._floors)

    def write(self, store: Store) -> None:
        """Into the transaction about to commit (runs removed meanwhile are skipped)."""
        for run, (now, records, points) in self._runs.items():
            if store.has_run(run):
                store.touch(run, now, records, points)
        for stream, floor in self._floors.items():
            if store.has_run(stream[0]):
                store.account_floor(stream, floor)

    def saved(self) -> None:
        """A commit went through: what was heard until now is on disk."""
        self._runs.clear()
        self._floors.clear()

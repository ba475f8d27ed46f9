"""The journal's side of packing (``pilothouse.store.packing``), in the agent's spare time.

``Compactor`` gives the shared packer what is the journal's: streams of (run, metric, rank), packed
entries that say where they begin (``first_id``: a reader whose page ends inside one reads its
part), each run's bytes in ``runs.bytes``, and the agent's loop: a step in the transaction between
the turns that take trainers' data, as retention's, so ingest never waits for long.  A run whose
tiers are being built is left alone until they are (the builder reads each row once), a run being
removed is forgotten, and a step undone (a full disk) counts every stream again a second later.
Every (run, metric) is counted once at start, a few at a time; then the journal's commits tell it
what was added.
"""

from __future__ import annotations

import time

from pilothouse.node.journal import Store
from pilothouse.node.journal_schema import ENTRY_OVERHEAD
from pilothouse.store.packing import Layout, Packer
from pilothouse.wire.entries import Entry

LAYOUT = Layout("journal", owner=(), stream=("run", "metric", "rank"), first_id=True)


class Compactor:
    def __init__(self, store: Store):
        self.store = store
        self.packer = Packer(store.db, LAYOUT, self._streams(), self._account)
        self._held_until = 0.0

    def _streams(self) -> list[tuple[str, str]]:
        return self.store.db.execute("SELECT run, metric FROM last_values").fetchall()

    def pending(self) -> bool:
        return (self.packer.surveying or self._packable() is not None) and time.monotonic() >= self._held_until

    def _packable(self) -> tuple | None:
        """A stream ready to pack, of a run whose tiers are not being built (see ``journal_tiers``)."""
        building = self.store.tiers.building
        return self.packer.ready(lambda key: key[0] in building)

    def failed(self) -> None:
        """The step's transaction was undone (a full disk): count again, and wait a second first."""
        self._held_until = time.monotonic() + 1.0
        self.packer.reset(self._streams())

    def added(self, entries: list[Entry]) -> None:
        """Entries just committed: a stream's count of small entries grows."""
        self.packer.added((), entries)

    def resurvey(self) -> None:
        """Entries arrived around ``added`` (an imported run): look at every stream again."""
        self.packer.resurvey(self._streams())

    def step(self) -> int:
        """One bounded piece of work in the caller's transaction; returns the entries it packed."""
        if self.packer.surveying:
            self.packer.survey()
            return 0
        key = self._packable()
        if key is None:
            return 0
        if key[0] in self.store.removing:
            self.packer.forget(lambda k: k[0] == key[0])
            return 0
        return self.packer.pack(key)

    def _account(self, key: tuple, rows: list[tuple], blob: bytes) -> None:
        """``runs.bytes`` less the joined rows and their blobs, plus the packed one."""
        freed = (len(rows) - 1) * ENTRY_OVERHEAD + sum(len(b) for r in rows for b in r[4:]) - len(blob)
        self.store.db.execute("UPDATE runs SET bytes=bytes-? WHERE id=?", [freed, key[0]])

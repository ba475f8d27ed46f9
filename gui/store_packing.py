"""The app store's side of packing (``pilothouse.store.packing``), on its writer's thread.

Why the app packs too: it keeps a followed run's entries as its agent's journal held them when they
were read live, one small entry per metric per turn of the agent, before the agent packed them.
``StorePacker`` gives the shared packer what is the app's: its entries keyed by agent, streams of
(agent, run, metric) whatever the rank, only entries at or below their agent's cursor (above it an
entry may be a packed part waiting for its rest, ``LocalStore.write_pages``) and folded into the tiers
(``LocalStore.pack_upto``), the tiers' level-0
blocks repointed at the packed entry (a zoomed-in chart reads its points from there, each attempt's
tiers included), each run's bytes in ``run_bytes``, and one transaction per step: a step undone (a
full disk) counts again.  Each run's metrics are counted once when the writer starts, a run's metrics
by index seeks, one metric at a time.
"""

from __future__ import annotations

from collections.abc import Iterator

from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.tiers import ATTEMPT
from pilothouse.store.db import transaction
from pilothouse.store.packing import Layout, Packer
from pilothouse.wire.entries import Entry

LAYOUT = Layout("entries", owner=("agent",), stream=("agent", "run", "metric"))
ROW_BYTES = 48  # what ``run_bytes`` counts for a row besides its blobs and twice its names (store_schema)


class StorePacker:
    """What of a store is worth packing, and one packing step at a time (see the module docstring)."""

    def __init__(self, store: LocalStore) -> None:
        self.store = store
        self.packer = Packer(store.db, LAYOUT, self._streams(), self._account, upto=store.pack_upto,
                             tiers=store.tiers.table, names=_names)

    def _streams(self) -> Iterator[tuple[str, str, str]]:
        """Every stored metric of every run with entries, found as the survey goes."""
        for agent, run in self.store.db.execute("SELECT agent, run FROM run_bytes").fetchall():
            for metric in self.store.metrics(agent, run):
                yield agent, run, metric

    def added(self, url: str, entries: list[Entry]) -> None:
        """Entries just written (repeats included: the counts are only a hint of where to look)."""
        self.packer.added((url,), entries)

    def pending(self) -> bool:
        return self.packer.surveying or self.packer.ready() is not None

    def step(self) -> int:
        """One bounded transaction: count some metrics, or pack one metric's oldest small entries;
        returns the entries joined."""
        if self.packer.surveying:
            self.packer.survey()
            return 0
        key = self.packer.ready()
        if key is None:
            return 0
        try:
            with transaction(self.store.db):
                if self.store.db.execute("SELECT 1 FROM removed_runs WHERE agent=? AND run=?", key[:2]).fetchone():
                    self.packer.forget(lambda k: k[:2] == key[:2])  # its rows are being deleted
                    return 0
                return self.packer.pack(key)
        except BaseException:
            self.packer.reset(self._streams())
            raise

    def _account(self, key: tuple, rows: list[tuple], blob: bytes) -> None:
        """``run_bytes`` less the joined rows' blobs and rows, plus the packed one (the trigger on ``n``
        counts 24 B a point more for the row that keeps its id)."""
        agent, run, metric = key
        points = sum(r[1] for r in rows)
        freed = sum(len(b) for r in rows for b in r[4:]) - len(blob) + 24 * (points - rows[-1][1])
        freed += (len(rows) - 1) * (ROW_BYTES + 2 * (len(run.encode()) + len(metric.encode()) + len(agent.encode())))
        self.store.db.execute("UPDATE run_bytes SET bytes = MAX(bytes - ?, 0) WHERE agent=? AND run=?",
                              [freed, agent, run])


def _names(metric: str) -> tuple[str, str]:
    """The range of the names a metric's tiers are kept under: its name, and its name then ATTEMPT and
    a number (no name holds a control character, so no other metric's name falls between the two)."""
    return metric, metric + chr(ord(ATTEMPT) + 1)

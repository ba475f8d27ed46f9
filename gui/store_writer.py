"""The one thread that writes every link's pages into one store file.

Why one: SQLite takes one writer at a time.  With each link writing its own pages, 16 links
spent about 80 % of their time waiting for the store's lock, and each paid a transaction (and a
tier fold per metric, at every level) per batch of its own.  Links hand their pages here instead;
what is queued while a transaction runs, or within WRITE_GAP of the last one, goes into the next
one, each agent's pages joined (group commit: a busy app writes fewer and larger transactions),
then each link hears what was written, in order.

One bad page never rolls back anyone else's: a transaction that fails is written again one
agent at a time, and only the link whose pages fail hears the error.

After each write it packs small metric entries (``store_packing``), a bounded transaction at a time,
for up to PACK_SECONDS and only until a page waits; while pages keep waiting, one step each
PACK_EVERY (a step takes 20-40 ms on a loaded machine: one after every write held pages that long,
the largest part of the store's p99 at 4 agents x 2,000 points/s); with nothing to write it packs
what is left.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pilothouse.wire.entries import KIND_ROLLOUTS, Entry

from .local_store import LocalStore
from .store_packing import StorePacker

T = TypeVar("T")
IDLE_FOLD = 2.0  # seconds without a page after which what waits for the tiers is folded (and then packed)
BUSY_PAUSE = 0.05  # seconds between tries while another connection of the app holds the store's lock
INDEX_SECONDS = 0.05  # rollout indexing per transaction at most (the rest waits for the next one)
PACK_SECONDS = 0.02  # packing at a time at most (after a write no page waits behind, or while idle)
PACK_EVERY = 1.0  # seconds between packing steps at most while pages keep waiting (a step packs 2,048 entries)
WRITE_GAP = 0.02  # seconds from one write to the next: pages that come meanwhile join it (the UI pays per batch)


class Writer(Protocol):
    """What a link hears of its pages; called on the writer's thread."""

    def written(self, entries: list[Entry], cursor: int, runs: list[dict] | None) -> None: ...

    def failed(self, error: Exception) -> None: ...

    def busy(self, message: str) -> None: ...

    def stopped(self) -> bool:
        """A stopped link's pages are not written: its next start reads them again from the cursor."""
        ...


@dataclass
class Write:
    """One agent's pages (entries in arrival order, the cursor they reach, its run list or None); ``link``
    None: pages written already, waiting for the UI thread (``network.Inbox``)."""

    url: str
    entries: list[Entry]
    cursor: int
    runs: list[dict] | None
    link: Writer | None


class _Call:
    def __init__(self, fn: Callable[[LocalStore], Any]):
        self.fn, self.future = fn, Future()


_STOP = object()


class StoreWriter:
    """The writing thread of one store file, shared by the links that write to it
    (``acquire``/``release``): it ends once the last link released it and its queue is written."""

    _open: dict[str, StoreWriter] = {}
    _guard = threading.Lock()

    def __init__(self, path: str | Path | None):
        self.path = path
        self.users = 0
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name=f"store writer {path}", daemon=True)
        self._thread.start()

    @classmethod
    def acquire(cls, path: str | Path | None) -> StoreWriter:
        with cls._guard:
            writer = cls._open.get(str(path))
            if writer is None:
                writer = cls._open[str(path)] = cls(path)
            writer.users += 1
            return writer

    def release(self) -> None:
        with self._guard:
            self.users -= 1
            if self.users == 0:
                del self._open[str(self.path)]
                self._jobs.put(_STOP)

    @classmethod
    def settle(cls, path: str | Path | None) -> None:
        """Wait for the write in progress on this store, if any: a link stopped meanwhile may be in it
        (its agent's data must not come back after it is removed)."""
        with cls._guard:
            writer = cls._open.get(str(path))
        if writer is not None:
            writer.call(lambda store: None)

    def write(self, job: Write) -> None:
        self._jobs.put(job)

    def call(self, fn: Callable[[LocalStore], T], timeout: float | None = None) -> T:
        """``fn(store)`` on the writer's thread, after every write queued before it; its result or
        its exception."""
        return self.submit(fn).result(timeout)

    def submit(self, fn: Callable[[LocalStore], T]) -> Future:
        """``call`` without waiting: the future of ``fn(store)`` (the links' thread serves every agent
        and must not wait for one agent's pages to be written)."""
        call = _Call(fn)
        self._jobs.put(call)
        return call.future

    # --- the writer's thread ------------------------------------------------------------------

    def _main(self) -> None:
        store: LocalStore | None = None
        self._packer: StorePacker | None = None
        self._unfolded: list[tuple[str, list[Entry]]] = []  # written, not yet folded: the packer hears of them after
        self._folds = 0  # the store's fold count when the packer last heard
        self._refused = False  # the store refused a packing step (a full disk): none until the next write
        self._packed = 0.0  # when the last packing ended
        indexing = True  # rollouts may wait to be indexed (a store written before, or a link stopped midway)
        stop = False
        written = 0.0  # when the last transaction ended
        try:
            while not stop:
                packing = store is not None and not self._refused and self._packer.pending()
                try:
                    jobs = [self._jobs.get(timeout=PACK_SECONDS if packing else IDLE_FOLD)]
                except queue.Empty:
                    jobs = []
                if store is not None and time.monotonic() - written >= IDLE_FOLD:
                    self._idle(store)  # no page for a while (a run ended, only calls): what waits is folded
                if not jobs:
                    if packing:
                        self._pack()  # nothing to write: packing has the time
                    continue
                if isinstance(jobs[0], Write):  # pages that come meanwhile join this write
                    time.sleep(max(0.0, written + WRITE_GAP - time.monotonic()))
                while not self._jobs.empty():
                    jobs.append(self._jobs.get_nowait())
                stop = _STOP in jobs  # the last link released it: write what is queued, then end
                try:
                    if store is None:
                        store = self._retry(LocalStore, self.path, jobs=jobs)  # many app threads open it at once
                        self._packer = StorePacker(store)
                    indexing = self._run(store, jobs, indexing)
                except Exception as exc:  # a broken store or a bug: every waiting link hears why, the writer goes on
                    _fail(jobs, exc)
                if any(isinstance(job, Write) for job in jobs):
                    written = time.monotonic()
        finally:
            if store is not None:
                store.close()

    def _run(self, store: LocalStore, jobs: list, indexing: bool) -> bool:
        """The jobs in order: the writes between two calls in one transaction; whether indexing is left."""
        writes: list[Write] = []
        for job in jobs:
            if isinstance(job, Write):
                writes.append(job)
            elif isinstance(job, _Call):
                indexing = self._commit(store, writes, indexing)
                writes = []
                try:
                    job.future.set_result(self._retry(job.fn, store, jobs=[]))
                except Exception as exc:
                    job.future.set_exception(exc)
        return self._commit(store, writes, indexing)

    def _commit(self, store: LocalStore, writes: list[Write], indexing: bool) -> bool:
        """The writes in one transaction, each agent's joined (else one agent at a time, see the
        module docstring), rollouts indexed, then each link told; whether indexing is left."""
        writes = [w for w in writes if not w.link.stopped()]
        if not writes:
            return indexing
        joined = join_writes(writes)
        try:
            self._retry(store.write_pages, [(w.url, w.entries, w.cursor, w.runs) for w in joined], jobs=joined)
            done = joined
        except Exception:
            done = []
            for w in joined:
                try:
                    self._retry(store.write_pages, [(w.url, w.entries, w.cursor, w.runs)], jobs=[w])
                    done.append(w)
                except Exception as exc:
                    w.link.failed(exc)
        if indexing or any(e.kind == KIND_ROLLOUTS for w in done for e in w.entries):
            indexing = self._retry(_index, store, jobs=done)
        for w in done:
            try:
                w.link.written(w.entries, w.cursor, w.runs)
            except Exception as exc:  # its callback failed (a bug in what it feeds): that link ends, not the others
                w.link.failed(exc)
            self._unfolded.append((w.url, w.entries))
        if self._jobs.empty() or time.monotonic() - self._packed >= PACK_EVERY:
            self._pack()
        return indexing

    def _idle(self, store: LocalStore) -> None:
        """Fold what waits for the tiers, then pack; a refusal (a full disk) waits for the next write."""
        if not store.tiers.waiting():
            return
        try:
            self._retry(store.fold_tiers, jobs=[])
        except sqlite3.Error:
            return
        self._pack()

    def _pack(self) -> None:
        """Pack for up to PACK_SECONDS (one step at least) or until a page waits, the entries folded into
        the tiers only (``LocalStore.pack_upto``).  A step the store refuses (a full disk) is undone and
        packing waits for the next write: the pages just written stand, and no link hears of it."""
        if self._packer.store.tiers.folds != self._folds:  # what waited is folded now: worth packing
            self._folds = self._packer.store.tiers.folds
            for url, entries in self._unfolded:
                self._packer.added(url, entries)
            self._unfolded = []
        deadline = time.monotonic() + PACK_SECONDS
        self._refused = False
        try:
            while self._packer.pending():
                self._retry(self._packer.step, jobs=[])
                if time.monotonic() >= deadline or not self._jobs.empty():
                    break
        except sqlite3.Error:
            self._refused = True
        self._packed = time.monotonic()

    def _retry(self, fn: Callable[..., T], *args: Any, jobs: list) -> T:
        """``fn(*args)`` once the store's lock is free: another connection of the app (the UI's)
        may hold it past SQLite's busy timeout on a CPU-starved machine, which must not end a link."""
        while True:
            try:
                return fn(*args)
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorname != "SQLITE_BUSY":
                    raise
                for job in jobs:
                    if isinstance(job, Write):
                        job.link.busy(f"the app's store is busy ({exc}); trying again")
            time.sleep(BUSY_PAUSE)


def join_writes(writes: list[Write]) -> list[Write]:
    """One write per link (an agent's), its pages in arrival order, the links in the order they first
    came (a transaction folds each metric once; the UI takes each agent's batches at once)."""
    by_url: dict[tuple[str, int], Write] = {}
    for w in writes:
        old = by_url.get((w.url, id(w.link)))
        if old is None:
            by_url[(w.url, id(w.link))] = Write(w.url, list(w.entries), w.cursor, w.runs, w.link)
        else:
            old.entries += w.entries
            old.cursor = max(old.cursor, w.cursor)
            old.runs = w.runs if w.runs is not None else old.runs
    return list(by_url.values())


def _fail(jobs: list, exc: Exception) -> None:
    for job in jobs:
        if isinstance(job, Write):
            job.link.failed(exc)
        elif isinstance(job, _Call) and not job.future.done():
            job.future.set_exception(exc)


def _index(store: LocalStore) -> bool:
    """Index queued rollouts for up to INDEX_SECONDS, in short transactions, before the links hear
    of the pages (a live batch is searchable and its step listed when the panel hears of it);
    whether some are left.  A catch-up of millions indexes a slice per transaction."""
    deadline = time.monotonic() + INDEX_SECONDS
    due = True
    while due and time.monotonic() < deadline:
        due = store.index_rollouts()
    return due

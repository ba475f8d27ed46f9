"""Readers (the app, ``pilothouse tail``) following the journal by cursor, against credit.

A reader asks for "everything after N" with some credit; each page it gets costs one
credit, and it returns them as it takes the pages (``Client.follow``: half its window at a time, or
a second after its last return).  A reader without credit costs the agent
its cursor and nothing else, however far behind it falls.  Each page echoes the number the
reader gave its "sub": pages of an earlier sub still in flight when the reader subscribed
again are told apart and dropped (they would repeat what the new sub reads again).  Caught-up readers get the
entries a turn just committed from memory; the others page through SQLite.  A reader from the network
reads while its key is allowed: once `pilothouse keys revoke` takes it off the allow-list, its open
connection gets no further page (the agent refuses that connection's new messages too).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pilothouse.node.journal import Store
from pilothouse.wire.entries import Entry, check_kinds
from pilothouse.wire.messages import MAX_PAGE_POINTS, message

MAX_CREDIT = 64

Send = Callable[[bytes, dict], bool]
Admits = Callable[[str], bool]  # whether a client key is still on the allow-list


@dataclass
class Reader:
    cursor: int
    credit: int
    run: str | None
    kinds: tuple[str, ...]
    sub: int = 0  # the reader's number for this subscription, echoed in every page
    heard: float = field(default_factory=time.monotonic)
    owed: bool = True  # a "sub" is always answered, even by an empty page: it tells the reader it is heard
    key: str | None = None  # a network reader's CURVE key (None: the owner, on loopback)

    def wants(self, entry: Entry) -> bool:
        return (self.run is None or entry.run == self.run) and (not self.kinds or entry.kind in self.kinds)


class ReaderFeed:
    def __init__(self, store: Store, send: Send, timeout: float, admits: Admits):
        self.store = store
        self.send = send
        self.timeout = timeout
        self.admits = admits
        self.readers: dict[bytes, Reader] = {}

    def subscribe(self, ident: bytes, msg: dict, key: str | None = None) -> None:
        """(Re)start at the reader's cursor; a repeated sub after silence is how readers reconnect.
        ``key``: the client key a network reader authenticated with."""
        credit = max(1, min(msg["credit"], MAX_CREDIT)) + 1  # +1 pays for the answer to the sub itself
        self.readers[ident] = Reader(msg["after"], credit, msg.get("run"), check_kinds(msg.get("kinds")),
                                     msg.get("sub", 0), key=key)

    def credit(self, ident: bytes, n: int) -> None:
        reader = self.readers.get(ident)
        if reader is not None:
            reader.credit = max(0, min(reader.credit + n, MAX_CREDIT))
            reader.heard = time.monotonic()

    def drop(self, ident: bytes) -> None:
        self.readers.pop(ident, None)

    def behind(self) -> bool:
        head = self.store.head
        return any(r.credit > 0 and r.cursor < head for r in self.readers.values())

    def feed(self, head_before: int, fresh: list) -> None:
        """One page per reader with credit: ``fresh`` (committed this turn) or from the store; readers
        silent too long, or whose key was revoked, are dropped first."""
        now = time.monotonic()
        for ident in [i for i, r in self.readers.items()
                      if now - r.heard > self.timeout or (r.key is not None and not self.admits(r.key))]:
            del self.readers[ident]
        head = self.store.head
        for ident, reader in list(self.readers.items()):
            if reader.credit <= 0:
                continue
            if reader.cursor >= head_before and (fresh or reader.owed):
                entries, cursor = _fresh_page(fresh, reader, head)
            elif reader.cursor < head:
                entries, cursor = self.store.read(reader.cursor, run=reader.run, kinds=reader.kinds,
                                                  limit_points=MAX_PAGE_POINTS)
            else:
                continue
            reader.owed = False
            reader.credit -= 1
            reader.cursor = cursor
            if not self.send(ident, message("data", cursor=cursor, entries=entries, journal=self.store.journal_id,
                                         sub=reader.sub)):
                self.drop(ident)  # gone, or its queue is full: it will subscribe again


def _fresh_page(fresh: list[Entry], reader: Reader, head: int) -> tuple[list[Entry], int]:
    """This turn's entries for a caught-up reader, cut at MAX_PAGE_POINTS like a page from the store:
    a fast trainer's turn would otherwise be one message the size of the turn, held once per reader."""
    entries: list[Entry] = []
    points = 0
    for entry in fresh:
        if entry.id <= reader.cursor or not reader.wants(entry):
            continue
        entries.append(entry)
        points += entry.n
        if points >= MAX_PAGE_POINTS:
            return entries, entry.id
    return entries, head

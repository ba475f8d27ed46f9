"""Journal entries, as the agent stores and streams them and every reader receives them.

The journal is one sequence of entries (a metric chunk, a rollout batch, an event), each
with the next integer id; a reader follows it by cursor ("everything after id N").  On
the wire an entry is a list in ``ENTRY_FIELDS`` order, to keep frames small; metric
points travel as int64/float64 blobs, so NaN, ±Inf and -0.0 arrive bit-exact.

A packed metric entry (the agent's ``compactor``) joins many small ones and takes the id of the
last it joined.  A page that ends inside one carries its points up to the page's cursor under its
own id, above that cursor (a *part*); the rest follows in later pages under the same id.  So a
metric entry's id may exceed its page's cursor, and a reader that keys entries by id continues a
part it holds instead of dropping the rest as a repeat (``LocalStore.write_page``).
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from pilothouse.wire.checks import INT64_MAX
from pilothouse.wire.messages import ProtocolError
from pilothouse.wire.rollouts import unpack_batch

KIND_METRIC = "m"
KIND_ROLLOUTS = "r"
KIND_EVENT = "e"
KINDS = (KIND_METRIC, KIND_ROLLOUTS, KIND_EVENT)

ENTRY_FIELDS = ("id", "run", "kind", "metric", "rank", "n", "steps", "vals", "times", "body")
Entry = namedtuple("Entry", ENTRY_FIELDS)
_new_entry = tuple.__new__  # ``_new_entry(Entry, fields)``: an Entry of fields checked for their number, in C
# (``Entry(*fields)`` runs a Python frame per entry, half of making one: every entry of every page of a link)


@dataclass
class Page:
    entries: list[Entry]
    cursor: int
    journal: str | None = None  # the journal the cursor counts in: an agent on a new one restarts its ids


def join_chunks(rows: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, values, wall_times) of metric chunks given as (steps, vals, times) blobs."""
    if not rows:
        return np.empty(0, np.int64), np.empty(0, np.float64), np.empty(0, np.float64)
    steps = np.frombuffer(b"".join(r[0] for r in rows), dtype=np.int64)
    vals = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float64)
    times = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float64)
    return steps, vals, times


def entry_points(entry: Entry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, values, wall_times) of a metric chunk."""
    return join_chunks([(entry.steps, entry.vals, entry.times)])


def unpack_blob(blob: bytes | None) -> Any:
    """A stored msgpack blob (an entry's body, a run's config), None for none."""
    return None if blob is None else msgpack.unpackb(blob, raw=False)


def entry_body(entry: Entry) -> Any:
    """An entry's body decoded: a rollout batch's from its zstd frame (see ``rollouts.unpack_batch``)."""
    return unpack_batch(entry.body) if entry.kind == KIND_ROLLOUTS else unpack_blob(entry.body)


def check_kinds(value: Any) -> tuple[str, ...]:
    """A reader's entry-kind filter: none (everything) or a list drawn from KINDS."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(k in KINDS for k in value):
        raise ProtocolError(f"kinds must be a list drawn from {KINDS}")
    return tuple(value)


def check_page(entries: Any, cursor: Any) -> Page:
    """Entries as the protocol defines them, or ProtocolError: nothing malformed reaches the caller."""
    if type(cursor) is not int or not 0 <= cursor <= INT64_MAX or not isinstance(entries, list):
        raise ProtocolError("a page needs a cursor in [0, 2**63) and a list of entries")
    out = []
    for e in entries:  # on every page of every link: plain comparisons, no generator per entry
        if not isinstance(e, list) or len(e) != len(ENTRY_FIELDS):
            raise ProtocolError("a journal entry has the wrong shape")
        id_, run, kind, metric, rank, n, steps, vals, times, body = e
        if not (type(id_) is int and 0 < id_ <= (INT64_MAX if kind == KIND_METRIC else cursor)
                and isinstance(run, str) and kind in KINDS and (metric is None or isinstance(metric, str))
                and type(rank) is int and 0 <= rank <= INT64_MAX and type(n) is int and 0 <= n <= INT64_MAX
                and (body is None or isinstance(body, bytes))
                and (isinstance(steps, bytes) and isinstance(vals, bytes) and isinstance(times, bytes)
                     and len(steps) == len(vals) == len(times) == 8 * n if kind == KIND_METRIC
                     else steps is None and vals is None and times is None)):
            raise ProtocolError(f"malformed journal entry {str(e)[:120]}")
        out.append(_new_entry(Entry, e))
    return Page(out, cursor)

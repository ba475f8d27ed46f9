"""What the app's local store holds, made by hand: two agent addresses (``A``, ``B``), journal
entries of metrics (``chunk``, ``r1_chunk``) and of bodies (``body``), special floats that must come
back bit for bit (``SPECIAL``), run rows (``run``, ``NOW``, ``DAY``) and a run's pages written in
(``fill``); and ``copy_all``, what a link writes from a real agent (its runs and journal pages)."""

from __future__ import annotations

import msgpack
import numpy as np

from pilothouse.client import Client
from pilothouse.gui.local_store import LocalStore
from pilothouse.wire.entries import Entry

A, B = "tcp://127.0.0.1:7001", "tcp://127.0.0.1:7002"
SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 1e308, 5e-324, 1.5])
DAY = 86400.0
NOW = 1.8e9


def chunk(id: int, run: str, metric: str, steps, vals) -> Entry:
    steps = np.asarray(steps, np.int64)
    vals = np.asarray(vals, np.float64)
    times = 1.7e9 + steps.astype(np.float64)
    return Entry(id, run, "m", metric, 0, len(steps), steps.tobytes(), vals.tobytes(), times.tobytes(), None)


def r1_chunk(id: int, metric: str, steps, vals) -> Entry:
    """A metric entry of run ``r1`` (the charts tests' one run)."""
    steps = np.asarray(steps, np.int64)
    vals = np.asarray(vals, np.float64)
    return Entry(id, "r1", "m", metric, 0, len(steps), steps.tobytes(), vals.tobytes(),
                 (1.7e9 + steps).astype(np.float64).tobytes(), None)


def body(id: int, run: str, kind: str, obj: dict) -> Entry:
    return Entry(id, run, kind, None, 0, len(obj.get("rows", ())), None, None, None,
                 msgpack.packb(obj, use_bin_type=True))


def run(run_id: str, status: str = "finished", ended: float | None = NOW - DAY, **extra) -> dict:
    return {"id": run_id, "project": "p", "name": run_id, "status": status, "created": 1.0, "ended": ended, **extra}


def fill(store: LocalStore, url: str, run_id: str, first_id: int, chunks: int, points: int = 10) -> int:
    """``chunks`` metric entries of ``points`` points for a run; returns the next free journal id."""
    entries = [chunk(first_id + i, run_id, f"m{i % 3}", range(i * points, (i + 1) * points),
                     np.full(points, float(i))) for i in range(chunks)]
    store.write_page(url, entries, first_id + chunks - 1)
    return first_id + chunks


def copy_all(client: Client, store: LocalStore, url: str, after: int = 0) -> list:
    """What a link writes: the run list and every journal page after ``after``; returns the entries."""
    store.put_runs(url, client.runs())
    entries = []
    for page in client.history(after=after):
        store.write_page(url, page.entries, page.cursor)
        entries += page.entries
    return entries

"""Reading a run back from a real agent through its ``Client``: its journal events (``run_events``),
a run found by name (``run_of``), and one of its series checked point for point (``assert_series``)."""

from __future__ import annotations

import numpy as np

from pilothouse.client import Client
from pilothouse.wire.entries import entry_body


def run_events(client: Client, run_id: str, *names: str) -> list[dict]:
    """A run's journal events (status, command, ack, alert...), oldest first; only ``names`` if given."""
    bodies = [entry_body(e) for page in client.history(run_id, ["e"]) for e in page.entries]
    return [b for b in bodies if not names or b.get("event") in names]


def run_of(client, name: str) -> dict | None:
    return next((r for r in client.runs() if r["name"] == name), None)


def assert_series(client, run_id: str, metric: str, want: tuple) -> None:
    steps, vals, times = client.series(run_id, metric)
    np.testing.assert_array_equal(steps, want[0])
    np.testing.assert_array_equal(vals, want[1])  # NaN == NaN here; ±Inf kept
    np.testing.assert_array_equal(times, want[2])

"""A run brought back from an archive: what ``pilothouse import`` sends and the agent takes.

The CLI decodes the archive file and sends the run's metadata (``import_begin``), then its
journal entries in batches (``import_batch``), then ``import_end``; the agent keeps the batches
aside and makes the run visible, whole, only when the last one lands.  Both ends check with
this module: the CLI so that a bad file is refused before anything is sent, the agent because
a peer may send anything.  Every check raises ValueError or TypeError naming the field.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pilothouse.wire.checks import check_config, check_int, check_name, check_run_id
from pilothouse.wire.entries import KIND_EVENT, KIND_METRIC, KIND_ROLLOUTS, KINDS
from pilothouse.wire.messages import MAX_HELLO_BYTES, MAX_INBOUND_BYTES, MAX_INBOUND_CONTAINERS, pack, unpack
from pilothouse.wire.rollouts import pack_batch, unpack_batch
from pilothouse.wire.tuning import check_schema
from pilothouse.wire.watched import WATCHED

# one import_batch's entries: bytes of points and bodies, and entries, as a trainer's batch is
# bounded, so the frame stays under MAX_INBOUND_BYTES with room for the envelope
IMPORT_BATCH_BYTES = MAX_INBOUND_BYTES // 2
IMPORT_BATCH_ENTRIES = 10_000
ENTRY_OVERHEAD = 64  # bytes an entry costs on the wire besides its points, body and metric name

STATUSES = ("running", "paused", "stale", "finished", "crashed")
ENDED = ("finished", "crashed")  # kept as archived; a run archived live comes back stale: no process feeds it
RUN_KINDS = ("train", "system", WATCHED)
COUNTERS = ("dropped_records", "dropped_points", "lost_records")


def imported_status(status: str) -> str:
    return status if status in ENDED else "stale"


def check_run_meta(meta: Any) -> dict[str, Any]:
    """An archived run's metadata, with exactly the fields a run is recreated from."""
    if not isinstance(meta, dict):
        raise TypeError(f"a run's metadata must be a map, got {type(meta).__name__}")
    kind = meta.get("kind", "train")
    if kind not in RUN_KINDS:
        raise ValueError(f"run kind must be one of {RUN_KINDS}, got {str(kind)[:40]!r}")
    status = meta.get("status")
    if status not in STATUSES:
        raise ValueError(f"run status must be one of {STATUSES}, got {str(status)[:40]!r}")
    out: dict[str, Any] = {
        "id": check_run_id(meta.get("id"), system=kind == "system"), "kind": kind, "status": status,
        "project": check_name(meta.get("project"), "project"), "name": check_name(meta.get("name"), "run name"),
        "host": None if meta.get("host") is None else check_name(meta["host"], "host"),
        "created": _seconds(meta.get("created"), "created"),
        "ended": None if meta.get("ended") is None else _seconds(meta["ended"], "ended"),
        "last_step": None if meta.get("last_step") is None else check_int(meta["last_step"], "last_step"),
        **{key: check_int(meta.get(key, 0), key) for key in COUNTERS},
        "config": check_config(meta.get("config")), "schema": check_schema(meta.get("schema", {})),
    }
    size = len(pack({"config": out["config"], "schema": out["schema"]}))
    if size > MAX_HELLO_BYTES:
        raise ValueError(f"the run's config and schema are {size} bytes; a run's are limited to {MAX_HELLO_BYTES}")
    return out


def _seconds(value: Any, what: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number of seconds, got {str(value)[:40]}")
    return float(value)


def import_entry(kind: str, metric: str | None, rank: int, steps: bytes | None = None, vals: bytes | None = None,
                 times: bytes | None = None, body: bytes | None = None) -> list:
    """One entry of an ``import_batch``, as the CLI sends it."""
    return [kind, metric, rank, steps, vals, times, body]


def entry_size(entry: list) -> int:
    """What an entry adds to a batch's IMPORT_BATCH_BYTES."""
    return ENTRY_OVERHEAD + sum(len(part) for part in entry[1:] if isinstance(part, (str, bytes)))


def check_import_entry(entry: Any) -> tuple:
    """One sent entry -> the journal row without id and run ``(kind, metric, rank, n, steps, vals,
    times, body)``, checked as the agent checks what a trainer logs."""
    if not isinstance(entry, list) or len(entry) != 7:
        raise TypeError("an imported entry must be [kind, metric, rank, steps, vals, times, body]")
    kind, metric, rank, steps, vals, times, body = entry
    check_int(rank, "rank")
    blobs = (steps, vals, times)
    if kind == KIND_METRIC:
        check_name(metric, "metric name")
        if not all(isinstance(b, bytes) for b in blobs) or body is not None:
            raise TypeError(f"metric {metric!r}: a metric chunk has steps, values and times as bytes and no body")
        if not 0 < len(steps) == len(vals) == len(times) or len(steps) % 8:
            raise ValueError(f"metric {metric!r}: steps, values and times must be as many int64/float64 (8 bytes each)")
        if np.frombuffer(steps, np.int64).min() < 0:
            raise ValueError(f"metric {metric!r}: a step is negative")
        return kind, metric, rank, len(steps) // 8, steps, vals, times, None
    if kind not in (KIND_ROLLOUTS, KIND_EVENT):
        raise ValueError(f"entry kind must be one of {KINDS}, got {str(kind)[:40]!r}")
    if metric is not None or any(b is not None for b in blobs) or not isinstance(body, bytes):
        raise TypeError("a rollout batch or an event has a body (bytes) and no metric or points")
    if kind == KIND_EVENT:
        decoded = unpack(body, MAX_INBOUND_CONTAINERS)
        if not isinstance(decoded, dict) or not isinstance(decoded.get("event"), str):
            raise ValueError("an event's body must be a map with an 'event' name")
        return kind, None, rank, 0, None, None, None, body
    batch = unpack_batch(body)  # packed again as the journal packs it: one zstd frame (an archive may be older)
    rows = batch["rows"]
    return kind, None, rank, len(rows), None, None, None, pack_batch(batch["step"], batch["time"], rows)

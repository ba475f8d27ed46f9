"""Trainer messages built by hand: ``TOKEN``, a run's secret for raw hellos, and ``batch_fields``,
readable records made into the batch of a 'rec' message by the trainer's own encoder."""

from __future__ import annotations

from pilothouse.wire.messages import pack, unpack
from pilothouse.wire.records import REC_METRICS, encode_batch, metrics_packer

TOKEN = "5eed" * 8  # a run's secret (Run.token) for raw hellos


def batch_fields(records: list) -> dict:
    """Records written readably -> the batch entries of a 'rec' message (``n``, ``keys``, ``metrics``,
    ``others``), made by the trainer's own encoder and passed through msgpack as the agent gets them:
    [0, step, wall_time, {name: value}] metrics, [1, step, wall_time, rows] rollouts, [2, step, wall_time,
    path] a checkpoint."""
    queue = []
    for kind, step, wall_time, payload in records:
        if kind == REC_METRICS:
            queue.append((kind, tuple(payload), metrics_packer(len(payload))(step, wall_time, *payload.values())))
        else:
            queue.append((kind, None, (step, wall_time, payload)))
    return unpack(pack(encode_batch(queue)))

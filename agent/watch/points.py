"""Records of a run read from files (TensorBoard, W&B, MLflow, the RL frameworks' own files), in the
trainer's queue form: one metric record per (step, wall time) with its values, rollout rows in records
that each fit a batch.  A tag the agent would refuse (a name with
control characters, one metric past the run's limit) or a negative step is left out and said
once, never sent."""

from __future__ import annotations

from typing import Any

from pilothouse.wire.checks import INT64_MAX, normal_name
from pilothouse.wire.messages import MAX_INBOUND_BYTES, pack
from pilothouse.wire.records import MAX_METRICS_PER_RUN, MAX_ROLLOUT_ROWS, REC_METRICS, metrics_packer

MAX_ROLLOUT_BYTES = MAX_INBOUND_BYTES // 2 - 4096  # packed rows per record: one record always fits a batch


class MetricRecords:
    """Names a run's tags as metrics (remembering which it let through) and packs their values."""

    def __init__(self) -> None:
        self._names: dict[str, str | None] = {}  # tag -> its metric name, None: refused
        self._packers: dict[int, Any] = {}
        self._told: set[str] = set()

    def name(self, tag: str, skipped: list[str]) -> str | None:
        """The metric name of ``tag``, or None (said in ``skipped`` the first time) if it is left out."""
        if tag in self._names:
            return self._names[tag]
        try:
            name: str | None = normal_name(tag, "metric name")
        except ValueError as exc:
            self.skip(skipped, tag, f"{exc}: left out")
            name = None
        if name is not None and sum(n is not None for n in self._names.values()) >= MAX_METRICS_PER_RUN:
            self.skip(skipped, tag, f"tag {tag!r} would be metric {MAX_METRICS_PER_RUN + 1} of the run: left out")
            name = None
        self._names[tag] = name
        return name

    def record(self, step: int, wall_time: float, values: dict[str, float], skipped: list[str]) -> tuple | None:
        """The metric record of ``values`` (metric name -> number) at ``step``; None if there are
        none, or the step is one the agent refuses."""
        if not values:
            return None
        if not 0 <= step <= INT64_MAX:
            self.skip(skipped, f"step {step}", f"step {step} is negative: {len(values)} values at it are left out")
            return None
        n = len(values)
        packer = self._packers.get(n) or self._packers.setdefault(n, metrics_packer(n))
        return (REC_METRICS, tuple(values), packer(step, wall_time, *values.values()))

    def rows(self, rows: list[tuple[int, float, dict[str, float]]], skipped: list[str]) -> list[tuple]:
        """The records of (step, wall time, tag -> value) rows, tags named as ``name`` names them."""
        out = []
        for step, wall_time, values in rows:
            named = {}
            for tag, value in values.items():
                name = self.name(tag, skipped)
                if name is not None:
                    named[name] = value
            record = self.record(step, wall_time, named, skipped)
            if record is not None:
                out.append(record)
        return out

    def skip(self, skipped: list[str], key: str, why: str) -> None:
        """Say ``why`` once per ``key``."""
        if key not in self._told:
            self._told.add(key)
            skipped.append(why)


def rollout_parts(rows: list[dict]) -> list[list[dict]]:
    """Rows in records of at most MAX_ROLLOUT_BYTES packed (all at the same step); a single row
    larger than that is cut to fit."""
    parts: list[list[dict]] = [[]]
    size = 0
    for row in rows:
        row_size = len(pack(row))
        if row_size > MAX_ROLLOUT_BYTES:
            row = {k: v[: MAX_ROLLOUT_BYTES // (2 * len(row))] if isinstance(v, str) else v for k, v in row.items()}
            row_size = len(pack(row))
        if parts[-1] and (size + row_size > MAX_ROLLOUT_BYTES or len(parts[-1]) == MAX_ROLLOUT_ROWS):
            parts.append([])
            size = 0
        parts[-1].append(row)
        size += row_size
    return parts

"""Metric records of a run read from files (TensorBoard, W&B, MLflow), in the trainer's queue form:
one record per (step, wall time) with its values.  A tag the agent would refuse (a name with
control characters, one metric past the run's limit) or a negative step is left out and said
once, never sent."""

from __future__ import annotations

from typing import Any

from pilothouse.wire.checks import INT64_MAX, normal_name
from pilothouse.wire.records import MAX_METRICS_PER_RUN, REC_METRICS, metrics_packer


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

    def skip(self, skipped: list[str], key: str, why: str) -> None:
        """Say ``why`` once per ``key``."""
        if key not in self._told:
            self._told.add(key)
            skipped.append(why)

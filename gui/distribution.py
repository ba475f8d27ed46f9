"""The reward distribution chart's names, in plain Python: which metrics it draws and what its
curves are called.

Why one chart and not five: the agent stores a step's reward quantiles as five ordinary metrics
(``rollouts/reward/min``, ``p10``, ``p50``, ``p90``, ``max``; ``pilothouse.wire.rollout_groups``).
Five line charts of them read as noise; TensorBoard's "distributions" and W&B draw them as nested
bands over steps, so the Charts model (``pilothouse.gui.charts_model``) gives the five one chart,
``CHART``, with five curves per run named ``<run>#<quantile>`` (a run id has no ``#``); the mean
keeps its line chart.  They are read, tiered and followed live like any metric's curves.
"""

from __future__ import annotations

from pilothouse.wire.rollout_groups import PREFIX, REWARD_SERIES

SERIES = f"{PREFIX}reward/"
CHART = f"{PREFIX}reward (distribution)"
PARTS = tuple(s for s in REWARD_SERIES if s != "mean")  # min, p10, p50, p90, max
BANDS = (("min", "max"), ("p10", "p90"))  # outer (light) then inner (darker); p50 is the line
LINE = "p50"
SEP = "#"


def part_of(metric: str) -> str | None:
    """The quantile a metric is (``rollouts/reward/p10`` -> ``p10``), or None for any other metric."""
    part = metric[len(SERIES):] if metric.startswith(SERIES) else None
    return part if part in PARTS else None


def curve_name(run_curve: str, part: str | None) -> str:
    """A quantile's curve in the distribution chart: the run's curve name and the quantile."""
    return run_curve if part is None else f"{run_curve}{SEP}{part}"


def split(name: str) -> tuple[str, str | None]:
    """A curve name as (the run's curve name, its quantile or None)."""
    base, sep, part = name.rpartition(SEP)
    return (base, part) if sep and part in PARTS else (name, None)

"""What a chart curve is, in plain Python: the interface every curve source answers, the x axis, and
one curve as the Charts model (``pilothouse.gui.charts_model``) decides it.

Why one named interface: a curve's points come from memory (``lod.Series``), the store's tiers
(``stored_series.StoredSeries``), each attempt's tiers (``StoredPieces``), a group's runs' tiers
(``StoredGroup``) or its agent's tiers (``remote_tiers.RemoteSeries``); the chart draws all five
alike, through ``CurveSource``.  The four read from tiers never hold live points: the link writes a
page to the store before the UI hears of it, so they are only told that the store grew
(``TieredSource.grew``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import numpy as np

from pilothouse.gui.models import RunKey


class CurveSource(Protocol):
    """What a chart asks of a curve each frame: its points per pixel column of a range, where its
    non-finite values are, the point nearest the crosshair, and its extent."""

    generation: int  # bumped when old points move (a smoothed copy starts over)

    def __len__(self) -> int: ...

    @property
    def nbytes(self) -> int: ...

    @property
    def all_finite(self) -> bool: ...

    def view(self, x0: float, x1: float, pixels: int) -> tuple[np.ndarray, np.ndarray]: ...

    def nonfinite(self, x0: float, x1: float) -> np.ndarray: ...

    def nearest(self, xq: float) -> tuple[float, float] | None: ...

    def x_range(self) -> tuple[float, float] | None: ...

    def y_range(self) -> tuple[float, float] | None: ...


class TieredSource(CurveSource, Protocol):
    """A curve read from tiers (the store's or an agent's): live points reach it through the store."""

    def grew(self) -> None:
        """New points of it are in the store: the cached extent is out of date (no point is read)."""


class Axis(Enum):
    """The charts' x axis; its value is what the x-axis control says."""

    STEP = "step"
    TIME = "wall time"


@dataclass
class Curve:
    """One curve of one chart: a run's (its superseded points apart, ``faint``) or a group's mean."""

    name: str  # the chart's name for it: the run's id (+ ``OLD``), or the group's name
    owner: RunKey | str  # its legend entry: the run's key or the group's name
    label: str  # what the readout calls it
    slot: int  # its color slot (``pilothouse.gui.palette``)
    source: CurveSource
    faint: bool = False  # points a later attempt superseded: dotted, behind the run's curve
    group: bool = False  # a group's mean, with a min/max band


@dataclass(frozen=True)
class AlertMark:
    """A vertical line where a rule fired (or cleared), labelled with the rule's name."""

    x: float
    label: str
    tooltip: str
    firing: bool = True
    resume: bool = False  # where a run was resumed (a new attempt), not an alert
    steering: bool = False  # where a run applied a command (``pilothouse.gui.steering_marks``), not an alert

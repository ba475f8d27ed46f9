"""Ticks of a log-scale y axis that a person can read: labels never closer than a line of text,
at least two labels whenever the axis shows any range, and numbers written as people write them.

Why not pyqtgraph's own: it labels every 1..9 x 10^n on a range of one or two decades, so
0.9, 0.8, 0.7 ... pile up into one smear under the "1", and on a range narrower than a decade it
labels a single tick (or none), so the curve cannot be read at all.  The choice here is the one
plotting libraries settle on (matplotlib's LogLocator, d3's log ticks): powers of ten, every k-th
on a wide range; 1-2-5 inside a decade where there is room; all of 1..9 where there is more; and
on a range too narrow for any of those, evenly spaced "nice" values, as a linear axis would have.

All positions are in log10 units (what pyqtgraph's axis works in when its log mode is on).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

MIN_GAP_PX = 22.0  # the least distance between two labels: a line of axis text and a little air
MINOR_GAP_PX = 4.0  # unlabelled ticks closer than this are a grey bar, not a scale
_DECADE_STEPS = (1, 2, 3, 5, 10, 20, 50, 100)
_MANTISSAS = ((1,), (1, 3), (1, 2, 5), (1, 2, 3, 4, 5, 6, 7, 8, 9))


class Ticks(NamedTuple):
    major: list[float]  # labelled positions
    labels: list[str]
    minor: list[float]  # unlabelled marks between them


def log_ticks(lo: float, hi: float, pixels: float, min_gap: float = MIN_GAP_PX) -> Ticks:
    """The ticks of the axis range [lo, hi] (log10 units) drawn over ``pixels``: the densest
    readable set of labels, and finer marks between them."""
    lo, hi = sorted((lo, hi))
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi - lo <= 0 or pixels <= 0:
        return Ticks([], [], [])
    per_unit = pixels / (hi - lo)  # pixels per decade
    chosen: list[float] = []
    for step in _DECADE_STEPS:  # dense to sparse: the first that reads
        if step * per_unit >= min_gap and len(_decades(lo, hi, step)) >= 2:
            chosen = _decades(lo, hi, step)
            break
    if not chosen or len(chosen) < 4 and chosen == _decades(lo, hi, 1):
        for mantissas in _MANTISSAS[1:]:  # few labels: inside decades too, where there is room
            dense = _mantissa_ticks(lo, hi, mantissas)
            if _min_gap(dense) * per_unit < min_gap:
                break
            chosen = dense if len(dense) >= 2 else chosen
    if hi - lo < 0.5 or len(chosen) < 3 and hi - lo < 1:  # inside a decade: evenly spaced values read better
        linear, labels = _linear(lo, hi, pixels, min_gap)
        if len(linear) > len(chosen):
            return Ticks(linear, labels, [])
    if len(chosen) < 2:  # an axis too short for two readable labels: the sparsest that gives two
        chosen = _thin(next((_decades(lo, hi, step) for step in reversed(_DECADE_STEPS)
                             if len(_decades(lo, hi, step)) >= 2), chosen), per_unit, min_gap)
    if len(chosen) < 2:
        chosen = _thin(_mantissa_ticks(lo, hi, _MANTISSAS[-1]), per_unit, min_gap)
    taken = set(chosen)
    minor: list[float] = []
    for marks in (_mantissa_ticks(lo, hi, _MANTISSAS[-1]), _mantissa_ticks(lo, hi, _MANTISSAS[2]), _decades(lo, hi, 1)):
        if _min_gap(marks) * per_unit >= MINOR_GAP_PX:
            minor = [t for t in marks if t not in taken]
            break
    return Ticks(chosen, [tick_label(t) for t in chosen], minor)


def tick_label(position: float) -> str:
    """The number at log10 position ``position``, as short as it can be without lying: 0.001, 500,
    1500, then with an exponent outside [10^-3, 10^4): 2e-5, 1e6."""
    value = 10.0 ** position
    if 1e-3 <= value < 1e4:
        return f"{value:.4g}"
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def _decades(lo: float, hi: float, step: int) -> list[float]:
    first = math.ceil(lo / step - 1e-9) * step
    return [float(d) for d in range(int(first), int(math.floor(hi + 1e-9)) + 1, step)]


def _mantissa_ticks(lo: float, hi: float, mantissas: tuple[int, ...]) -> list[float]:
    out = []
    for decade in range(math.floor(lo), math.floor(hi) + 1):
        for m in mantissas:
            t = decade + math.log10(m)
            if lo - 1e-9 <= t <= hi + 1e-9:
                out.append(t)
    return out


def _linear(lo: float, hi: float, pixels: float, min_gap: float) -> tuple[list[float], list[str]]:
    """Nice evenly spaced values (1, 2, 2.5 or 5 x 10^n apart) and their labels, with as many
    decimals as the step needs, for a range inside about a decade (a reward between 0.8 and 1.2):
    the finest step whose labels are ``min_gap`` apart, else (an axis too short for two such
    labels) the coarsest step that still gives two, every k-th of them if that is closer."""
    a, b = 10.0 ** lo, 10.0 ** hi
    power = 10.0 ** math.floor(math.log10((b - a) / max(2, int(pixels // min_gap)))) / 10
    two: tuple[list[float], list[str]] = ([], [])
    for decade in (power, power * 10, power * 100):
        for nice in (1, 2, 2.5, 5):
            step = nice * decade
            values = np.arange(math.ceil(a / step - 1e-9), math.floor(b / step + 1e-9) + 1) * step
            values = values[values > 0]
            positions = [float(p) for p in np.log10(values)]
            decimals = max(0, -math.floor(math.log10(step) + 1e-9) + (nice == 2.5))
            labels = [f"{v:.{decimals}f}" for v in values]
            if len(positions) >= 2 and _min_gap(positions) * pixels / (hi - lo) >= min_gap:
                return positions, labels
            if len(positions) >= 2:
                every = _every(positions, pixels / (hi - lo), min_gap)
                two = (positions[::every], labels[::every])
    return two


def _thin(positions: list[float], per_unit: float, min_gap: float) -> list[float]:
    return positions[::_every(positions, per_unit, min_gap)] if len(positions) >= 2 else positions


def _every(positions: list[float], per_unit: float, min_gap: float) -> int:
    """Keep every k-th: the least k that puts labels ``min_gap`` apart, as long as two remain."""
    return max(1, min(math.ceil(min_gap / (_min_gap(positions) * per_unit)), len(positions) - 1))


def _min_gap(positions: list[float]) -> float:
    if len(positions) < 2:
        return math.inf
    return float(np.min(np.diff(np.sort(np.asarray(positions)))))

"""Floats that must survive storage bit for bit (``SPECIAL``: NaN, ±Inf, -0.0, the largest and the
smallest double) and ``bits``, their IEEE 754 patterns, to compare them exactly (NaN payloads and
the sign of zero included, which ``==`` cannot see)."""

from __future__ import annotations

import math

import numpy as np

SPECIAL = [math.nan, math.inf, -math.inf, -0.0, 1e308, 5e-324, 0.1]


def bits(values) -> list[int]:
    """The 64-bit patterns of an array's or an iterable's floats."""
    array = values if isinstance(values, np.ndarray) else np.fromiter(values, np.float64)
    return array.astype(np.float64, copy=False).view(np.uint64).tolist()

"""Floats that must survive storage bit for bit (``SPECIAL``: NaN, ±Inf, -0.0, the largest and the
smallest double) and ``bits``, their IEEE 754 patterns, to compare them exactly."""

from __future__ import annotations

import math
import struct

SPECIAL = [math.nan, math.inf, -math.inf, -0.0, 1e308, 5e-324, 0.1]


def bits(values) -> list[int]:
    return [struct.unpack("<Q", struct.pack("<d", v))[0] for v in values]

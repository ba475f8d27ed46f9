"""The runs' colors: a colorblind-safe palette and a stable color slot per run.

Why Okabe–Ito (without its black and yellow, which vanish on the dark and the light chart
background): it was designed to stay distinct with deuteranopia and protanopia, and the order
below is greedy farthest-first, so the first runs compared get the most distinct colors
(blue and orange).  ``tests/test_palette.py`` measures every pair in CIEDE2000 under simulated
color blindness.

A run keeps its slot while the app runs.  A comparison never holds a slot twice: a run whose
slot an earlier-selected run of the comparison holds moves to a free one.  Past the palette's
size, slots repeat the colors with a dashed line (``dashed``), so even ten runs stay apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable

PALETTE: tuple[str, ...] = (
    "#0072b2",  # blue
    "#e69f00",  # orange
    "#56b4e9",  # sky blue
    "#d55e00",  # vermillion
    "#009e73",  # bluish green
    "#cc79a7",  # reddish purple
)


def color(slot: int) -> str:
    return PALETTE[slot % len(PALETTE)]


def dashed(slot: int) -> bool:
    """Slots past the palette reuse its colors; a dash tells them apart."""
    return slot >= len(PALETTE)


class RunColors:
    """Color slots per run (any hashable key), kept for the life of the app."""

    def __init__(self) -> None:
        self._slots: dict[Hashable, int] = {}
        self._holders: Counter[int] = Counter()  # how many runs hold each slot

    def slot(self, key: Hashable) -> int | None:
        return self._slots.get(key)

    def assign(self, keys: Iterable[Hashable]) -> dict[Hashable, int]:
        """Slots for a comparison, in selection order: runs keep theirs unless an earlier one of
        this comparison holds it; the rest take the least used free slot (lowest first)."""
        keys = list(dict.fromkeys(keys))
        taken: set[int] = set()
        out: dict[Hashable, int] = {}
        for key in keys:  # first, everyone who can keep a slot keeps it
            slot = self._slots.get(key)
            if slot is not None and slot not in taken:
                taken.add(slot)
                out[key] = slot
        for key in keys:
            if key not in out:
                out[key] = self._take(key, taken)
                taken.add(out[key])
        return {key: out[key] for key in keys}

    def _take(self, key: Hashable, taken: set[int]) -> int:
        free = [s for s in range(len(PALETTE)) if s not in taken]
        if free:
            slot = min(free, key=lambda s: (self._holders[s], s))
        else:  # more runs than colors in this comparison: the first free dashed slot
            slot = next(s for s in range(len(PALETTE), len(PALETTE) + len(taken) + 1) if s not in taken)
        old = self._slots.get(key)
        if old is not None:
            self._holders[old] -= 1
        self._slots[key] = slot
        self._holders[slot] += 1
        return slot

"""Rollout browsing in plain Python: steps, search, reward filter and sort, and pairing two runs.

Why no Qt here: the Rollouts panel only displays what this module selects, so what a search,
a reward range or a comparison shows is tested without a display.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]  # one rollout row as logged: prompt, completion, reward, and any extra fields
Pair = tuple[Row | None, Row | None]  # the same prompt's rows from run A and run B (None: absent there)

ORDERS = ("logged", "asc", "desc")  # "logged": as the trainer sent them


def reward(row: Row | None) -> float | None:
    """The row's reward as a float, or None when it has none usable (missing, text, NaN)."""
    value = None if row is None else row.get("reward")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def text(row: Row, field: str) -> str:
    value = row.get(field)
    return "" if value is None else str(value)


class RolloutIndex:
    """A run's rollout batches by step.  Every step is kept; batches logged for the same step
    (several ranks, or several calls) are joined in arrival order."""

    def __init__(self, batches: Iterable[dict] = ()) -> None:
        self._by_step: dict[int, list[Row]] = {}
        for batch in batches:
            self.add(batch)

    def add(self, batch: dict) -> None:
        """One rollout body ({step, time, rows}), from the store or a live entry."""
        self._by_step.setdefault(batch["step"], []).extend(batch["rows"])

    def steps(self) -> list[int]:
        return sorted(self._by_step)

    def rows(self, step: int) -> list[Row]:
        return list(self._by_step.get(step, ()))

    def search(self, words: str) -> list[tuple[int, Row]]:
        """(step, row) of every row, over all steps, whose prompt or completion holds every word."""
        return [(step, row) for step in self.steps() for row in self._by_step[step] if matches(row, words)]


def matches(row: Row, words: str) -> bool:
    """Case-insensitive: every word of ``words`` appears in the prompt or the completion."""
    hay = (text(row, "prompt") + "\n" + text(row, "completion")).lower()
    return all(word in hay for word in words.lower().split())


@dataclass(frozen=True)
class Query:
    """What the panel's controls ask for; empty text and None bounds select everything."""

    words: str = ""
    reward_min: float | None = None
    reward_max: float | None = None
    order: str = "logged"

    def accepts(self, row: Row | None) -> bool:
        if row is None or not matches(row, self.words):
            return False
        if self.reward_min is None and self.reward_max is None:
            return True
        r = reward(row)  # a bound is set: rows without a usable reward are out
        return (r is not None and (self.reward_min is None or r >= self.reward_min)
                and (self.reward_max is None or r <= self.reward_max))

    def rows(self, rows: Iterable[Row]) -> list[Row]:
        """The accepted rows, ordered."""
        return sort_by_reward([r for r in rows if self.accepts(r)], self.order, reward)

    def pairs(self, pairs: Iterable[Pair]) -> list[Pair]:
        """Pairs where either side is accepted (a comparison keeps both sides), ordered by
        run A's reward, falling back to run B's where A has none."""
        kept = [p for p in pairs if self.accepts(p[0]) or self.accepts(p[1])]
        return sort_by_reward(kept, self.order, lambda p: reward(p[0]) if reward(p[0]) is not None else reward(p[1]))


def sort_by_reward(items: list, order: str, key: Any) -> list:
    """Stable sort by ``key(item)`` ascending or descending; items without a reward go last
    either way, so "best first" never starts with blanks."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if order == "logged":
        return list(items)
    sign = -1.0 if order == "desc" else 1.0
    return sorted(items, key=lambda item: (key(item) is None, sign * (key(item) or 0.0)))


def pair(a_rows: Sequence[Row], b_rows: Sequence[Row]) -> list[Pair]:
    """Match the two runs' rows by prompt text.  A prompt sampled k times in each run pairs its
    occurrences in order (1st with 1st, ...).  A's order is kept; rows only B has come last."""
    b_by_prompt: dict[str, list[Row]] = {}
    for row in b_rows:
        b_by_prompt.setdefault(text(row, "prompt"), []).append(row)
    out: list[Pair] = []
    used: set[int] = set()
    for row in a_rows:
        waiting = b_by_prompt.get(text(row, "prompt"))
        match = waiting.pop(0) if waiting else None
        if match is not None:
            used.add(id(match))
        out.append((row, match))
    out.extend((None, row) for row in b_rows if id(row) not in used)
    return out

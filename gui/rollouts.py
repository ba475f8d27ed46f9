"""Rollout browsing in plain Python: steps, reward filter and sort, and pairing two runs.

Why no Qt here: the Rollouts panel only displays what this module selects, so what a reward range
or a comparison shows is tested without a display.  Rows come from the store a step (or a search
page) at a time: nothing here holds a whole run.  A prompt or completion may be a chat (a list of
messages, ``pilothouse.wire.chat``): rows are matched by its canonical text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pilothouse.wire import chat

Row = dict[str, Any]  # one rollout row as logged: prompt, completion, reward, and any extra fields
Pair = tuple[Row | None, Row | None]  # the same prompt's rows from run A and run B (None: absent there)

ORDERS = ("logged", "asc", "desc")  # "logged": as the trainer sent them


def reward(row: Row | None) -> float | None:
    """The row's reward as a float, or None when it has none usable (missing, text, NaN)."""
    value = None if row is None else row.get("reward")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def key(row: Row, field: str) -> str:
    """A field's identity: its text, or a chat's canonical JSON (two prompts pair, group and share a
    history exactly when these are equal)."""
    return chat.key_text(row.get(field))


def merge_steps(*steps: Iterable[tuple[int, int, float | None]]) -> list[int]:
    """The steps any of the runs has rollouts for, from their ``rollout_steps`` listings."""
    return sorted({step for listing in steps for step, _, _ in listing})


def hit_pairs(steps: Sequence[int], a_rows: Callable[[int], list[Row]], b_rows: Callable[[int], list[Row]],
              a_hits: Iterable[tuple[int, Row]], b_hits: Iterable[tuple[int, Row]]) -> list[tuple[int, Pair]]:
    """Two runs searched: at each step of ``steps``, the same prompt's rows paired, kept where either
    side is one the search found (told by its step and text)."""
    found = {(s, key(r, "prompt"), key(r, "completion")) for s, r in (*a_hits, *b_hits)}

    def hit(step: int, row: Row | None) -> bool:
        return row is not None and (step, key(row, "prompt"), key(row, "completion")) in found
    return [(s, p) for s in steps for p in pair(a_rows(s), b_rows(s)) if hit(s, p[0]) or hit(s, p[1])]


@dataclass(frozen=True)
class Query:
    """What the panel's reward controls ask for of the rows shown (a step's, or a search's page; the
    words are the store's business); None bounds select everything."""

    reward_min: float | None = None
    reward_max: float | None = None
    order: str = "logged"

    def accepts(self, row: Row | None) -> bool:
        if row is None:
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
        return [p for _, p in self.lines((0, p) for p in pairs)]

    def lines(self, lines: Iterable[tuple[int, Pair]]) -> list[tuple[int, Pair]]:
        """(step, pair) lines, as ``pairs`` keeps and orders them (a single run's have B None)."""
        kept = [line for line in lines if self.accepts(line[1][0]) or self.accepts(line[1][1])]
        return sort_by_reward(kept, self.order, lambda line: _first_reward(line[1]))


def _first_reward(p: Pair) -> float | None:
    return reward(p[0]) if reward(p[0]) is not None else reward(p[1])


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
    """Match the two runs' rows by prompt (``key``).  A prompt sampled k times in each run pairs its
    occurrences in order (1st with 1st, ...).  A's order is kept; rows only B has come last."""
    b_by_prompt: dict[str, list[Row]] = {}
    for row in b_rows:
        b_by_prompt.setdefault(key(row, "prompt"), []).append(row)
    out: list[Pair] = []
    used: set[int] = set()
    for row in a_rows:
        waiting = b_by_prompt.get(key(row, "prompt"))
        match = waiting.pop(0) if waiting else None
        if match is not None:
            used.add(id(match))
        out.append((row, match))
    out.extend((None, row) for row in b_rows if id(row) not in used)
    return out


Place = tuple[tuple[int, Pair], int]  # a line, and which of the lines equal to it (identical rows repeat)


def place(lines: Sequence[tuple[int, Pair]], i: int) -> Place:
    """Line ``i`` as the live table can find it again once rebuilt: its step and rows (reloaded rows
    are equal, not the same objects) and its rank among equal lines, never its index, which moves
    when rows arrive or are sorted."""
    return lines[i], sum(1 for line in lines[:i] if line == lines[i])


def same_line(lines: Sequence[tuple[int, Pair]], where: Place) -> int | None:
    """The index of the line at ``where`` in rebuilt ``lines``; None when it is no longer shown."""
    line, rank = where
    found = [i for i, other in enumerate(lines) if other == line]
    return found[rank] if rank < len(found) else None

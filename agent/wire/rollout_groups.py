"""A step's rollouts as GRPO sees them: groups of one prompt, advantages, and the step's distributions.

Why shared: the agent derives the ``rollouts/*`` series from these (``pilothouse.node.rollout_series``),
and the CLI's ``--groups`` and the app's group view show the same groups; one definition keeps a
group's stats the same wherever they are read.  Plain Python and numpy, no I/O.

A group is the rows of one step with the same ``group`` field when one is given, else the same prompt
(a chat prompt compared whole: ``chat.key_text``).  Its rewards are *all equal* when they do not
spread at all: GRPO learns nothing from it (its advantages are all zero).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pilothouse.wire import chat

PREFIX = "rollouts/"
REWARD_SERIES = ("mean", "min", "p10", "p50", "p90", "max")
# every series the agent derives; a run's own metric of one of these names wins (none is written for it)
DERIVED = (*(f"{PREFIX}reward/{s}" for s in REWARD_SERIES), f"{PREFIX}groups/zero_std_frac",
           f"{PREFIX}length/mean", f"{PREFIX}length/p90", f"{PREFIX}length/max",
           f"{PREFIX}turns/mean", f"{PREFIX}tool_calls/mean")
QUANTILES = {"p10": 10, "p50": 50, "p90": 90}


def number(row: dict | None, key: str) -> float | None:
    """A row's field as a float, or None when it has none usable (missing, text, bool, NaN, ±Inf)."""
    value = None if row is None else row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def reward(row: dict | None) -> float | None:
    return number(row, "reward")


def group_key(row: dict) -> str:
    """What makes rows one group: their ``group`` field when the row has one, else their prompt."""
    if row.get("group") is not None:
        return "group " + chat.key_text(row["group"])
    return "prompt " + chat.key_text(row.get("prompt"))


def length(row: dict) -> float | None:
    """The completion's length: ``completion_tokens`` where logged, else characters of its text (a
    trajectory's, ``messages``, where the row has no completion)."""
    tokens = number(row, "completion_tokens")
    if tokens is not None:
        return tokens
    value = row.get("completion") if row.get("completion") is not None else row.get("messages")
    return None if value is None else float(chat.text_length(value))


def is_training(row: dict) -> bool:
    """Whether a row is a training sample: validation and evaluation rows (``split``, as the watcher
    marks a framework's val/eval dumps) are kept apart from the derived series."""
    return row.get("split", "train") == "train"


def is_agentic(row: dict) -> bool:
    """Whether the row's completion or trajectory is a chat (turns and tool calls are counted then)."""
    return chat.is_chat(row.get("completion")) or chat.is_chat(row.get("messages"))


def _trajectory(row: dict) -> Any:
    return row["messages"] if chat.is_chat(row.get("messages")) else row.get("completion")


@dataclass
class Group:
    """One group of a step: its rows (their places in the step), rewards and spread."""

    key: str
    rows: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.rows)

    @property
    def mean(self) -> float | None:
        return float(np.mean(self.rewards)) if self.rewards else None

    @property
    def std(self) -> float | None:
        return float(np.std(self.rewards)) if self.rewards else None

    @property
    def all_equal(self) -> bool:
        """Rewards that do not spread (two rewarded rows at least): no GRPO signal from this group."""
        return len(self.rewards) >= 2 and min(self.rewards) == max(self.rewards)

    def advantage(self, row: dict) -> float | None:
        """The row's logged ``advantage``; else GRPO's, (reward - group mean) / group std (0 where
        the rewards do not spread)."""
        logged = number(row, "advantage")
        r = reward(row)
        if logged is not None or r is None or self.mean is None:
            return logged
        return (r - self.mean) / self.std if self.std else 0.0


def groups(rows: Sequence[dict]) -> list[Group]:
    """A step's rows in groups, in the order their first rows were logged."""
    found: dict[str, Group] = {}
    for i, row in enumerate(rows):
        group = found.setdefault(group_key(row), Group(group_key(row)))
        group.rows.append(i)
        r = reward(row)
        if r is not None:
            group.rewards.append(r)
    return list(found.values())


@dataclass(frozen=True)
class StepStats:
    """What the derived series need of one step's rows, gathered over the calls that logged them: a
    few numbers per row, never the text.  Immutable: ``add`` returns a new one (the agent can undo a
    message's changes by keeping the old)."""

    rewards: tuple[float, ...] = ()
    lengths: tuple[float, ...] = ()
    turns: tuple[int, ...] = ()
    tool_calls: tuple[int, ...] = ()
    spreads: tuple[tuple[str, float, float, int], ...] = ()  # (group, least reward, most, rewarded rows)

    def add(self, rows: Iterable[dict]) -> StepStats:
        rows = [row for row in rows if is_training(row)]
        rewards = [r for r in map(reward, rows) if r is not None]
        lengths = [n for n in map(length, rows) if n is not None]
        agentic = [_trajectory(row) for row in rows if is_agentic(row)]
        spread = {key: (lo, hi, n) for key, lo, hi, n in self.spreads}
        for row in rows:
            r = reward(row)
            if r is not None:
                key = group_key(row)
                lo, hi, n = spread.get(key, (r, r, 0))
                spread[key] = (min(lo, r), max(hi, r), n + 1)
        return StepStats(self.rewards + tuple(rewards), self.lengths + tuple(lengths),
                         self.turns + tuple(map(chat.turns, agentic)),
                         self.tool_calls + tuple(map(chat.tool_calls, agentic)),
                         tuple((k, *v) for k, v in spread.items()))

    def series(self) -> dict[str, float]:
        """The derived series' values at this step: only those the rows give (no reward: no reward
        series; no group of two rewarded rows: no zero_std_frac; no chat: no turns)."""
        out: dict[str, float] = {}
        if self.rewards:
            r = np.asarray(self.rewards)
            out |= {f"{PREFIX}reward/mean": float(r.mean()), f"{PREFIX}reward/min": float(r.min()),
                    f"{PREFIX}reward/max": float(r.max())}
            out |= {f"{PREFIX}reward/{name}": float(v)
                    for name, v in zip(QUANTILES, np.percentile(r, list(QUANTILES.values())))}
        spreads = [lo == hi for _, lo, hi, n in self.spreads if n >= 2]
        if spreads:
            out[f"{PREFIX}groups/zero_std_frac"] = sum(spreads) / len(spreads)
        if self.lengths:
            n = np.asarray(self.lengths)
            out |= {f"{PREFIX}length/mean": float(n.mean()), f"{PREFIX}length/p90": float(np.percentile(n, 90)),
                    f"{PREFIX}length/max": float(n.max())}
        if self.turns:
            out[f"{PREFIX}turns/mean"] = float(np.mean(self.turns))
            out[f"{PREFIX}tool_calls/mean"] = float(np.mean(self.tool_calls))
        return {name: out[name] for name in DERIVED if name in out}

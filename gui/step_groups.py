"""A step's rows as GRPO groups and as a reward distribution, for the Rollouts panel's group view
and histogram.

Why no Qt here: which rows form a group, their advantages, the order they are listed in, which
groups give no signal and what the histogram counts are decided here and tested without a display;
the groups themselves are ``pilothouse.wire.rollout_groups``' (the CLI and the agent's derived
series use the same).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pilothouse.wire import rollout_groups

from .rollouts import Row, reward, sort_by_reward
from .transcript import summary

MAX_BARS = 20  # distinct rewards up to this many get a bar each; more are binned into this many bars
DIGITS = 9  # rewards equal to this many decimals share a bar (1 - 1/3 and 2/3 are one reward)
NO_SIGNAL = "all rewards equal: no signal"


@dataclass(frozen=True)
class Member:
    """A row of a group: its place in the step's rows, reward and advantage."""

    index: int
    row: Row
    reward: float | None
    advantage: float | None


@dataclass(frozen=True)
class GroupLine:
    """One group as the view lists it."""

    label: str  # the group's ``group`` field, else its prompt in one line
    size: int
    mean: float | None
    std: float | None
    all_equal: bool  # GRPO learns nothing from it: marked NO_SIGNAL
    members: list[Member]


def group_lines(rows: Sequence[Row], order: str = "logged") -> list[GroupLine]:
    """The step's groups in the order they were logged; each group's rows ``order``ed by advantage
    ("logged", "asc", "desc"; rows without one last)."""
    out = []
    for group in rollout_groups.groups(rows):
        first = rows[group.rows[0]]
        label = f"group {first['group']}" if first.get("group") is not None else summary(first.get("prompt"))
        members = [Member(i, rows[i], reward(rows[i]), group.advantage(rows[i])) for i in group.rows]
        out.append(GroupLine(label, group.size, group.mean, group.std, group.all_equal,
                             sort_by_reward(members, order, lambda m: m.advantage)))
    return out


@dataclass(frozen=True)
class Bars:
    """A histogram of one or more runs' rewards over the same bars."""

    centers: list[float]
    width: float
    counts: list[list[int]]  # per run, per bar


def reward_bars(runs: Sequence[Sequence[Row]]) -> Bars:
    """The runs' rewards (rows without a usable one left out) over shared bars: a bar per distinct
    reward when there are at most MAX_BARS (a 0/1 reward shows two bars, not a binned range), else
    MAX_BARS equal bins over the range."""
    values = [np.round([r for r in map(reward, rows) if r is not None], DIGITS) for rows in runs]
    every = np.concatenate(values) if values else np.array([])
    if not every.size:
        return Bars([], 1.0, [[] for _ in runs])
    distinct = np.unique(every)
    if distinct.size <= MAX_BARS:
        width = float(np.diff(distinct).min()) * 0.8 if distinct.size > 1 else 0.2 * max(1.0, abs(distinct[0]))
        counts = [[int((v == d).sum()) for d in distinct] for v in values]
        return Bars([float(d) for d in distinct], width, counts)
    edges = np.histogram_bin_edges(every, MAX_BARS)
    counts = [[int(c) for c in np.histogram(v, edges)[0]] for v in values]
    return Bars([float(c) for c in (edges[:-1] + edges[1:]) / 2], float(edges[1] - edges[0]), counts)

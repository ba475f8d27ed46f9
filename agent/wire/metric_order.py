"""Which metrics matter first: what a researcher watching an RL post-training run looks for.

One order for every place that must pick or sort metrics (the agent's short run summary, the
CLI's last values, the app's charts): reward-like first, then KL, loss, entropy, lengths, the rest.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

_GROUPS = tuple(re.compile(p, re.IGNORECASE) for p in (
    r"reward|score|return|accuracy|win_?rate",
    r"(^|[/_.])kl($|[/_.])|kl_?div",
    r"loss",
    r"entropy",
    r"length|len($|[/_.])|tokens",
))


@functools.lru_cache(maxsize=1 << 16)  # a `runs` reply sorts every run's names each second
def importance(name: str) -> tuple[int, int, int, int, str]:
    """Sort key: the group a metric falls in, then less nested names, then names that start with
    the group's word (``reward`` before ``frac_reward_zero_std``), then shorter ones."""
    for group, pattern in enumerate(_GROUPS):
        match = pattern.search(name)
        if match:
            return group, name.count("/"), match.start(), len(name), name
    return len(_GROUPS), name.count("/"), 0, len(name), name


def by_importance(names: Iterable[str]) -> list[str]:
    return sorted(names, key=importance)

"""Which metrics matter first: what a researcher watching an RL post-training run looks for.

One order for every place that must pick or sort metrics (the agent's short run summary, the
CLI's last values, the app's charts): reward-like first, then KL, loss, entropy, lengths, the rest.
``key_metric`` picks the one headline a run's row shows, the same way for the CLI and the app.
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


_VARIANT = re.compile(r"(^|[/_.])(std|stddev|var|min|max)($|[/_.])", re.IGNORECASE)


@functools.lru_cache(maxsize=1 << 16)  # a `runs` reply sorts every run's names each second
def importance(name: str) -> tuple[int, int, int, int, int, str]:
    """Sort key: the group a metric falls in, then less nested names, then names that start with
    the group's word (``reward`` before ``frac_reward_zero_std``), then a mean before its spread
    and extremes (``reward/mean`` before ``reward/std``), then shorter ones."""
    variant = int(_VARIANT.search(name) is not None)
    for group, pattern in enumerate(_GROUPS):
        match = pattern.search(name)
        if match:
            return group, name.count("/"), match.start(), variant, len(name), name
    return len(_GROUPS), name.count("/"), 0, variant, len(name), name


def by_importance(names: Iterable[str]) -> list[str]:
    return sorted(names, key=importance)


_TOKENS = re.compile(r"[/_.\-]")
_SPREAD = frozenset({"std", "stddev", "var", "variance"})  # how wide a value is, not how good
_EXTREMES = frozenset({"min", "max", "minimum", "maximum"})
_QUANTILE = re.compile(r"^p\d{1,2}$")  # the agent's rollouts/reward/p10 ...: one end of a distribution
_REWARD_HEADS = ("reward", "reward/mean", "rewards/mean")  # the best headlines, best first


@functools.lru_cache(maxsize=1 << 16)
def _headline_rank(name: str) -> tuple[int, int, int, int, str] | None:
    """How good a headline ``name`` makes (lower is better), or None if it makes none: a reward
    (an exact mean first, min/max last), then a loss.  A spread (``reward_std``) or a fraction
    (``frac_reward_zero_std``) never heads a run: it says how noisy the reward is, not how good."""
    low = name.lower()
    # `train/loss` reads as `loss`, the agent's `rollouts/reward/mean` as `reward/mean` (after the run's own)
    core = low.removeprefix("train/").removeprefix("train_").removeprefix("rollouts/")
    tokens = set(_TOKENS.split(core))
    extreme = bool(tokens & _EXTREMES) or any(_QUANTILE.match(t) for t in tokens)
    if tokens & _SPREAD or any(t.startswith("frac") for t in tokens):
        return None
    prefixed = int(core != low)
    if tokens & {"reward", "rewards"} and "loss" not in tokens:  # a reward model's loss is a loss
        tier = _REWARD_HEADS.index(core) if core in _REWARD_HEADS else 4 if extreme else 3
    elif "loss" in tokens and not extreme:
        tier = 5 if core == "loss" else 6
    else:
        return None
    return tier, prefixed, core.count("/"), len(core), name


def key_metric(names: Iterable[str], preferred: str | None = None) -> str | None:
    """The one metric a run is summed up by (its row in `pilothouse runs` and the app): the
    project's chosen ``preferred`` if the run logs it, else a reward, else a loss, else the most
    important name.  One function, so the CLI and the app never disagree.  None: no metrics."""
    have = list(names)
    if preferred is not None and preferred in have:
        return preferred
    ranked = [(rank, name) for name in have if (rank := _headline_rank(name)) is not None]
    if ranked:
        return min(ranked)[1]
    return min(have, key=importance, default=None)

"""A framework's record of a sample as a rollout row: its prompt, completion, reward and advantage
under those names, every other field kept.

Why one place: each framework names them its own way (verl's input/output/score, NeMo RL's
content/rewards, ...), and a row must hold only what the agent takes (text, numbers, chats in
``prompt``/``completion``/``messages``): a field that is not (verl's ground truth may be a map) is kept
as its JSON text rather than dropped, and a chat the agent would refuse as its JSON text too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pilothouse.watch.sources import Parsed
from pilothouse.wire import chat
from pilothouse.wire.checks import SCALARS

SPLITS = {"train": "train", "training": "train", "val": "val", "validation": "val", "eval": "eval", "test": "test"}


def plain(key: str, value: Any) -> Any:
    """``value`` as the agent takes it in field ``key``: as is, else its JSON text."""
    if isinstance(value, SCALARS) or chat.check_field(key, value) is None:
        return value
    return json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)


def number(value: Any) -> float | None:
    """A reward or an advantage as a float (a one-element list, NeMo RL's way, unwrapped)."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def row(fields: dict[str, Any], *, prompt: Any = None, completion: Any = None, reward: Any = None,
        advantage: Any = None, split: str | None = None, messages: Any = None,
        used: tuple[str, ...] = ()) -> dict[str, Any]:
    """A rollout row: the named parts first (those given), then ``fields`` less the ``used`` keys."""
    out: dict[str, Any] = {}
    for key, value in (("prompt", prompt), ("completion", completion), ("messages", messages)):
        if value is not None:
            out[key] = plain(key, value)
    for key, value in (("reward", reward), ("advantage", advantage)):
        n = number(value)
        if n is not None:
            out[key] = n
        elif value is not None:
            out[key] = plain(key, value)
    if split is not None and split != "train":
        out["split"] = split
    for key, value in fields.items():
        if key not in used and key not in out and isinstance(key, str):
            out[key] = plain(key, value)
    return out


def scalars(values: dict[str, Any]) -> dict[str, float]:
    """The numbers of a flat map of metrics (a null, text or a list left out; NaN and ±Inf kept)."""
    return {k: float(v) for k, v in values.items()
            if isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)}


def samples(path: Path, needs: tuple[str, ...]) -> Iterator[tuple[int, dict[str, Any]]]:
    """A step file's samples, a JSON object a line, with their line numbers: one without the fields
    ``needs`` is a ValueError naming its line (the file is not of the format its name says)."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            sample = json.loads(line)
            if not isinstance(sample, dict) or not set(needs) <= set(sample):
                raise ValueError(f"line {n} has no {' and '.join(needs)}")
            yield n, sample


def at_step(path: Path, step: int, rows: list[dict[str, Any]]) -> Parsed:
    """A step file's rows at ``step``, at the file's time (the frameworks write none per sample)."""
    return Parsed(rollouts=[(step, path.stat().st_mtime, rows)] if rows else [])

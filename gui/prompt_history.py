"""A prompt's history: the same prompt's rows at every step it was sampled, newest first.

Why through the search index: a run of millions of rows is never read whole, so the store is asked
for rows whose prompt holds a few of this prompt's words (``in_prompt``), a bounded number of hits
(HISTORY_HITS), and of those only rows whose prompt is exactly this one (``chat.key_text``) are kept.
Two runs shown stay paired by prompt at each step.  Plain Python on a ``LocalStore``: tested without
a display, called by the panel when a row is selected (never per paint).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pilothouse.wire import chat

from .local_store import LocalStore
from .models import RunKey
from .rollouts import Pair, Row, pair

HISTORY_HITS = 400  # search hits read per run at most: a prompt's history costs a bounded read
PAGE = 200
WORDS = 4  # the prompt's longest words are searched for: long words are the rare ones
_WORD = re.compile(r"[^\W_]+")  # letters and digits, as the index splits text


def prompt_words(prompt: Any) -> str:
    """A few distinctive words of a prompt: its longest, from the last user message of a chat (a
    system prompt every row shares would match everything).  Empty when it has none."""
    if chat.is_chat(prompt):
        said = [m for m in prompt if m.get("role") == "user"]
        source = chat.content_text(said[-1].get("content")) if said else chat.field_text(prompt)
    else:
        source = "" if prompt is None else str(prompt)
    seen: dict[str, str] = {}
    for word in _WORD.findall(source):
        seen.setdefault(word.casefold(), word)
    longest = sorted(seen.values(), key=len, reverse=True)[:WORDS]
    return " ".join(longest)


@dataclass
class History:
    """One run's rows of one prompt, newest step first (a step's rows as logged)."""

    rows: list[tuple[int, Row]]
    complete: bool  # False: HISTORY_HITS hits were read and more were left unread


def history(store: LocalStore, key: RunKey, prompt: Any, limit: int = HISTORY_HITS) -> History:
    """The run's rows whose prompt is ``prompt``, from at most ``limit`` search hits."""
    words = prompt_words(prompt)
    if not words:
        return History([], True)
    want = chat.key_text(prompt)
    found: list[tuple[int, int, int, Row]] = []
    before: int | None = None
    read = 0
    while read < limit:
        hits, before = store.search_rollouts(*key, words, before, min(PAGE, limit - read), in_prompt=True)
        read += len(hits)
        found.extend(hit for hit in hits if chat.key_text(hit[3].get("prompt")) == want)
        if before is None:
            break
    found.sort(key=lambda hit: (-hit[0], hit[2], hit[1]))  # newest step first, each step's rows as logged
    return History([(step, row) for step, _, _, row in found], before is None)


def paired(a: list[tuple[int, Row]], b: list[tuple[int, Row]] | None = None) -> list[tuple[int, Pair]]:
    """History lines, newest step first: one run's rows, or two runs' rows of each step side by side
    (the k-th of A with the k-th of B; a step only one run sampled has the other side None)."""
    if b is None:
        return [(step, (row, None)) for step, row in a]
    by_step: dict[int, tuple[list[Row], list[Row]]] = {}
    for side, rows in enumerate((a, b)):
        for step, row in rows:
            by_step.setdefault(step, ([], []))[side].append(row)
    return [(s, p) for s in sorted(by_step, reverse=True) for p in pair(*by_step[s])]

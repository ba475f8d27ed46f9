"""Values as a model reads them: plain JSON, bounded, nothing lost silently.

Why: a tool's answer goes into a model's context.  A NaN must stay a NaN (JSON has none, and the SDK's
serializer would write ``null``: a collapsed reward would read as "no value"), a completion of 40,000
characters must not fill the context, and what was cut says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

STRING_CHARS = 2000  # a string (a completion, a prompt, a config value) kept at most this long
ITEMS = 50  # items of a list or keys of a mapping kept at most (a chat's messages, a config's keys)
DEPTH = 8  # nesting kept at most


def number(value: float) -> float | str:
    """A float as JSON holds it: finite as is, else ``"nan"``, ``"inf"`` or ``"-inf"`` (as `pilothouse
    export --format jsonl` writes them)."""
    return value if math.isfinite(value) else repr(value)


def plain(value: Any, chars: int = STRING_CHARS, items: int = ITEMS, depth: int = DEPTH) -> Any:
    """``value`` as bounded JSON: non-finite floats as strings, long strings cut with a note of how
    long they were, long lists and mappings cut with a note of how many were left out."""
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return number(value)
    if isinstance(value, str):
        return value if len(value) <= chars else f"{value[:chars]}… [{len(value) - chars} more characters]"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if depth <= 0:
        return "…"
    if isinstance(value, Mapping):
        out = {str(k): plain(v, chars, items, depth - 1) for k, v in list(value.items())[:items]}
        if len(value) > items:
            out["…"] = f"{len(value) - items} more keys"
        return out
    if isinstance(value, (list, tuple)):
        out_list = [plain(v, chars, items, depth - 1) for v in value[:items]]
        if len(value) > items:
            out_list.append(f"… {len(value) - items} more items")
        return out_list
    return plain(str(value), chars, items, depth)


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"

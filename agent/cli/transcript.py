"""A rollout row as a terminal shows it: its numbers on one line, then each text field cut to a few
lines, and a chat (a list of messages) as a transcript: each message's role and content, the tools it
called as ``name(arguments)``, the tool results.

Why its own module: ``pilothouse rollouts`` prints rows one by one (a step, a search) and by group
(``--groups``), and all of them must cut text the same way and pass every string from the run through
``printable``: a rollout is text a model wrote, and a hostile one must not reach the terminal as
escape sequences.  ``--json`` never comes here: it prints rows exactly as logged.
"""

from __future__ import annotations

import math
from typing import Any

from pilothouse.text import fmt_value, printable
from pilothouse.wire import chat

TEXT_LINES = 3  # lines shown of a prompt, a completion, or one message of a chat
HEAD_MESSAGES = 2  # of a long chat: its first messages (the system prompt, the task) ...
TAIL_MESSAGES = 6  # ... and its last (how it ended); those between are counted, not shown
TEXTS = ("prompt", "completion", "messages")  # shown first, in this order
NUMBERS = ("reward", "advantage")  # first on a row's line of numbers, then rewards/*, then the rest
LABEL = 12  # width of a field's name in front of its text
INDENT = " " * (4 + LABEL + 1)  # where a field's text starts
MAX_LINE = 4096  # characters of a line read before it is cut to the terminal's width


def number(value: Any) -> float | None:
    """A row's value as a number to sort or average by; None for text, booleans, None and NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def row_lines(label: str, row: dict, width: int) -> list[str]:
    """A row's numbers on one line after ``[label]``, then a block per text or chat field."""
    numbers = "  ".join(f"{k[:60]}={_value(row[k])}" for k in _numbers(row))
    lines = [clip(printable(f"[{label}] {numbers}"), width)]
    shown = [*(k for k in TEXTS if k in row), *(k for k, v in row.items() if _is_text(v) and k not in TEXTS)]
    for key in shown:
        lines.extend(field_lines(key, row[key], width))
    return lines


def field_lines(key: str, value: Any, width: int) -> list[str]:
    """A text field cut to TEXT_LINES lines, or a chat as a transcript, under the field's name."""
    label = "    " + printable(key)[:LABEL].ljust(LABEL) + " "
    lines = _chat_lines(value) if chat.is_chat(value) else _cut(value if isinstance(value, str) else str(value))
    return [clip((label if i == 0 else INDENT) + text, width - len(tail)) + tail
            for i, (text, tail) in enumerate(lines)]


def gist(value: Any) -> str:
    """A field on one line, for a row among many (a group's rows): a text's first line; of a chat,
    how many messages and tool calls it holds and its last message's first line."""
    if not chat.is_chat(value):
        text = value if isinstance(value, str) else "" if value is None else str(value)
        return printable((text[:MAX_LINE].splitlines() or [""])[0])
    last = value[-1] if value else {}
    said = (chat.content_text(last.get("content"))[:MAX_LINE].splitlines() or [""])[0]
    calls = chat.tool_calls(value)
    counts = f"{len(value)} message{'s' * (len(value) != 1)}" + (f", {calls} tool call{'s' * (calls != 1)}" * bool(calls))
    return printable(f"({counts}) {last.get('role', '?')}: {said}")


def clip(line: str, width: int) -> str:
    return line if len(line) <= width else line[:max(0, width - 1)] + "…"


def _is_text(value: Any) -> bool:
    return isinstance(value, str) or chat.is_chat(value)


def _numbers(row: dict) -> list[str]:
    keys = [k for k, v in row.items() if not _is_text(v)]
    return sorted(keys, key=lambda k: (NUMBERS.index(k) if k in NUMBERS else 2 + (not k.startswith("rewards/"))))


def _value(value: Any) -> str:
    return fmt_value(value) if isinstance(value, float) else str(value)


Line = tuple[str, str]  # a line's text, cut to fit, and what must stay at its end (a note of lines cut)


def _cut(text: str) -> list[Line]:
    """Text's first TEXT_LINES lines, printable, the last noting how many more there were.  A line
    longer than any terminal is cut before it is made printable (a completion may be megabytes)."""
    lines = text.splitlines() or [""]
    out = [(printable(line[:MAX_LINE].expandtabs(4)), "") for line in lines[:TEXT_LINES]]
    if len(lines) > TEXT_LINES:
        out[-1] = (out[-1][0], f" … (+{len(lines) - TEXT_LINES} more lines)")
    return out


def _chat_lines(messages: list[dict]) -> list[Line]:
    """A transcript: each message as ``role: content`` (its later lines indented under it), a tool
    call as ``→ name(arguments)``, a tool result as ``tool NAME: content``.  A long chat shows its
    first and last messages and counts those left out between."""
    if not messages:
        return [("(no messages)", "")]
    shown: list[Any] = list(enumerate(messages))
    if len(messages) > HEAD_MESSAGES + TAIL_MESSAGES:
        left_out = len(messages) - HEAD_MESSAGES - TAIL_MESSAGES
        shown = [*shown[:HEAD_MESSAGES], left_out, *shown[-TAIL_MESSAGES:]]
    lines: list[Line] = []
    for item in shown:
        if isinstance(item, int):
            lines.append((f"… {item} message{'s' * (item != 1)} left out (--json has them all)", ""))
        else:
            lines.extend(_message_lines(item[1]))
    return lines


def _message_lines(message: dict) -> list[Line]:
    who = message.get("role", "?")
    if who == "tool" and isinstance(message.get("name"), str):
        who = f"tool {message['name']}"
    text = chat.content_text(message.get("content"))
    content = _cut(text) if text else [("", "")]
    head = (printable(f"{who}:") + (f" {content[0][0]}" if text else ""), content[0][1])
    calls = [("  " + printable(f"→ {name}({args[:MAX_LINE]})"), "") for name, args in chat.calls(message)]
    return [head, *(("  " + line, tail) for line, tail in content[1:]), *calls]

"""A rollout row as a person reads it: chat fields as a transcript of parts, folds, one-line summaries.

Why no Qt here: what a transcript holds (roles, tool calls with pretty arguments, tool results), which
parts are long enough to fold, and what a table cell says of a whole trajectory are decisions the
Rollouts panel only draws, so they are tested without a display.  The chat format itself (what a
message may hold) is ``pilothouse.wire.chat``'s.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pilothouse.wire import chat

FOLD_CHARS = 600  # a part longer than this, or of more lines than FOLD_LINES, opens folded
FOLD_LINES = 12
PREVIEW_LINES = 6  # what a folded part shows of itself
PREVIEW_CHARS = 300
SUMMARY_CHARS = 200  # a cell's summary is cut here (the table elides further to its width)


@dataclass(frozen=True)
class Part:
    """One block of a transcript: a message's content, one of its tool calls, or its reasoning."""

    role: str  # the message's role (system, user, assistant, tool, ...)
    kind: str  # "content", "call" (a tool call the message makes) or "reasoning"
    title: str  # what the block's header says: the role, the tool called, the call answered
    body: str

    @property
    def long(self) -> bool:
        """Long enough to open folded: a trajectory of many tool outputs stays scannable."""
        return folds(self.body)


def folds(body: str) -> bool:
    return len(body) > FOLD_CHARS or body.count("\n") >= FOLD_LINES


def preview(body: str) -> str:
    """A folded part's start: its first lines, cut to PREVIEW_CHARS."""
    head = "\n".join(body.split("\n")[:PREVIEW_LINES])
    return head if len(head) <= PREVIEW_CHARS else head[:PREVIEW_CHARS]


def fold_note(body: str) -> str:
    lines = body.count("\n") + 1
    return f"{lines} lines, {len(body)} characters"


def pretty_arguments(arguments: Any) -> str:
    """A tool call's arguments indented as JSON where they are JSON (a map, or text that parses to a
    map or list); other text as sent (a model's malformed call is shown as it made it)."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return arguments
        if not isinstance(parsed, (dict, list)):
            return arguments
        arguments = parsed
    if arguments is None:
        return ""
    return json.dumps(arguments, ensure_ascii=False, indent=2)


def parts(value: list[dict]) -> list[Part]:
    """A chat field's messages as parts, in order: each message's reasoning, content and tool calls."""
    out: list[Part] = []
    for message in value:
        role = str(message.get("role"))
        reasoning = message.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            out.append(Part(role, "reasoning", f"{role} · reasoning", reasoning))
        calls = message.get("tool_calls") or []
        body = chat.content_text(message.get("content"))
        if body or not calls:
            out.append(Part(role, "content", _title(message, role), body))
        for call in calls:
            function = call["function"]
            ident = f" ({call['id']})" if call.get("id") else ""
            out.append(Part(role, "call", f"{role} → {function['name']}{ident}",
                            pretty_arguments(function.get("arguments"))))
    return out


def _title(message: dict, role: str) -> str:
    """A tool result names the tool and the call it answers (``name``, ``tool_call_id``)."""
    said = [str(message[k]) for k in ("name", "tool_call_id") if message.get(k) is not None]
    return f"{role} · {' · '.join(said)}" if said else role


def summary(value: Any) -> str:
    """A field in one line for a table cell.  Text as it is; a chat that is only asked (no assistant
    turn) by its last user message (what tells prompts apart: they share their system message); a
    trajectory by its turns, tool calls and final answer."""
    if not chat.is_chat(value):
        return "" if value is None else str(value)
    if not chat.turns(value):
        said = [m for m in value if m.get("role") == "user"] or value
        return _cut(_flat(chat.content_text(said[-1].get("content")))) if said else ""
    turns, calls = chat.turns(value), chat.tool_calls(value)
    head = f"{turns} turn{'s' * (turns != 1)} · {calls} tool call{'s' * (calls != 1)}"
    return _cut(f"{head} · final: {final_answer(value)}")


def final_answer(value: list[dict]) -> str:
    """The last assistant message's text; a last turn that only calls a tool says which."""
    for message in reversed(value):
        if message.get("role") != "assistant":
            continue
        text = _flat(chat.content_text(message.get("content")))
        if text:
            return text
        named = chat.calls(message)
        if named:
            return "→ " + ", ".join(f"{name}({_flat(args)})" for name, args in named)
    return ""


def _flat(text: str) -> str:
    """One line of a text's start (a tool's output may be megabytes; a cell shows a line)."""
    return " ".join(text[:4 * SUMMARY_CHARS].split())


def _cut(text: str) -> str:
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 1] + "…"


def cells(row: dict) -> tuple[str, str]:
    """A row's prompt and completion in one line each.  A row that logs its whole trajectory as
    ``messages`` (and no completion) is summed up from it, its prompt being the messages before the
    first assistant turn."""
    prompt, completion = row.get("prompt"), row.get("completion")
    messages = row.get("messages")
    if completion is None and chat.is_chat(messages):
        completion = messages
        if prompt is None:
            asked = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
            prompt = messages[:asked]
    return summary(prompt), summary(completion)


@dataclass(frozen=True)
class Section:
    """A heading and a field under it: plain text shown whole, or a chat's parts."""

    heading: str
    text: str = ""
    parts: tuple[Part, ...] = ()


def _section(heading: str, value: Any) -> Section:
    if chat.is_chat(value):
        return Section(heading, parts=tuple(parts(value)))
    return Section(heading, text="" if value is None else str(value))


def sections(step: int, sides: Sequence[tuple[str, dict | None]]) -> list[Section]:
    """What the detail pane reads for one line: the step, the prompt once, then each run's
    completion (headed by the run's name and the row's other fields) and trajectory (``messages``)."""
    present = [(name, row) for name, row in sides if row is not None]
    if not present:
        return []
    out = [Section(f"step {step}"), _section("PROMPT", present[0][1].get("prompt"))]
    for name, row in present:
        extra = "  ".join(f"{k}={v}" for k, v in row.items() if k not in chat.CHAT_FIELDS)
        fields = [f for f in ("completion", "messages") if f in row] or ["completion"]
        for field in fields:
            heading = f"{'COMPLETION' if field == 'completion' else 'TRAJECTORY'} · {name}"
            out.append(_section(f"{heading}   {extra}" if field == fields[0] and extra else heading, row.get(field)))
    return out

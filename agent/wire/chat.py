"""Chat-shaped rollout fields: a prompt, a completion or a whole trajectory as a list of messages.

Why its own module: agentic RL logs each rollout as a conversation (system and user messages,
assistant turns, tool calls, tool results), in the chat format TRL, verl, verifiers/prime-rl and ART
share with the OpenAI API.  The trainer refuses a bad shape before it is queued, the agent refuses it
in a message, the search index and the derived series read text and counts out of it, and the CLI
and the app show it: one definition of what a message may hold serves them all.

A message is a map with ``role`` (text) and any of ``content`` (text, None, or a list of parts: maps
of ``type`` and text/number fields, an image's ``image_url`` map included), ``tool_calls`` (maps with
``function``: ``name`` and ``arguments``, text or a JSON-like map, and optional ``id`` and ``type``),
``tool_call_id``, ``name``, and other text or number fields (``reasoning_content``, ...).
Nothing is rewritten: a row comes back exactly as logged.
"""

from __future__ import annotations

import json
from typing import Any

from pilothouse.wire.checks import SCALARS

CHAT_FIELDS = ("prompt", "completion", "messages")  # the row fields that may hold a list of messages
MAX_MESSAGES = 4096  # per field: a long agentic trajectory, not a dataset
MAX_ROLE_CHARS = 64
MAX_JSON_DEPTH = 8  # a tool call's arguments as a map: nesting below the message itself


def is_chat(value: Any) -> bool:
    return isinstance(value, list)


def check_field(key: str, value: Any) -> str | None:
    """What is wrong with a row's field ``key`` (None: nothing): text and numbers anywhere, a list of
    messages in CHAT_FIELDS."""
    if isinstance(value, SCALARS):
        return None
    if key not in CHAT_FIELDS:
        return f"has unsupported type {type(value).__name__} (a list of messages may be in {', '.join(CHAT_FIELDS)})"
    if not isinstance(value, list):
        return f"has unsupported type {type(value).__name__}: text, a number or a list of messages"
    if len(value) > MAX_MESSAGES:
        return f"has {len(value)} messages, at most {MAX_MESSAGES}"
    for i, message in enumerate(value):
        problem = _message_problem(message)
        if problem is not None:
            return f"message {i} {problem}"
    return None


def _message_problem(message: Any) -> str | None:
    if not isinstance(message, dict):
        return f"must be a map with a role, got {type(message).__name__}"
    role = message.get("role")
    if not isinstance(role, str) or not 0 < len(role) <= MAX_ROLE_CHARS:
        return f"needs a role: text of 1 to {MAX_ROLE_CHARS} characters"
    for key, value in message.items():
        if not isinstance(key, str):
            return "has a field name that is not text"
        if key == "content":
            problem = _content_problem(value)
        elif key == "tool_calls":
            problem = _calls_problem(value)
        elif isinstance(value, SCALARS):
            continue
        else:
            problem = f"has unsupported type {type(value).__name__}"
        if problem is not None:
            return f"field {key!r} {problem}"
    return None


def _content_problem(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return None
    if not isinstance(content, list):
        return f"must be text, null or a list of parts, got {type(content).__name__}"
    for i, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            return f"part {i} must be a map with a type"
        if _json_problem(part, 1) is not None:
            return f"part {i} {_json_problem(part, 1)}"
    return None


def _calls_problem(calls: Any) -> str | None:
    if calls is None:
        return None
    if not isinstance(calls, list):
        return f"must be a list, got {type(calls).__name__}"
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return f"[{i}] needs function.name as text"
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, (str, dict)):
            return f"[{i}] function.arguments must be text or a map, got {type(arguments).__name__}"
        problem = _json_problem(call, 1)
        if problem is not None:
            return f"[{i}] {problem}"
    return None


def _json_problem(value: Any, depth: int) -> str | None:
    """Whether ``value`` is JSON-like (maps with text keys, lists, text, numbers) and not too deep."""
    if isinstance(value, SCALARS):
        return None
    if depth > MAX_JSON_DEPTH:
        return f"nests deeper than {MAX_JSON_DEPTH} levels"
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return "has a key that is not text"
        items = value.values()
    elif isinstance(value, list):
        items = value
    else:
        return f"holds unsupported type {type(value).__name__}"
    for item in items:
        problem = _json_problem(item, depth + 1)
        if problem is not None:
            return problem
    return None


# --- reading ----------------------------------------------------------------------------------

def arguments_text(arguments: Any) -> str:
    """A tool call's arguments as a person reads them: the text as sent, a map as compact JSON."""
    if arguments is None:
        return ""
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, sort_keys=True)


def content_text(content: Any) -> str:
    """A message's content as text: the text parts joined (an image part is named by its type)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] if isinstance(p.get("text"), str) else f"[{p['type']}]" for p in content)


def calls(message: dict) -> list[tuple[str, str]]:
    """(tool name, arguments as text) of each tool call a message makes."""
    return [(c["function"]["name"], arguments_text(c["function"].get("arguments"))) for c in message.get("tool_calls") or ()]


def field_text(value: Any) -> str:
    """Everything searchable of a field: its text, or of a chat every message's content, the tools
    called with their arguments, and the tool results (which are messages of role ``tool``)."""
    if not is_chat(value):
        return value if isinstance(value, str) else ""
    parts = []
    for message in value:
        text = content_text(message.get("content"))
        if text:
            parts.append(text)
        parts.extend(f"{name} {args}" for name, args in calls(message))
    return "\n".join(parts)


def text_length(value: Any) -> int:
    """``len(field_text(value))`` without joining the text: the derived series count every row's
    characters, and joining a trajectory's was most of their cost per chat row."""
    if not is_chat(value):
        return len(value) if isinstance(value, str) else 0
    sizes = []
    for message in value:
        text = content_text(message.get("content"))
        if text:
            sizes.append(len(text))
        sizes.extend(len(name) + 1 + len(args) for name, args in calls(message))
    return sum(sizes) + max(0, len(sizes) - 1)


def key_text(value: Any) -> str:
    """A field as one text that is equal exactly when the fields are: a prompt's identity for groups
    and a prompt's history (a chat as canonical JSON)."""
    if is_chat(value):
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return "" if value is None else str(value)


def turns(value: Any) -> int:
    """Assistant turns in a chat (0 for text)."""
    return sum(1 for m in value if m.get("role") == "assistant") if is_chat(value) else 0


def tool_calls(value: Any) -> int:
    """Tool calls made in a chat (0 for text)."""
    return sum(len(m.get("tool_calls") or ()) for m in value) if is_chat(value) else 0

"""A framework's chat message as a rollout row's message (``pilothouse.wire.chat``'s shape).

Why: prime-rl (verifiers) and ART log OpenAI-like messages, each with its own extras: verifiers'
tool calls are flat (``{id, name, arguments}``) and its assistant turns may carry opaque
``provider_state``; an OpenAI ``Choice``'s message carries ``refusal``, ``annotations``, ``audio``.
The agent refuses a message field that is neither text, a number, content nor tool calls, and a row
whose chat it refuses is kept only as JSON text; so a message keeps its role, content, tool calls
(in OpenAI's nesting) and its text or number fields, and drops nulls and opaque structures.
"""

from __future__ import annotations

from typing import Any

from pilothouse.wire.checks import SCALARS


def call(tool_call: Any) -> Any:
    """A tool call in OpenAI's shape (``{id, type, function: {name, arguments}}``) from OpenAI's or
    verifiers' flat one; anything else as it is (the agent's check says what is wrong with it)."""
    if not isinstance(tool_call, dict):
        return tool_call
    function = tool_call.get("function") if isinstance(tool_call.get("function"), dict) else tool_call
    out: dict[str, Any] = {"type": tool_call.get("type") or "function",
                           "function": {"name": function.get("name"), "arguments": function.get("arguments")}}
    if tool_call.get("id") is not None:
        out["id"] = tool_call["id"]
    return out


def message(raw: Any) -> Any:
    """One message with the fields a row's chat may hold (see the module's docstring)."""
    if not isinstance(raw, dict):
        return raw
    out: dict[str, Any] = {"role": raw.get("role")}
    for key, value in raw.items():
        if key == "role" or value is None:
            continue
        if key == "tool_calls" and isinstance(value, list):
            if value:
                out[key] = [call(c) for c in value]
        elif key == "content" or isinstance(value, SCALARS):
            out[key] = value
    return out


def chat(raws: list) -> list | None:
    """Messages as a row's chat; None for none."""
    return [message(m) for m in raws] or None

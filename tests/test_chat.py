"""The chat shape of rollout rows (``pilothouse.wire.chat``) read without a wire: what is searchable of a
chat, and its length as the derived series count it (without joining the text) are the same thing."""

from __future__ import annotations

import pytest

from pilothouse.wire import chat

CALL = {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": {"expr": "2+2", "n": [1, 2]}}}
SHAPES = [
    [{"role": "assistant", "content": None, "tool_calls": [CALL]}, {"role": "tool", "tool_call_id": "c1", "content": "4"},
     {"role": "assistant", "content": [{"type": "text", "text": "four"}, {"type": "image_url", "image_url": {"url": "x"}}]}],
    [{"role": "user", "content": "héllo\nthere"}],
    [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{\"a\": 1}"}}]}],
    [],
    "plain text",
    None,
]


@pytest.mark.parametrize("value", SHAPES, ids=["tools", "one", "string-args", "empty", "text", "none"])
def test_a_fields_length_is_that_of_its_searchable_text(value):
    assert chat.text_length(value) == len(chat.field_text(value))


def test_searchable_text_holds_contents_tool_names_arguments_and_results():
    text = chat.field_text(SHAPES[0])
    assert text.split("\n") == ['calc {"expr": "2+2", "n": [1, 2]}', "4", "four", "[image_url]"]
    assert chat.turns(SHAPES[0]) == 2 and chat.tool_calls(SHAPES[0]) == 1
    assert chat.key_text(SHAPES[1]) == chat.key_text([{"content": "héllo\nthere", "role": "user"}])  # key order

"""A run's rollouts by step, as the agent's ``rollouts`` query answers them: its bounds, shared by the
agent (which enforces them), the client and the CLI (which refuse what the agent would)."""

from __future__ import annotations

from typing import Any

from pilothouse.wire.checks import check_int
from pilothouse.wire.messages import MAX_INBOUND_BYTES, ProtocolError
from pilothouse.wire.records import check_rollouts

MAX_ROLLOUT_STEPS = 1000  # steps one query gathers (``last``): what a person reads, not an export
# batch bytes per reply page, passed by one batch at most (a trainer's is under MAX_INBOUND_BYTES / 2):
# a page stays far below MAX_MESSAGE_BYTES and one query holds the agent's loop for milliseconds; a
# larger answer comes in several pages, each its own query
ROLLOUT_PAGE_BYTES = MAX_INBOUND_BYTES
ROLLOUT_SLACK = 16  # batches of other steps passed over while gathering one step's: ranks interleave


def check_batch(body: Any) -> dict:
    """A rollout entry's body ``{"step", "time", "rows"}``, or ProtocolError: a reader shows nothing
    malformed."""
    if not isinstance(body, dict) or type(body.get("time")) is not float:
        raise ProtocolError("a rollout batch must be a map with step, time and rows")
    try:
        check_int(body.get("step"), "a rollout batch's step")
    except ValueError as exc:
        raise ProtocolError(str(exc)) from None
    check_rollouts(body.get("rows"))
    return body

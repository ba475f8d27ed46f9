"""A run's rollouts by step, as the agent's ``rollouts`` query answers them: its bounds, shared by the
agent (which enforces them), the client and the CLI (which refuse what the agent would); how a batch's
body is packed (a zstd frame per batch, so one batch decodes without reading any other); and how a
user's search words become an FTS5 query that cannot say anything but "these words".
"""

from __future__ import annotations

import re
from typing import Any

import zstandard

from pilothouse.wire.checks import check_int
from pilothouse.wire.messages import MAX_INBOUND_BYTES, MAX_INBOUND_CONTAINERS, ProtocolError, pack, unpack
from pilothouse.wire.records import check_rollouts

MAX_ROLLOUT_STEPS = 1000  # steps one query gathers (``last``): what a person reads, not an export
# batch bytes per reply page, passed by one batch at most (a trainer's is under MAX_INBOUND_BYTES / 2):
# a page stays far below MAX_MESSAGE_BYTES and one query holds the agent's loop for milliseconds; a
# larger answer comes in several pages, each its own query
ROLLOUT_PAGE_BYTES = MAX_INBOUND_BYTES
ROLLOUT_SLACK = 16  # batches of other steps passed over while gathering one step's: ranks interleave
MAX_SEARCH_HITS = 1000  # rows one search page returns, at most
MAX_SEARCH_CHARS = 500  # a search's words: what a person types, not a document
MAX_SEARCH_TERMS = 16

ZSTD_LEVEL = 3  # measured: level 3 to 9 changed bytes per rollout by under 10% and cost 3x the time
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# a body decodes to at most this: a trainer's batch is at most MAX_INBOUND_BYTES / 2 packed, and a
# frame claiming more (from a broken agent or a crafted archive) is refused before any allocation
MAX_BATCH_BYTES = MAX_INBOUND_BYTES


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


def pack_batch(step: int, wall_time: float, rows: list[dict]) -> bytes:
    """A rollout entry's body: msgpack ``{"step", "time", "rows"}`` in one zstd frame of its own, or left
    plain where a frame would not be smaller (a row or two of a few words)."""
    plain = pack({"step": step, "time": wall_time, "rows": rows})
    framed = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(plain)
    return framed if len(framed) < len(plain) else plain


def unpack_batch(blob: Any) -> dict:
    """A rollout body, zstd-framed or plain msgpack (small, or from before compression), checked as
    ``check_batch`` does; ProtocolError for anything else, including a frame that would decode to more
    than MAX_BATCH_BYTES."""
    if not isinstance(blob, bytes):
        raise ProtocolError("a rollout batch's body must be bytes")
    if blob.startswith(_ZSTD_MAGIC):
        size = zstandard.frame_content_size(blob)
        if not 0 <= size <= MAX_BATCH_BYTES:
            raise ProtocolError(f"a rollout batch must decode to at most {MAX_BATCH_BYTES} bytes with its size "
                                "in the frame")
        try:
            blob = zstandard.ZstdDecompressor().decompress(blob)
        except zstandard.ZstdError as exc:
            raise ProtocolError(f"a rollout batch's zstd frame is damaged: {exc}") from None
    return check_batch(unpack(blob, MAX_INBOUND_CONTAINERS))


_TERM = re.compile(r'"([^"]*)"|(\S+)')


def fts_query(words: Any) -> str:
    """A user's search as an FTS5 query: every word (a ``"quoted phrase"`` as one) must appear, a
    trailing ``*`` asks for a prefix.  Each term goes in as an FTS5 string, so operators, column
    filters and quotes a user types are only text; ValueError says what cannot be searched."""
    if not isinstance(words, str) or not words.strip():
        raise ValueError("search needs at least one word")
    if len(words) > MAX_SEARCH_CHARS:
        raise ValueError(f"a search is at most {MAX_SEARCH_CHARS} characters, got {len(words)}")
    if words.count('"') % 2:
        raise ValueError('a search has an unclosed quote (")')
    terms = []
    for phrase, word in _TERM.findall(words):
        term = phrase if phrase or not word else word
        prefix = not phrase and term.endswith("*")
        term = term.rstrip("*") if prefix else term
        if not any(c.isalnum() for c in term):  # FTS5 indexes letters and digits only: nothing to look for
            continue
        terms.append('"' + '""'.join(term.split('"')) + '"' + "*" * prefix)  # a quote doubled
    if not terms:
        raise ValueError(f"nothing to search for in {words[:60]!r}: a word needs a letter or a digit")
    if len(terms) > MAX_SEARCH_TERMS:
        raise ValueError(f"a search has at most {MAX_SEARCH_TERMS} words or phrases, got {len(terms)}")
    return " AND ".join(terms)

"""The wire protocol between trainers, the node agent and readers.

Every message is one msgpack map with a ``t`` (type) key, sent as the last frame
over DEALER -> ROUTER.  The set of types is closed: anything else is rejected by
``decode`` before the agent acts on it.  The app imports this module, never the
reverse.
"""


from __future__ import annotations

import math
from typing import Any

import msgpack

from pilothouse.wire.alert_rules import check_rules
from pilothouse.wire.checks import (
    check_command_id,
    check_config,
    check_int,
    check_name,
    check_run_id,
    check_session,
    check_token,
)
from pilothouse.wire.job import check_nodes
from pilothouse.wire.tuning import check_schema
from pilothouse.wire.watched import SOURCES

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # ZMQ_MAXMSGSIZE on a reader's socket: the agent's replies
# What the agent takes in.  Decoding costs memory per object, not per byte (an empty map is 64 B of
# Python for 1 B of frame, a 2-character string 59 B for 3), so both the frame and its maps and
# lists are bounded: one message costs the agent about 20x MAX_INBOUND_BYTES at worst (a frame of
# two-character strings; tests/test_bad_input_hostile.py measures it).
MAX_INBOUND_BYTES = 8 * 1024 * 1024  # ZMQ_MAXMSGSIZE on the agent's sockets; a trainer's batch is at most half
MAX_INBOUND_CONTAINERS = 1 << 19  # maps and lists in one inbound message; a trainer's batch is at most half
MAX_HELLO_BYTES = 1 << 20  # a run's config, schema and alert rules
MAX_PAGE_POINTS = 200_000  # points per reply page; keeps replies far below the frame bound
# metrics one tiers query answers: up to 3 MB each (a query's bound on blocks read), so a reply stays
# below MAX_MESSAGE_BYTES; a query holds the agent's loop as long as that many one-metric queries
# (10 metrics of a chart-wide view of a 100 M-point run: about 20 ms)
MAX_TIER_METRICS = 16
MAX_TIER_PIXELS = 16_384  # pixel columns a tiers query may fold into (a chart on an 8K screen and then some)


class ProtocolError(ValueError):
    """A peer sent something that is not a valid message; nothing was applied."""


def pack(msg: dict) -> bytes:
    return msgpack.packb(msg, use_bin_type=True)


class _TooManyContainers(Exception):
    pass


def unpack(frame: bytes, max_containers: int | None = None) -> Any:
    """msgpack -> Python; with ``max_containers``, decoding stops at the first map or list past it,
    so a frame of millions of empty maps is refused before it is built."""
    hooks = {}
    if max_containers is not None:
        left = max_containers

        def count(container: Any) -> Any:
            nonlocal left
            left -= 1
            if left < 0:
                raise _TooManyContainers
            return container

        hooks = {"object_hook": count, "list_hook": count}
    try:
        return msgpack.unpackb(frame, raw=False, strict_map_key=True, **hooks)
    except _TooManyContainers:
        raise ProtocolError(f"message holds more than {max_containers} maps and lists") from None
    except Exception as exc:  # msgpack raises several unrelated types for garbage
        raise ProtocolError(f"frame is not valid msgpack ({type(exc).__name__})") from None


# --- message validation ------------------------------------------------------------------

def _need(msg: dict, key: str, types: type | tuple, what: str | None = None) -> Any:
    value = msg.get(key)
    if not isinstance(value, types) or isinstance(value, bool) and bool not in _as_tuple(types):
        raise ProtocolError(f"{msg.get('t')!r} message needs {what or key} of type "
                            f"{'/'.join(t.__name__ for t in _as_tuple(types))}")
    return value


def _as_tuple(types: type | tuple) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _check_hello(msg: dict) -> None:
    _check_hb(msg)
    _wrap(check_token, msg.get("token"))
    _wrap(check_name, msg.get("project"), "project")
    _wrap(check_name, msg.get("name"), "run name")
    _wrap(check_name, msg.get("host"), "host")
    _wrap(check_int, msg.get("pid"), "pid", 1)
    _wrap(check_config, msg.get("config"))
    if "schema" in msg:
        _wrap(check_schema, msg["schema"])
    if "alerts" in msg:
        _wrap(check_rules, msg["alerts"], "alerts")
    if "nodes" in msg:
        _wrap(check_nodes, msg["nodes"])
    if "watched" in msg and msg["watched"] not in SOURCES:
        raise ProtocolError(f"'hello' watched must be one of {SOURCES} (what a watcher reads)")
    for key in ("pid_started", "created"):
        value = msg.get(key)
        if value is not None and (type(value) not in (int, float) or not math.isfinite(value)):
            raise ProtocolError(f"'hello' {key} must be a finite number of seconds")


def _check_rec(msg: dict) -> None:
    _check_hb(msg)
    seq = msg.get("seq")
    _wrap(check_int, seq, "'rec' seq", 1)
    if "floor" not in msg:
        raise ProtocolError("'rec' message needs floor")
    _wrap(check_int, msg.get("n"), "'rec' n (records in the batch)", 1)
    for key in ("keys", "metrics", "others"):
        _need(msg, key, list)
    _wrap(check_int, seq + msg["n"] - 1, "'rec' last seq", 1)


def _check_hb(msg: dict) -> None:
    _wrap(check_run_id, msg.get("run"))
    _wrap(check_int, msg.get("rank"), "rank")
    for key in ("floor", "dropped_records", "dropped_points"):
        if key in msg:
            _wrap(check_int, msg[key], key)
    if "step" in msg:  # -1: nothing logged or synced yet
        _wrap(check_int, msg["step"], "step", -1)
    if "session" in msg:
        _wrap(check_session, msg["session"])
    if "paused" in msg and type(msg["paused"]) is not bool:
        raise ProtocolError("'paused' must be true or false")


def _check_finish(msg: dict) -> None:
    _check_hb(msg)
    _wrap(check_int, msg.get("seq"), "'finish' seq")
    if msg.get("status", "finished") not in ("finished", "crashed"):
        raise ProtocolError("'finish' status must be finished or crashed")
    if "error" in msg and (not isinstance(msg["error"], str) or len(msg["error"]) > MAX_ERROR_CHARS):
        raise ProtocolError(f"'finish' error must be text of at most {MAX_ERROR_CHARS} characters")


COMMANDS = ("pause", "resume", "set", "checkpoint", "stop")
MAX_ERROR_CHARS = 2000  # why a trainer crashed, as it says
ACK_STATES = ("applied", "rejected", "scheduled")


def _check_cack(msg: dict) -> None:
    _check_hb(msg)
    _wrap(check_command_id, msg.get("cid"))
    if msg.get("cmd") not in COMMANDS or msg.get("state") not in ACK_STATES:
        raise ProtocolError(f"'cack' needs cmd in {COMMANDS} and state in {ACK_STATES}")
    _wrap(check_int, msg.get("step"), "'cack' step")
    _need(msg, "detail", str)
    _wrap(check_config, msg.get("applied"), "'cack' applied")
    if "config" in msg:
        _wrap(check_config, msg["config"], "'cack' config")


def _check_query(msg: dict) -> None:
    _need(msg, "id", int, "request id")
    _need(msg, "op", str)


def _check_sub(msg: dict) -> None:
    _wrap(check_int, msg.get("after"), "'sub' cursor")
    _wrap(check_int, msg.get("credit"), "'sub' credit", 1, 1 << 20)
    if "sub" in msg:
        _wrap(check_int, msg["sub"], "'sub' number")
    run = msg.get("run")
    if run is not None:
        _wrap(lambda r: check_run_id(r, system=True), run)


def _check_credit(msg: dict) -> None:
    _wrap(check_int, msg.get("n"), "'credit' n", 0, 1 << 20)


def _check_nothing(msg: dict) -> None:
    return None


def _wrap(check, *args) -> None:
    try:
        check(*args)
    except (ValueError, TypeError) as exc:
        raise ProtocolError(str(exc)) from None


# Closed set of message types a peer may send to the agent.
INBOUND = {
    "hello": _check_hello,
    "rec": _check_rec,
    "hb": _check_hb,
    "finish": _check_finish,
    "cack": _check_cack,
    "q": _check_query,
    "sub": _check_sub,
    "credit": _check_credit,
    "unsub": _check_nothing,
}


# What the agent sends: welcome/ack/nack/finished/cmd to trainers, r(eply)/err/data to readers.
OUTBOUND = frozenset({"welcome", "ack", "nack", "finished", "cmd", "r", "err", "data"})


def message(kind: str, **fields: Any) -> dict:
    """Every message a process sends is built here, so no peer ever sees a type outside the closed sets."""
    if kind not in INBOUND and kind not in OUTBOUND:
        raise ValueError(f"unknown message type {kind!r}")
    return {"t": kind, **fields}


def decode(frame: bytes) -> dict:
    """Unpack and validate one inbound message, or raise ProtocolError saying what is wrong."""
    msg = unpack(frame, MAX_INBOUND_CONTAINERS)
    if not isinstance(msg, dict):
        raise ProtocolError(f"message must be a map, got {type(msg).__name__}")
    kind = msg.get("t")
    check = INBOUND.get(kind) if isinstance(kind, str) else None
    if check is None:
        raise ProtocolError(f"unknown message type {str(kind)[:40]!r}")
    if kind == "hello" and len(frame) > MAX_HELLO_BYTES:
        raise ProtocolError(f"'hello' is {len(frame)} bytes; a run's config, schema and rules are limited to "
                            f"{MAX_HELLO_BYTES}")
    check(msg)
    return msg

"""The wire protocol between trainers, the node agent and readers.

Every message is one msgpack map with a ``t`` (type) key, sent as the last frame
over DEALER -> ROUTER.  The set of types is closed: anything else is rejected by
``decode`` before the agent acts on it.  The app imports this module, never the
reverse.
"""

from __future__ import annotations

import ipaddress
import math
import re
import unicodedata
from typing import Any
from urllib.parse import urlsplit

import msgpack

from .alert_rules import check_rules
from .tuning import check_schema

DEFAULT_PORT = 7766
DEFAULT_URL = f"tcp://127.0.0.1:{DEFAULT_PORT}"
ENV_AGENT = "PILOTHOUSE_AGENT"

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # ZMQ_MAXMSGSIZE on the agent's socket
MAX_NAME_CHARS = 250
MAX_PAGE_POINTS = 200_000  # points per reply page; keeps replies far below the frame bound

# Records inside a trainer batch: [0, step, wall_time, keyset_index, values] for metrics,
# [1, step, wall_time, rows] for rollouts; see encode_records.
REC_METRICS = 0
REC_ROLLOUTS = 1
REC_CHECKPOINT = 2  # [2, step, wall_time, path]: a checkpoint the loop saved unasked

# Journal entry kinds, as stored and streamed.
KIND_METRIC = "m"
KIND_ROLLOUTS = "r"
KIND_EVENT = "e"
KINDS = (KIND_METRIC, KIND_ROLLOUTS, KIND_EVENT)

# Field order of a journal entry on the wire (a list, to keep frames small).
ENTRY_FIELDS = ("id", "run", "kind", "metric", "rank", "n", "steps", "vals", "times", "body")

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_COMMAND_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
SYSTEM_RUN_PREFIX = "sys-"  # the agent's own host/GPU sample runs; no trainer may use it
INT64_MAX = (1 << 63) - 1
MAX_CONFIG_DEPTH = 8
_CONFIG_SCALARS = (str, int, float, bool, type(None))


class ProtocolError(ValueError):
    """A peer sent something that is not a valid message; nothing was applied."""


def pack(msg: dict) -> bytes:
    return msgpack.packb(msg, use_bin_type=True)


def unpack(frame: bytes) -> Any:
    try:
        return msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types for garbage
        raise ProtocolError(f"frame is not valid msgpack ({type(exc).__name__})") from None


def encode_records(records: list[tuple]) -> tuple[list[tuple[str, ...]], list[tuple]]:
    """Trainer-side records -> the ``keys`` table and ``recs`` list of a 'rec' message.

    Metrics records arrive as (0, step, wall_time, names, values) and leave with ``names``
    replaced by its index in the table, so each name crosses the wire once per batch."""
    table: dict[tuple[str, ...], int] = {}
    wire = []
    for rec in records:
        if rec[0] == REC_METRICS:
            index = table.get(rec[3])
            if index is None:
                index = table[rec[3]] = len(table)
            wire.append((REC_METRICS, rec[1], rec[2], index, rec[4]))
        else:
            wire.append(rec)
    return list(table), wire


def check_name(value: Any, what: str) -> str:
    """Names end up in terminals, files and the app: refuse what would corrupt them."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, not {type(value).__name__}")
    if not value or len(value) > MAX_NAME_CHARS:
        raise ValueError(f"{what} must be 1 to {MAX_NAME_CHARS} characters, got {len(value)}")
    for ch in value:
        if unicodedata.category(ch) in ("Cc", "Cs"):
            raise ValueError(f"{what} {value[:40]!r} contains control character U+{ord(ch):04X}")
    return value


def check_run_id(value: Any, *, system: bool = False) -> str:
    if not isinstance(value, str) or not _RUN_ID.match(value):
        raise ValueError(f"run id must match {_RUN_ID.pattern}, got {str(value)[:80]!r}")
    if not system and value.startswith(SYSTEM_RUN_PREFIX):
        raise ValueError(f"run ids starting with {SYSTEM_RUN_PREFIX!r} are reserved for the agent's host samples")
    return value


def check_int(value: Any, what: str, lo: int = 0, hi: int = INT64_MAX) -> int:
    """SQLite and numpy store int64: refuse what they cannot hold before it reaches them."""
    if type(value) is not int or not lo <= value <= hi:
        raise ValueError(f"{what} must be an int in [{lo}, {hi}], got {str(value)[:40]}")
    return value


def query_arg(args: dict, key: str, kind: type, default: Any = None) -> Any:
    """One argument of a query, of the type the query needs (bool is not an int here)."""
    value = args.get(key, default)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(f"{key} must be {kind.__name__}")
    return value


def check_config(config: Any, where: str = "config", depth: int = 0) -> dict:
    """Config values: text, numbers, booleans, None, and lists/maps of them (string keys)."""
    if not isinstance(config, dict):
        raise TypeError(f"{where} must be a dict, got {type(config).__name__}")
    if depth > MAX_CONFIG_DEPTH:
        raise ValueError(f"{where} nests deeper than {MAX_CONFIG_DEPTH} levels")
    out = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise TypeError(f"{where} keys must be strings, got {key!r}")
        out[key] = _config_value(value, f"{where}.{key}", depth)
    return out


def _config_value(value: Any, where: str, depth: int) -> Any:
    if isinstance(value, dict):
        return check_config(value, where, depth + 1)
    if isinstance(value, (list, tuple)):
        return [_config_value(v, where, depth + 1) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        check_int(value, where, -INT64_MAX - 1)
    elif not isinstance(value, _CONFIG_SCALARS):
        raise TypeError(f"{where} has type {type(value).__name__}; use str, int, float, bool or None")
    return value


def check_url(url: Any, *, bind: bool = False) -> str:
    """Accept tcp://HOST:PORT and ipc://PATH; a bind must name an address, not a wildcard."""
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"agent URL must look like tcp://127.0.0.1:{DEFAULT_PORT}, got {url!r}")
    parts = urlsplit(url)
    if parts.scheme == "ipc":
        if not url[len("ipc://"):]:
            raise ValueError(f"ipc URL needs a path: {url!r}")
        return url
    if parts.scheme != "tcp":
        raise ValueError(f"agent URL scheme must be tcp or ipc, got {parts.scheme!r}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None or not 0 < port < 65536:
        raise ValueError(f"agent URL needs a host and a port 1-65535: {url!r}")
    if bind and parts.hostname == "*":
        raise ValueError("bind to an explicit address, not '*'")
    return url


def is_loopback(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme == "ipc":
        return True
    host = parts.hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    _wrap(check_name, msg.get("project"), "project")
    _wrap(check_name, msg.get("name"), "run name")
    _wrap(check_name, msg.get("host"), "host")
    _wrap(check_int, msg.get("pid"), "pid", 1)
    _wrap(check_config, msg.get("config"))
    if "schema" in msg:
        _wrap(check_schema, msg["schema"])
    if "alerts" in msg:
        _wrap(check_rules, msg["alerts"], "alerts")
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
    recs = _need(msg, "recs", list)
    if not recs:
        raise ProtocolError("'rec' message has no records")
    _need(msg, "keys", list)
    _wrap(check_int, seq + len(recs) - 1, "'rec' last seq", 1)


def _check_hb(msg: dict) -> None:
    _wrap(check_run_id, msg.get("run"))
    _wrap(check_int, msg.get("rank"), "rank")
    for key in ("floor", "dropped_records", "dropped_points"):
        if key in msg:
            _wrap(check_int, msg[key], key)
    if "paused" in msg and type(msg["paused"]) is not bool:
        raise ProtocolError("'paused' must be true or false")


def _check_finish(msg: dict) -> None:
    _check_hb(msg)
    _wrap(check_int, msg.get("seq"), "'finish' seq")


COMMANDS = ("pause", "resume", "set", "checkpoint", "stop")
ACK_STATES = ("applied", "rejected", "scheduled")


def _check_cack(msg: dict) -> None:
    _check_hb(msg)
    _wrap(check_command_id, msg.get("cid"))
    if msg.get("cmd") not in COMMANDS or msg.get("state") not in ACK_STATES:
        raise ProtocolError(f"'cack' needs cmd in {COMMANDS} and state in {ACK_STATES}")
    _wrap(check_int, msg.get("step"), "'cack' step")
    _need(msg, "detail", str)
    _need(msg, "applied", dict)


def check_command_id(cid: Any) -> str:
    if not isinstance(cid, str) or not _COMMAND_ID.match(cid):
        raise ValueError(f"command id must match {_COMMAND_ID.pattern}, got {str(cid)[:80]!r}")
    return cid


def _check_query(msg: dict) -> None:
    _need(msg, "id", int, "request id")
    _need(msg, "op", str)


def _check_sub(msg: dict) -> None:
    _wrap(check_int, msg.get("after"), "'sub' cursor")
    _wrap(check_int, msg.get("credit"), "'sub' credit", 1, 1 << 20)
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


def decode(frame: bytes) -> dict:
    """Unpack and validate one inbound message, or raise ProtocolError saying what is wrong."""
    msg = unpack(frame)
    if not isinstance(msg, dict):
        raise ProtocolError(f"message must be a map, got {type(msg).__name__}")
    kind = msg.get("t")
    check = INBOUND.get(kind) if isinstance(kind, str) else None
    if check is None:
        raise ProtocolError(f"unknown message type {str(kind)[:40]!r}")
    check(msg)
    return msg

"""Values that cross the wire: names, run and command ids, int64 counters, config maps.

Checked on both ends with the same code: the trainer refuses a bad name at ``init`` or
``log``, the agent refuses it in a message.  Every check raises ValueError or TypeError
with a message that names the field.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

MAX_NAME_CHARS = 250
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_COMMAND_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TOKEN = re.compile(r"^[0-9a-f]{32,128}$")
ENV_TOKEN = "PILOTHOUSE_RUN_TOKEN"  # a run's secret, for ranks that no torch.distributed broadcast reaches
# zero-width, bidi controls, BOM, tags (Cf); U+2028 and U+2029, which end a line in JSON readers and editors
_HIDDEN_IN_NAMES = {"Cf": "invisible format character", "Zl": "line separator", "Zp": "paragraph separator"}
SYSTEM_RUN_PREFIX = "sys-"  # the agent's own host/GPU sample runs; no trainer may use it
INT64_MAX = (1 << 63) - 1
MAX_CONFIG_DEPTH = 8
SCALARS = (str, int, float, bool, type(None))  # what a config value or a rollout field may be


def check_name(value: Any, what: str) -> str:
    """Names end up in terminals, files and the app: refuse what would corrupt them or make two
    names look alike (``loss`` and ``loss`` + a zero-width space; a right-to-left override; U+2028).  A
    name must be in Unicode NFC, the form ``normal_name`` gives it."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, not {type(value).__name__}")
    if not value or len(value) > MAX_NAME_CHARS:
        raise ValueError(f"{what} must be 1 to {MAX_NAME_CHARS} characters, got {len(value)}")
    for ch in value:
        category = unicodedata.category(ch)
        if category in ("Cc", "Cs"):
            raise ValueError(f"{what} {value[:40]!r} contains control character U+{ord(ch):04X}")
        if category in _HIDDEN_IN_NAMES:  # invisible in every terminal and table, or a line break in some
            raise ValueError(f"{what} {value[:40]!r} contains {_HIDDEN_IN_NAMES[category]} U+{ord(ch):04X} "
                             f"({unicodedata.name(ch, 'unnamed')})")
    if not unicodedata.is_normalized("NFC", value):
        raise ValueError(f"{what} {value[:40]!r} is not in Unicode NFC form (the trainer API normalizes it)")
    return value


def normal_name(value: Any, what: str) -> str:
    """A name from the user's code, in NFC (one spelling per look), then checked."""
    return check_name(unicodedata.normalize("NFC", value) if isinstance(value, str) else value, what)


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


def check_step_bound(value: Any, what: str) -> float:
    """One end of a step range: a finite number within int64, as steps are."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or abs(value) > 2.0 ** 63:
        raise ValueError(f"{what} must be a finite step within int64, got {str(value)[:40]}")
    return float(value)


def check_seconds(value: Any, what: str) -> float:
    """A span of time a client asks for (a wait, an age): a finite number, never negative."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a number of seconds >= 0")
    return float(value)


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
        check_name(key, f"{where} key")  # keys are shown as names: no control or invisible characters
        out[key] = _config_value(value, f"{where}.{key}", depth)
    return out


def _config_value(value: Any, where: str, depth: int) -> Any:
    if isinstance(value, dict):
        return check_config(value, where, depth + 1)
    if isinstance(value, (list, tuple)):
        if depth >= MAX_CONFIG_DEPTH:
            raise ValueError(f"{where} nests deeper than {MAX_CONFIG_DEPTH} levels")
        return [_config_value(v, where, depth + 1) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        check_int(value, where, -INT64_MAX - 1)
    elif not isinstance(value, SCALARS):
        raise TypeError(f"{where} has type {type(value).__name__}; use str, int, float, bool or None")
    return value


def check_session(value: Any) -> str:
    """A trainer process's session id (its Run object's): which stream of a run its records are."""
    if not isinstance(value, str) or not _COMMAND_ID.match(value):
        raise ValueError(f"session must match {_COMMAND_ID.pattern}, got {str(value)[:80]!r}")
    return value


def check_token(value: Any) -> str:
    """A run's secret (``Run.token``): hex, at least 128 bits, so it cannot be guessed."""
    if not isinstance(value, str) or not _TOKEN.match(value):
        raise ValueError("a run token is 32 to 128 lowercase hex digits (rank 0's run.token)")
    return value


def check_command_id(cid: Any) -> str:
    if not isinstance(cid, str) or not _COMMAND_ID.match(cid):
        raise ValueError(f"command id must match {_COMMAND_ID.pattern}, got {str(cid)[:80]!r}")
    return cid


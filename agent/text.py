"""Text a person types or reads, shared by the CLI and the app: agent URLs, values, events, exports."""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import time
from collections.abc import Iterator
from typing import IO, Any

from pilothouse.wire.checks import INT64_MAX, check_int
from pilothouse.wire.entries import KIND_EVENT, KIND_METRIC, entry_body, entry_points
from pilothouse.wire.urls import check_url

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet runs a cell starting with these


def printable(value: Any) -> str:
    """Text from the wire (a trainer's detail, a run's name) as it may reach a terminal or a label:
    control, bidi and zero-width characters shown as escapes, never acted on (ESC [2J clears a screen)."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", str(value))


def csv_cell(text: str) -> str:
    """A text cell a spreadsheet shows as text, not runs as a formula."""
    return "'" + text if text.startswith(_FORMULA) else text


def step_arg(text: str) -> int:
    """argparse type for a step: an int the journal can hold, or a one-line usage error."""
    try:
        return check_int(int(text), "a step")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc) if "must be" in str(exc) else f"not a step: {text!r}") from None


def url_arg(text: str) -> str:
    """argparse type for agent URLs: a clear usage error instead of a traceback."""
    try:
        return check_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_assignment(text: str) -> tuple[str, Any]:
    """CLI ``key=value``: an int, a float, true/false, or else the text itself."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise ValueError(f"expected key=value, got {text!r}")
    low = raw.lower()
    if low in ("true", "false"):
        return key, low == "true"
    try:
        value: Any = int(raw)
    except ValueError:
        pass
    else:
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise ValueError(f"{key}={raw[:40]} does not fit in a 64-bit integer")
        return key, value
    try:
        return key, float(raw)
    except ValueError:
        return key, raw


def fmt_value(v: float) -> str:
    return f"{v:.6g}"


def tail_lines(entries: list) -> Iterator[tuple[str, bool]]:
    """One line per step with every metric of that step; events on lines of their own."""
    steps: dict[int, dict[str, float]] = {}
    for e in entries:
        if e.kind == KIND_METRIC:
            s, v, _ = entry_points(e)
            for step, value in zip(s.tolist(), v.tolist()):
                steps.setdefault(step, {})[e.metric] = value
    for step in sorted(steps):
        yield printable(f"step {step:>8}  " + "  ".join(f"{k}={fmt_value(v)}" for k, v in steps[step].items())), False
    for e in entries:
        if e.kind == KIND_EVENT:
            body = entry_body(e)
            detail = " ".join(f"{k}={v}" for k, v in body.items() if k not in ("event", "time"))
            yield printable(f"-- {body['event']}: {detail}"), body.get("status") in ("finished", "crashed")


def event_line(body: dict) -> str:
    """One readable line per audit event."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(body.get("time", 0)))
    kind = body.get("event", "?")
    if kind == "command":
        extra = " ".join(f"{k}={v!r}" for k, v in (body.get("values") or {}).items())
        at = f" at step {body['at_step']}" if body.get("at_step") is not None else ""
        text = f"{body.get('cmd')} {extra}{at} by {_sender(body.get('who') or {})} id={body.get('cid')}"
    elif kind == "alert":
        step = "" if body.get("step") is None else f" at step {body['step']}"
        actions = f" -> {', '.join(body['actions'])}" if body.get("actions") else ""
        text = f"{body.get('rule')} {body.get('state')}{step} ({body.get('kind')}): {body.get('detail')}{actions}"
    elif kind in ("ack", "checkpoint"):
        step = "" if body.get("step") is None else f" at step {body['step']}"
        text = f"{body.get('cmd')} {body.get('state')}{step}: {body.get('detail')} id={body.get('cid')}"
    else:
        text = " ".join(f"{k}={v}" for k, v in body.items() if k not in ("event", "time"))
    return printable(f"{when}  {kind:<10}  {text}")


def _sender(who: dict) -> str:
    claimed = f"{who.get('user', '?')}@{who.get('host', '?')} ({who.get('client', '?')})"
    if who.get("via") == "alert":
        return f"alert rule {who.get('rule')}"
    if who.get("via") == "curve":
        return f"{who.get('name')} [key {str(who.get('key'))[:12]}...] as {claimed}"
    return claimed


def write_points(pages: Iterator[Any], out: IO[str], fmt: str) -> int:
    """Long format metric,step,value,wall_time; floats written so they read back bit-exact."""
    n = 0
    writer = csv.writer(out) if fmt == "csv" else None
    if writer:
        writer.writerow(["metric", "step", "value", "wall_time"])
    for page in pages:
        for e in page.entries:
            steps, vals, times = entry_points(e)
            for step, value, wall in zip(steps.tolist(), vals.tolist(), times.tolist()):
                if writer:
                    writer.writerow([csv_cell(e.metric), step, repr(value), repr(wall)])
                else:
                    out.write(json.dumps({"metric": e.metric, "step": step,
                                          "value": value if math.isfinite(value) else repr(value),
                                          "wall_time": wall}) + "\n")
                n += 1
    return n

"""Text a person types or reads, shared by the CLI and the app: agent URLs, values, exports (events:
``pilothouse.event_text``)."""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any

from pilothouse.wire.checks import INT64_MAX, check_int
from pilothouse.wire.entries import entry_points
from pilothouse.wire.urls import check_url

# invisible code points (Unicode's Default_Ignorable) that str.isprintable() lets through: Hangul
# fillers, Khmer vowels, Mongolian and other variation selectors, the combining grapheme joiner
_BLANK = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef]")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet runs a cell starting with these


def printable(value: Any) -> str:
    """Text from the wire (a trainer's detail, a run's name, who a peer claims to be) as it may reach
    a terminal, a label or a log line: what is not a visible character or a space shown as an escape,
    never acted on.  Controls (ESC [2J clears a screen, BEL rings), bidi and other format characters
    (U+202E, U+061C reorder text), line and paragraph separators (U+2028 breaks a line in some
    readers), zero-width and tag characters (U+2060, U+E0041 hide text), private-use, unassigned and
    surrogate code points: every category Python's ``str.isprintable`` refuses but spaces (Zs)."""
    text = str(value)
    if text.isprintable() and not _BLANK.search(text):  # nearly every text: one pass in C
        return text
    return "".join(_escape(c) if _hidden(c) else c for c in text)


def _hidden(c: str) -> bool:
    return (not c.isprintable() and unicodedata.category(c) != "Zs") or _BLANK.match(c) is not None


def _escape(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


class PrintableFormatter(logging.Formatter):
    """The agent's log lines hold what peers sent (who a client claims to be, a run's name, a
    refused message): the line goes through ``printable``, so ESC or BEL in a claimed user name
    never reaches whoever reads ``agent.log`` in a terminal, and a newline in it cannot forge a
    line.  A traceback keeps its lines, each made printable."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return "\n".join(map(printable, super().formatException(ei).split("\n")))

    def formatStack(self, stack_info: str) -> str:
        return "\n".join(map(printable, super().formatStack(stack_info).split("\n")))


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


_SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AMOUNT = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]+)\s*")


def parse_size(text: str) -> int:
    """``50GB``, ``800MB``, ``2TiB``: bytes (KB..TB count in thousands, KiB..TiB in 1024s)."""
    found = _AMOUNT.fullmatch(text)
    if found is None or found[2].lower() not in _SIZE_UNITS:
        raise ValueError(f"not a size: {text!r} (a number and a unit, B, KB, MB, GB, TB or KiB..TiB: 50GB)")
    return check_int(int(float(found[1]) * _SIZE_UNITS[found[2].lower()]), "a size in bytes")


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``2w``: seconds (units s, m, h, d, w)."""
    found = _AMOUNT.fullmatch(text)
    if found is None or found[2].lower() not in _AGE_UNITS:
        raise ValueError(f"not an age: {text!r} (a number and a unit, s, m, h, d or w: 30d)")
    return float(found[1]) * _AGE_UNITS[found[2].lower()]


def fmt_bytes(n: int) -> str:
    """``45.6 MB``: a size as people read it, in the units ``parse_size`` takes."""
    if n < 1000:
        return f"{n} B"
    value = float(n)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1000
        if value < 999.5 or unit == "TB":
            break
    return f"{value:.3g} {unit}" if value < 999.5 else f"{value:.0f} {unit}"


def write_points(pages: Iterator[Any], out: IO[str], fmt: str,
                 extra: Mapping[str, Callable[[Any], Any]] | None = None) -> int:
    """Long format metric,step,value,wall_time; floats written so they read back bit-exact.
    ``extra``: more columns, each a function giving an entry's values, one per point (ints)."""
    n = 0
    extra = extra or {}
    writer = csv.writer(out) if fmt == "csv" else None
    if writer:
        writer.writerow(["metric", "step", "value", "wall_time", *extra])
    for page in pages:
        for e in page.entries:
            steps, vals, times = entry_points(e)
            more = [column(e).tolist() for column in extra.values()]
            for step, value, wall, *cells in zip(steps.tolist(), vals.tolist(), times.tolist(), *more):
                if writer:
                    writer.writerow([csv_cell(e.metric), step, repr(value), repr(wall), *cells])
                else:
                    out.write(json.dumps({"metric": e.metric, "step": step,
                                          "value": value if math.isfinite(value) else repr(value),
                                          "wall_time": wall, **dict(zip(extra, cells))}) + "\n")
                n += 1
    return n

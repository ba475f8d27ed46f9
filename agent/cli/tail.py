"""What `pilothouse tail` prints: a line per step that fits the terminal, the most important metrics
first and "+N more" for the rest (``--metric GLOB`` chooses which, and then every chosen one is shown,
wrapped), and events as the same sentences as `pilothouse events`.

Piped into another program (no terminal, no $COLUMNS) nothing is cut: a line per step holds every
metric, as `grep` or a log file wants it.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import shutil
import sys
import textwrap
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pilothouse.event_text import Narrator
from pilothouse.text import fmt_value, printable
from pilothouse.wire.entries import KIND_EVENT, KIND_METRIC, Entry, entry_body, entry_points
from pilothouse.wire.metric_order import by_importance, importance

GAP = "  "
MIN_WIDTH = 40  # narrower than this, a line could not hold a step and one value anyway
STEP_COLUMN = 15  # "step 12345678  ": where the values start, on every line of a step


def terminal_width() -> int | None:
    """The width to fit: $COLUMNS, else the terminal's; None when printing into a pipe or a file."""
    if os.environ.get("COLUMNS", "").strip().isdigit() or sys.stdout.isatty():
        return max(shutil.get_terminal_size().columns, MIN_WIDTH)
    return None


def cols(text: str) -> int:
    """Columns ``text`` takes on a terminal: wide (CJK) characters two, combining marks none."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
               for c in text)


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns, ending in "..." when cut."""
    if cols(text) <= width:
        return text
    out, used = [], 0
    for c in text:
        used += cols(c)
        if used > width - 3:
            break
        out.append(c)
    return "".join(out) + "..."[:max(width, 0)]


class MetricFilter:
    """``--metric GLOB`` (repeatable): shell-style patterns matched against whole metric names."""

    def __init__(self, globs: Sequence[str] | None = None):
        self.globs = tuple(globs or ())
        self._seen: dict[str, bool] = {}

    def __bool__(self) -> bool:
        return bool(self.globs)

    def __call__(self, name: str) -> bool:
        hit = self._seen.get(name)
        if hit is None:
            hit = self._seen[name] = not self.globs or any(fnmatch.fnmatchcase(name, g) for g in self.globs)
        return hit

    def unmatched(self, run: str, names: Iterable[str]) -> str | None:
        """Why nothing will print (no known name matches), naming some names that would; else None."""
        names = by_importance(set(names))
        if not names or any(self(n) for n in names):
            return None
        shown = ", ".join(names[:10]) + (f" (+{len(names) - 10} more)" if len(names) > 10 else "")
        return printable(f"pilothouse: no metric of run {run} matches {' or '.join(map(repr, self.globs))} "
                         f"(a glob matches whole names, e.g. 'train/*' or '*loss*'); its metrics: {shown}")


def fit(prefix: str, items: Sequence[str], width: int | None, wrap: bool) -> list[str]:
    """``items`` after ``prefix``: on one line ending "+N more" for those that do not fit, or
    (``wrap``) on as many lines as they need, each starting under the first item."""
    if width is None:
        return [prefix + GAP.join(items)]
    if wrap:  # in columns, as wide as the widest value, so that a name is found at a glance
        indent = cols(prefix)
        cell = max(map(cols, items)) + len(GAP)
        per_line = max(1, (width - indent + len(GAP)) // cell)
        rows = [items[i:i + per_line] for i in range(0, len(items), per_line)]
        lines = [(prefix if n == 0 else " " * indent)
                 + "".join(item + " " * (cell - cols(item)) for item in row).rstrip() for n, row in enumerate(rows)]
        return [clip(x, width) for x in lines]
    line, shown = prefix, 0
    for item in items:
        rest = len(items) - shown - 1
        more = f"{GAP}+{rest} more" if rest else ""
        if cols(line + (GAP if shown else "") + item + more) > width:
            break
        line += (GAP if shown else "") + item
        shown += 1
    if shown == 0:  # not even one: the first, cut, beside the count of the rest
        more = f"{GAP}+{len(items) - 1} more" if len(items) > 1 else ""
        line, shown = clip(prefix + items[0], width - cols(more)), 1
    if shown < len(items):
        line += f"{GAP}+{len(items) - shown} more"
    return [clip(line, width)]


class Tail:
    """Turns pages of a run's entries into lines; remembers commands across pages, so that an
    acknowledgement names who asked for it."""

    def __init__(self, width: int | None, metrics: MetricFilter | None = None):
        self.width = width
        self.metrics = metrics or MetricFilter()
        self.narrator = Narrator()

    def values(self, prefix: str, values: dict[str, float]) -> list[str]:
        """One step's (or the last) values, the most important first; none chosen: no line."""
        names = sorted((n for n in values if self.metrics(n)), key=importance)
        if not names:
            return []
        items = [printable(f"{n}={fmt_value(values[n])}") for n in names]
        return fit(prefix.ljust(STEP_COLUMN), items, self.width, wrap=bool(self.metrics))

    def text(self, text: str) -> list[str]:
        """A header or an event, wrapped (continuation lines indented) to fit."""
        text = printable(text)
        if self.width is None:
            return [text]
        return textwrap.wrap(text, self.width, subsequent_indent="   ", break_on_hyphens=False) or [""]

    def lines(self, entries: list[Entry]) -> Iterator[tuple[str, bool]]:
        """Each step's values and each event, in the order they came; True with the last line of the
        event that ends the run."""
        for step, values, body, ended in steps_and_events(entries, self.metrics):
            if body is None:
                for line in self.values(f"step {step:>8}", values):
                    yield line, False
                continue
            lines = self.text("-- " + self.narrator.sentence(body))
            for i, line in enumerate(lines):
                yield line, ended and i == len(lines) - 1


Item = tuple[int, dict[str, float], Any, bool]  # (step, its values, None, False) or (0, {}, an event's body, ended)


def steps_and_events(entries: list[Entry], metrics: MetricFilter) -> Iterator[Item]:
    """A page's entries as each step's chosen values (steps in order, up to the next event) and each
    event's body, with whether it ends the run: what `tail` prints, as text or (``--json``) as data."""
    steps: dict[int, dict[str, float]] = {}
    for e in entries:
        if e.kind == KIND_METRIC and metrics(e.metric):
            s, v, _ = entry_points(e)
            for step, value in zip(s.tolist(), v.tolist()):
                steps.setdefault(step, {})[e.metric] = value
        elif e.kind == KIND_EVENT:
            yield from _flush(steps)
            body = entry_body(e)
            yield 0, {}, body, (isinstance(body, dict) and body.get("event") == "status"
                                and body.get("status") in ("finished", "crashed"))
    yield from _flush(steps)


def _flush(steps: dict[int, dict[str, float]]) -> Iterator[Item]:
    for step in sorted(steps):
        yield step, steps[step], None, False
    steps.clear()


def json_line(item: Item, metrics: MetricFilter) -> str | None:
    """``tail --json``'s line for one item: ``{"step": N, "values": {...}}`` (non-finite values as "nan",
    "inf", "-inf", as `export --format jsonl` writes them) or an event's body as `events --json` prints
    it; None for a step none of whose metrics were chosen."""
    step, values, body, _ = item
    if body is not None:
        return json.dumps(body, default=str)
    chosen = {name: finite_or_text(values[name]) for name in sorted(values, key=importance) if metrics(name)}
    return json.dumps({"step": step, "values": chosen}) if chosen else None


def finite_or_text(value: float) -> float | str:
    return value if math.isfinite(value) else repr(value)

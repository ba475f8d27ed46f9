"""The runs table's columns, in plain Python: which config keys to show, how a column sorts, how a
value reads in a cell.

Why apart from ``models``: these rules (numbers numerically, text case-insensitively, a missing
value last in both directions) are what a user compares runs by, so they are tested on their own,
without a display; ``RunsModel`` applies them to its rows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pilothouse.text import printable

RUN, CONFIG, SUMMARY = "run", "config", "summary"  # a fixed column, a config key, a metric's last value
FIXED_NAMES = ("status", "alerts", "run", "step", "key metric", "host", "lost")
DEFAULT_LIMIT = 6  # config columns shown by default: a table still readable beside the charts
MISSING: Any = object()  # a run that has no value in a column (None is a value: a config may say null)

T = TypeVar("T")


@dataclass(frozen=True)
class Column:
    source: str  # RUN, CONFIG or SUMMARY
    key: str  # a fixed column's name, a dotted config key or a metric name

    @property
    def header(self) -> str:
        return printable(self.key)

    @property
    def ident(self) -> str:
        """``config:lr``: how a chosen column is remembered across restarts."""
        return f"{self.source}:{self.key}"

    @classmethod
    def parse(cls, ident: str) -> Column | None:
        """The column ``ident`` names, None for text that names no extra column."""
        source, sep, key = ident.partition(":")
        return cls(source, key) if sep and key and source in (CONFIG, SUMMARY) else None


FIXED = tuple(Column(RUN, name) for name in FIXED_NAMES)


def ordered(items: Iterable[T], value: Callable[[T], Any], descending: bool = False) -> list[T]:
    """``items`` sorted by ``value``: bools as bools, numbers numerically, text case-insensitively,
    then anything else by its text; NaN, None and missing values last in both directions.  Ties
    keep the order ``items`` came in (the table's default order)."""
    keyed = [(_rank(value(item)), item) for item in items]
    present = [(k, item) for k, item in keyed if k[0] < _NAN]
    present.sort(key=lambda pair: pair[0], reverse=descending)  # a stable sort, reversed or not
    absent = sorted(((k, item) for k, item in keyed if k[0] >= _NAN), key=lambda pair: pair[0][0])
    return [item for _, item in present + absent]


_BOOL, _NUMBER, _TEXT, _OTHER, _NAN, _NONE, _MISSING = range(7)


def _rank(value: Any) -> tuple:
    """(kind, comparable): values of one kind compare with each other, kinds in the order above."""
    if value is MISSING:
        return (_MISSING, 0)
    if value is None:
        return (_NONE, 0)
    if isinstance(value, bool):
        return (_BOOL, value)
    if isinstance(value, (int, float)):
        return (_NAN, 0) if isinstance(value, float) and math.isnan(value) else (_NUMBER, value)
    if isinstance(value, str):
        return (_TEXT, value.casefold())
    return (_OTHER, repr(value).casefold())


def cell_text(value: Any) -> str:
    """A value as the table shows it: floats compactly (``.4g``), ints in full (seeds 100001 and
    100002 must not both read 1e+05), true/false as the Config tab writes them, text without
    control characters, nothing for a missing value."""
    if value is MISSING:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return printable(value if isinstance(value, str) else repr(value))


def default_config_columns(configs: Iterable[Mapping[str, Any]], differing: Iterable[str],
                           limit: int = DEFAULT_LIMIT) -> list[Column]:
    """The config columns a table of these runs (flat configs) opens with: of the ``differing``
    keys, those most runs set and that split them most ways, at most ``limit``, by name (so columns
    do not move about as runs arrive)."""
    configs = list(configs)

    def spread(key: str) -> tuple[int, int, str]:
        values = [c[key] for c in configs if key in c]
        return (-len(values), -len({identity(v) for v in values}), key)

    picked = sorted(differing, key=spread)[:limit]
    return [Column(CONFIG, key) for key in sorted(picked)]


def identity(value: Any) -> Hashable:
    """What makes two config values one (a group, a distinct value): equal as a user reads them
    (1 is 1.0, True is not 1, NaN is NaN); lists and dicts by their JSON text."""
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    if isinstance(value, (bool, int, float, str)) or value is None:
        return (type(value) is bool, type(value) is str, value)
    return ("json", json.dumps(value, sort_keys=True, default=str))

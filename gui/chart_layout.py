"""Which charts the Charts tab shows, and in what order, in plain Python (tested without a display).

Why: a TRL run logs 30+ metrics, a third of them flat (``clip_ratio/*`` at 0 while nothing is
clipped).  The charts a researcher pinned come first, then the rest by importance
(``models.metric_groups``); a search narrows them by name; charts whose every curve is one
constant value fold into one line of text, so the first screen is spent on curves that move.
An explicit choice wins over folding: a pinned or searched-for chart is shown even when flat.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .models import metric_groups

GLOB = frozenset("*?[")
FOLDED_SHOWN = 6  # the folded line names this many charts, then "and N more"


def matches(name: str, query: str) -> bool:
    """Case-insensitive: a glob (``rewards/*``) matches the whole name; plain words must all appear."""
    query, name = query.strip().lower(), name.lower()
    if not query:
        return True
    if GLOB & set(query):
        return fnmatch.fnmatchcase(name, query)
    return all(word in name for word in query.split())


def constant_value(y_ranges: Iterable[tuple[float, float] | None], x_ranges: Iterable[tuple[float, float] | None],
                   all_finite: bool) -> float | None:
    """The one value every curve of a chart holds, or None.  A chart is constant when its points
    span more than one x (two runs' first points say nothing yet), none is NaN/Inf (a gap is
    news, never folded away) and they hold one finite value."""
    y_ranges, xs = list(y_ranges), [r for r in x_ranges if r is not None]
    if not xs or min(r[0] for r in xs) == max(r[1] for r in xs) or not all_finite:
        return None
    if not y_ranges or any(r is None for r in y_ranges):
        return None
    values = {v for r in y_ranges for v in r}
    return values.pop() if len(values) == 1 else None


def varies(y_ranges: Iterable[tuple[float, float] | None], all_finite: bool) -> bool:
    """Whether a chart can never be constant again as points and curves are added: it holds a
    NaN/Inf, or two values (so a live chart need not be checked again on each append)."""
    return not all_finite or len({v for r in y_ranges if r is not None for v in r}) > 1


@dataclass(frozen=True)
class Arrangement:
    shown: list[str]  # in grid order
    folded: list[str]  # constant charts left out of the grid


def arrange(metrics: Iterable[str], pinned: Sequence[str] = (), query: str = "",
            constant: Mapping[str, float] | None = None, show_constant: bool = False) -> Arrangement:
    """The grid: pinned charts in the order they were pinned, then the others by importance;
    only those matching ``query``; constant ones folded unless shown, pinned or searched for."""
    names = set(metrics)
    constant = constant or {}
    pins = [m for m in pinned if m in names]
    rest = [m for group in metric_groups(names - set(pins)).values() for m in group]
    shown, folded = [], []
    for name in pins + rest:
        if not matches(name, query):
            continue
        if name in constant and not (show_constant or query.strip() or name in pins):
            folded.append(name)
        else:
            shown.append(name)
    return Arrangement(shown, folded)


def folded_text(folded: Sequence[str], constant: Mapping[str, float]) -> str:
    """One line for the folded charts: "3 constant charts folded: clip_ratio/high = 0, …"."""
    if not folded:
        return ""
    named = ", ".join(f"{m} = {constant[m]:.4g}" for m in folded[:FOLDED_SHOWN])
    more = f" and {len(folded) - FOLDED_SHOWN} more" if len(folded) > FOLDED_SHOWN else ""
    return f"{len(folded)} constant chart{'s' if len(folded) != 1 else ''} folded: {named}{more}"

"""View models of the run list and comparisons, in plain Python.

Why no Qt here: the Qt layer wraps these (a QAbstractTableModel over ``RunsModel.rows()``),
so filtering, ordering, selection and diffing are tested without a display.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pilothouse.wire.metric_order import by_importance, importance

RunKey = tuple[str, str]  # (agent URL, run id): run ids are only unique per agent

# Lower sorts first: what needs a human goes to the top.
SEVERITY = {"crashed": 0, "stale": 0, "running": 1, "paused": 2, "finished": 3}


@dataclass(frozen=True)
class RunRow:
    agent: str
    run_id: str
    project: str
    name: str
    status: str
    step: int | None
    key_metric: str | None
    key_value: float | None
    host: str
    lost_records: int
    created: float
    alerts: int = 0  # rules firing on this run now (pilothouse.gui.alerts)

    @property
    def key(self) -> RunKey:
        return (self.agent, self.run_id)

    @property
    def title(self) -> str:
        return f"{self.project}/{self.name}"

    @classmethod
    def from_run(cls, run: dict, agent: str | None = None) -> "RunRow":
        """A row from a run dict of ``Client.runs()`` or ``LocalStore.runs()`` (which adds ``agent``).
        Its key metric is the agent's ``key``: the CLI and every app show the same headline."""
        summary = run.get("summary") or {}
        metric = run["key"] if isinstance(run.get("key"), str) else None
        return cls(agent=agent if agent is not None else run.get("agent", ""), run_id=run["id"],
                   project=run.get("project") or "", name=run.get("name") or "",
                   status=run.get("status") or "", step=run.get("last_step"), key_metric=metric,
                   key_value=summary.get(metric) if metric else None, host=run.get("host") or "",
                   lost_records=run.get("lost_records") or 0, created=run.get("created") or 0.0)

    def matches(self, text: str) -> bool:
        """Case-insensitive: every word of ``text`` appears in the project, name, id or host."""
        hay = " ".join((self.title, self.run_id, self.host)).lower()
        return all(word in hay for word in text.lower().split())


def sort_key(row: RunRow) -> tuple:
    """Severity (a firing alert counts as crashed), then newest first, then a stable tie-break."""
    severity = 0 if row.alerts else SEVERITY.get(row.status, len(SEVERITY))
    return (severity, -row.created, row.title, row.key)


class RunsModel:
    """The run list of every agent: filtered, ordered by severity, with a multi-selection."""

    def __init__(self, include_system: bool = False):
        self.include_system = include_system  # the agents' sys-HOST runs belong to the GPU panel
        self.filter_text = ""
        self._rows: dict[RunKey, RunRow] = {}
        self._alerts: dict[RunKey, int] = {}
        self._selected: list[RunKey] = []

    def set_runs(self, runs: Iterable[dict]) -> None:
        """Replace every run (dicts carrying ``agent``, as ``LocalStore.runs()`` returns)."""
        self._rows = {}
        self._merge(runs, None)

    def update_agent(self, agent: str, runs: Iterable[dict]) -> None:
        """Refresh one agent's runs (from a link's batch); the others' are left as they are."""
        self._merge(runs, agent)

    def _merge(self, runs: Iterable[dict], agent: str | None) -> None:
        for run in runs:
            if self.include_system or run.get("kind", "train") == "train":
                row = RunRow.from_run(run, agent)
                self._rows[row.key] = replace(row, alerts=self._alerts[row.key]) if row.key in self._alerts else row

    def set_alerts(self, counts: Mapping[RunKey, int]) -> None:
        """Firing alerts per run (runs left out have none), e.g. ``AlertBook.counts()``."""
        self._alerts = {k: n for k, n in counts.items() if n}
        for key, row in self._rows.items():
            if row.alerts != self._alerts.get(key, 0):
                self._rows[key] = replace(row, alerts=self._alerts.get(key, 0))

    def set_filter(self, text: str) -> None:
        self.filter_text = text.strip()

    def rows(self) -> list[RunRow]:
        """The rows to show, in display order."""
        return sorted((r for r in self._rows.values() if r.matches(self.filter_text)), key=sort_key)

    def row(self, key: RunKey) -> RunRow | None:
        return self._rows.get(key)

    # --- selection (runs to compare) -------------------------------------------------------

    def select(self, key: RunKey, on: bool = True) -> None:
        """Add or drop a run from the comparison; the order of selection is kept (chart colours)."""
        if on and key not in self._selected and key in self._rows:
            self._selected.append(key)
        elif not on and key in self._selected:
            self._selected.remove(key)

    def toggle(self, key: RunKey) -> None:
        self.select(key, key not in self._selected)

    def clear_selection(self) -> None:
        self._selected.clear()

    def selected(self) -> list[RunKey]:
        """Selected runs, hidden by the filter or not: filtering must not drop a comparison."""
        return list(self._selected)


LIVE = ("running", "paused")


def first_screen(rows: Iterable[RunRow], remembered: Iterable[RunKey] = ()) -> list[RunKey]:
    """What the app charts when it opens: the runs the user had selected, where they still exist;
    else the live runs of the most recent project (else its newest run), so the first screen is
    never an empty "select a run" when runs are training."""
    rows = list(rows)
    known = {row.key for row in rows}
    kept = [key for key in remembered if key in known]
    if kept or not rows:
        return kept
    project = max(rows, key=lambda r: r.created).project
    mine = sorted((r for r in rows if r.project == project), key=lambda r: r.created)
    live = [r.key for r in mine if r.status in LIVE]
    return live or [mine[-1].key]


def metric_groups(names: Iterable[str]) -> dict[str, list[str]]:
    """Charts in the order a researcher reads them: grouped by the prefix before the first "/"
    ("rewards/a/mean" -> "rewards"; a name without one is a group of its own), the groups and the
    names in each by importance (``pilothouse.wire.metric_order``), so a TRL run opens on
    ``reward`` and its KL, not on five flat ``clip_ratio/*`` charts."""
    groups: dict[str, list[str]] = {}
    for name in by_importance(set(names)):
        prefix, sep, _ = name.partition("/")
        groups.setdefault(prefix if sep else name, []).append(name)
    return dict(sorted(groups.items(), key=lambda kv: importance(kv[1][0])))


def flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    """Nested configs as dotted keys ({"opt": {"lr": 1}} -> {"opt.lr": 1}), so a diff names the leaf."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


_MISSING = object()


def _same(a: Any, b: Any) -> bool:
    """Equal as a user reads them: NaN equals NaN, True is not 1, 1 equals 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def config_diff(configs: dict[Hashable, dict]) -> set[str]:
    """Keys (dotted for nested configs) whose values differ between the runs, or that some
    runs lack: the ones to highlight when comparing."""
    flat = [flatten(c or {}) for c in configs.values()]
    keys = set().union(*flat) if flat else set()
    return {k for k in keys
            if any(not _same(f.get(k, _MISSING), flat[0].get(k, _MISSING)) for f in flat[1:])}


def run_labels(names: Mapping[RunKey, str]) -> dict[RunKey, str]:
    """What the compared runs are called in legends and column headers: the run's name, or its
    id when it has none; a name that two of them share gets the id too ("base (kv0wszws)")."""
    shown = {key: name or key[1] for key, name in names.items()}
    counts: dict[str, int] = {}
    for label in shown.values():
        counts[label] = counts.get(label, 0) + 1
    return {key: f"{label} ({key[1]})" if counts[label] > 1 else label for key, label in shown.items()}

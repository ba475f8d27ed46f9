"""View models of the run list and comparisons, in plain Python.

Why no Qt here: the Qt layer wraps these (a QAbstractTableModel over ``RunsModel.rows()``),
so filtering, ordering, selection and diffing are tested without a display.
"""

from __future__ import annotations

import math
import os
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from pilothouse.event_text import event_lines
from pilothouse.gui.attempts import members
from pilothouse.gui.jobs import is_job_node
from pilothouse.gui.run_columns import CONFIG, FIXED, MISSING, SUMMARY, Column, default_config_columns, ordered
from pilothouse.wire.metric_order import by_importance, importance
from pilothouse.wire.urls import is_loopback
from pilothouse.wire.watched import USER_KINDS, WATCHED

RunKey = tuple[str, str]  # (agent URL, run id): one run resumed on another node is one row (see ``attempts``)

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
    attempts: int = 1  # processes that ran it: a crashed trainer started again with its id is attempt 2
    members: tuple[RunKey, ...] = ()  # its (agent, id) pairs, first begun first: more than one once it moved nodes
    job_node: bool = False  # one node of a multi-node job: its own row, not joined to the others
    watched: bool = False  # followed from TensorBoard files: nothing to steer (pilothouse.wire.watched)
    config: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)  # flattened: dotted keys
    summary: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)  # metric -> last value

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
        summary = run.get("summary") if isinstance(run.get("summary"), dict) else {}
        config = run.get("config") if isinstance(run.get("config"), dict) else {}
        metric = run["key"] if isinstance(run.get("key"), str) else None
        return cls(agent=agent if agent is not None else run.get("agent", ""), run_id=run["id"],
                   project=run.get("project") or "", name=run.get("name") or "",
                   status=run.get("status") or "", step=run.get("last_step"), key_metric=metric,
                   key_value=summary.get(metric) if metric else None, host=run.get("host") or "",
                   lost_records=run.get("lost_records") or 0, created=run.get("created") or 0.0,
                   attempts=run.get("attempts") if isinstance(run.get("attempts"), int) else 1,
                   job_node=is_job_node(run), watched=run.get("kind") == WATCHED, config=flatten(config),
                   summary=dict(summary))

    def value(self, column: Column) -> Any:
        """The row's value in ``column`` as it sorts (``MISSING`` where the run has none)."""
        if column.source == CONFIG:
            return self.config.get(column.key, MISSING)
        if column.source == SUMMARY:
            return self.summary.get(column.key, MISSING)
        return _FIXED_VALUES[column.key](self)

    def matches(self, text: str) -> bool:
        """Case-insensitive: every word of ``text`` appears in the project, name, id, host or agent URL."""
        hay = " ".join((self.title, self.run_id, self.host, self.agent)).lower()
        return all(word in hay for word in text.lower().split())


def sort_key(row: RunRow) -> tuple:
    """Severity (a firing alert counts as crashed), then newest first, then a stable tie-break."""
    severity = 0 if row.alerts else SEVERITY.get(row.status, len(SEVERITY))
    return (severity, -row.created, row.title, row.key)


def _or_missing(value: Any) -> Any:
    return MISSING if value is None or value == "" else value


# what a click on a fixed column's header sorts by: a status by its severity, the rest as shown
_FIXED_VALUES = {
    "status": lambda row: SEVERITY.get(row.status, len(SEVERITY)), "alerts": lambda row: row.alerts,
    "run": lambda row: row.title, "step": lambda row: _or_missing(row.step),
    "key metric": lambda row: _or_missing(row.key_value), "host": lambda row: _or_missing(row.host),
    "lost": lambda row: row.lost_records,
}


class RunsModel:
    """The run list of every agent: filtered, ordered by severity or by a column, with config and
    summary columns and a multi-selection."""

    def __init__(self, include_system: bool = False):
        self.include_system = include_system  # the agents' sys-HOST runs belong to the GPU panel
        self.filter_text = ""
        self._each: dict[RunKey, RunRow] = {}  # as every agent reports its runs
        self._rows: dict[RunKey, RunRow] = {}  # one per run, its members joined (``_join``)
        self._by_id: dict[str, set[RunKey]] = {}  # the keys in ``_each`` of each run id
        self._alerts: dict[RunKey, int] = {}
        self._selected: list[RunKey] = []
        self._columns: list[Column] | None = None  # the extra columns chosen; None: the default ones
        self._sort: tuple[Column, bool] | None = None  # (column, descending); None: by severity

    def set_runs(self, runs: Iterable[dict]) -> None:
        """Replace every run (dicts carrying ``agent``, as ``LocalStore.runs()`` returns)."""
        self._each = {}
        self._merge(runs, None)
        self._join()

    def update_agent(self, agent: str, runs: Iterable[dict]) -> bool:
        """Refresh one agent's runs (from a link's batch); the others' are left as they are.  Only
        the rows of the run ids that changed are joined again, so each agent's once-a-second list
        costs its own runs, not every agent's.  True when a row changed."""
        ids = self._merge(runs, agent)
        for run_id in ids:
            self._join(run_id)
        return bool(ids)

    def _merge(self, runs: Iterable[dict], agent: str | None) -> set[str]:
        """Take the runs in; the ids of those that changed (a row or its summary and config)."""
        changed = set()
        for run in runs:
            if self.include_system or run.get("kind", "train") in USER_KINDS:
                row = RunRow.from_run(run, agent)
                old = self._each.get(row.key)
                if old is None or old != row or old.summary != row.summary or old.config != row.config:
                    self._each[row.key] = row
                    self._by_id.setdefault(row.run_id, set()).add(row.key)
                    changed.add(row.run_id)
        return changed

    def _join(self, run_id: str | None = None) -> None:
        """One row per run: a run resumed on another node shows where it is now (status, step, host,
        last values: its latest member's) under the key of its first, with every attempt counted.
        With ``run_id``, only the rows of that id are joined again (members share their id)."""
        if run_id is None:
            self._rows, self._by_id = {}, {}
            for key in self._each:
                self._by_id.setdefault(key[1], set()).add(key)
            keys: Iterable[RunKey] = self._each
        else:
            keys = self._by_id.get(run_id, ())
            for key in keys:
                self._rows.pop(key, None)
        each = [(k, self._each[k]) for k in keys]
        apart = {k for k, r in each if r.job_node}
        for key, group in members(((k, r.project, r.created) for k, r in each), apart).items():
            rows = [self._each[k] for k in group]
            first, last = rows[0], rows[-1]
            self._rows[key] = replace(last, agent=first.agent, name=first.name, created=first.created,
                                      attempts=sum(r.attempts for r in rows), members=tuple(group),
                                      lost_records=sum(r.lost_records for r in rows),
                                      alerts=sum(self._alerts.get(k, 0) for k in group))

    def set_alerts(self, counts: Mapping[RunKey, int]) -> None:
        """Firing alerts per run (runs left out have none), e.g. ``AlertBook.counts()``."""
        self._alerts = {k: n for k, n in counts.items() if n}
        self._join()

    def set_filter(self, text: str) -> None:
        self.filter_text = text.strip()

    def rows(self) -> list[RunRow]:
        """The rows to show, in display order: by the sorted column while it is shown, else by severity."""
        listed = self._listed()
        if self._sort is not None and (self._sort[0] in FIXED or self._sort[0] in self._extra(listed)):
            column, descending = self._sort
            return ordered(listed, lambda row: row.value(column), descending)
        return listed

    def _listed(self) -> list[RunRow]:
        return sorted((r for r in self._rows.values() if r.matches(self.filter_text)), key=sort_key)

    def row(self, key: RunKey) -> RunRow | None:
        return self._rows.get(key)

    def titles(self) -> dict[RunKey, str]:
        """What the run column calls each run: its title, told apart where titles collide
        (``distinct_titles``), over every run (not only the filtered ones, so a label does not
        change as the user types a filter)."""
        return distinct_titles(self._rows.values())

    # --- columns (config keys and last values beside the fixed ones) and sorting -------------

    @property
    def default_columns(self) -> bool:
        """Whether the extra columns are the default ones (no choice made)."""
        return self._columns is None

    def extra_columns(self) -> list[Column]:
        """The columns shown after the fixed ones: those chosen, else the config keys that differ
        between the listed runs (at most ``run_columns.DEFAULT_LIMIT``)."""
        return self._extra(self._listed())

    def _extra(self, listed: list[RunRow]) -> list[Column]:
        if self._columns is not None:
            return list(self._columns)
        return default_config_columns([r.config for r in listed], config_diff({r.key: r.config for r in listed}))

    def set_extra_columns(self, columns: Iterable[Column] | None) -> None:
        """Show these columns (in this order) after the fixed ones; None: the default ones."""
        self._columns = None if columns is None else list(dict.fromkeys(columns))

    def toggle_column(self, column: Column) -> None:
        """Show ``column`` if hidden, else hide it (and stop sorting by it)."""
        shown = self.extra_columns()
        if column in shown:
            shown.remove(column)
            if self._sort is not None and self._sort[0] == column:
                self._sort = None
        else:
            shown.append(column)
        self._columns = shown

    def available_columns(self) -> list[Column]:
        """Every config key (by name) and summary metric (by importance) of the listed runs."""
        listed = self._listed()
        config = sorted(set().union(*(r.config for r in listed)))
        summary = by_importance(set().union(*(r.summary for r in listed)))
        return [Column(CONFIG, k) for k in config] + [Column(SUMMARY, m) for m in summary]

    @property
    def sort(self) -> tuple[Column, bool] | None:
        """(column, descending) the rows are sorted by, None for the default severity order."""
        return self._sort

    def sort_by(self, column: Column | None, descending: bool = False) -> None:
        self._sort = None if column is None else (column, descending)

    def cycle_sort(self, column: Column) -> None:
        """A header click: ascending, then descending, then back to the severity order."""
        if self._sort is None or self._sort[0] != column:
            self.sort_by(column)
        elif not self._sort[1]:
            self.sort_by(column, descending=True)
        else:
            self.sort_by(None)

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


IDLE_WHEN = {  # a fixed column that says nothing about these rows: hidden, so the others fit beside the charts
    "alerts": lambda rows: not any(r.alerts for r in rows),
    "lost": lambda rows: not any(r.lost_records for r in rows),
    "host": lambda rows: len({r.host for r in rows}) <= 1,  # one machine: each row's tooltip names it
}


def idle_columns(rows: list[RunRow]) -> set[str]:
    """The fixed columns to hide for these rows: no alert firing, no record lost, all on one host."""
    return {name for name, idle in IDLE_WHEN.items() if idle(rows)}


def held_order(rows: list[RunRow], order: list[RunKey]) -> list[RunRow]:
    """``rows`` in the order ``order`` had them (the rows shown now), those not in it last in their
    own order: a held table moves no row, a new run comes in below the others."""
    where = {key: i for i, key in enumerate(order)}
    return sorted(rows, key=lambda r: where.get(r.key, len(where)))  # stable: new rows keep their order


def agent_place(url: str) -> str:
    """How a row names its agent: ``host:port`` of a tcp URL, only ``:port`` on this machine's loopback
    (every local agent is there: the port is what differs), the file's name of an ipc URL."""
    parts = urlsplit(url)
    if parts.scheme == "ipc":
        return os.path.basename(url[len("ipc://"):].rstrip("/")) or url
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is not None and is_loopback(url):
        return f":{port}"
    return parts.netloc or url


def distinct_titles(rows: Iterable[RunRow]) -> dict[RunKey, str]:
    """Each row's title, told apart from rows of the same title: by its agent's ``host:port`` when they
    are on several agents (two demos both run ``grpo-demo/lr3e-3``), by its id when one agent holds
    several (a script run twice), both where both happen."""
    by_title: dict[str, list[RunRow]] = {}
    for row in rows:
        by_title.setdefault(row.title, []).append(row)
    out = {}
    for title, group in by_title.items():
        agents = {r.agent for r in group}
        for r in group:
            label = title
            if len(agents) > 1:
                label += f" @ {agent_place(r.agent)}"
            if sum(o.agent == r.agent for o in group) > 1:
                label += f" ({r.run_id})"
            out[r.key] = label
    return out


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


def merged_event_lines(events: Mapping[RunKey, list], labels: Mapping[RunKey, str]) -> list[str]:
    """The events of several compared runs as one journal, oldest first, each line led by its run's
    label ("base: 2025-01-31 14:02:07  paused at step 42 ..."): what happened across runs reads in
    the order it happened.  Each run is narrated on its own (an acknowledgement names who asked
    from that run's commands); one run keeps the plain lines of `pilothouse events`."""
    if len(events) == 1:
        return event_lines(next(iter(events.values())))
    timed = []
    for n, (key, bodies) in enumerate(events.items()):
        for i, (body, line) in enumerate(zip(bodies, event_lines(bodies))):
            stamp = body.get("time") if isinstance(body, Mapping) else None
            stamp = stamp if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) else math.inf
            timed.append((stamp if math.isfinite(stamp) else math.inf, n, i, f"{labels.get(key, key[1])}: {line}"))
    return [line for *_, line in sorted(timed)]

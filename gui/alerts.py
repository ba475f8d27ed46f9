"""Alerts as the app sees them, in plain Python: which runs have a rule firing, where to mark the
charts, and which alerts deserve a desktop notification.

Why here and not in the agent: the agent writes each alert as an event in the run's journal
(state "firing", later maybe "cleared"), so the app derives everything from the journal it
already keeps, and it works offline from the local store.  Why the notification rule: at start
the app replays history (its own store, then whatever the agent journaled while the app was
closed); an on-call engineer wants to be woken by what fires now, not by last night's alerts,
which the badge and the Alerts tab still show.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from pilothouse.wire.alert_rules import KINDS as RULE_KINDS

from .models import RunKey

ALERT_EVENT = "alert"
KINDS = tuple(RULE_KINDS)
# What each kind needs, as the rule form asks for it (the agent validates and has the last word).
KIND_FIELDS = {kind: tuple(fields) for kind, fields in RULE_KINDS.items()}
# alerts about the run as a whole (kinds without a metric), marked on all its charts
RUN_LEVEL = tuple(kind for kind, fields in RULE_KINDS.items() if "metric" not in fields)
INT_FIELDS = ("for_steps", "window")
FLOAT_FIELDS = ("threshold", "pct", "seconds", "util")
NOTIFY_GRACE = 30.0  # seconds an alert may predate the app's start (clock skew) and still notify
RECENT = 200  # alert events kept for the Alerts tab's "recent" list
# What the Rules list says while an agent has none: a new user meets the tab empty, and an empty
# table teaches nothing (what a rule is, what it does, where rules come from).
NO_RULES = (
    "No alert rules on this agent yet.\n\n"
    "A rule is a condition the agent checks on its runs (every run, or one), even with the app closed: "
    "on a metric (nonfinite: it became NaN or ±Inf; above / below: past a threshold for some "
    "consecutive steps; drop: a % fall from its recent best) or on the run (stale: no heartbeat for "
    "some seconds; gpu_idle: its GPU idle). When the condition holds the rule fires: the run gets a ⚠ "
    "badge and a line on its charts, you get a notification, and the rule may pause the run (pause) "
    "or run a hook (exec, from the agent's --alerts file only).\n\n"
    "Add one here with the Add… button above, or from a terminal:\n"
    "    pilothouse alerts add kl-high above metric=kl threshold=5 for_steps=3 pause=true [--run RUN]\n"
    "A trainer can bring its own: pilothouse.init(..., alerts=[{\"name\": \"nan\", \"kind\": \"nonfinite\", "
    "\"pause\": True}]); an agent reads a file of them: pilothouse agent --alerts rules.toml."
)


@dataclass(frozen=True)
class Alert:
    agent: str
    run: str
    rule: str
    kind: str
    state: str
    metric: str | None
    step: int | None
    value: float | None
    detail: str
    time: float
    source: str
    actions: tuple[str, ...]

    @property
    def key(self) -> RunKey:
        return (self.agent, self.run)

    @property
    def episode(self) -> tuple[str, str | None]:
        """A rule fires once per (rule, metric) episode; a later "cleared" ends it."""
        return (self.rule, self.metric)

    @property
    def firing(self) -> bool:
        return self.state == "firing"

    @classmethod
    def from_body(cls, body: Any, agent: str, run: str) -> "Alert | None":
        """An alert from an event body, or None for any other event (or a malformed alert)."""
        if not is_alert(body):
            return None
        try:
            step = body.get("step")
            value = body.get("value")
            return cls(agent=agent, run=run, rule=str(body.get("rule") or "?"), kind=str(body.get("kind") or "?"),
                       state=str(body.get("state") or "firing"), metric=body.get("metric"),
                       step=None if step is None else int(step), value=None if value is None else float(value),
                       detail=str(body.get("detail") or ""), time=float(body.get("time") or 0.0),
                       source=str(body.get("source") or ""), actions=tuple(str(a) for a in body.get("actions") or ()))
        except (TypeError, ValueError):
            return None

    def summary(self) -> str:
        """One line for a tooltip or a notification."""
        return self.detail or f"{self.rule} ({self.kind}) {self.state}"


class Marker(NamedTuple):
    """Where a chart marks an alert: at ``step`` (or ``time`` on a wall-time axis)."""

    step: int | None
    rule: str
    metric: str | None
    detail: str
    state: str
    time: float


def place(marks: list[Marker], steps: np.ndarray, times: np.ndarray) -> list[Marker]:
    """Give a step to markers without one (a stale run: the alert knows only its time): the
    last step the run logged by then, from one metric's (steps, wall times)."""
    if not len(steps) or all(m.step is not None for m in marks):
        return marks
    reached = np.maximum.accumulate(times)  # arrival order; a clock step back must not unsort it
    placed = []
    for m in marks:
        if m.step is None:
            i = int(np.searchsorted(reached, m.time, side="right")) - 1
            m = m._replace(step=int(steps[max(i, 0)]))
        placed.append(m)
    return placed


def is_alert(body: Any) -> bool:
    return isinstance(body, dict) and body.get("event") == ALERT_EVENT


def firing(alerts: Iterable[Alert]) -> list[Alert]:
    """The alerts whose episode's latest event (in the order given, oldest first) is "firing"."""
    latest: dict[tuple[RunKey, str, str | None], Alert] = {}
    for alert in alerts:
        latest[(alert.key, *alert.episode)] = alert
    return [a for a in latest.values() if a.firing]


def markers(alerts: Iterable[Alert]) -> list[Marker]:
    """Every firing and clearing, for the charts of the alert's metric; metric None (a stale run,
    an idle GPU: not one of the run's own curves) marks every chart of the run."""
    return [Marker(a.step, a.rule, None if a.kind in RUN_LEVEL else a.metric, a.summary(), a.state, a.time)
            for a in alerts]


class AlertBook:
    """Every alert the app knows of, per run, and which of them arrived live.

    ``load`` takes history (never notified); ``add`` takes an entry from a link and returns the
    alert when it should notify: a "firing" event journaled after the agent's floor (the store's
    cursor when the app started following it) and stamped no earlier than that moment (less a
    grace for clock skew between hosts), seen for the first time.
    """

    def __init__(self, started: float | None = None):
        self.started = time.time() if started is None else started
        self._floors: dict[str, tuple[int, float]] = {}  # agent -> (journal id, wall time) to notify after
        self._by_run: dict[RunKey, list[Alert]] = {}
        self._seen: dict[RunKey, set[tuple]] = {}
        self._firing: dict[RunKey, list[Alert]] = {}

    def follow(self, agent: str, cursor: int, since: float | None = None) -> None:
        """Notify only of this agent's alerts journaled after ``cursor`` and stamped after ``since``
        (default: the book's start); an agent never followed has floor (0, start)."""
        self._floors[agent] = (cursor, self.started if since is None else since)

    def load(self, agent: str, run: str, bodies: Iterable[Any]) -> None:
        """A run's event bodies from the store, oldest first (replaces what was known of it)."""
        key = (agent, run)
        self._by_run[key], self._seen[key] = [], set()
        for body in bodies:
            alert = Alert.from_body(body, agent, run)
            if alert is not None:
                self._keep(alert)
        self._firing[key] = firing(self._by_run[key])

    def add(self, agent: str, run: str, entry_id: int, body: Any) -> Alert | None:
        """A live event entry; returns the alert if it is one to notify about."""
        alert = Alert.from_body(body, agent, run)
        if alert is None or not self._keep(alert):
            return None
        self._firing[alert.key] = firing(self._by_run[alert.key])
        floor, since = self._floors.get(agent, (0, self.started))
        fresh = entry_id > floor and alert.time >= since - NOTIFY_GRACE
        return alert if fresh and alert.firing else None

    def _keep(self, alert: Alert) -> bool:
        """Record an alert; False when it was already known (a page delivered twice)."""
        ident = (alert.rule, alert.metric, alert.state, alert.step, alert.time)
        seen = self._seen.setdefault(alert.key, set())
        if ident in seen:
            return False
        seen.add(ident)
        self._by_run.setdefault(alert.key, []).append(alert)
        return True

    def firing(self, key: RunKey | None = None) -> list[Alert]:
        """Firing alerts of one run, or of every run (newest first)."""
        if key is not None:
            return list(self._firing.get(key, ()))
        return sorted((a for alerts in self._firing.values() for a in alerts), key=lambda a: -a.time)

    def counts(self) -> dict[RunKey, int]:
        """Firing alerts per run, for runs that have any: the runs list's badge."""
        return {key: len(alerts) for key, alerts in self._firing.items() if alerts}

    def recent(self, n: int = RECENT) -> list[Alert]:
        """The newest ``n`` alert events (firing and cleared) across runs, newest first."""
        every = (a for alerts in self._by_run.values() for a in alerts)
        return sorted(every, key=lambda a: -a.time)[:n]

    def markers(self, key: RunKey) -> list[Marker]:
        return markers(self._by_run.get(key, ()))


def rule_from_form(fields: Mapping[str, str], pause: bool = False) -> dict:
    """A rule dict for ``Client.add_alert`` from the form's text fields; only the kind's fields
    are sent, empty ones left to the agent's defaults.  ValueError says what to fix."""
    name = (fields.get("name") or "").strip()
    kind = (fields.get("kind") or "").strip()
    if not name:
        raise ValueError("a rule needs a name")
    if kind not in KIND_FIELDS:
        raise ValueError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    rule: dict[str, Any] = {"name": name, "kind": kind}
    for field in KIND_FIELDS[kind]:
        text = (fields.get(field) or "").strip()
        if not text:
            continue
        if field in INT_FIELDS:
            try:
                rule[field] = int(text)
            except ValueError:
                raise ValueError(f"{field} must be a whole number, not {text!r}") from None
        elif field in FLOAT_FIELDS:
            try:
                rule[field] = float(text)
            except ValueError:
                raise ValueError(f"{field} must be a number, not {text!r}") from None
            if not math.isfinite(rule[field]):
                raise ValueError(f"{field} must be finite")
        else:
            rule[field] = text
    if pause:
        rule["pause"] = True
    return rule


def rule_text(rule: dict) -> str:
    """A rule's spec in one line for the rule list ("metric=loss threshold=10 pause")."""
    spec = rule.get("spec") or {}
    parts = [f"{k}={v}" for k, v in spec.items() if k not in ("name", "kind", "pause") and v not in (None, False)]
    if spec.get("pause"):
        parts.append("pause")
    return " ".join(parts)

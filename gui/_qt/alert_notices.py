"""The window's alerts: the book of every run's alerts, the toolbar's firing count, the desktop notice
of an alert that fires live, and each run's chart markers.

The book starts from the store (history: badges and markers, never a notice) and follows the live
batches; an alert journaled after the app started notifies, once the run list can name its run.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QApplication, QMainWindow, QStyle, QSystemTrayIcon

from pilothouse.text import printable
from pilothouse.wire.entries import KIND_EVENT, Entry, entry_body

from ..alerts import Alert, AlertBook, Marker, is_alert, place
from ..local_store import LocalStore
from ..models import RunKey, RunsModel
from .alerts import AlertsPanel

NAME_WAIT_MS = 2000  # a notification waits this long at most for its run's name (the run list lags ~1 s)
NOTIFY_MS = 15000


class AlertNotices(QObject):
    """What the window shows of alerts; ``show_tab`` brings the Alerts tab up (the toolbar's count
    and a clicked notice both call it)."""

    def __init__(self, window: QMainWindow, store: LocalStore, runs: RunsModel, show_tab: Callable[[], None]):
        super().__init__(window)
        self.store, self.runs = store, runs
        self.book = _load(store)
        self.runs.set_alerts(self.book.counts())
        self.notifier = Notifier(window, show_tab)
        self.action = QAction("no alerts", window, toolTip="alerts firing now: show the Alerts tab",
                              triggered=show_tab)
        self.dirty = True  # the badges, the tab and the count are to be shown again
        self._unnamed: list[Alert] = []  # alerts to notify once the run list names their run
        self._closed = False

    def close(self) -> None:
        """The window closed: a notice still waiting for its run's name is dropped."""
        self._closed = True

    def title(self, key: RunKey) -> str:
        row = self.runs.row(key)
        return row.title if row is not None else key[1]

    def add(self, url: str, entries: list[Entry]) -> set[RunKey]:
        """Alert events of a live batch go in the book, new ones notify; returns the runs whose alerts changed."""
        changed: set[RunKey] = set()
        fresh = []
        for e in entries:
            if e.kind != KIND_EVENT:
                continue
            body = entry_body(e)
            if is_alert(body):
                changed.add((url, e.run))
                if (alert := self.book.add(url, e.run, e.id, body)) is not None:
                    fresh.append(alert)
        if fresh or self._unnamed:
            self._notify(fresh)
        self.dirty = self.dirty or bool(changed)
        return changed

    def follow(self, url: str, cursor: int) -> None:
        """A newly followed agent: its alerts after ``cursor``, stamped from now, notify."""
        self.book.follow(url, cursor, time.time())

    def forget(self, keys: list[RunKey]) -> None:
        """Runs removed from the app: their alerts go with them."""
        for key in keys:
            self.book.load(*key, ())
        self.dirty = True

    def show(self, panel: AlertsPanel) -> bool:
        """The badges, the Alerts tab and the toolbar's count, if they changed; True when they did."""
        if not self.dirty:
            return False
        self.dirty = False
        self.runs.set_alerts(self.book.counts())
        panel.show_alerts(self.book)
        n = len(self.book.firing())
        self.action.setText(f"⚠ {n} alert{'s' if n != 1 else ''} firing" if n else "no alerts")
        return True

    def markers(self, key: RunKey) -> list[Marker]:
        """A run's chart markers, every node's it ran on (see ``pilothouse.gui.attempts``)."""
        row = self.runs.row(key)
        members = (row.members if row is not None else ()) or (key,)
        return [m for member in members for m in self._member_markers(member)]

    def _member_markers(self, key: RunKey) -> list[Marker]:
        """One member's chart markers, those without a step placed at its last step by then."""
        marks = self.book.markers(key)
        if any(m.step is None for m in marks) and (metrics := self.store.metrics(*key)):
            row = self.runs.row(key)
            metric = row.key_metric if row is not None and row.key_metric in metrics else metrics[0]
            steps, _, times = self.store.series(*key, metric)
            marks = place(marks, steps, times)
        return marks

    def _notify(self, fresh: list[Alert], wait: bool = True) -> None:
        """Notify now about alerts of runs the list knows (a title says more than a run id); an
        alert on a run just started waits for the list's next refresh, at most NAME_WAIT_MS."""
        self._unnamed += fresh
        ready = [a for a in self._unnamed if not wait or self.runs.row(a.key) is not None]
        self._unnamed = [a for a in self._unnamed if a not in ready]
        self.notifier.notify(ready, self.title)
        if fresh and self._unnamed:
            QTimer.singleShot(NAME_WAIT_MS, self, self._notify_unnamed)

    def _notify_unnamed(self) -> None:
        if not self._closed:
            self._notify([], wait=False)


class Notifier:
    """A desktop notification per batch of alerts that fired live: the system tray's balloon,
    or where there is no tray, the status bar and the taskbar's attention hint."""

    def __init__(self, window: QMainWindow, on_click: Callable[[], None]):
        self.window = window
        self.on_click = on_click  # the balloon was clicked: show the alerts
        self.tray: QSystemTrayIcon | None = None

    def notify(self, alerts: list[Alert], title: Callable[[RunKey], str]) -> None:
        if not alerts:
            return
        first = alerts[0]
        head = (printable(f"⚠ {first.rule} on {title(first.key)}") if len(alerts) == 1
                else f"⚠ {len(alerts)} alerts firing")
        body = "\n".join(printable(f"{title(a.key)}: {a.summary()}") for a in alerts)
        if QSystemTrayIcon.isSystemTrayAvailable():
            if self.tray is None:
                icon = self.window.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning)
                self.tray = QSystemTrayIcon(icon, self.window, toolTip="Pilothouse")
                self.tray.messageClicked.connect(self.on_click)
                self.tray.show()
            self.tray.showMessage(head, body, QSystemTrayIcon.MessageIcon.Warning, NOTIFY_MS)
        else:
            self.window.statusBar().showMessage(f"{head}: {body.replace(chr(10), '; ')}", NOTIFY_MS)
            QApplication.alert(self.window)


def _load(store: LocalStore) -> AlertBook:
    """Every alert in the store; only those journaled after each agent's cursor as of now, and
    stamped after now, will notify."""
    book = AlertBook()
    with store.snapshot():
        for agent in store.agents():
            book.follow(agent["url"], agent["cursor"])
        for run in store.runs():
            book.load(run["agent"], run["id"], store.events(run["agent"], run["id"]))
    return book

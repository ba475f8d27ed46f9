"""The Pilothouse window: agents, the run list, charts, events and run control.

Network I/O lives in ``pilothouse.gui.network`` threads; their callbacks become Qt signals here
(queued into the UI thread), and the UI redraws on one coalescing timer, not per message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pyqtgraph.util.garbage_collector import GarbageCollector
from PySide6.QtCore import QItemSelectionModel, QObject, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QDialog,
    QFileDialog,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QSplitter,
    QStackedWidget,
    QTableView,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from pilothouse.text import printable
from pilothouse.wire.entries import KIND_EVENT, KIND_METRIC, Entry
from pilothouse.wire.watched import STEER_HOW, how_to_steer

from ..health_text import health_text
from ..local_store import LocalStore
from ..models import RunKey, RunsModel, first_screen, merged_event_lines, run_labels
from ..network import Health, Inbox, Links
from ..palette import RunColors
from ..remote_tiers import RemoteTiers
from .alert_notices import AlertNotices
from .alerts import AlertsPanel
from .calls import Calls
from .charts import ChartsPanel
from .config import ConfigPanel
from .export import export_chart_png, export_run_csv
from .help import ShortcutsDialog, add_doc_actions, show_about
from .job_offers import JobOffers
from .local_follow import EVERY, LocalFollow
from .rollouts import RolloutsPanel
from .runs_pane import OrderHold, PaneFit, elide_middle, fit_columns, hide_idle
from .runs_table import COLUMNS, RunsHeader, RunsTableModel
from .status_icons import StatusDelegate
from .store_dialogs import Ask, CleanupDialog, StoreWork, ask_user, fmt_bytes, live_text, removal_text
from .system import SystemPanel
from .theme import apply_theme

REDRAW_MS = 30
STOP_NAMES = 5  # a stop confirmation names this many runs, then "and N more"
RESIZE_S = 2.0  # the run table's columns fit grown values (a longer step) at most this often
EMPTY = ("No agents yet: run `pilothouse agent` (`pilothouse gui` without --agent follows the agents you "
         "start on this machine), or add one on another node here (Agents → Add agent…, e.g. tcp://127.0.0.1:7766).")


class Bridge(QObject):
    """Signals emitted from network threads; Qt delivers them on the UI thread."""

    batch = Signal()  # the links' inbox has batches (``Inbox``)
    health = Signal(object)
    tiers = Signal(str)  # agent url: it answered tiers of a run the store lacks


class MainWindow(QMainWindow):
    def __init__(self, store_path: str | Path | None = None, agents: Sequence[str] = (), local: bool = False):
        """``agents``: URLs to follow (and remember); ``local``: follow the user's running local agents too."""
        super().__init__()
        self.setWindowTitle("Pilothouse")
        self.bridge = Bridge()
        self.inbox = Inbox(self.bridge.batch.emit)
        self.links = Links(store_path, on_batch=self.inbox.put, on_health=self.bridge.health.emit)
        self.store: LocalStore = self.links.store
        for url in agents:
            self.links.add(url)
        self.removed = self.store.removed()  # runs removed from this app: the agents' lists still carry them
        self.runs = RunsModel()
        self.runs.set_runs(self.store.runs())
        self.notices = AlertNotices(self, self.store, self.runs, self._show_alerts_tab)
        self.table_model = RunsTableModel(self.runs, self.notices.book.firing)
        self.run_colors = RunColors()  # a run keeps its color in every tab while the app runs
        self.health: dict[str, Health] = {}
        self.behind: dict[str, float] = {}  # agent url -> how late its last points reached this thread (s)
        self._events_keys: list[RunKey] = []  # the runs the Events pane shows
        self._events_stale = False  # they logged events since: read again when the pane is seen (``_redraw``)
        self._dirty = True
        self._rows_dirty = True
        self._reorder = False  # the user asked for an order (a header click, a filter): not held
        self._sized = 0.0  # when the run table's columns were last fitted to their contents
        self._closed = False
        self._opened = False  # the first screen (the last selection, else the live runs) is shown
        self.local: LocalFollow | None = None  # the user's running local agents, followed (``follow_local_agents``)
        self._build()
        self.bridge.batch.connect(self._take_batches)
        self.bridge.tiers.connect(self.charts.remote_answered)
        self.remote = RemoteTiers(on_answer=self.bridge.tiers.emit)  # asked on its own threads, never this one
        self.charts.model.remote = self.remote
        self.bridge.health.connect(self._on_health)
        self.calls = Calls(self)
        self.calls.answered.connect(self._on_answer)
        self.store_work = StoreWork(self.store.path)
        self.store_work.done.connect(self._on_removed)
        if self.store.pending_removals():
            self.store_work.finish_pending()
        self.redraw = QTimer(self, singleShot=True, interval=REDRAW_MS, timeout=self._redraw)
        self.links.start()
        if local:
            self.follow_local_agents()
        self.system.show_agents(self.store)
        self._schedule()
        self._restore_layout()

    def follow_local_agents(self, every: float = EVERY) -> None:
        """Follow the agents this user runs on this machine, those that start later too (their records
        are read every ``every`` seconds, off this thread), for this session only."""
        if self.local is None:
            self.local = LocalFollow(self, self, every)

    # --- layout ---------------------------------------------------------------------------

    def _build(self) -> None:
        self.filter = QLineEdit(placeholderText="filter runs…", clearButtonEnabled=True)
        self.filter.textChanged.connect(self._on_filter)
        self.table = QTableView()
        self.table.setModel(self.table_model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.ExtendedSelection)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setWordWrap(False)
        self.table.setItemDelegateForColumn(COLUMNS.index("status"), StatusDelegate(self.table))  # drawn icons
        elide_middle(self.table)
        self.table_header = RunsHeader(self.table, self.table_model, self._resort)  # sort, choose columns
        self.order_hold = OrderHold(self.table, self._schedule)  # no re-sort under the pointer
        self.table.selectionModel().selectionChanged.connect(self._on_select)
        left = QWidget()
        column = QVBoxLayout(left)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.filter)
        column.addWidget(self.table)

        self.charts = ChartsPanel(self.run_colors)
        self.system = SystemPanel()
        self.rollouts = RolloutsPanel()
        self.config = ConfigPanel()
        self.events = QPlainTextEdit(readOnly=True)
        self.alerts = AlertsPanel()
        self.alerts.titles = self.notices.title
        self.alerts.run_choices = lambda url: [(r.run_id, r.title) for r in self.runs.rows() if r.agent == url]
        self.alerts.run_activated.connect(self._show_run)
        self.alerts.set_agents(self.followed())
        self.tabs = QTabWidget()
        for widget, title in ((self.charts, "Charts"), (self.system, "System"), (self.rollouts, "Rollouts"),
                              (self.config, "Config"), (self.events, "Events"), (self.alerts, "Alerts")):
            self.tabs.addTab(widget, title)
        self.tabs.currentChanged.connect(self._on_tab)
        self.empty = QLabel(EMPTY, alignment=Qt.AlignCenter, wordWrap=True)
        self.center = QStackedWidget()
        self.center.addWidget(self.tabs)
        self.center.addWidget(self.empty)
        jobs_menu = QMenu("&Jobs", self)  # each multi-node job decided on: offer again, remove as one
        self.job_offers = JobOffers(self, self.store, self, jobs_menu)
        right = QWidget()
        stack = QVBoxLayout(right)
        stack.setContentsMargins(0, 0, 0, 0)
        stack.addWidget(self.job_offers.bar)
        stack.addWidget(self.center)

        self.splitter = QSplitter()
        self.splitter.addWidget(left)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(1, 3)
        self.splitter.setSizes([440, 840])
        self.pane_fit = PaneFit(self.splitter, self.table)  # grown to its columns until the user drags it
        self.setCentralWidget(self.splitter)

        bar = QToolBar("Run control", objectName="control")
        self.addToolBar(bar)
        self.actions: dict[str, QAction] = {}
        for name, keys in (("pause", "Ctrl+P"), ("resume", "Ctrl+R"), ("checkpoint", "Ctrl+S"), ("stop", None)):
            act = QAction(name.capitalize(), self, triggered=lambda _=False, n=name: self.send(n))
            if keys:
                act.setShortcut(QKeySequence(keys))
            bar.addAction(act)
            self.actions[name] = act
        bar.addSeparator()
        bar.addAction(self.notices.action)
        files = self.menuBar().addMenu("&File")
        files.addAction(QAction("Export run as &CSV…", self, shortcut=QKeySequence("Ctrl+E"),
                                triggered=self._export_csv))
        files.addAction(QAction("Save charts as &PNG…", self, triggered=self._export_png))
        files.addSeparator()
        files.addAction(QAction("&Remove run from this app…", self, triggered=lambda: self.remove_from_app()))
        files.addAction(QAction("Clean &up store…", self, triggered=lambda: self.clean_up_store()))
        files.addSeparator()
        files.addAction(QAction("&Quit", self, shortcut=QKeySequence("Ctrl+Q"), triggered=self.close))
        agents = self.menuBar().addMenu("&Agents")
        agents.addAction(QAction("&Add agent…", self, shortcut=QKeySequence("Ctrl+N"), triggered=self._ask_agent))
        agents.addAction(QAction("&Remove agent…", self, triggered=self._forget_agent))
        agents.addMenu(jobs_menu)
        view = self.menuBar().addMenu("&View")
        self.dark = QAction("&Dark theme", self, checkable=True, shortcut=QKeySequence("Ctrl+Shift+D"),
                            toggled=self._theme)
        view.addAction(self.dark)
        for i, name in enumerate(("Charts", "System", "Rollouts", "Config", "Events", "Alerts"), start=1):
            view.addAction(QAction(name, self, shortcut=QKeySequence(f"Alt+{i}"),
                                   triggered=lambda _=False, i=i: self.tabs.setCurrentIndex(i - 1)))
        self.filter_shortcut = QAction("Filter runs", self, shortcut=QKeySequence("Ctrl+F"),
                                       triggered=self.filter.setFocus)
        self.addAction(self.filter_shortcut)
        helps = self.menuBar().addMenu("&Help")
        add_doc_actions(helps, self)  # Getting started (the README) and each docs/ page, then a separator
        helps.addAction(QAction("&Keyboard shortcuts", self, shortcut=QKeySequence("F1"),
                                triggered=lambda: ShortcutsDialog(self).exec()))
        helps.addAction(QAction("&About Pilothouse", self, triggered=lambda: show_about(self)))
        self.status_label = QLabel()
        self.statusBar().addPermanentWidget(self.status_label)

    def _restore_layout(self) -> None:
        settings = QSettings("pilothouse", "pilothouse")
        self.dark.setChecked(settings.value("dark", "true") == "true")
        self._theme(self.dark.isChecked())
        if settings.value("geometry") is not None:
            self.restoreGeometry(settings.value("geometry"))
            self.restoreState(settings.value("state"))
        else:
            self.resize(1280, 800)

    def closeEvent(self, event: Any) -> None:
        if self._closed:
            return super().closeEvent(event)
        self._closed = True
        settings = QSettings("pilothouse", "pilothouse")
        settings.setValue("geometry", self.saveGeometry())
        settings.setValue("state", self.saveState())
        settings.setValue("dark", "true" if self.dark.isChecked() else "false")
        self.redraw.stop()
        self.notices.close()
        if self.local is not None:
            self.local.close()
        for signal in (self.bridge.batch, self.bridge.health, self.bridge.tiers, self.calls.answered,
                       self.store_work.done):
            signal.disconnect()  # queued signals from the links' threads must not reach a closed store
        self.remote.close()
        self.links.close()
        super().closeEvent(event)

    # --- data in --------------------------------------------------------------------------

    def _take_batches(self) -> None:
        for url, entries, runs in self.inbox.take():
            self._on_batch(url, entries, runs)

    def _on_batch(self, url: str, entries: list[Entry], runs: list[dict] | None) -> None:
        if self._closed:  # a batch still queued when the window closed: its store is gone
            return
        rows_changed = False
        if self.removed:
            entries = [e for e in entries if (url, e.run) not in self.removed]
            runs = None if runs is None else [r for r in runs if (url, r["id"]) not in self.removed]
        if runs is not None:
            self.job_offers.runs_listed(runs)
            joined = {k: self.runs.row(k) for k in self.runs.selected()}
            rows_changed = self.runs.update_agent(url, runs)
            self.system.note_runs(url, runs)
            resumed = rows_changed and any(row is not None and row.members != getattr(self.runs.row(k), "members", None)
                                           for k, row in joined.items())
            if resumed or self.charts.model.remote_filled(self.store):
                # a charted run resumed on another node (its curves join), or one drawn from its agent's
                # tiers that is now in the store
                self.charts.show_runs(self.runs.selected(), self.store)
                self.charts.show_alerts({k: self.notices.markers(k) for k in self.runs.selected()})
        newest = max((float(np.frombuffer(e.times, np.float64)[-1]) for e in entries if e.kind == KIND_METRIC and e.n),
                     default=None)
        if newest is not None:  # how late the newest point reaches this thread: the status bar says so
            self.behind[url] = max(0.0, time.time() - newest)
        self.charts.add_entries(url, entries)
        self.system.add_entries(url, entries)
        self.rollouts.add_entries(url, entries)
        charted = self.notices.add(url, entries) & set(self.charts.model.keys)
        if charted:  # only the runs whose alerts changed are marked again
            self.charts.show_alerts({**self.charts.model.alert_markers, **{k: self.notices.markers(k) for k in charted}})
        # commands, acks, alerts of the shown runs appear live, in the window's next redraw: the pane reads every
        # event of the shown runs again, once a burst and only while seen (per batch, 64 runs' events stalled the UI)
        self._events_stale |= any(e.kind == KIND_EVENT and (url, e.run) in self._events_keys for e in entries)
        self._schedule(rows=runs is not None and rows_changed)

    def _on_health(self, health: Health) -> None:
        if health.state == "stopped" and health.url not in self.links.links:
            return  # the last word of an agent no longer followed: not listed as one
        self.health[health.url] = health
        self._schedule(rows=False)

    def _schedule(self, rows: bool = True) -> None:
        """Many messages, one repaint: the timer coalesces everything of a ~30 ms burst.  ``rows``:
        the run list may have changed (resetting and sizing the table is most of a redraw)."""
        self._dirty = True
        self._rows_dirty = self._rows_dirty or rows
        if not self.redraw.isActive():
            self.redraw.start()

    def _redraw(self) -> None:
        if not self._dirty or self._closed:
            return
        self._dirty = False
        self._events_if_seen()
        if self.notices.show(self.alerts):
            self._rows_dirty = True  # the badges
        if self._rows_dirty:
            self._rows_dirty = False
            hold, self._reorder = not self._reorder and self.order_hold.holding(), False
            if self.table_model.refresh(hold):  # rows or columns changed, not only values: sized at once
                self._reselect(self.runs.selected())
                self._sized = 0.0
            self.order_hold.note(self.table_model.held)  # re-sorted once the hold ends
            if not self._opened and self.runs.rows():
                self._opened = True
                first = first_screen(self.runs.rows(), self.store.selection())
                if first:
                    self._reselect(first)
                    self._on_select()
            if hide_idle(self.table, self.table_model) or time.monotonic() - self._sized >= RESIZE_S:
                self._sized = time.monotonic()  # measuring every cell: not on each run list
                fit_columns(self.table, self.table_model)
                self.pane_fit.fit()
            self.center.setCurrentWidget(self.tabs if self.links.agents() or self.runs.rows() else self.empty)
        self.charts.redraw()
        self.system.redraw()
        self.status_label.setText("   ".join(health_text(h, self.behind.get(h.url)) for h in self.health.values())
                                  or "no agents")

    # --- selection ------------------------------------------------------------------------

    def _on_filter(self, text: str) -> None:
        self.runs.set_filter(text)
        self._resort()

    def _resort(self) -> None:
        """The user asked for another order or other rows: shown at once, even under the pointer."""
        self._reorder = True
        self._schedule()

    def _on_select(self, *_: object) -> None:
        keys = [self.table_model.row_at(i.row()).key for i in self.table.selectionModel().selectedRows()]
        self.runs.clear_selection()
        for key in keys:
            self.runs.select(key)
        self.store.remember_selection(keys)
        steerable = not keys or any(not getattr(self.runs.row(k), "watched", False) for k in keys)
        for action in self.actions.values():  # a watched run has no process to steer: say how to get one
            action.setEnabled(steerable)
            action.setToolTip("" if steerable else f"watched from its framework's files; {STEER_HOW}")
        self.charts.show_runs(keys, self.store)
        self.charts.show_alerts({k: self.notices.markers(k) for k in keys})
        self.table_model.set_slots(self.charts.model.slots)
        self.rollouts.show_runs(keys, self.store, self.charts.model.slots)
        self.config.show_runs(keys, self.store, self.charts.model.slots)
        self._events_keys, self._events_stale = list(keys), True
        self._schedule(rows=False)  # the Events pane reads them if seen, else once shown (``_events_if_seen``)

    def _reselect(self, keys: list[RunKey]) -> None:
        model = self.table.selectionModel()
        model.blockSignals(True)
        self.table.clearSelection()
        flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
        for i in range(self.table_model.rowCount()):
            if self.table_model.row_at(i).key in keys:
                model.select(self.table_model.index(i, 0), flags)
        model.blockSignals(False)
        for key in keys:
            self.runs.select(key)

    def _events_if_seen(self) -> None:
        """The Events pane reads the shown runs' events again if they logged some since and it is seen."""
        if self._events_stale and self.tabs.currentWidget() is self.events:
            self._show_events()

    def _show_events(self) -> None:
        """The selected runs' events, merged in time order and led by each run's name (as the
        legends name it) when there are several."""
        keys, self._events_stale = self._events_keys, False
        events = {key: self.store.events(*key) for key in keys}
        labels = run_labels({key: getattr(self.runs.row(key), "name", "") for key in keys})
        self.events.setPlainText("\n".join(merged_event_lines(events, labels)))

    # --- alerts ---------------------------------------------------------------------------

    def _on_tab(self, _: int) -> None:
        self._events_if_seen()
        if self.tabs.currentWidget() is self.alerts:
            self.alerts.refresh_rules()  # rules may have changed from a CLI or another app

    def _show_alerts_tab(self) -> None:
        self.tabs.setCurrentWidget(self.alerts)
        if self.isMinimized():
            self.showNormal()
        self.raise_()
        self.activateWindow()

    def _show_run(self, key: RunKey) -> None:
        """From the Alerts tab: select the run and show its charts."""
        for i in range(self.table_model.rowCount()):
            if self.table_model.row_at(i).key == key:
                self.table.selectRow(i)
                self.tabs.setCurrentWidget(self.charts)
                return
        self.statusBar().showMessage(f"run {key[1]} is not in the list (hidden by the filter?)", 5000)

    # --- run control ----------------------------------------------------------------------

    def send(self, command: str) -> None:
        """Send a command to every selected run, off the UI thread; the answer comes back as a signal."""
        keys = self.runs.selected()
        if not keys:
            self.statusBar().showMessage(f"select a run to {command}", 5000)
            return
        watched = [k for k in keys if getattr(self.runs.row(k), "watched", False)]
        if watched:  # the agent refuses them too; said here without a round trip
            self.statusBar().showMessage(how_to_steer(watched[0][1]), 15000)
            keys = [k for k in keys if k not in watched]
        if command == "stop" and keys and not self.confirm_stop(keys):
            self.statusBar().showMessage("stop cancelled: nothing sent", 5000)
            return
        self.order_hold.touch()  # its answer changes the run's status: no re-sort under the user for a while
        for agent_url, run_id in keys:
            self.calls.call(agent_url, lambda c, run=run_id: c.command(run, command, who={"client": "gui"}), command)
        self.statusBar().showMessage(f"{command}: waiting for the trainer's answer…")

    def confirm_stop(self, keys: Sequence[RunKey]) -> bool:
        """Stop ends a run for good (pause does not), so it asks first, naming the runs; Cancel is
        the default so that Enter or a stray click keeps them running."""
        names = [row.name if (row := self.runs.row(k)) is not None else k[1] for k in keys]
        more = len(names) - STOP_NAMES
        shown = ", ".join(names[:STOP_NAMES]) + (f" and {more} more" if more > 0 else "")
        box = QMessageBox(QMessageBox.Icon.Warning, "Stop runs" if len(keys) > 1 else "Stop run",
                          f"Stop {shown}?\n\nStopping ends a run for good; Pause holds it and Resume goes on.",
                          QMessageBox.StandardButton.Cancel, self)
        stop = box.addButton("Stop", QMessageBox.ButtonRole.DestructiveRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        return box.clickedButton() is stop

    def _on_answer(self, command: str, ok: bool, answer: Any) -> None:
        if not ok:
            text = f"{command} failed: {answer}"
        elif answer["state"] in ("applied", "scheduled"):
            text = answer["detail"]
        else:
            text = f"{command} {answer['state']}: {answer.get('detail') or 'no answer yet; it stays queued'}"
        self.statusBar().showMessage(printable(text), 10000)  # a trainer's text: shown, never acted on
        self._schedule()

    def _export_csv(self) -> None:
        keys = self.runs.selected()
        if not keys:
            self.statusBar().showMessage("select a run to export", 5000)
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export run as CSV", f"{keys[-1][1]}.csv", "CSV (*.csv)")
        if path:
            n = export_run_csv(self.store, *keys[-1], path)
            self.statusBar().showMessage(f"wrote {n} points to {path}", 10000)

    def _export_png(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Save charts as PNG")
        if folder:
            for metric, chart in self.charts.charts.items():
                export_chart_png(chart, Path(folder) / (metric.replace("/", "_") + ".png"))
            self.statusBar().showMessage(f"saved {len(self.charts.charts)} charts to {folder}", 10000)

    # --- removing runs from the app's store ---------------------------------------------------

    def remove_from_app(self, keys: Iterable[RunKey] | None = None, ask: Ask | None = None) -> bool:
        """File → Remove run from this app…: the selected runs (or ``keys``), once the user agreed
        to what goes and its size, and once more for a live run; True when the removal started."""
        wanted = set(self.runs.selected() if keys is None else keys)
        wanted |= {m for k in wanted if (row := self.runs.row(k)) is not None for m in row.members}  # every node's
        runs = [r for r in self.store.stored_runs() if r.key in wanted]
        if not runs:
            self.statusBar().showMessage("select a run to remove from this app", 5000)
            return False
        ask = ask or ask_user(self)
        live = [r for r in runs if r.live]
        if not ask("Remove from this app", removal_text(runs)) or live and not ask("Remove live runs", live_text(live)):
            return False
        self._remove([r.key for r in runs], force=bool(live))
        return True

    def clean_up_store(self, decide: Callable[[CleanupDialog], bool] | None = None) -> bool:
        """File → Clean up store…: the dialog shows what its limits would remove; Remove removes that
        (never a live run).  ``decide(dialog)`` stands for the user (default: the modal dialog)."""
        dialog = CleanupDialog(self, self.store.collect, sum(self.store.run_sizes().values()))
        decide = decide or (lambda d: d.exec() == QDialog.DialogCode.Accepted)
        if not decide(dialog) or not dialog.chosen:
            return False
        self._remove([r.key for r in dialog.chosen], force=False)
        return True

    def _remove(self, keys: list[RunKey], force: bool) -> None:
        """Hide the runs now, remove them off the UI thread (``_on_removed`` follows)."""
        self.removed |= set(keys)
        self.notices.forget(keys)
        kept = [k for k in self.runs.selected() if k not in self.removed]
        self._show_stored_runs()
        self.table_model.refresh()
        self._reselect(kept)
        self._on_select()
        self.store_work.remove(keys, force)
        self.statusBar().showMessage(f"removing {len(keys)} run{'s' if len(keys) != 1 else ''} from this app…")

    def _on_removed(self, tag: Any, result: Any, error: str | None) -> None:
        if error is not None:
            text = f"not removed: {error}"
        elif tag == "pending":
            text = f"finished removing {result} run{'s' if result != 1 else ''} left from last time"
        else:
            text = f"removed {len(tag)} run{'s' if len(tag) != 1 else ''} ({fmt_bytes(result)}) from this app"
        self.removed = self.store.removed()  # a refused removal brings its runs back
        self._show_stored_runs()
        self.statusBar().showMessage(text, 10000)

    def _show_stored_runs(self) -> None:
        self.runs.set_runs(r for r in self.store.runs() if (r["agent"], r["id"]) not in self.removed)
        self._schedule()

    def _theme(self, dark: bool) -> None:
        apply_theme(QApplication.instance(), dark, self)

    def _forget_agent(self) -> None:
        urls = [a["url"] for a in self.links.agents()]
        if not urls:
            self.statusBar().showMessage("no agents to remove", 5000)
            return
        url, ok = QInputDialog.getItem(self, "Remove agent", "Stop following (its runs stay browsable):", urls,
                                       editable=False)
        if ok:
            self.unfollow(url)
            if self.local is not None:
                self.local.drop(url)  # still running: its record must not bring it back
            self.agents_changed()

    def _ask_agent(self) -> None:
        url, ok = QInputDialog.getText(self, "Add agent", "Agent URL:", text="tcp://127.0.0.1:7766")
        if not ok or not url:
            return
        try:
            self.follow(url.strip())
        except ValueError as exc:
            QMessageBox.warning(self, "Add agent", str(exc))
        self.agents_changed()

    # --- the agents followed (``JobOffers`` adds and removes a job's as one) -------------------

    def followed(self) -> list[str]:
        return [a["url"] for a in self.links.agents()]

    def remembered(self, url: str) -> bool:
        return self.links.remembered(url)

    def follow(self, url: str, remember: bool = True) -> None:
        """Follow an agent (ValueError for a bad URL), remembered for later starts unless ``remember``
        is False; its alerts notify from now on."""
        self.links.add(url, remember=remember)
        self.notices.follow(url, self.store.cursor(url))

    def unfollow(self, url: str) -> None:
        """Stop following an agent; its runs stay browsable."""
        self.links.remove(url)
        self.health.pop(url, None)
        self.system.forget(url)

    def agents_changed(self) -> None:
        self.alerts.set_agents(self.followed())
        self._schedule()


def run_app(argv: Sequence[str], store_path: str | Path | None, agents: Sequence[str], local: bool = False) -> int:
    app = QApplication.instance() or QApplication(list(argv))
    # garbage is collected on the UI thread only: a collection triggered on a network thread
    # could otherwise delete Qt objects there and crash the app
    collector = GarbageCollector(interval=1.0)
    window = MainWindow(store_path, agents, local)
    window.show()
    try:
        return app.exec()
    finally:
        collector.timer.stop()

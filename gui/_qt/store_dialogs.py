"""Removing runs from the app's store: the confirmations, the clean-up dialog, the work off the UI thread.

Why here: the app's File menu only wires these up.  The store decides what a removal means
(``LocalStore.remove_runs``: this app's copy only, for good) and the texts say the same.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QGridLayout,
    QLabel,
    QListWidget,
    QMessageBox,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ..local_store import LocalStore, StoredRun

Ask = Callable[[str, str], bool]  # (title, question) -> the user said yes
Preview = Callable[[float | None, int | None], list[StoredRun]]  # (older than s, max bytes) -> what would go
DAY = 86400.0
GB = 10**9
ONLY_THIS_APP = ("This removes the app's copy only: an agent that still has a run keeps it, and this app "
                 "will not record the run again.")
FILE_NOTE = "The store's file keeps its size: SQLite reuses the freed space for new data."


def fmt_bytes(n: float) -> str:
    """1.2 GB, 340 MB, 12 kB: decimal units, as disks are sold."""
    for unit, size in (("TB", 10**12), ("GB", GB), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def run_line(run: StoredRun) -> str:
    ended = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.ended)) if run.ended else "never"
    return f"{run.title} · {run.status or 'unknown'} · last heard of {ended} · {fmt_bytes(run.size)}"


def removal_text(runs: Sequence[StoredRun]) -> str:
    """The first confirmation: what goes, and how much."""
    total = fmt_bytes(sum(r.size for r in runs))
    what = "1 run" if len(runs) == 1 else f"{len(runs)} runs"
    return "\n".join([f"Remove {what} ({total}) from this app's store?", "", *map(run_line, runs), "", ONLY_THIS_APP])


def live_text(runs: Sequence[StoredRun]) -> str:
    """The extra confirmation for runs whose trainer may still be logging."""
    names = ", ".join(f"{r.title} ({r.status})" for r in runs)
    return (f"{names} may still be training. This app stops recording {'it' if len(runs) == 1 else 'them'} "
            "and its data here goes; the trainer and the agent go on. Remove anyway?")


def ask_user(parent: QWidget) -> Ask:
    """A modal yes/no, No by default: removing is what needs the click."""
    yes, no = QMessageBox.StandardButton.Yes, QMessageBox.StandardButton.No
    return lambda title, text: QMessageBox.question(parent, title, text, yes | no, no) == yes


class CleanupDialog(QDialog):
    """Older than N days and/or over a max size: shows what would go, live, before the Remove click."""

    def __init__(self, parent: QWidget | None, preview: Preview, total: int):
        super().__init__(parent, windowTitle="Clean up store")
        self.preview = preview
        self.chosen: list[StoredRun] = []
        self.by_age = QCheckBox("Runs last heard of more than", checked=True)
        self.days = QSpinBox(minimum=1, maximum=36500, value=30, suffix=" days ago")
        self.by_size = QCheckBox("Keep the store under")
        self.gigabytes = QDoubleSpinBox(minimum=0.001, maximum=10**6, value=50.0, decimals=3, suffix=" GB")
        self.summary = QLabel()
        self.listing = QListWidget()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.remove = self.buttons.addButton("Remove", QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self._lay_out(total)
        for box in (self.by_age, self.by_size):
            box.toggled.connect(self._update)
        self.days.valueChanged.connect(self._update)
        self.gigabytes.valueChanged.connect(self._update)
        self._update()

    def _lay_out(self, total: int) -> None:
        limits = QGridLayout()
        for row, (box, spin) in enumerate(((self.by_age, self.days), (self.by_size, self.gigabytes))):
            limits.addWidget(box, row, 0)
            limits.addWidget(spin, row, 1)
        column = QVBoxLayout(self)
        column.addLayout(limits)
        column.addWidget(QLabel(f"The runs take {fmt_bytes(total)} now. Running, paused and stale runs are "
                                "never removed.", wordWrap=True))
        column.addWidget(self.summary)
        column.addWidget(self.listing)
        column.addWidget(QLabel(f"{ONLY_THIS_APP} {FILE_NOTE}", wordWrap=True))
        column.addWidget(self.buttons)
        self.resize(640, 420)

    def set_limits(self, days: float | None, gigabytes: float | None) -> None:
        """Set both limits (None: not used), as a user would in the dialog."""
        self.by_age.setChecked(days is not None)
        self.by_size.setChecked(gigabytes is not None)
        self.days.setValue(int(days or self.days.value()))
        self.gigabytes.setValue(gigabytes or self.gigabytes.value())
        self._update()

    def limits(self) -> tuple[float | None, int | None]:
        """(older than, in seconds; max size, in bytes), None where unchecked."""
        return (self.days.value() * DAY if self.by_age.isChecked() else None,
                round(self.gigabytes.value() * GB) if self.by_size.isChecked() else None)

    def _update(self, *_: object) -> None:
        older_than, max_size = self.limits()
        self.chosen = self.preview(older_than, max_size)
        self.listing.clear()
        self.listing.addItems([run_line(r) for r in self.chosen])
        n = len(self.chosen)
        self.summary.setText(f"{n} run{'s' if n != 1 else ''} would go, {fmt_bytes(sum(r.size for r in self.chosen))}:"
                             if n else "Nothing would go.")
        self.remove.setEnabled(bool(n))


class StoreWork(QObject):
    """Removals on a worker thread with its own store connection (one job at a time); ``done``
    comes back on the UI thread."""

    done = Signal(object, object, object)  # the job's tag, its result (None on failure), the error text

    def __init__(self, path: str | Path):
        super().__init__()
        self.path = path
        self._one_at_a_time = threading.Lock()

    def remove(self, keys: Iterable[tuple[str, str]], force: bool) -> None:
        """Remove these runs (``LocalStore.remove_runs``); the result is the bytes freed."""
        keys = list(keys)
        self._start(keys, lambda store: store.remove_runs(keys, force=force))

    def finish_pending(self) -> None:
        """Complete the removals a killed app left; the result is how many there were."""
        self._start("pending", LocalStore.finish_removals)

    def _start(self, tag: Any, job: Callable[[LocalStore], Any]) -> None:
        threading.Thread(target=self._work, args=(tag, job), daemon=True, name="pilothouse-store").start()

    def _work(self, tag: Any, job: Callable[[LocalStore], Any]) -> None:
        with self._one_at_a_time:
            store = LocalStore(self.path)
            try:
                result, error = job(store), None
            except Exception as exc:  # noqa: BLE001 - a live run, a locked file: shown, never fatal
                result, error = None, str(exc)
            finally:
                store.close()
        try:
            self.done.emit(tag, result, error)
        except RuntimeError:  # the window went away meanwhile; an unfinished removal resumes at the next start
            pass

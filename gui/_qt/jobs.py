"""The bar that offers a multi-node job's other agents: one job at a time, above the tabs, never modal.

What to add and how is decided in ``pilothouse.gui.jobs``; this only shows a plan and says what the
user chose: ``accepted(plan)`` or ``declined(plan)``.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout

from ..jobs import JobPlan


class JobBar(QFrame):
    accepted = Signal(object)  # JobPlan
    declined = Signal(object)

    def __init__(self) -> None:
        super().__init__(objectName="jobBar", frameShape=QFrame.Shape.StyledPanel)
        self.plan: JobPlan | None = None
        self.queue: list[JobPlan] = []
        self.headline = QLabel(wordWrap=True)
        self.details = QLabel(wordWrap=True, textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        self.add = QPushButton(clicked=lambda: self._done(self.accepted))
        self.no = QPushButton("Not for this job", clicked=lambda: self._done(self.declined))
        self.copy = QPushButton("Copy tunnel commands", clicked=self.copy_tunnels)
        buttons = QHBoxLayout()
        for b in (self.add, self.copy, self.no):
            buttons.addWidget(b)
        buttons.addStretch(1)
        column = QVBoxLayout(self)
        column.addWidget(self.headline)
        column.addWidget(self.details)
        column.addLayout(buttons)
        self.hide()

    def offer(self, plan: JobPlan) -> None:
        """Show ``plan`` now, or after the ones before it; a job already shown or queued is replaced."""
        if self.plan is not None and self.plan.run != plan.run:
            self.queue = [p for p in self.queue if p.run != plan.run] + [plan]
            return
        self.plan = plan
        self.headline.setText(plan.headline())
        self.details.setText("\n".join(n.line() for n in plan.nodes))
        n = len(plan.addable)
        self.add.setText(f"Add {n} agent{'s' * (n != 1)}")
        self.add.setEnabled(n > 0)
        self.copy.setVisible(bool(plan.tunnels))
        self.show()

    def copy_tunnels(self) -> None:
        if self.plan is not None and self.plan.tunnels:
            QGuiApplication.clipboard().setText("\n".join(self.plan.tunnels))

    def _done(self, signal: Signal) -> None:
        plan, self.plan = self.plan, None
        if self.queue:
            self.offer(self.queue.pop(0))
        else:
            self.hide()
        if plan is not None:
            signal.emit(plan)

"""The Rollouts tab's reward histogram: the step shown, one run or two side by side in their colors.

Why beside the table: the step's mean reward hides a bimodal step (half solved, half not) or one
where every row scored the same; the bars show it at a glance.  The bars are
``pilothouse.gui.step_groups.reward_bars``; this draws them.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtCore import QEvent

from ..palette import color
from ..rollouts import Row
from ..step_groups import Bars, reward_bars
from .theme import current, is_restyle, style_plot


class RewardHistogram(pg.PlotWidget):
    def __init__(self) -> None:
        super().__init__()
        self.bars = Bars([], 1.0, [])
        self.items: list[pg.BarGraphItem] = []
        self.step: int | None = None
        plot = self.getPlotItem()
        plot.setMenuEnabled(False)
        plot.hideButtons()
        plot.setLabel("bottom", "reward")
        plot.setLabel("left", "rows")
        self.setMouseEnabled(x=False, y=False)
        self._built = True
        self.restyle()

    def show_step(self, step: int | None, runs: Sequence[tuple[int | None, list[Row]]]) -> None:
        """Bars of the runs' rows at ``step``; each run in its color slot (None: the first color)."""
        plot = self.getPlotItem()
        for item in self.items:
            plot.removeItem(item)
        self.step, self.bars = step, reward_bars([rows for _, rows in runs])
        self.items = []
        share = self.bars.width / max(len(runs), 1)  # two runs: each bar halved, side by side
        for k, ((slot, _), counts) in enumerate(zip(runs, self.bars.counts)):
            if not self.bars.centers:
                continue
            xs = [c - self.bars.width / 2 + share * (k + 0.5) for c in self.bars.centers]
            fill = color(slot if slot is not None else k)
            item = pg.BarGraphItem(x=xs, height=counts, width=share * 0.95, brush=fill, pen=pg.mkPen(fill))
            plot.addItem(item)
            self.items.append(item)
        self._title()
        plot.enableAutoRange()

    def _title(self) -> None:
        rows = sum(sum(c) for c in self.bars.counts)
        text = "" if self.step is None else f"rewards at step {self.step} ({rows} rows)"
        self.getPlotItem().setTitle(text, color=current().chart_fg, size="9pt")

    def restyle(self) -> None:
        style_plot(self)
        self._title()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        if is_restyle(event) and getattr(self, "_built", False) and self.getPlotItem() is not None:
            self.restyle()
        super().changeEvent(event)

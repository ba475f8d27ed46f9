"""Dark and light themes: a Fusion palette for the widgets, matching chart colors."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QWidget

from .chart import ChartWidget

DARK = {"window": "#202329", "base": "#17191d", "text": "#e6e6e6", "button": "#2b2f36", "highlight": "#3f7fd0",
        "chart_bg": "#111316", "chart_fg": "#c8c8c8"}
LIGHT = {"window": "#f2f2f2", "base": "#ffffff", "text": "#1d1d1d", "button": "#e6e6e6", "highlight": "#3f7fd0",
         "chart_bg": "#ffffff", "chart_fg": "#333333"}


def apply_theme(app: QApplication, dark: bool, root: QWidget | None = None) -> None:
    """Style the application; charts that exist under ``root`` are recolored, new ones follow."""
    colors = DARK if dark else LIGHT
    app.setStyle("Fusion")
    palette = QPalette()
    for role, key in ((QPalette.Window, "window"), (QPalette.Base, "base"), (QPalette.AlternateBase, "window"),
                      (QPalette.Button, "button"), (QPalette.Highlight, "highlight"), (QPalette.ToolTipBase, "base")):
        palette.setColor(role, QColor(colors[key]))
    for role in (QPalette.WindowText, QPalette.Text, QPalette.ButtonText, QPalette.ToolTipText):
        palette.setColor(role, QColor(colors["text"]))
    palette.setColor(QPalette.HighlightedText, QColor("#ffffff"))
    palette.setColor(QPalette.PlaceholderText, QColor("#8a8f98"))
    app.setPalette(palette)
    pg.setConfigOption("background", colors["chart_bg"])
    pg.setConfigOption("foreground", colors["chart_fg"])
    for chart in root.findChildren(ChartWidget) if root is not None else ():
        chart.setBackground(colors["chart_bg"])
        for axis in ("left", "bottom"):
            chart.getPlotItem().getAxis(axis).setTextPen(colors["chart_fg"])

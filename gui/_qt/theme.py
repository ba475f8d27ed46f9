"""Dark and light themes: a Fusion palette for the widgets, matching chart and item colors.

The colors are ``pilothouse.gui.themes`` (plain data, contrast-checked by the tests).  Widgets
that bake a color into an item or a chart read ``current()`` and restyle on ``is_restyle(event)``
(Qt sends every widget a palette change when the theme switches).
"""

from __future__ import annotations

import dataclasses

import pyqtgraph as pg
from PySide6.QtCore import QEvent
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QWidget

from ..themes import DARK, LIGHT, Theme, status_role

_current: list[Theme] = [LIGHT]  # Qt's default palette is a light one
_colors: dict[tuple[str, str], QColor] = {}
_RESTYLE = (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange)


def current() -> Theme:
    return _current[0]


def qcolor(role: str) -> QColor:
    """The current theme's color ``role`` (a ``Theme`` field), cached: item models ask per cell."""
    theme = _current[0]
    key = (theme.name, role)
    if key not in _colors:
        _colors[key] = QColor(dataclasses.asdict(theme)[role])
    return _colors[key]


def status_color(status: str) -> QColor:
    """The current theme's color of a run status (the runs table's word and icon)."""
    return qcolor(status_role(status))


def style_plot(widget: pg.PlotWidget) -> None:
    """A plot in the current theme's chart colors: background, axes, and its title if it has one."""
    theme = _current[0]
    plot = widget.getPlotItem()
    widget.setBackground(theme.chart_bg)
    for axis in ("left", "bottom"):
        plot.getAxis(axis).setPen(theme.chart_fg)
        plot.getAxis(axis).setTextPen(theme.chart_fg)
    if plot.titleLabel.text:
        plot.titleLabel.setText(plot.titleLabel.text, color=theme.chart_fg)


def is_restyle(event: QEvent) -> bool:
    return event.type() in _RESTYLE


def apply_theme(app: QApplication, dark: bool, root: QWidget | None = None) -> None:
    """Style the application; widgets that bake colors restyle on the palette change that follows.
    ``root`` is kept for callers; every widget of the app hears the change."""
    theme = DARK if dark else LIGHT
    _current[0] = theme
    app.setStyle("Fusion")
    palette = QPalette()
    colors = dataclasses.asdict(theme)
    for role, key in ((QPalette.Window, "window"), (QPalette.Base, "base"), (QPalette.AlternateBase, "window"),
                      (QPalette.Button, "button"), (QPalette.Highlight, "highlight"), (QPalette.ToolTipBase, "base"),
                      (QPalette.HighlightedText, "highlighted_text"), (QPalette.PlaceholderText, "placeholder")):
        palette.setColor(role, QColor(colors[key]))
    for role in (QPalette.WindowText, QPalette.Text, QPalette.ButtonText, QPalette.ToolTipText):
        palette.setColor(role, QColor(theme.text))
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor(theme.dim_text))
    app.setPalette(palette)
    pg.setConfigOption("background", theme.chart_bg)
    pg.setConfigOption("foreground", theme.chart_fg)

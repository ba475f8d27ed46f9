"""The app's two themes as plain data: every color the app draws text in, or text on.

Why plain data: the Qt layer (``pilothouse.gui._qt.theme``) builds its palette and item colors
from these values, and ``tests/test_palette.py`` checks every pair in ``TEXT_PAIRS`` against
WCAG's 4.5:1 from the same values, without a display.  A color that text is drawn in or on
belongs here, not as a literal in a widget.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Theme:
    name: str
    window: str  # panels, dialogs, the legend
    base: str  # tables, text fields
    button: str  # buttons, table headers
    text: str
    highlight: str  # selected rows
    highlighted_text: str
    placeholder: str  # hints in empty fields
    dim_text: str  # read-only config values, disabled controls, a cleared alert on a chart
    alert_text: str  # firing alerts: the runs table's badge, the Alerts tab, a chart's alert label
    diff_bg: str  # Config tab: values that differ between the compared runs
    chart_bg: str
    chart_fg: str  # axes, titles, the crosshair readout
    # the runs table's status word and icon (on a selected row they take highlighted_text)
    status_crashed: str
    status_stale: str
    status_running: str
    status_paused: str
    status_finished: str


DARK = Theme(name="dark", window="#202329", base="#17191d", button="#2b2f36", text="#e6e6e6", highlight="#2c64a8",
             highlighted_text="#ffffff", placeholder="#959aa3", dim_text="#9ba1aa", alert_text="#ff7b72",
             diff_bg="#3d3300", chart_bg="#111316", chart_fg="#c8c8c8", status_crashed="#f47067",
             status_stale="#e0a040", status_running="#57c27a", status_paused="#6aa5ee", status_finished="#a3a9b3")
LIGHT = Theme(name="light", window="#f2f2f2", base="#ffffff", button="#e6e6e6", text="#1d1d1d", highlight="#2c64a8",
              highlighted_text="#ffffff", placeholder="#62676f", dim_text="#5c6169", alert_text="#b42318",
              diff_bg="#fff0b3", chart_bg="#ffffff", chart_fg="#333333", status_crashed="#c62828",
              status_stale="#a35a00", status_running="#1e7b3c", status_paused="#2a62b0", status_finished="#5c6169")
THEMES = (DARK, LIGHT)
STATUSES = ("crashed", "stale", "running", "paused", "finished")  # each has a status_* color


def status_role(status: str) -> str:
    """The ``Theme`` field a run status is drawn in; a status the app does not know is dim."""
    return f"status_{status}" if status in STATUSES else "dim_text"


# (text color, background) as the app pairs them: each must reach WCAG AA for body text
TEXT_PAIRS: tuple[tuple[str, str], ...] = (
    ("text", "window"), ("text", "base"), ("text", "button"), ("text", "diff_bg"),
    ("highlighted_text", "highlight"),
    ("placeholder", "base"),
    ("dim_text", "base"), ("dim_text", "window"), ("dim_text", "button"), ("dim_text", "diff_bg"),
    ("dim_text", "chart_bg"),
    ("alert_text", "base"), ("alert_text", "window"), ("alert_text", "chart_bg"),
    ("chart_fg", "chart_bg"),
    *((status_role(status), "base") for status in STATUSES),
)
AA_TEXT = 4.5  # WCAG 2.x success criterion 1.4.3

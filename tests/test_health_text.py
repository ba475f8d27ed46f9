"""The status bar's line for an agent says how far behind its points reach the window, once that
is a second or more, only while points are flowing."""

from __future__ import annotations

from pilothouse.gui.health_text import BEHIND_S, health_text
from pilothouse.gui.network import Health

URL = "tcp://127.0.0.1:7766"


def test_the_line_says_how_far_behind_once_a_second_or_more():
    flowing = Health(URL, state="connected", lag=0.004, points_per_s=8000.0)
    assert health_text(flowing, 4.25).endswith("4 ms lag · 4.2 s behind · 8,000 pts/s")
    assert "behind" not in health_text(flowing, BEHIND_S / 2)
    assert "behind" not in health_text(flowing)
    idle = Health(URL, state="connected", lag=0.004, points_per_s=0.0)  # a finished run's last point is old, not late
    assert "behind" not in health_text(idle, 600.0)
    assert "behind" not in health_text(Health(URL, state="reconnecting", points_per_s=10.0), 9.0)

"""An agent's line in the app's status bar, in plain Python (tested without a display)."""

from __future__ import annotations

from .network import Health

BEHIND_S = 1.0  # the line says how far behind an agent's points reach the window, from this much on


def health_text(h: Health, behind: float | None = None) -> str:
    """An agent's line in the status bar; ``behind``: seconds from its newest point's log() to this
    window (its clock against the agent's host's), said once it reaches BEHIND_S."""
    mark = {"connected": "●", "reconnecting": "◌", "connecting": "◌"}.get(h.state, "○")
    lag = f" {h.lag * 1000:.0f} ms lag" if h.lag is not None and h.state == "connected" else ""
    if behind is not None and behind >= BEHIND_S and h.state == "connected" and h.points_per_s > 0:
        lag += f" · {behind:.1f} s behind"
    problem = f" · {h.error}" if h.error and h.state != "connected" else ""  # e.g. a refused key: what to run
    if h.warning:
        problem += f" · ⚠ {h.warning}"
    return f"{h.url} {mark} {h.state}{lag} · {h.points_per_s:,.0f} pts/s{problem}"

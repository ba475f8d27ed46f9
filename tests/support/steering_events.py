"""A run's steering and reward quantiles as the agent journals them, for the app's store without an
agent: ``steered`` is a command event and its answer (the bodies ``CommandDesk.issue`` and
``on_ack`` write), ``quantiles`` the five ``rollouts/reward/*`` quantile metrics and the mean of a
run's steps (``WHO`` asks; ``T0`` is the journal's clock at step 0)."""

from __future__ import annotations

import numpy as np

from pilothouse.wire.entries import Entry

from .app_store import body, chunk

T0 = 1.7e9  # app_store.chunk's wall time at step 0
WHO = {"user": "alice", "host": "laptop", "client": "cli"}
SPREAD = {"min": -1.0, "p10": -0.5, "p50": 0.0, "p90": 0.5, "max": 1.0}  # each quantile's offset from the mean


def steered(id: int, run: str, cid: str, cmd: str, step: int, state: str = "applied", values: dict | None = None,
            who: dict | None = WHO) -> list[Entry]:
    """Entries ``id`` and ``id + 1``: the command (``who`` None: it is not in the store) and its answer."""
    asked = {"values": values} if values is not None else {}
    detail = f"{' '.join(f'{k}={v!r}' for k, v in (values or {}).items())} applied at step {step}" if cmd == "set" \
        else {"pause": f"paused at step {step}", "resume": f"resumed at step {step}"}.get(cmd, "")
    answer = {"event": "ack", "time": T0 + step, "cid": cid, "cmd": cmd, "state": state, "step": step,
              "detail": detail if state == "applied" else "not applied", "applied": values or {}}
    command = {"event": "command", "time": T0 + step - 0.5, "cid": cid, "cmd": cmd, **asked, "who": who}
    return ([body(id, run, "e", command)] if who is not None else []) + [body(id + 1, run, "e", answer)]


def quantiles(id: int, run: str, steps, mean) -> list[Entry]:
    """Entries ``id`` to ``id + 5``: a run's reward mean and its five quantiles around it at these steps."""
    mean = np.asarray(mean, np.float64)
    return [chunk(id, run, "rollouts/reward/mean", steps, mean)] + \
        [chunk(id + 1 + i, run, f"rollouts/reward/{q}", steps, mean + d) for i, (q, d) in enumerate(SPREAD.items())]

"""An agent's journal file, read and written without an agent: ``write_runs`` writes runs with the
agent's own Store before an agent opens the file (so a run can have ended days ago honestly),
``SIZE_SQL`` sums each run's points and stored bytes as the agent counts them, and ``snapshot``
takes every stored row of one run, to compare bit for bit."""

from __future__ import annotations

import socket
import sqlite3
import time
from pathlib import Path

from pilothouse.node.journal import ENTRY_OVERHEAD, Store

from .messages import batch_fields

SIZE_SQL = (f"SELECT run, SUM(n) FILTER (WHERE kind='m'), SUM({ENTRY_OVERHEAD} + COALESCE(length(steps), 0) "
            "+ COALESCE(length(vals), 0) + COALESCE(length(times), 0) + COALESCE(length(body), 0)) "
            "FROM journal GROUP BY run")


def write_runs(path: Path, runs: dict[str, dict]) -> None:
    """run id -> {"steps", "per_call" (steps per ingest: fewer make more rows), "status", "ended"
    (seconds ago), "pid", "pid_started"}: each run logs two metrics through Store.ingest."""
    store = Store(path)
    now = time.time()
    for run, spec in runs.items():
        store.begin()
        store.upsert_run({"run": run, "project": "ret", "name": run, "host": socket.gethostname(),
                          "pid": spec.get("pid", 1), "pid_started": spec.get("pid_started"), "config": {}}, now)
        steps, per_call = spec.get("steps", 100), spec.get("per_call", 50)
        for lo in range(0, steps, per_call):
            recs = [(0, s, now + s, {"loss": 1.0 / (s + 1), "reward": float(s)})
                    for s in range(lo, min(lo + per_call, steps))]
            store.ingest((run, 0, ""), lo + 1, lo + 1, batch_fields(recs), now)
        store.set_status(run, spec.get("status", "finished"), now)
        store.commit()
        if "ended" in spec:
            at = now - spec["ended"]
            store.db.execute("UPDATE runs SET ended=IIF(ended IS NULL, NULL, ?), last_seen=?, created=? WHERE id=?",
                             [at, at, at - 1, run])
    store.close()


def snapshot(data_dir: Path, run_id: str) -> dict[str, list]:
    """Every stored row of one run: its row in runs, its journal entries and its streams."""
    con = sqlite3.connect(data_dir / "journal.sqlite", timeout=10)
    try:
        return {"runs": con.execute("SELECT * FROM runs WHERE id=?", [run_id]).fetchall(),
                "journal": con.execute("SELECT * FROM journal WHERE run=? ORDER BY id", [run_id]).fetchall(),
                "streams": con.execute("SELECT * FROM streams WHERE run=?", [run_id]).fetchall()}
    finally:
        con.close()

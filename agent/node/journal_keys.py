"""A project's key metric as its users chose it: the table object ``Store.key_metrics``.

Why its own: the choice is a small table of its own (project -> metric), read when runs are listed and
set by one query; nothing else of the journal takes part.
"""

from __future__ import annotations

from pilothouse.store.db import sqlite_utils


class KeyMetrics:
    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db

    def choices(self) -> dict[str, str]:
        """project -> the metric chosen for it; a project not in it picks automatically."""
        return dict(self.db.execute("SELECT project, metric FROM key_metrics"))

    def choose(self, project: str, metric: str | None, now: float) -> None:
        """Choose ``project``'s key metric, or with None go back to the automatic choice.  A project
        with no runs yet may be set: its first runs then show the choice."""
        if metric is None:
            self.db.execute("DELETE FROM key_metrics WHERE project=?", [project])
        else:
            self.db.execute("INSERT OR REPLACE INTO key_metrics VALUES (?,?,?)", [project, metric, now])

    def project_logging(self, project: str, metric: str) -> tuple[int, int]:
        """(runs of ``project``, those of them that log ``metric``): tells a user a choice is a typo."""
        runs, logging = self.db.execute(
            "SELECT COUNT(*), COUNT(v.metric) FROM runs r LEFT JOIN last_values v ON v.run=r.id AND v.metric=? "
            "WHERE r.project=? AND r.removing IS NULL", [metric, project]).fetchone()
        return runs, logging

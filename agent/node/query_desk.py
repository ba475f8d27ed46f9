"""What clients ask the agent about its journal: runs, entries, tiers, rollouts, key metrics.

A component of the agent, handed its journal, liveness and alert engine.  Its ops get arguments
already checked against ``pilothouse.wire.queries`` (types, ranges, names, unknown ones refused);
what is left here needs the journal: which runs exist, what they hold.  Every op but
``key_metric_set`` only reads, so these are answered on a full disk.
"""

from __future__ import annotations

import time

from pilothouse.node.alert_engine import AlertEngine
from pilothouse.node.journal import Store
from pilothouse.node.journal_tiers import NotReady
from pilothouse.node.liveness import Liveness
from pilothouse.store.rollout_search import ROW_BITS
from pilothouse.store.tiers import LEVELS, RECORD, WIDTHS, columns
from pilothouse.wire.messages import pack
from pilothouse.wire.queries import bad_argument
from pilothouse.wire.rollouts import ROLLOUT_PAGE_BYTES
from pilothouse.wire.watched import USER_KINDS


class QueryDesk:
    def __init__(self, store: Store, liveness: Liveness, alerts: AlertEngine):
        self.store = store
        self.liveness = liveness
        self.alerts = alerts

    def op_runs(self, args: dict) -> list[dict]:
        """Every run, with the alert rules firing on it and, while it is watched, its live status."""
        rows = self.store.runs()
        firing: dict[str, list[str]] = {}
        for alert in self.alerts.firing():
            firing.setdefault(alert.run, []).append(alert.rule.name)
        for row in rows:
            row["alerts"] = sorted(set(firing.get(row["id"], ())))
            live = self.liveness.get(row["id"])
            if live is not None and row["kind"] in USER_KINDS:
                row["status"] = live.status
                row["silent"] = round(time.time() - live.seen, 1)
        return rows

    def op_resolve(self, args: dict) -> str:
        return self.store.resolve(args["ref"])

    def op_read(self, args: dict) -> dict:
        entries, cursor = self.store.read(args["after"], run=args["run"], kinds=args["kinds"],
                                          limit_points=args["limit_points"])
        return {"entries": entries, "cursor": cursor}

    def op_key_metric(self, args: dict) -> dict:
        """A project's chosen key metric (None: automatic) and how many of its runs log it."""
        project = args["project"]
        metric = self.store.key_metrics.choices().get(project)
        runs, logging = self.store.key_metrics.project_logging(project, metric or "")  # "": no metric is named that
        return {"project": project, "metric": metric, "runs": runs, "logging": logging}

    def op_key_metric_set(self, args: dict) -> dict:
        """Choose a project's key metric for every client of this agent; ``metric`` None clears it.
        Its name was checked as a trainer's is: what is stored is a name a run could log."""
        self.store.key_metrics.choose(args["project"], args["metric"], time.time())
        return self.op_key_metric({"project": args["project"]})

    def op_tiers(self, args: dict) -> dict:
        """The buckets of some of a run's metrics' tiers at ``level`` over steps x0..x1 (``records``:
        per metric, in the order asked, a ``pilothouse.tiers.RECORD`` array), so an app that never saw
        a run draws every chart of it in one round trip; with ``pixels``, folded per pixel column (one
        record per column: the answer's size is the charts' width, not the level's); ``ready`` False
        while the run's tiers are being built (its points are read meanwhile)."""
        level, x0, x1, pixels = args["level"], args["x0"], args["x1"], args["pixels"]
        if level >= LEVELS:  # the fold's bound: the wire's table checks only that it is a count
            raise bad_argument("tiers", "level", f"level must be an int in [0, {LEVELS - 1}], got {level}")
        try:
            recs = [self.store.tier_buckets(args["run"], name, level, x0, x1) for name in args["metrics"]]
        except NotReady as exc:
            return {"ready": False, "detail": str(exc)}
        if pixels is not None:
            recs = [columns(rec, level, x0, x1, pixels)[0] for rec in recs]
        return {"ready": True, "level": level, "width": WIDTHS[level], "pixels": pixels, "fields": list(RECORD.names),
                "records": [rec.tobytes() for rec in recs]}

    def op_rollouts(self, args: dict) -> dict:
        """A run's rollouts of one step or of its latest steps, without reading the run from its start;
        ``next``: the arguments of the query that fetches the rest (see Store.rollouts)."""
        if args["search"] is not None:
            return self._search(args)
        entries, more = self.store.rollouts.page(args["run"], step=args["step"], last=args["last"],
                                                 before=args["before"], seen=args["seen"])
        return {"entries": entries, "next": more}

    def _search(self, args: dict) -> dict:
        """Rows of the run holding the words of ``search``, newest first: ``hits`` of [step, row, entry
        id, row], ``next`` the ``before`` of the next page (None: no more), ``indexing`` whether
        batches still wait to be indexed (they are not searched yet).  A page stops at about
        ROLLOUT_PAGE_BYTES of rows, so a reply stays far below a reader's message limit."""
        hits, more = self.store.rollouts.search_text(args["run"], args["search"], args["before"], args["limit"],
                                                    args["in_prompt"])
        size = 0
        for i, (_, row, key, values) in enumerate(hits):
            size += len(pack(values))
            if i and size > ROLLOUT_PAGE_BYTES:
                hits, more = hits[:i], hits[i - 1][2] << ROW_BITS | hits[i - 1][1]
                break
        return {"hits": [list(h) for h in hits], "next": more, "indexing": self.store.index_due}

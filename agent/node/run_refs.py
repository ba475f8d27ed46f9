"""Which run a reference (an id, a name, or project/name) means, for every command that takes one.

Names are labels, not keys: re-running a script makes a second run of the same name, as W&B, Aim
and MLflow do (whose commands take ids only).  A user who re-runs ``quickstart.py`` and types
``pilothouse pause quickstart`` means the run that is going now, never the finished one, so when a
name matches several runs and exactly one of them is live (not finished or crashed), that one is
meant; of several live ones, the one running or paused beats stale ones (a silent trainer, or a
run brought back from an archive, which comes back stale).  Everything else stays ambiguous, and
the error lists the runs (newest first, each with its status) so the id to type is in front of
the user:

- several live runs of one name (two launches of one script): no guess, for any command;
- no live run among several (every attempt has ended): reads are no exception.  Picking "the
  newest" would make ``export`` or ``archive`` silently write one of several finished runs' data,
  an error nobody sees; W&B and Aim users address such runs by id anyway;
- removal (``rm``) never prefers: a command that deletes must name exactly one run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pilothouse.wire.run_import import ENDED  # a run in any other status (running, paused, stale) is live

HEARD = ("running", "paused")  # live and heard from: a stale run (silent, or imported) comes after these
SHOWN = 5  # runs an ambiguity error lists


def resolve(db: Any, ref: str, has_run: Callable[[str], bool], live_wins: bool = True) -> str:
    """The id ``ref`` means in the journal ``db`` (sqlite-utils); LookupError naming the candidates.

    ``has_run``: whether an id is a run here (one being removed is not); ``live_wins`` False for a
    command that must name exactly one run whatever their statuses."""
    if has_run(ref):
        return ref
    rows = list(db.query("SELECT id, status FROM runs WHERE (name=? OR project || '/' || name=?) AND removing IS NULL "
                         "ORDER BY created DESC", [ref, ref]))
    if len(rows) == 1:
        return rows[0]["id"]
    if not rows:
        raise LookupError(f"no run with id or name {ref!r}")
    live = [r for r in rows if r["status"] not in ENDED]
    heard = [r for r in live if r["status"] in HEARD]
    if live_wins and len(heard or live) == 1:
        return (heard or live)[0]["id"]
    listed = ", ".join(f"{r['id']} ({r['status']})" for r in rows[:SHOWN])
    more = f" and {len(rows) - SHOWN} more" if len(rows) > SHOWN else ""
    how = "" if not live_wins else "none of them live" if not live else f"{len(live)} of them live"
    raise LookupError(f"{ref!r} names {len(rows)} runs ({listed}{more}){'; ' + how if how else ''}; use a run id")

"""A journal's rollout batches by step and by text: the table object ``Store.rollouts``.

Why its own: a run's rollouts are read without paging the journal from its start (``page``: index
seeks and the batches returned, whatever the run's length) and searched through the index of
``pilothouse.store.rollout_search``; neither needs the rest of the journal's state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pilothouse.store.db import sqlite_utils
from pilothouse.store.rollout_search import RolloutSearch
from pilothouse.wire.checks import INT64_MAX
from pilothouse.wire.entries import ENTRY_FIELDS, KIND_ROLLOUTS, Entry
from pilothouse.wire.rollouts import ROLLOUT_PAGE_BYTES, ROLLOUT_SLACK, unpack_batch

_FIELDS = ", ".join(ENTRY_FIELDS)
# a run's rollout batches, on the journal's (run, kind, metric, id) index
_ROLLOUTS = f"FROM journal WHERE run=? AND kind='{KIND_ROLLOUTS}' AND metric IS NULL"


class Rollouts:
    """The rollout batches of one journal connection; ``has_run``: whether a run is there for readers."""

    def __init__(self, db: sqlite_utils.Database, search: RolloutSearch, has_run: Callable[[str], bool]) -> None:
        self.db, self.search, self._has_run = db, search, has_run

    def page(self, run: str, *, step: int | None = None, last: int = 1, before: int | None = None,
                 seen: Iterable[int] = (), budget: int = ROLLOUT_PAGE_BYTES) -> tuple[list[Entry], dict | None]:
        """Rollout batches of ``run``, newest first, below id ``before``: those of ``step``, or of the
        ``last`` steps logged latest (``seen``: those an earlier page began), up to about ``budget``
        bytes; and the arguments that fetch the rest (None: nothing is left).

        Why not ``read``: that pages from the start, and the promise is a cost that never grows with
        the run.  Here it is index seeks and the batches returned.  ``step`` is found by binary search
        over arrival order, since a trainer logs its steps in order; batches of other steps passed
        over while gathering one step's are bounded by ROLLOUT_SLACK (ranks interleave)."""
        if not self._has_run(run):
            raise LookupError(f"no run with id {run!r}")
        newest = self._rollout_near(run, INT64_MAX, older=True)
        if newest is None:
            raise LookupError(f"run {run} has no rollouts (a trainer logs them with run.log_rollouts)")
        floor = INT64_MAX  # gathering ``step``: other steps' batches at or below this id are misses
        below: tuple[int, int] | None = None
        if before is None:
            before = newest[0] + 1
            if step is not None:
                below = self._step_below(run, step, newest)
                floor = below[0] if below else 0
                top = self.db.execute(f"SELECT id {_ROLLOUTS} AND id > ? ORDER BY id LIMIT 1 OFFSET ?",
                                      [run, floor, ROLLOUT_SLACK - 1]).fetchone()
                before = top[0] + 1 if top else before
        steps = list(seen)
        out: list[Entry] = []
        size = misses = 0
        cursor = self.db.execute(f"SELECT id, length(body) {_ROLLOUTS} AND id < ? ORDER BY id DESC", [run, before])
        try:
            for entry_id, length in cursor:
                found = self._rollout_step(entry_id)
                if step is not None:
                    if found != step:
                        misses += entry_id <= floor
                        if misses > ROLLOUT_SLACK:
                            break
                        continue
                    misses = 0
                elif found not in steps:
                    if len(steps) == last:
                        break
                    steps.append(found)
                if out and size + length > budget:
                    more = {"step": step} if step is not None else {"last": last, "seen": steps}
                    return out, {**more, "before": out[-1].id}
                out.append(Entry._make(self.db.execute(f"SELECT {_FIELDS} FROM journal WHERE id=?",
                                                            [entry_id]).fetchone()))
                size += length
        finally:
            cursor.close()
        if step is not None and not out:
            raise LookupError(self._no_step(run, step, below))
        return out, None

    def _no_step(self, run: str, step: int, below: tuple[int, int] | None) -> str:
        """What a reader asking for a step with no rollouts is told: the nearest steps that have some."""
        after = self._rollout_near(run, below[0] + 1 if below else 0, older=False)
        near = [str(s) for s in (below and below[1], after and after[1]) if s is not None]
        return f"run {run} has no rollouts at step {step}; the nearest steps with rollouts: {', '.join(near)}"

    def _step_below(self, run: str, step: int, newest: tuple[int, int]) -> tuple[int, int] | None:
        """(id, step) of the latest batch at or below ``step``, if steps grow with ids: a binary search
        on ids, one index seek and a few bytes read per probe."""
        oldest = self._rollout_near(run, 0, older=False)
        assert oldest is not None  # the run has ``newest``
        if oldest[1] > step:
            return None
        if newest[1] <= step:
            return newest
        lo, hi = oldest[0], newest[0]  # the batch at or below lo is at or below ``step``; at or below hi, past it
        while hi - lo > 1:
            mid = (lo + hi) // 2
            probe = self._rollout_near(run, mid, older=True)
            assert probe is not None
            if probe[1] <= step:
                lo = mid
            else:
                hi = mid
        return self._rollout_near(run, lo, older=True)

    def _rollout_near(self, run: str, entry_id: int, older: bool) -> tuple[int, int] | None:
        """(id, step) of the run's rollout batch nearest ``entry_id``: at or below it, or at or above."""
        sql = f"SELECT id {_ROLLOUTS} AND id <= ? ORDER BY id DESC LIMIT 1" if older else \
            f"SELECT id {_ROLLOUTS} AND id >= ? ORDER BY id LIMIT 1"
        row = self.db.execute(sql, [run, entry_id]).fetchone()
        return None if row is None else (row[0], self._rollout_step(row[0]))

    def _rollout_step(self, entry_id: int) -> int:
        """A batch's step from its row in the search index's table; a batch not indexed yet is decoded."""
        step = self.search.step_of(entry_id)
        if step is None:
            body = self.db.execute("SELECT body FROM journal WHERE id=?", [entry_id]).fetchone()[0]
            step = unpack_batch(body)["step"]
        return step

    def index_some(self, text_bytes: int) -> bool:
        """One bounded slice of the search index's queue, in the caller's transaction; whether more waits."""
        return self.search.index_some(text_bytes)

    def search_text(self, run: str, words: str, before: int | None = None, limit: int = 100,
                    in_prompt: bool = False) -> tuple[list[tuple[int, int, int, dict]], int | None]:
        """Rows of ``run`` whose prompt or completion (``in_prompt``: prompt) holds ``words``, newest
        first (see ``RolloutSearch.search``); batches not indexed yet are not among them
        (``Store.index_due``)."""
        if not self._has_run(run):
            raise LookupError(f"no run with id {run!r}")
        return self.search.search((run,), words, before, limit, in_prompt)

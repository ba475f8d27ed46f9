"""Charts of a run the app's store does not hold yet, drawn from the tiers its agent answers.

Why: an app that connects to an agent for the first time follows the journal from its start; a
run of 10 x 100 M points takes minutes to arrive.  Meanwhile a chart of it asks the agent for the
tiers of the visible range (``Client.tiers``: a few buckets per pixel column, whatever the run's
length) and draws them; once the store holds the run, the chart reads the store as usual.

``RemoteTiers`` keeps what charts want and what agents answered.  Charts (the Qt thread) only
note what they want and read answers; one fetch thread per agent, with its own socket, asks the
agent: network I/O never runs on the Qt thread.  A chart that wants a new range keeps drawing
what it had until the answer comes (``on_answer`` then tells the app to redraw).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pilothouse.client import AgentError, Client
from pilothouse.gui.tiers import TierView, drawn, view_range
from pilothouse.tiers import LEVELS, RECORD, level_for, whole
from pilothouse.wire.messages import ProtocolError

ALL = (-2.0 ** 63, 2.0 ** 63)
Key = tuple[str, str, str]  # (agent, run, metric)


@dataclass(frozen=True)
class Answer:
    """What an agent answered for steps x0..x1 at ``level``: its buckets folded per pixel column
    (the top level's buckets for a summary); None while the run's tiers are being built."""

    level: int
    x0: float
    x1: float
    pixels: int
    records: np.ndarray | None


class RemoteTiers:
    """Wants and answers of every agent (see the module docstring)."""

    def __init__(self, on_answer: Callable[[str], None] | None = None, timeout: float = 10.0) -> None:
        self.on_answer = on_answer
        self.timeout = timeout
        self._cond = threading.Condition()
        self._wants: dict[str, dict[Key, tuple[float, float, int]]] = {}  # agent -> the latest want per curve
        self._answers: dict[Key, Answer] = {}
        self._summaries: dict[Key, Answer] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._stop = False
        self.errors: dict[str, str] = {}  # agent -> the last refusal or failure, shown, never raised

    def want(self, key: Key, x0: float, x1: float, pixels: int) -> None:
        """Ask (later, on the agent's fetch thread) for the tiers of steps x0..x1 at ``pixels`` columns."""
        with self._cond:
            if self._stop:
                return
            self._wants.setdefault(key[0], {})[key] = (x0, x1, pixels)
            if key[0] not in self._threads:
                thread = threading.Thread(target=self._fetch, args=(key[0],), name=f"tiers {key[0]}", daemon=True)
                self._threads[key[0]] = thread
                thread.start()
            self._cond.notify_all()

    def answer(self, key: Key) -> Answer | None:
        with self._cond:
            return self._answers.get(key)

    def summary(self, key: Key) -> Answer | None:
        """The top level over every step (the run's extent), once answered."""
        with self._cond:
            return self._summaries.get(key)

    def forget(self, agent: str | None = None) -> None:
        """Answers are a cache: dropped when the charts are rebuilt from the store."""
        with self._cond:
            for table in (self._answers, self._summaries):
                for key in [k for k in table if agent is None or k[0] == agent]:
                    del table[key]

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(self.timeout + 1.0)

    def _fetch(self, agent: str) -> None:
        """The agent's fetch thread: the latest want of each curve, asked in turn."""
        try:
            self._serve(agent)
        except Exception as exc:  # no key for this agent, a broken answer: said, and the charts fill from the store
            self.errors[agent] = f"{type(exc).__name__}: {exc}"

    def _serve(self, agent: str) -> None:
        with Client(agent, timeout=self.timeout) as client:
            while True:
                with self._cond:
                    while not self._stop and not self._wants.get(agent):
                        self._cond.wait()
                    if self._stop:
                        return
                    wants, self._wants[agent] = self._wants[agent], {}
                for key, (x0, x1, pixels) in wants.items():
                    try:
                        self._ask(client, key, x0, x1, pixels)
                    except (AgentError, ProtocolError) as exc:
                        self.errors[agent] = str(exc)
                if self.on_answer is not None:
                    self.on_answer(agent)

    def _ask(self, client: Client, key: Key, x0: float, x1: float, pixels: int) -> None:
        _, run, metric = key
        if (x0, x1) == ALL:
            rec = client.tiers(run, metric, *ALL, level=LEVELS - 1)
            with self._cond:
                self._summaries[key] = Answer(LEVELS - 1, *ALL, 1, rec)
            return
        level = max(level_for(x0, x1, pixels), 0)
        rec = client.tiers(run, metric, x0, x1, pixels, level=level, by_column=True)
        with self._cond:
            self._answers[key] = Answer(level, x0, x1, pixels, rec)


class RemoteSeries:
    """One metric of a run the store lacks, as a chart asks of a ``Series``, from ``RemoteTiers``."""

    generation = 0

    def __init__(self, remote: RemoteTiers, agent: str, run: str, metric: str) -> None:
        self.remote, self.key = remote, (agent, run, metric)
        self._whole: np.ndarray | None = None
        self._last: TierView | None = None
        remote.want(self.key, *ALL, 1)

    def _summary(self) -> np.ndarray:
        if self._whole is None:
            got = self.remote.summary(self.key)
            if got is None or got.records is None:
                return np.empty(0, RECORD)  # not answered yet: asked at construction
            self._whole = whole(got.records)
        return self._whole

    def __len__(self) -> int:
        rec = self._summary()
        return int(rec["count"][0]) if len(rec) else 0

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self._last.xs, self._last.ys)) if self._last else 0

    def append(self, xs: np.ndarray, ys: np.ndarray) -> None:
        """Points reaching the store meanwhile: the extent may have grown; asked again."""
        if len(xs) and self._whole is not None:
            self._whole = None
            self.remote.want(self.key, *ALL, 1)

    def view(self, x0: float, x1: float, pixels: int) -> tuple[np.ndarray, np.ndarray]:
        """The last answer's columns; a new answer is asked for when it is not of this range on
        these columns (the chart redraws when it comes; meanwhile the old columns stand where
        their points are)."""
        x0, x1, pixels = view_range(x0, x1, pixels)
        got = self.remote.answer(self.key)
        if got is None or (got.x0, got.x1, got.pixels) != (x0, x1, pixels):
            self.remote.want(self.key, x0, x1, pixels)
        if got is None or got.records is None:
            empty = np.empty(0)
            return empty, empty
        none = np.empty(0, np.int64)
        cols = got.records
        self._last = drawn(cols[(cols["xlast"] >= x0) & (cols["xfirst"] <= x1)], got.level, none, none)
        return self._last.xs, self._last.ys

    def nonfinite(self, x0: float, x1: float) -> np.ndarray:
        marks = self._last.marks if self._last is not None else np.empty(0)
        return marks[(marks >= min(x0, x1)) & (marks <= max(x0, x1))]

    def nearest(self, xq: float) -> tuple[float, float] | None:
        got = self.remote.answer(self.key)
        if got is None or got.records is None or not len(got.records):
            return None
        rec = got.records
        steps = np.concatenate([rec["xfirst"], rec["xlast"]])
        vals = np.concatenate([rec["first"], rec["last"]])
        i = int(np.argmin(np.abs(steps.astype(np.float64) - xq)))
        return float(steps[i]), float(vals[i])

    def x_range(self) -> tuple[float, float] | None:
        rec = self._summary()
        return (float(rec["xfirst"][0]), float(rec["xlast"][0])) if len(rec) else None

    def y_range(self) -> tuple[float, float] | None:
        rec = self._summary()
        return None if not len(rec) or np.isnan(rec["min"][0]) else (float(rec["min"][0]), float(rec["max"][0]))

    @property
    def all_finite(self) -> bool:
        rec = self._summary()
        return not len(rec) or int(rec["bad"][0]) == 0

"""Charts of a run the app's store does not hold yet, drawn from the tiers its agent answers.

Why: an app that connects to an agent for the first time follows the journal from its start; a
run of 10 x 100 M points takes minutes to arrive.  Meanwhile a chart of it asks the agent for the
tiers of the visible range (``Client.tiers``: a few buckets per pixel column, whatever the run's
length) and draws them; once the store holds the run, the chart reads the store as usual.

``RemoteTiers`` keeps what charts want and what agents answered.  Charts (the Qt thread) only
note what they want and read answers; one fetch thread per agent, with its own socket, asks the
agent: network I/O never runs on the Qt thread.  A chart that wants a new range keeps drawing
what it had until the answer comes (``on_answer`` then tells the app to redraw).

A pan or zoom moves every chart of a run (their x axes are linked), each to a range a few pixels
apart from the others' (the y axes' labels differ in width): the fetch thread asks for all of them
in one request, on the finest columns asked and reaching ``PAD`` of the span past each edge, and an
answer serves any view it covers on about as many columns (``serves``), so a chart a few pixels
wider, or a small pan, needs no new answer.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pilothouse.client import AgentError, Client
from pilothouse.gui.tiers import TierView, drawn, view_range
from pilothouse.store.tiers import LEVELS, RECORD, level_for, whole
from pilothouse.wire.messages import MAX_TIER_PIXELS, ProtocolError

ALL = (-2.0 ** 63, 2.0 ** 63)
Key = tuple[str, str, str]  # (agent, run, metric)
Span = tuple[float, float, int]  # steps x0..x1 on so many pixel columns
PAD = 0.02  # an asked range reaches this share of its span past each edge: a small pan is answered already
FINER = 0.5  # an answer serves a view whose columns are up to 1 / FINER times as wide as its own
COARSER = 1.1  # ... or up to COARSER times narrower (a chart a few pixels wider than the one that asked)


def serves(got: Span, want: Span) -> bool:
    """Whether the answer for ``got`` draws the view ``want`` as well as one asked for it: it covers
    the range on columns about as wide as the view's (each column keeps its extremes at their own
    steps, so its edges need not fall on the view's pixels)."""
    (a0, a1, ap), (x0, x1, pixels) = got, want
    if (a0, a1) == ALL or (x0, x1) == ALL or x1 <= x0:
        return got == want
    column, view = (a1 - a0) / ap, (x1 - x0) / pixels
    return a0 <= x0 and x1 <= a1 and FINER * view <= column <= COARSER * view


def together(wants: list[tuple[str, Span]]) -> list[tuple[Span, list[str]]]:
    """One run's wants (metric, span) as few requests, each with the metrics it answers: wants
    whose ranges and columns are close share one request that ``serves`` each of them, on the
    finest columns among them, padded by PAD each side; a summary (ALL) or an empty range is
    asked as it is."""
    exact: dict[Span, list[str]] = {}
    groups: list[tuple[float, float, float, float, int, list[str]]] = []  # x0, x1, finest, widest column, most pixels
    for metric, (x0, x1, pixels) in sorted(wants, key=lambda w: w[1]):
        if (x0, x1) == ALL or x1 <= x0:
            exact.setdefault((x0, x1, pixels), []).append(metric)
            continue
        column = (x1 - x0) / pixels
        for i, (u0, u1, fine, wide, most, metrics) in enumerate(groups):
            u0, u1, fine, wide, most = min(u0, x0), max(u1, x1), min(fine, column), max(wide, column), max(most, pixels)
            if FINER * wide <= fine and (u1 - u0) / fine <= COARSER * most:  # about one chart's width of columns
                groups[i] = (u0, u1, fine, wide, most, [*metrics, metric])
                break
        else:
            groups.append((x0, x1, column, column, pixels, [metric]))
    asks = list(exact.items())
    for u0, u1, fine, _, _, metrics in groups:
        pad = PAD * (u1 - u0)
        asks.append(((u0 - pad, u1 + pad, min(math.ceil((u1 - u0 + 2 * pad) / fine), MAX_TIER_PIXELS)), metrics))
    return asks


@dataclass(frozen=True)
class Answer:
    """What an agent answered for steps x0..x1 at ``level``: its buckets folded per pixel column
    (the top level's buckets for a summary); None while the run's tiers are being built.  ``view``:
    the columns' curve, made on the fetch thread so that the Qt thread only hands it to the chart."""

    level: int
    x0: float
    x1: float
    pixels: int
    records: np.ndarray | None
    view: TierView | None = None


class RemoteTiers:
    """Wants and answers of every agent (see the module docstring)."""

    def __init__(self, on_answer: Callable[[str], None] | None = None, timeout: float = 10.0) -> None:
        self.on_answer = on_answer
        self.timeout = timeout
        self._cond = threading.Condition()
        # agent -> the latest want per curve and kind (a summary or a view: one does not replace the other)
        self._wants: dict[str, dict[tuple[Key, bool], Span]] = {}
        self._asking: dict[str, dict[tuple[Key, bool], Span]] = {}  # agent -> what is being asked now
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
            wants, kind = self._wants.setdefault(key[0], {}), (key, (x0, x1) == ALL)
            asked = self._asking.get(key[0], {}).get(kind)
            if asked is not None and serves(asked, (x0, x1, pixels)):
                wants.pop(kind, None)  # being asked now: its answer comes (a chart redrawn meanwhile asks again)
                return
            wants[kind] = (x0, x1, pixels)
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
        except Exception as exc:  # noqa: BLE001 (no key for this agent, a broken answer: said, the charts fill from the store)
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
                    runs: dict[str, list[tuple[str, Span]]] = {}
                    for ((_, run, metric), _), span in wants.items():
                        runs.setdefault(run, []).append((metric, span))
                    asks = [(run, span, metrics) for run, run_wants in runs.items()
                            for span, metrics in together(run_wants)]
                    self._asking[agent] = {((agent, run, m), span[:2] == ALL): span
                                           for run, span, metrics in asks for m in metrics}
                for run, (x0, x1, pixels), metrics in asks:
                    try:
                        self._ask(client, agent, run, metrics, x0, x1, pixels)
                    except (AgentError, ProtocolError) as exc:
                        self.errors[agent] = str(exc)
                with self._cond:
                    self._asking[agent] = {}
                if self.on_answer is not None:
                    self.on_answer(agent)

    def _ask(self, client: Client, agent: str, run: str, metrics: list[str], x0: float, x1: float,
             pixels: int) -> None:
        """One request (``Client.tiers`` splits a long list) for every metric wanting this range."""
        if (x0, x1) == ALL:
            level, table = LEVELS - 1, self._summaries
            got = client.tiers(run, metrics, *ALL, level=level)
        else:
            level, table = max(level_for(x0, x1, pixels), 0), self._answers
            got = client.tiers(run, metrics, x0, x1, pixels, level=level, by_column=True)
        none = np.empty(0, np.int64)
        answers = {metric: Answer(level, x0, x1, pixels, None) if got is None else
                   Answer(level, x0, x1, pixels, got[metric], None if table is self._summaries else
                          drawn(got[metric], level, none, none)) for metric in metrics}
        with self._cond:
            for metric, answer in answers.items():
                table[(agent, run, metric)] = answer

class RemoteSeries:
    """One metric of a run the store lacks, as a chart asks of a curve (``pilothouse.gui.curves.CurveSource``),
    from ``RemoteTiers``."""

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

    @property
    def drawn(self) -> TierView | None:
        """The view of the last frame (what its smoothed copy follows)."""
        return self._last

    def grew(self) -> None:
        """Points reaching the store meanwhile: the extent may have grown; asked again."""
        if self._whole is not None:
            self._whole = None
            self.remote.want(self.key, *ALL, 1)

    def view(self, x0: float, x1: float, pixels: int) -> tuple[np.ndarray, np.ndarray]:
        """The last answer's curve, the very same arrays until another answer comes (the chart
        keeps its curve: a pan or zoom only moves it, the old columns stand where their points
        are); a new answer is asked for when it is not of this range on these columns (the chart
        redraws when it comes)."""
        x0, x1, pixels = view_range(x0, x1, pixels)
        if not self.answered(x0, x1, pixels):
            self.remote.want(self.key, x0, x1, pixels)
        got = self.remote.answer(self.key)
        if got is None or got.view is None:
            empty = np.empty(0)
            return empty, empty
        self._last = got.view
        return got.view.xs, got.view.ys

    def answered(self, x0: float, x1: float, pixels: int) -> bool:
        """Whether the agent's answer at hand ``serves`` steps x0..x1 on ``pixels`` columns."""
        got = self.remote.answer(self.key)
        return got is not None and serves((got.x0, got.x1, got.pixels), view_range(x0, x1, pixels))

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

"""The reader feed on a real journal: a fast trainer's turn reaches a caught-up reader in pages of
bounded size (not one message the size of the turn, held once per reader), and every point once."""

from __future__ import annotations

import numpy as np
from support.messages import batch_fields

from pilothouse.client import RETURN_SECONDS, _Owed
from pilothouse.node.feed import ReaderFeed
from pilothouse.node.journal import Store
from pilothouse.wire.entries import KIND_METRIC, entry_points
from pilothouse.wire.messages import MAX_PAGE_POINTS

METRICS = [f"m{i}" for i in range(10)]


def test_a_big_turn_reaches_a_caught_up_reader_in_bounded_pages_and_every_point_once(tmp_path):
    store = Store(tmp_path / "j.sqlite")
    store.begin()
    store.upsert_run({"run": "r1", "rank": 0, "project": "p", "name": "n", "config": {}, "host": "h", "pid": 1}, 0.0)
    store.commit()
    pages: list[dict] = []
    feed = ReaderFeed(store, lambda ident, msg: pages.append(msg) or True, timeout=60, admits=lambda key: True)
    feed.subscribe(b"app", {"after": store.head, "credit": 64})
    feed.feed(store.head, [])  # the answer to the sub: an empty page
    assert pages.pop()["entries"] == []

    head_before, steps = store.head, 40_960  # 409,600 points in one turn: twice a page
    store.begin()
    for lo in range(0, steps, 4096):
        recs = [(0, s, 1000.0 + s, {m: s + i / 10 for i, m in enumerate(METRICS)}) for s in range(lo, lo + 4096)]
        store.ingest(("r1", 0, ""), lo + 1, lo + 1, batch_fields(recs), 0.0)
    fresh = store.commit()
    feed.feed(head_before, fresh)
    while feed.behind():
        feed.feed(store.head, [])

    assert len(pages) >= 3, "the turn went out as one page"
    biggest_entry = max(e.n for e in fresh)
    assert all(sum(e.n for e in p["entries"]) < MAX_PAGE_POINTS + biggest_entry for p in pages)
    assert pages[-1]["cursor"] == store.head
    got: dict[str, list[int]] = {m: [] for m in METRICS}
    for page in pages:
        for entry in page["entries"]:
            assert entry.kind == KIND_METRIC
            got[entry.metric].extend(entry_points(entry)[0].tolist())
    assert all(got[m] == list(range(steps)) for m in METRICS), "a point was lost or repeated across pages"
    np.testing.assert_array_equal(entry_points(pages[0]["entries"][1])[1], np.arange(4096) + 0.1)


def test_a_follower_returns_its_credit_once_half_its_window_is_owed_or_a_second_after_the_last_return():
    """A reader keeping up with a fast stream returns credit every fourth page of a window of 8 (the
    agent still holds four: it never waits), a slow stream's reader every page, as before."""
    owed, now = _Owed(8), 100.0
    owed.returned(now)
    due = []
    for page in range(1, 9):  # 8 pages within a second
        owed.pages += 1
        if owed.due(now + page / 100):
            due.append((page, owed.pages))
            owed.returned(now + page / 100)
    assert due == [(4, 4), (8, 4)]
    owed.pages += 1
    assert not owed.due(now + 0.5) and owed.due(now + 0.08 + RETURN_SECONDS)
    assert _Owed(1).every == 1 and _Owed(2).every == 1  # a window of one or two: every page, as before

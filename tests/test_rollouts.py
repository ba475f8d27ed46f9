"""Rollout browsing without Qt: steps from a real LocalStore, search, reward filter, sort, pairing."""

from __future__ import annotations

import math

import msgpack
import pytest

from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.rollouts import Query, RolloutIndex, pair, reward
from pilothouse.wire.entries import Entry

A = "tcp://127.0.0.1:7001"


def rollout_entry(id: int, run: str, step: int, rows: list[dict]) -> Entry:
    """A rollout entry as the agent journals it (store._entries)."""
    body = msgpack.packb({"step": step, "time": 1.7e9 + step, "rows": rows}, use_bin_type=True)
    return Entry(id, run, "r", None, 0, len(rows), None, None, None, body)


def rows(*items: tuple[str, str, object]) -> list[dict]:
    return [{"prompt": p, "completion": c, "reward": r} for p, c, r in items]


STEP0 = rows(("What is 2+2?", "4", 1.0), ("Name a colour", "Blue", 0.5), ("Capital of France", "Lyon", 0.0))
STEP5 = rows(("What is 2+2?", "four", 0.8), ("Name a colour", "bLUE sky", float("nan")),
             ("Capital of France", "Paris", 1.0))


@pytest.fixture
def index(tmp_path) -> RolloutIndex:
    store = LocalStore(tmp_path / "s.sqlite")
    store.write_page(A, [rollout_entry(1, "r1", 0, STEP0), rollout_entry(2, "r1", 5, STEP5[:2]),
                         rollout_entry(3, "r1", 5, STEP5[2:])], 3)
    index = RolloutIndex(store.rollouts(A, "r1"))
    store.close()
    return index


def test_every_step_is_kept_and_batches_of_a_step_join(index):
    assert index.steps() == [0, 5]
    assert [r["completion"] for r in index.rows(5)] == ["four", "bLUE sky", "Paris"]  # two batches, in order
    assert index.rows(7) == []


def test_search_is_case_insensitive_over_prompt_and_completion_across_steps(index):
    assert [(s, r["completion"]) for s, r in index.search("blue")] == [(0, "Blue"), (5, "bLUE sky")]
    assert [(s, r["completion"]) for s, r in index.search("FRANCE paris")] == [(5, "Paris")]  # every word
    assert len(index.search("")) == 6
    assert index.search("nowhere") == []


def test_reward_filter_is_inclusive_and_drops_rows_without_a_reward(index):
    kept = Query(reward_min=0.5, reward_max=1.0).rows(index.rows(5) + [{"prompt": "x", "completion": "y"}])
    assert [r["completion"] for r in kept] == ["four", "Paris"]  # NaN and missing rewards are out
    assert len(Query().rows(index.rows(5))) == 3  # no bound: everything, NaN included
    assert [r["completion"] for r in Query(reward_max=0.0).rows(index.rows(0))] == ["Lyon"]


def test_sort_by_reward_puts_rows_without_one_last_both_ways(index):
    assert [reward(r) for r in Query(order="asc").rows(index.rows(5))][:2] == [0.8, 1.0]
    desc = Query(order="desc").rows(index.rows(5))
    assert [r["completion"] for r in desc] == ["Paris", "four", "bLUE sky"]
    assert [r["completion"] for r in Query(order="logged").rows(index.rows(5))] == ["four", "bLUE sky", "Paris"]
    with pytest.raises(ValueError):
        Query(order="random").rows([])


def test_pair_matches_the_same_prompt_and_keeps_unmatched_rows():
    a = rows(("p1", "a1", 1.0), ("p2", "a2", 0.0), ("p1", "a1'", 0.5), ("only-a", "x", 0.1))
    b = rows(("only-b", "y", 0.2), ("p2", "b2", 1.0), ("p1", "b1", 0.0), ("p1", "b1'", 0.3))
    pairs = pair(a, b)
    by_text = [(x and x["completion"], y and y["completion"]) for x, y in pairs]
    assert by_text == [("a1", "b1"), ("a2", "b2"), ("a1'", "b1'"), ("x", None), (None, "y")]


def test_pairs_filter_keeps_both_sides_and_sorts_by_run_a():
    pairs = pair(rows(("p1", "good", 1.0), ("p2", "bad", 0.0), ("p3", "meh", math.nan)),
                 rows(("p1", "worse", 0.0), ("p2", "fixed", 1.0), ("p3", "ok", 0.7)))
    kept = Query(words="fixed").pairs(pairs)
    assert [(x["completion"], y["completion"]) for x, y in kept] == [("bad", "fixed")]
    ordered = Query(order="desc").pairs(pairs)
    assert [x["completion"] for x, _ in ordered] == ["good", "meh", "bad"]  # p3 falls back to B's 0.7
    assert len(Query(reward_min=0.9).pairs(pairs)) == 2  # p1 by A's side, p2 by B's

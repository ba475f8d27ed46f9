"""Rollouts without Qt: compressed bodies, steps and search from a real LocalStore (SQLite FTS5), the
reward filter, sort and pairing."""

from __future__ import annotations

import json
import math
import re
import sqlite3

import pytest

from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.rollouts import Query, pair, reward
from pilothouse.store.rollout_search import ROW_BITS
from pilothouse.wire.entries import Entry, entry_body
from pilothouse.wire.messages import ProtocolError, pack
from pilothouse.wire.rollouts import MAX_BATCH_BYTES, fts_query, pack_batch, unpack_batch

A = "tcp://127.0.0.1:7001"


def rollout_entry(id: int, run: str, step: int, rows: list[dict]) -> Entry:
    """A rollout entry as the agent journals it (store._entries)."""
    return Entry(id, run, "r", None, 0, len(rows), None, None, None, pack_batch(step, 1.7e9 + step, rows))


def rows(*items: tuple[str, str, object]) -> list[dict]:
    return [{"prompt": p, "completion": c, "reward": r} for p, c, r in items]


STEP0 = rows(("What is 2+2?", "4", 1.0), ("Name a colour", "Blue", 0.5), ("Capital of France", "Lyon", 0.0))
STEP5 = rows(("What is 2+2?", "four", 0.8), ("Name a colour", "bLUE sky", float("nan")),
             ("Capital of France", "Paris", 1.0))


def indexed(store: LocalStore) -> LocalStore:
    while store.index_rollouts():
        pass
    return store


@pytest.fixture
def store(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    store.write_page(A, [rollout_entry(1, "r1", 0, STEP0), rollout_entry(2, "r1", 5, STEP5[:2]),
                         rollout_entry(3, "r1", 5, STEP5[2:])], 3)
    yield indexed(store)
    store.close()


def found(store: LocalStore, words: str, run: str = "r1", **page) -> list[tuple[int, str]]:
    hits, _ = store.search_rollouts(A, run, words, **page)
    return [(step, row["completion"]) for step, _, _, row in hits]


def same(a: object, b: object) -> bool:
    """Equal, with NaN equal to NaN and -0.0 told from 0.0."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_a_body_round_trips_exactly_and_compresses():
    rows = [{"prompt": "Solve: " + "x + 1 = 2. " * 100, "completion": "x = 1 " * 300, "reward": -0.0,
             "advantage": float("nan"), "rewards/format": 1e308, "ok": True, "n": -(2 ** 63), "note": None,
             "text": "é\u202e\x00"}] * 8
    blob = pack_batch(7, 1.5, rows)
    assert blob[:4] == b"\x28\xb5\x2f\xfd" and len(blob) < len(pack({"step": 7, "time": 1.5, "rows": rows})) / 10
    assert same(unpack_batch(blob), {"step": 7, "time": 1.5, "rows": rows})
    small = pack_batch(1, 2.0, [{"prompt": "p"}])  # a frame would not be smaller: kept plain
    assert unpack_batch(small) == {"step": 1, "time": 2.0, "rows": [{"prompt": "p"}]}
    old = pack({"step": 3, "time": 1.0, "rows": []})  # a body journaled before compression
    assert entry_body(Entry(1, "r", "r", None, 0, 0, None, None, None, old))["step"] == 3


def test_a_bad_or_oversized_frame_is_refused_with_a_reason():
    import zstandard

    huge = zstandard.ZstdCompressor().compress(b"\x00" * (MAX_BATCH_BYTES + 1))
    with pytest.raises(ProtocolError, match="at most"):
        unpack_batch(huge)
    with pytest.raises(ProtocolError, match="damaged"):
        unpack_batch(pack_batch(1, 1.0, STEP0 * 20)[:-5])
    with pytest.raises(ProtocolError):
        unpack_batch(pack({"step": "one", "time": 1.0, "rows": []}))


def test_steps_list_counts_and_mean_rewards_and_a_step_joins_its_batches(store):
    assert store.rollout_steps(A, "r1") == [(0, 3, 0.5), (5, 3, 0.9)]  # NaN left out of the mean
    assert [r["completion"] for r in store.rollout_rows(A, "r1", 5)] == ["four", "bLUE sky", "Paris"]
    assert store.rollout_rows(A, "r1", 7) == []
    assert same(store.rollout_rows(A, "r1", 5), STEP5)


def test_search_is_by_word_over_prompt_and_completion_newest_first_and_paged(store):
    assert found(store, "blue") == [(5, "bLUE sky"), (0, "Blue")]  # case folded, newest first
    assert found(store, "FRANCE paris") == [(5, "Paris")]  # every word
    assert found(store, '"capital of"') == [(5, "Paris"), (0, "Lyon")]  # a phrase
    assert found(store, '"of capital"') == []
    assert found(store, "col*") == [(5, "bLUE sky"), (0, "Blue")]  # a prefix
    assert found(store, "nowhere") == []
    hits, more = store.search_rollouts(A, "r1", "what", limit=1)
    assert [(s, i, r["completion"]) for s, i, _, r in hits] == [(5, 0, "four")] and more is not None
    rest, end = store.search_rollouts(A, "r1", "what", before=more, limit=5)
    assert [r["completion"] for *_, r in rest] == ["4"] and end is None


@pytest.mark.parametrize("words", ['prompt:blue', 'blue OR lyon', 'NOT blue', 'blue NEAR(paris)', '"blue"" OR x',
                                   'blue) OR (x', '{prompt}: x', '^blue', 'blue + paris', "rowid", "*", "a' OR 1=1 --",
                                   "what 2", '"2+2"'])
def test_fts_syntax_in_a_search_is_only_words(store, words):
    try:
        hits = found(store, words)
    except ValueError as exc:  # said plainly, before SQLite sees anything
        assert not isinstance(exc, sqlite3.Error) and str(exc)
        return
    # exactly the rows holding every word typed, operators and punctuation included as plain words:
    # "OR" or "NOT" would widen it, a column filter narrow it
    terms = set(re.findall(r"\w+", words.lower().rstrip("*")))
    logged = [(5, r) for r in reversed(STEP5)] + [(0, r) for r in reversed(STEP0)]
    assert hits == [(s, r["completion"]) for s, r in logged
                    if terms <= set(re.findall(r"\w+", (r["prompt"] + " " + r["completion"]).lower()))]


@pytest.mark.parametrize("words, reason", [("", "at least one word"), ('"open', "unclosed quote"),
                                           ("+++ ---", "letter or a digit"), ("x" * 501, "at most 500"),
                                           (" ".join("w" * 17), "at most 16")])
def test_words_that_cannot_be_searched_get_a_clear_error(store, words, reason):
    with pytest.raises(ValueError, match=reason):
        store.search_rollouts(A, "r1", words)
    with pytest.raises(ValueError, match=reason):
        fts_query(words)


def test_search_keeps_to_its_run_and_forgets_a_removed_one_with_its_index_rows(store):
    store.write_page(A, [rollout_entry(4, "r2", 9, rows(("Name a colour", "blue again", 1.0)))], 4)
    indexed(store)
    assert found(store, "blue", run="r2") == [(9, "blue again")]
    assert found(store, "blue") == [(5, "bLUE sky"), (0, "Blue")]
    terms = store.db.execute("SELECT COUNT(*) FROM rollout_text_data").fetchone()[0]
    store.remove_runs([(A, "r2")], force=True)
    assert found(store, "again", run="r2") == [] and store.rollout_steps(A, "r2") == []
    assert found(store, "blue") == [(5, "bLUE sky"), (0, "Blue")]
    store.db.execute("INSERT INTO rollout_text(rollout_text) VALUES ('optimize')")
    assert store.db.execute("SELECT COUNT(*) FROM rollout_batches WHERE run='r2'").fetchone()[0] == 0
    assert store.db.execute("SELECT COUNT(*) FROM rollout_text WHERE rollout_text MATCH 'again'").fetchone()[0] == 0
    assert store.db.execute("SELECT COUNT(*) FROM rollout_text_data").fetchone()[0] <= terms
    store.db.execute("INSERT INTO rollout_text(rollout_text, rank) VALUES ('integrity-check', 0)")  # raises if not


def test_an_unindexed_batch_is_forgotten_without_touching_the_index(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    store.write_page(A, [rollout_entry(1, "r1", 0, STEP0)], 1)
    store.remove_runs([(A, "r1")], force=True)  # queued, never indexed
    assert not store.index_rollouts() and store.rollout_steps(A, "r1") == []
    store.db.execute("INSERT INTO rollout_text(rollout_text, rank) VALUES ('integrity-check', 0)")
    store.close()


def test_a_store_from_before_the_index_queues_its_rollouts_once(tmp_path):
    path = tmp_path / "old.sqlite"
    store = LocalStore(path)
    store.write_page(A, [Entry(1, "r1", "r", None, 0, 3, None, None, None,
                               pack({"step": 2, "time": 1.0, "rows": STEP0}))], 1)
    for table in ("rollout_text", "rollout_batches", "rollout_queue"):
        store.db.execute(f"DROP TABLE {table}")
    store.db.execute("PRAGMA user_version=0")  # as a file from before the schema was numbered
    store.close()
    store = indexed(LocalStore(path))
    assert store.rollout_steps(A, "r1") == [(2, 3, 0.5)] and found(store, "lyon") == [(2, "Lyon")]
    assert ROW_BITS >= 14
    store.close()


def test_reward_filter_is_inclusive_and_drops_rows_without_a_reward():
    kept = Query(reward_min=0.5, reward_max=1.0).rows(STEP5 + [{"prompt": "x", "completion": "y"}])
    assert [r["completion"] for r in kept] == ["four", "Paris"]  # NaN and missing rewards are out
    assert len(Query().rows(STEP5)) == 3  # no bound: everything, NaN included
    assert [r["completion"] for r in Query(reward_max=0.0).rows(STEP0)] == ["Lyon"]


def test_sort_by_reward_puts_rows_without_one_last_both_ways():
    assert [reward(r) for r in Query(order="asc").rows(STEP5)][:2] == [0.8, 1.0]
    desc = Query(order="desc").rows(STEP5)
    assert [r["completion"] for r in desc] == ["Paris", "four", "bLUE sky"]
    assert [r["completion"] for r in Query(order="logged").rows(STEP5)] == ["four", "bLUE sky", "Paris"]
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
    ordered = Query(order="desc").pairs(pairs)
    assert [x["completion"] for x, _ in ordered] == ["good", "meh", "bad"]  # p3 falls back to B's 0.7
    assert len(Query(reward_min=0.9).pairs(pairs)) == 2  # p1 by A's side, p2 by B's

"""The journal on a real SQLite file: exactness, idempotence, loss accounting, reopening."""

from __future__ import annotations

import numpy as np
import pytest
from support.float_bits import SPECIAL, bits
from support.messages import batch_fields

from pilothouse.node.journal import Store
from pilothouse.wire.messages import ProtocolError, pack

HELLO = {"run": "r1", "rank": 0, "project": "p", "name": "n", "config": {"lr": 3e-4}, "host": "h", "pid": 1}


def rec(step: int, **values: float) -> list:
    return [0, step, 1000.0 + step, values]


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "j.sqlite")
    s.begin()
    s.upsert_run(HELLO, 0.0)
    s.commit()
    return s


def ingest(store: Store, seq: int, recs: list, floor: int | None = None):
    store.begin()
    result = store.ingest(("r1", 0, ""), seq, floor or seq, batch_fields(recs), 0.0)
    store.commit()
    return result


def test_a_message_outside_a_transaction_begins_one_and_its_undo_leaves_nothing(store):
    """The agent's turn begins its transaction with its first message that may write: undoing that
    message rolls back the whole transaction (no savepoint), and the next message begins another."""
    assert not store.db.conn.in_transaction
    first = store.mark()
    assert store.db.conn.in_transaction and not first.savepoint
    store.ingest(("r1", 0, ""), 1, 1, batch_fields([rec(0, x=0.0)]), 0.0)
    store.undo(first)
    assert not store.db.conn.in_transaction
    second = store.mark()
    store.ingest(("r1", 0, ""), 1, 1, batch_fields([rec(0, x=5.0)]), 0.0)
    inner = store.mark()  # a later message of the same turn: a savepoint, undone alone
    assert inner.savepoint
    store.ingest(("r1", 0, ""), 2, 2, batch_fields([rec(1, x=6.0)]), 0.0)
    store.undo(inner)
    store.release(second)
    entries = store.commit()
    assert [(e.id, e.n) for e in entries] == [(store.head, 1)]
    steps, vals, _ = store.series("r1", "x")
    assert steps.tolist() == [0] and vals.tolist() == [5.0] and store.max_seq[("r1", 0, "")] == 1


def test_special_floats_come_back_bit_exact_after_reopening(store, tmp_path):
    ingest(store, 1, [rec(i, v=v) for i, v in enumerate(SPECIAL)])
    store.db.close()
    steps, vals, times = Store(tmp_path / "j.sqlite").series("r1", "v")
    assert steps.tolist() == list(range(len(SPECIAL)))
    assert bits(vals) == bits(SPECIAL)  # NaN stays NaN (not NULL), -0.0 keeps its sign


def test_resent_and_overlapping_batches_are_stored_once(store):
    assert ingest(store, 1, [rec(i, x=float(i)) for i in range(10)]).seq == 10
    assert ingest(store, 1, [rec(i, x=float(i)) for i in range(10)]).seq == 10  # resend
    assert ingest(store, 6, [rec(i, x=float(i)) for i in range(5, 15)]).seq == 15  # overlap
    steps, vals, _ = store.series("r1", "x")
    assert steps.tolist() == list(range(15)) and vals.tolist() == [float(i) for i in range(15)]


def test_a_gap_asks_for_a_resend_and_stores_nothing(store):
    ingest(store, 1, [rec(0, x=0.0)])
    result = ingest(store, 5, [rec(4, x=4.0)], floor=2)  # the trainer still holds seq 2-4
    assert result.expect == 2 and not result.entries
    assert store.series("r1", "x")[0].tolist() == [0]


def test_a_gap_below_the_trainers_floor_is_counted_as_loss(store):
    ingest(store, 1, [rec(0, x=0.0)])
    result = ingest(store, 5, [rec(4, x=4.0)], floor=5)  # the trainer dropped seqs 2-4
    assert result.expect is None and result.seq == 5
    assert store.run_row("r1")["lost_records"] == 3
    events = [e for e in store.read(0, run="r1", kinds=["e"])[0]]
    assert any(b"loss" in e[9] for e in events)


def test_rows_that_do_not_match_their_key_set_reject_the_whole_batch(store):
    body = batch_fields([rec(0, x=1.0), rec(1, x=2.0, y=3.0)])
    body["metrics"][1][2] = body["metrics"][1][2][:-8]  # one value short
    store.begin()
    with pytest.raises(ProtocolError, match="metrics group 1: 4 bytes of offsets and 24 of rows do not hold "
                                            "records of step, time and 2 metrics"):
        store.ingest(("r1", 0, ""), 1, 1, body, 0.0)
    store.rollback()
    assert store.series("r1", "x")[0].size == 0 and store.max_seq.get(("r1", 0), 0) == 0


def test_metrics_with_changing_companions_keep_record_order(store):
    recs = [rec(0, loss=0.0, lr=1.0), rec(1, loss=1.0), rec(2, loss=2.0, lr=3.0), rec(3, loss=3.0, acc=0.5)]
    ingest(store, 1, recs)
    assert store.series("r1", "loss")[0].tolist() == [0, 1, 2, 3]
    assert store.series("r1", "lr")[0].tolist() == [0, 2]
    assert store.series("r1", "acc")[1].tolist() == [0.5]


def test_reading_by_cursor_pages_through_everything(store):
    for seq in range(1, 51):
        ingest(store, seq, [rec(seq, x=float(seq), y=1.0)])
    seen, cursor = [], 0
    while True:
        entries, cursor = store.read(cursor, kinds=["m"], limit_points=7)
        if not entries:
            break
        seen.extend(np.frombuffer(e[6], np.int64).tolist() for e in entries if e[3] == "x")
    assert [s for chunk in seen for s in chunk] == list(range(1, 51))


def test_streams_survive_reopening(store, tmp_path):
    ingest(store, 1, [rec(0, x=0.0), rec(1, x=1.0)])
    store.db.close()
    again = Store(tmp_path / "j.sqlite")
    assert again.max_seq[("r1", 0, "")] == 2
    again.begin()
    assert again.ingest(("r1", 0, ""), 1, 1, batch_fields([rec(0, x=0.0), rec(1, x=1.0)]), 0.0).seq == 2  # a resend
    again.commit()
    assert again.series("r1", "x")[0].tolist() == [0, 1]


def test_resolve_by_id_name_and_project_slash_name(store):
    store.begin()
    store.upsert_run({**HELLO, "run": "r2", "name": "twin"}, 0.0)
    store.upsert_run({**HELLO, "run": "r3", "name": "twin"}, 0.0)
    store.commit()
    assert store.resolve("r1") == "r1" and store.resolve("n") == "r1" and store.resolve("p/n") == "r1"
    with pytest.raises(LookupError, match="names 2 runs"):
        store.resolve("twin")
    with pytest.raises(LookupError, match="no run"):
        store.resolve("ghost")


def test_a_journal_from_before_sessions_keeps_its_streams(tmp_path):
    """Streams were keyed by (run, rank): opening such a journal keeps every seq, as session ''."""
    import sqlite3

    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE streams (run TEXT, rank INTEGER, max_seq INTEGER, PRIMARY KEY (run, rank))")
    con.executemany("INSERT INTO streams VALUES (?,?,?)", [("a", 0, 7), ("a", 1, 3), ("b", 0, 12)])
    con.commit()
    con.close()
    store = Store(path)
    assert store.max_seq == {("a", 0, ""): 7, ("a", 1, ""): 3, ("b", 0, ""): 12}
    store.begin()
    assert store.ingest(("a", 0, ""), 1, 1, batch_fields([rec(0, x=0.0)]), 0.0).seq == 7  # still a resend
    assert store.ingest(("a", 0, "new"), 1, 1, batch_fields([rec(0, x=0.0)]), 0.0).seq == 1  # a new process
    store.commit()


def _wide(step: int, names) -> list:
    names = tuple(names)
    return [0, step, 1000.0 + step, dict.fromkeys(names, float(step))]


def test_past_the_metric_limit_new_metrics_are_refused_and_said_so(store):
    """A run at MAX_METRICS_PER_RUN keeps taking points of its metrics; a new one in the same batch
    is not stored, and the batch's answer and an event say so."""
    from pilothouse.wire.entries import KIND_EVENT, entry_body
    from pilothouse.wire.records import MAX_METRICS_PER_RUN

    assert ingest(store, 1, [_wide(0, (f"m{i}" for i in range(MAX_METRICS_PER_RUN)))]).refused == ""
    result = ingest(store, 2, [_wide(1, ("m7", "extra1", "extra2"))])
    assert result.seq == 2 and "10000 metrics, the most a run may have: 2 new metrics not stored" in result.refused
    assert store.series("r1", "m7")[0].tolist() == [0, 1]
    assert len(store.series("r1", "extra1")[0]) == 0
    events = [entry_body(e) for e in store.read(0, kinds=[KIND_EVENT])[0]]
    assert [(e["event"], e["metrics"], e["first"]) for e in events if e["event"] == "refused"] == \
        [("refused", 2, ["extra1", "extra2"])]
    run = next(r for r in store.runs() if r["id"] == "r1")
    assert run["metrics"] == MAX_METRICS_PER_RUN


def test_the_runs_summary_is_short_and_written_per_metric(store):
    """320k metric names once made the summary outgrow the frame and cost every turn a rewrite of
    it: now a turn writes the rows of the metrics it touched, and `runs` carries the most
    important few."""
    from pilothouse.node.journal import SUMMARY_METRICS

    names = [f"per_sample/{i}" for i in range(5000)] + ["loss", "reward", "kl"]
    ingest(store, 1, [_wide(0, names)])
    before = store.db.conn.total_changes
    ingest(store, 2, [rec(1, loss=0.5)])
    assert store.db.conn.total_changes - before <= 4  # the journal chunk, the stream, the step, loss's row
    run = next(r for r in store.runs() if r["id"] == "r1")
    assert run["metrics"] == len(names) and len(run["summary"]) == SUMMARY_METRICS
    assert list(run["summary"])[:3] == ["reward", "kl", "loss"] and run["summary"]["loss"] == 0.5
    assert len(pack(run)) < 4096


def test_a_journal_with_summary_blobs_keeps_its_last_values(tmp_path):
    """Summaries were one blob per run: opening such a journal turns them into rows."""
    path = tmp_path / "old.sqlite"
    old = Store(path)
    old.begin()
    old.upsert_run(HELLO, 0.0)
    old.commit()
    old.db["runs"].add_column("summary", bytes)
    old.db.execute("UPDATE runs SET summary=? WHERE id='r1'", [pack({"loss": 0.25, "reward": 1.5})])
    old.db.execute("DELETE FROM last_values")
    old.db.execute("PRAGMA user_version=0")  # as a file from before the schema was numbered
    old.db.conn.commit()
    old.db.close()
    store = Store(path)
    assert "summary" not in store.db["runs"].columns_dict
    assert next(r for r in store.runs() if r["id"] == "r1")["summary"] == {"reward": 1.5, "loss": 0.25}


def test_last_values_come_back_bit_exact_after_reopening(store, tmp_path):
    ingest(store, 1, [rec(0, **{f"v{i}": v for i, v in enumerate(SPECIAL)})])
    store.db.close()
    summary = next(r for r in Store(tmp_path / "j.sqlite").runs() if r["id"] == "r1")["summary"]
    assert bits(summary[f"v{i}"] for i in range(len(SPECIAL))) == bits(SPECIAL)

"""Bad frames on the wire, from a raw socket: garbage, malformed messages, bad record batches.
Each gets an error, the agent keeps serving, and nothing already stored changes (the ``wire``
fixture compares the stored training data before and after every test).
"""

from __future__ import annotations

import random
import re
import struct

import msgpack
import numpy as np
import pytest
import zmq
from support.messages import batch_fields
from support.sockets import as_owner
from support.wire_peer import (
    HELLO,
    SEED,
    RawPeer,
    assert_serving,
    hello,
    rec,
    series,
    stored_seq,
)
from zmq.utils.monitor import recv_monitor_message

import pilothouse as ph
from pilothouse.wire.messages import MAX_INBOUND_BYTES

pytest_plugins = ["support.wire_peer"]  # wire_agent, wire

GARBAGE = [
    pytest.param(b"", r"not valid msgpack", id="empty-frame"),
    pytest.param(b"\xc1", r"not valid msgpack", id="reserved-byte"),
    pytest.param(b"\x92\x01", r"not valid msgpack", id="truncated-array"),
    pytest.param(b"\x81\xa1t\xa5hello\xff", r"not valid msgpack", id="trailing-garbage"),
    pytest.param(b"GET / HTTP/1.1\r\n\r\n", r"not valid msgpack|must be a map", id="http"),
    pytest.param(random.Random(7).randbytes(512), r"not valid msgpack|must be a map", id="random"),
    pytest.param(msgpack.packb([1, 2, 3]), r"message must be a map, got list", id="array"),
    pytest.param(msgpack.packb("hello"), r"message must be a map, got str", id="string"),
    pytest.param(msgpack.packb(42), r"message must be a map, got int", id="int"),
    pytest.param(msgpack.packb(None), r"message must be a map, got NoneType", id="nil"),
    pytest.param(msgpack.packb(b"\x81\xa1t"), r"message must be a map, got bytes", id="bin"),
    pytest.param(msgpack.packb({1: "x"}), r"not valid msgpack", id="int-key"),
    pytest.param(msgpack.packb(msgpack.ExtType(5, b"xx")), r"must be a map", id="ext"),
    pytest.param(b"\x91" * 100_000, r"not valid msgpack", id="deep-nesting"),
    pytest.param(b"\xdd\xff\xff\xff\xff", r"not valid msgpack", id="claims-4g-items"),
]


@pytest.mark.parametrize("frame, why", GARBAGE)
def test_wire_garbage_gets_err(wire, frame, why):
    proc, peer, _ = wire
    bad_before = assert_serving(proc)["bad_frames"]
    reply = peer.ask(frame)
    assert reply is not None and reply["t"] == "err", reply
    assert re.search(why, reply["msg"]), reply["msg"]
    assert assert_serving(proc)["bad_frames"] == bad_before + 1


@pytest.mark.parametrize("msg, why", [
    ({"t": "nope"}, r"unknown message type 'nope'"),
    ({"t": 5}, r"unknown message type '5'"),
    ({"t": "ack", "run": SEED, "rank": 0, "seq": 1}, r"unknown message type 'ack'"),
    ({"run": SEED}, r"unknown message type 'None'"),
    ({}, r"unknown message type"),
    ({"t": "hello"}, r"run id must match"),
    ({**HELLO, "run": "w1", "project": None}, r"project must be a string"),
    ({**HELLO, "run": "w1", "config": None}, r"config must be a dict, got NoneType"),
    ({**HELLO, "run": "w1", "config": [1]}, r"config must be a dict, got list"),
    ({**HELLO, "run": "w1", "pid": "1"}, r"pid must be an int in \[1, "),
    ({**HELLO, "run": "w1", "pid": 1.0}, r"pid must be an int in \[1, "),
    ({**HELLO, "run": "w1", "rank": True}, r"rank must be an int in \[0, "),
    ({**HELLO, "run": "w1", "host": None}, r"host must be a string, not NoneType"),
    ({**HELLO, "run": "bad id!"}, r"run id must match"),
    ({**HELLO, "run": "x" * 65}, r"run id must match"),
    ({**HELLO, "run": 7}, r"run id must match"),
    ({**HELLO, "run": "w1", "name": "evil\x1b[2J"}, r"run name 'evil\\x1b\[2J' contains control character U\+001B"),
    ({**HELLO, "run": "w1", "project": "p\x00"}, r"project .* control character U\+0000"),
    ({**HELLO, "run": "w1", "name": "line\nbreak"}, r"control character U\+000A"),
    ({**HELLO, "run": "w1", "name": ""}, r"run name must be 1 to 250 characters, got 0"),
    ({**HELLO, "run": "w1", "name": "n" * 251}, r"run name must be 1 to 250 characters, got 251"),
    ({"t": "rec", "run": SEED, "rank": 0}, r"'rec' seq must be an int in \[1, "),
    ({"t": "rec", "run": SEED, "rank": "0", "seq": 99, "floor": 99, **batch_fields([[0, 9, 1.0, {"x": 1.0}]])},
     r"rank must be an int in \[0, "),
    ({"t": "rec", "run": SEED, "rank": 0, "seq": 0, "floor": 0, **batch_fields([[0, 9, 1.0, {"x": 1.0}]])},
     r"'rec' seq must be an int in \[1, "),
    ({"t": "rec", "run": SEED, "rank": 0, "seq": 99, "floor": 99.0, **batch_fields([[0, 9, 1.0, {"x": 1.0}]])},
     r"floor must be an int in \[0, \d+\], got 99.0"),
    ({"t": "rec", "run": SEED, "rank": 0, "seq": 99, "floor": 99, **batch_fields([[0, 9, 1.0, {"x": 1.0}]]), "n": 0},
     r"'rec' n \(records in the batch\) must be an int in \[1, "),
    ({"t": "rec", "run": SEED, "rank": 0, "seq": 99, "floor": 99, **batch_fields([[0, 9, 1.0, {"x": 1.0}]]),
      "n": "1"}, r"'rec' n \(records in the batch\) must be an int"),
    ({"t": "rec", "run": SEED, "rank": 0, "seq": 99, "floor": 99, **batch_fields([[0, 9, 1.0, {"x": 1.0}]]),
      "metrics": {"x": 1}}, r"needs metrics of type list"),
    ({"t": "rec", "run": SEED, "rank": 0, "seq": 2 ** 63 - 1, "floor": 99, **batch_fields([[0, 9, 1.0, {"x": 1.0}]]),
      "n": 2}, r"'rec' last seq must be an int"),
    ({"t": "hb", "run": SEED}, r"rank must be an int in \[0, "),
    ({"t": "finish", "run": SEED, "rank": 0}, r"'finish' seq must be an int in \[0, "),
    ({"t": "finish", "run": SEED, "rank": 0, "seq": "9"}, r"'finish' seq must be an int in \[0, "),
    ({"t": "sub"}, r"'sub' cursor must be an int in \[0, "),
    ({"t": "sub", "after": -1, "credit": 1}, r"'sub' cursor must be an int in \[0, \d+\], got -1"),
    ({"t": "sub", "after": 0, "credit": "1"}, r"'sub' credit must be an int in \[1, "),
    ({"t": "sub", "after": 0, "credit": 1, "run": "bad id!"}, r"run id must match"),
    ({"t": "sub", "after": 0, "credit": 1, "kinds": ["zz"]}, r"kinds must be a list drawn from"),
    ({"t": "sub", "after": 0, "credit": 1, "kinds": "m"}, r"kinds must be a list"),
    ({"t": "credit"}, r"'credit' n must be an int in \[0, "),
    ({"t": "credit", "n": 1.5}, r"'credit' n must be an int in \[0, \d+\], got 1.5"),
    ({"t": "q"}, r"'q' message needs request id of type int"),
    ({"t": "q", "id": "1", "op": "ping"}, r"needs request id of type int"),
    ({"t": "q", "id": 1, "op": 5}, r"needs op of type str"),
])
def test_wire_malformed_message_gets_err(wire, msg, why):
    _, peer, _ = wire
    reply = peer.ask(msg)
    assert reply is not None and reply["t"] == "err" and reply["id"] is None, reply
    assert re.search(why, reply["msg"]), reply["msg"]


def test_wire_multi_frame_message_gets_err(wire):
    _, peer, _ = wire
    good = msgpack.packb({"t": "q", "id": 1, "op": "ping"})
    peer.sock.send_multipart([good, good])
    reply = peer.reply()
    assert reply is not None and reply["t"] == "err"
    assert "expected one frame per message, got 2" in reply["msg"]
    peer.sock.send_multipart([b"", good, b"x"])
    reply = peer.reply()
    assert reply is not None and "got 3" in reply["msg"]
    # a well-formed request on the same connection is still answered
    assert peer.ask(good)["t"] == "r"


def row(step: int, *values: float) -> bytes:
    """One record of a metrics group, as the trainer packs it."""
    return struct.pack(f"<qd{len(values)}d", step, 1.0, *values)


def at(*offsets: int) -> bytes:
    return np.array(offsets, "<u4").tobytes()


M1 = [0, 10, 1.0, {"loss": 1.0}]  # a good metrics record
ROLLOUT = [1, 11, 1.0, [{"prompt": "p", "reward": 1.0}]]


@pytest.mark.parametrize("records, fields, why", [
    ([M1], {"metrics": [[0, at(0), row(10, 1.0)[:-1]]]},
     r"metrics group 0: 4 bytes of offsets and 23 of rows do not hold records of step, time and 1 metrics"),
    ([M1], {"metrics": [[0, at(0), row(10, 1.0, 2.0)]]}, r"do not hold records of step, time and 1 metrics"),
    ([M1], {"metrics": [[0, b"\x00\x00\x00", row(10, 1.0)]]}, r"3 bytes of offsets"),
    ([M1], {"metrics": [[0, b"", b""]]}, r"0 bytes of offsets and 0 of rows"),
    ([M1], {"metrics": [[5, at(0), row(10, 1.0)]]}, r"metrics group 0 names key set 5, the table has 1"),
    ([M1], {"metrics": [[-1, at(0), row(10, 1.0)]]}, r"names key set -1"),
    ([M1], {"metrics": [["0", at(0), row(10, 1.0)]]}, r"metrics group 0 must be \[keyset, at, rows\]"),
    ([M1], {"metrics": [[0, at(0)]]}, r"metrics group 0 must be \[keyset, at, rows\]"),
    ([M1], {"metrics": [[0, [0], [10, 1.0, 1.0]]]}, r"metrics group 0 must be \[keyset, at, rows\]"),
    ([M1], {"metrics": [[True, at(0), row(10, 1.0)]]}, r"metrics group 0 must be \[keyset, at, rows\]"),
    ([M1], {"metrics": ["group"]}, r"metrics group 0 must be"),
    ([M1], {"metrics": [[0, at(0), row(-1, 1.0)]]}, r"record step must be an int >= 0, got -1"),
    ([M1, M1], {"metrics": [[0, at(1, 0), row(10, 1.0) + row(11, 2.0)]]}, r"record offsets must increase"),
    ([M1, M1], {"metrics": [[0, at(0, 0), row(10, 1.0) + row(11, 2.0)]]}, r"record offsets must increase"),
    ([M1], {"metrics": [[0, at(7), row(10, 1.0)]]}, r"records must be numbered 0\.\.0, each once"),
    ([M1], {"metrics": [[0, at(2 ** 32 - 1), row(10, 1.0)]]}, r"records must be numbered 0\.\.0, each once"),
    ([M1, M1], {"metrics": [[0, at(0), row(10, 1.0)], [0, at(0), row(11, 1.0)]]},
     r"records must be numbered 0\.\.1, each once"),
    ([M1, ROLLOUT], {"others": [[0, *ROLLOUT]]}, r"records must be numbered 0\.\.1, each once"),
    ([M1], {"n": 3}, r"batch of 3 records holds 1"),
    ([M1, ROLLOUT], {"n": 1}, r"batch of 1 records holds 2"),
    ([M1, ROLLOUT, ROLLOUT], {"others": [[2, *ROLLOUT], [1, *ROLLOUT]]}, r"others must be in batch order"),
    ([M1, ROLLOUT], {"others": [[1, 7, 10, 1.0, "x"]]}, r"record kind 7 is not known \(1: rollouts, 2: checkpoint\)"),
    ([M1, ROLLOUT], {"others": [[1, 1, 10, 1.0]]},
     r"a record in 'others' must be \[at, kind, step, wall_time, payload\]"),
    ([M1, ROLLOUT], {"others": ["rec"]}, r"a record in 'others' must be"),
    ([M1, ROLLOUT], {"others": [[-1, *ROLLOUT]]}, r"record offset must be an int >= 0, got -1"),
    ([M1, ROLLOUT], {"others": [[1.0, *ROLLOUT]]}, r"record offset must be an int >= 0, got 1.0"),
    ([ROLLOUT], {"others": [[0, 1, -1, 1.0, []]]}, r"record step must be an int >= 0 and wall_time a float"),
    ([ROLLOUT], {"others": [[0, 1, 1.5, 1.0, []]]}, r"record step must be an int >= 0"),
    ([ROLLOUT], {"others": [[0, 1, True, 1.0, []]]}, r"record step must be an int >= 0"),
    ([ROLLOUT], {"others": [[0, 1, 10, 1, []]]}, r"wall_time a float"),
    ([ROLLOUT], {"others": [[0, 1, 10, None, []]]}, r"wall_time a float"),
    ([[2, 10, 1.0, 5]], {}, r"a checkpoint path must be a string of at most 4096 characters"),
    ([[2, 10, 1.0, "x" * 4097]], {}, r"a checkpoint path must be a string of at most 4096 characters"),
    ([[0, 10, 1.0, {"": 1.0}]], {}, r"metric name must be 1 to 250 characters"),
    ([[0, 10, 1.0, {"lo\x1bss": 1.0}]], {}, r"metric name 'lo\\x1bss' contains control character U\+001B"),
    ([[0, 10, 1.0, {"x" * 251: 1.0}]], {}, r"metric name must be 1 to 250 characters, got 251"),
    ([[1, 10, 1.0, [{"p": {"nested": 1}}]]], {}, r"rollout row 0 field 'p' has unsupported type dict"),
    ([[1, 10, 1.0, ["row"]]], {}, r"rollout row 0 must be a dict, got str"),
    ([[1, 10, 1.0, [{"p": b"x"}]]], {}, r"rollout row 0 field 'p' has unsupported type bytes"),
    ([M1, [1, 11, 1.0, [{"p": [1]}]]], {}, r"rollout row 0 field 'p'"),
    ([[1, 10, 1.0, [{"prompt": [{"role": "user", "content": {"deep": 1}}]}]]], {},
     r"rollout row 0 field 'prompt' message 0 field 'content' must be text, null or a list of parts"),
])
def test_wire_bad_batches_for_a_stored_run_get_err_and_store_nothing(wire, records, fields, why):
    proc, peer, _ = wire
    seq = stored_seq(proc.data, SEED) + 1  # the next expected seq: the records really are validated
    reply = peer.ask(rec(seq, *records, **fields))
    assert reply is not None and reply["t"] == "err", reply
    assert re.search(why, reply["msg"]), reply["msg"]
    assert stored_seq(proc.data, SEED) == seq - 1


@pytest.mark.parametrize("keys, why", [
    ([["a", "a"]], r"key set must be a list of distinct metric names"),
    (["a"], r"key set must be a list of distinct metric names"),
    ([[1]], r"metric name must be a string, not int"),
    ({"a": 1}, r"needs keys of type list"),
])
def test_wire_bad_key_table_gets_err_and_stores_nothing(wire, keys, why):
    proc, peer, _ = wire
    seq = stored_seq(proc.data, SEED) + 1
    msg = rec(seq, M1, keys=keys)
    reply = peer.ask(msg)
    assert reply is not None and reply["t"] == "err" and re.search(why, reply["msg"]), reply
    assert stored_seq(proc.data, SEED) == seq - 1


@pytest.mark.parametrize("msg", [
    rec(1, [0, 0, 1.0, {"x": 1.0}], run="ghost1"),
    {"t": "hb", "run": "ghost1", "rank": 0, "step": 3},
    {"t": "finish", "run": "ghost1", "rank": 0, "seq": 1},
], ids=["rec", "hb", "finish"])
def test_wire_messages_for_an_unknown_run_get_nack_and_store_nothing(wire, msg):
    proc, peer, _ = wire
    reply = peer.ask(msg)
    assert reply is not None and reply["t"] == "nack" and reply["reason"] == "hello", reply
    assert reply["run"] == "ghost1"
    with proc.client() as c:
        assert all(r["id"] != "ghost1" for r in c.runs())


def test_wire_records_from_a_process_that_never_opened_the_run_change_nothing(wire):
    """Records for a stored run from a session that sent no hello: asked to open the run first."""
    _, peer, _ = wire
    for seq in (1, 99):
        reply = peer.ask(rec(seq, [0, 0, 1.0, {"loss": 123.0}]))
        assert reply == {"t": "nack", "run": SEED, "rank": 0, "reason": "hello", "expect": 1}


def test_wire_bad_then_good_in_one_burst(wire_agent, tmp_path):
    """A burst of bad frames does not get in the way of a good trainer's data sent right after."""
    with RawPeer(wire_agent.url) as peer:
        for frame in (b"\xc1", msgpack.packb([1]), msgpack.packb({"t": "x"}), msgpack.packb({"t": "hb", "run": SEED})):
            peer.send(frame)
        run = ph.init("wire", "after-burst", agent=wire_agent.url, heartbeat=3600)
        for s in range(100):
            run.log({"x": float(s)}, step=s)
        assert run.finish(timeout=10)
        replies = [peer.reply() for _ in range(4)]
    assert all(r is not None and r["t"] == "err" for r in replies), replies
    steps, vals, _ = series(wire_agent, run.id, "x")
    assert steps.tolist() == list(range(100)) and vals.tolist() == [float(s) for s in range(100)]


def test_wire_oversized_frame_drops_the_connection_and_the_agent_serves_others(wire):
    proc, peer, _ = wire
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    try:
        as_owner(sock)
        sock.connect(proc.url)
        sock.send(b"\x80" * (MAX_INBOUND_BYTES + 1))
        assert monitor.poll(10_000), "the agent did not drop a connection that sent a frame over its bound"
        assert recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED
        assert not sock.poll(300, zmq.POLLIN), "the oversized frame got an answer"
    finally:
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close(linger=0)
    info = assert_serving(proc)
    assert peer.ask(b"\xc1")["t"] == "err"  # another raw peer is served too
    assert proc.proc.poll() is None and info["head"] >= 1


# --- wire bugs: each one is a single frame any local process can send ---------------------

@pytest.mark.parametrize("records, fields", [
    ([M1], {"metrics": [[0, at(0), struct.pack("<Qdd", 2 ** 63, 1.0, 1.0)]]}),  # int64 bits of a negative step
    ([ROLLOUT], {"others": [[0, 1, 2 ** 63, 1.0, []]]}),
], ids=["metrics", "rollouts"])
def test_wire_record_step_beyond_int64_gets_err(wire, records, fields):
    proc, peer, _ = wire
    reply = peer.ask(rec(stored_seq(proc.data, SEED) + 1, *records, **fields), timeout=1.0)
    assert reply is not None and reply["t"] == "err" and "record step must be an int >= 0" in reply["msg"], reply


@pytest.mark.parametrize("msg", [
    {**HELLO, "run": "big1", "pid": 2 ** 63},
    {**HELLO, "run": "big2", "created": [1.0]},
    {**HELLO, "run": "big3", "pid_started": {"at": 1.0}},
    rec(1, [0, 0, 1.0, {"x": 1.0}]) | {"rank": 2 ** 63},
    rec(2 ** 63 - 1, [0, 0, 1.0, {"x": 1.0}], [0, 1, 1.0, {"x": 2.0}]) | {"rank": 3},
], ids=["hello-pid", "hello-created-list", "hello-pid_started-map", "rec-rank", "rec-last-seq"])
def test_wire_unstorable_field_gets_err(wire, msg):
    _, peer, _ = wire
    reply = peer.ask(msg, timeout=1.0)
    assert reply is not None and reply["t"] == "err", reply


def test_no_process_builds_a_message_outside_the_closed_sets():
    from pilothouse.wire.messages import INBOUND, OUTBOUND, message

    assert message("ack", run="r", rank=0, seq=3) == {"t": "ack", "run": "r", "rank": 0, "seq": 3}
    assert not set(INBOUND) & OUTBOUND  # a type means one direction
    with pytest.raises(ValueError, match="unknown message type 'bogus'"):
        message("bogus", x=1)


def test_a_name_not_in_nfc_is_refused_on_the_wire(wire):
    _, peer, _ = wire
    reply = peer.ask(hello("nfdrun1", session="n1") | {"name": "caf\u0065\u0301"})
    assert reply["t"] == "err" and "not in Unicode NFC" in reply["msg"]

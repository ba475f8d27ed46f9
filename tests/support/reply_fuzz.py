"""Hypothesis strategies for what a fuzzing fake agent sends the app, and ``build``, which makes the
frame of a drawn item: raw bytes, random msgpack, and replies shaped like the protocol's
(``r``/``err``/``data``/``welcome``/``ack``...) with wrong field types, out-of-range and negative
cursors, entries of the wrong arity, NaN, deep nesting and long strings.  test_fuzz_link.py answers
the app's client and link with them; test_fuzz_agent_memory.py sends their frames to an agent.

Integers that could stand as a cursor or an entry id are drawn either invalid (negative,
above int64) or below ``HONEST_BASE``: a protocol-valid but wrong cursor cannot be told from a
real one, and the honest journal served after the fuzz starts above that range.
"""

from __future__ import annotations

import msgpack
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

SETTINGS = settings(deadline=None, database=None, derandomize=True, print_blob=True,
                    phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))

HONEST_BASE = 10 ** 7  # honest journal ids served after a fuzz start above every valid fuzzed id
HONEST_RUN = "honestrun"  # the honest journal's run: never drawn as a fuzzed run id
JOURNAL = "fakejournal-0001"  # the fake agent's journal id

# --- strategies ------------------------------------------------------------------------------

# invalid as a cursor (negative, above int64) or below HONEST_BASE; see the module docstring
INTS = st.one_of(st.integers(-(2 ** 63), -1), st.integers(0, 10 ** 6), st.integers(2 ** 63, 2 ** 64 - 1))
LONG = st.sampled_from(["x" * 70_000, "\u00e9" * 300_000, "\x1b[2J" * 1000])
ANY = st.recursive(
    st.none() | st.booleans() | INTS | st.floats() | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
).filter(lambda v: v != HONEST_RUN)
NESTED = st.integers(20, 500).map(lambda d: _nest(d))  # packb refuses deeper; ``deep`` frames go further
WEIRD = st.one_of(ANY, LONG, NESTED, st.just(float("nan")), st.just(float("inf")))
ECHO = "\x00echo"  # a reply's id: replaced by the id of the request it answers


def _nest(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def _blob(draw_bytes: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(draw_bytes, st.binary(max_size=7), st.just(b""), WEIRD)


ENTRY_TYPED = st.tuples(
    INTS, st.one_of(st.sampled_from(["fz", "sys-x"]), st.text(max_size=8), LONG, ANY).filter(lambda r: r != HONEST_RUN),
    st.one_of(st.sampled_from(["m", "r", "e"]), ANY), st.one_of(st.sampled_from(["loss", ""]), ANY),
    st.one_of(INTS, ANY), st.one_of(st.integers(0, 4), INTS, ANY),
    _blob(st.binary(min_size=8, max_size=32)), _blob(st.binary(min_size=8, max_size=32)),
    _blob(st.binary(min_size=8, max_size=32)), st.one_of(st.none(), st.binary(max_size=16), ANY)).map(list)
ENTRY = st.one_of(ENTRY_TYPED, st.lists(ANY, max_size=12), ANY)  # right arity, wrong arity, not a list
ENTRIES = st.one_of(st.lists(ENTRY, max_size=4), ANY)
CURSOR = st.one_of(INTS, st.floats(), st.text(max_size=5), st.none(), ANY)


def _with_holes(d: dict) -> st.SearchStrategy:
    """Every key kept or dropped, so missing fields are fuzzed too (``t`` always stays)."""
    keys = [k for k in d if k != "t"]
    return st.lists(st.sampled_from(keys), unique=True, max_size=len(keys)).map(
        lambda drop: {k: v for k, v in d.items() if k not in drop}) if keys else st.just(d)


def shaped(t: str, **fields: st.SearchStrategy) -> st.SearchStrategy:
    return st.fixed_dictionaries({"t": st.just(t), **fields}).flatmap(_with_holes)


RUN_DICT = st.one_of(
    st.fixed_dictionaries(
        {"id": st.one_of(st.text(min_size=1, max_size=8), LONG, ANY).filter(lambda r: r != HONEST_RUN)},
        optional={k: WEIRD for k in ("project", "name", "kind", "status", "host", "last_step", "created")}),
    ANY)
PING_DATA = st.fixed_dictionaries({}, optional={"journal": st.one_of(st.just(JOURNAL), st.text(max_size=20), LONG, ANY),
                                                "head": CURSOR, "host": WEIRD, "pid": WEIRD})
READ_DATA = st.fixed_dictionaries({}, optional={"entries": ENTRIES, "cursor": CURSOR})
ANSWER_ID = st.one_of(st.just(ECHO), st.just(ECHO), st.just(ECHO), st.none(), ANY)
SHAPED_REPLY = st.one_of(
    shaped("r", id=ANSWER_ID, data=st.one_of(PING_DATA, st.lists(RUN_DICT, max_size=3), READ_DATA, WEIRD)),
    shaped("err", id=ANSWER_ID, msg=WEIRD),
    shaped("data", cursor=CURSOR, entries=ENTRIES),
    shaped("welcome", run=WEIRD, rank=WEIRD, seq=CURSOR),
    shaped("ack", run=WEIRD, rank=WEIRD, seq=CURSOR),
    st.builds(lambda t, body: {**body, "t": t}, st.sampled_from(["nack", "finished", "r", "data", "", "zzz"]),
              st.dictionaries(st.text(max_size=6), WEIRD, max_size=4)),
)
ANSWER = st.one_of(  # a reply that answers the request it gets: the client must check what is inside
    st.fixed_dictionaries({"t": st.just("r"), "id": st.just(ECHO)}, optional={
        "data": st.one_of(PING_DATA, st.lists(RUN_DICT, max_size=3), READ_DATA, WEIRD)}),
    st.fixed_dictionaries({"t": st.just("err"), "id": st.sampled_from([ECHO, None])}, optional={"msg": WEIRD}),
).map(lambda o: ("obj", o))
STREAM = shaped("data", cursor=CURSOR, entries=ENTRIES).map(lambda o: ("obj", o))
# ("raw", bytes), ("obj", msgpack-able), ("deep", type, field, depth): built against the request they answer
RAW = st.one_of(st.binary(max_size=512), st.binary(max_size=64).map(lambda b: b"\xdf" + b),
                st.binary(max_size=64).map(lambda b: b"\x82\xa1t\xa4data" + b)).map(lambda b: ("raw", b))
RANDOM_MSGPACK = st.one_of(ANY, st.dictionaries(st.sampled_from(["t", "id", "data", "cursor", "entries"]), ANY,
                                                max_size=4)).map(lambda o: ("obj", o))
DEEP = st.tuples(st.just("deep"), st.sampled_from([("err", "msg"), ("r", "data"), ("data", "entries")]),
                 st.sampled_from([600, 999, 1000, 1023, 1024, 5000]))
GARBAGE = st.one_of(RAW, RANDOM_MSGPACK).filter(  # what the client must simply skip: no reply nor data
    lambda item: not (item[0] == "obj" and isinstance(item[1], dict) and item[1].get("t") in ("r", "err", "data")))
REPLY = st.one_of(RAW, RANDOM_MSGPACK, SHAPED_REPLY.map(lambda o: ("obj", o)), DEEP)


def build(item: tuple, request: dict) -> bytes:
    """The frame for a drawn reply, with ``ECHO`` replaced by the id of ``request``."""
    req_id = request.get("id") if isinstance(request, dict) else None
    if item[0] == "raw":
        return item[1]
    if item[0] == "deep":
        (t, field), depth = item[1], item[2]
        head = {"t": t, **({"id": req_id} if t != "data" else {"cursor": 5})}
        body = b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in head.items())
        return bytes([0x80 | len(head) + 1]) + body + msgpack.packb(field) + b"\x91" * depth + b"\xc0"
    obj = item[1]
    if isinstance(obj, dict) and obj.get("id") == ECHO:
        obj = {**obj, "id": req_id}
    return msgpack.packb(obj, use_bin_type=True)

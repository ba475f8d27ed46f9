"""The agent's memory under fuzz and connection churn: ~35k invalid frames (the strategies of
``support/reply_fuzz.py``: raw bytes, random msgpack, every inbound message type made invalid) and a
thousand connections that subscribe and vanish; the agent's RSS stays under a fixed bound, it keeps
answering, what it stored is unchanged and a trainer afterwards gets every point stored.
"""

from __future__ import annotations

import json
import random
import struct
import time

import msgpack
import numpy as np
import psutil
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st
from support.agent_journal import snapshot
from support.messages import TOKEN
from support.processes import AgentProcess, finish, start_trainer
from support.reply_fuzz import RANDOM_MSGPACK, SETTINGS, WEIRD, build
from support.sockets import as_owner, free_port

import pilothouse as ph
from pilothouse.wire.messages import INBOUND, ProtocolError, decode


def rejected(frame: bytes) -> bool:
    try:
        decode(frame)
    except ProtocolError:
        return True
    return False


def invalid(msg) -> bool:
    return rejected(msgpack.packb(msg, use_bin_type=True))


TEMPLATES = {  # one valid message of each inbound type, for mutation
    "hello": {"t": "hello", "run": "fzmem", "rank": 0, "token": TOKEN, "project": "p", "name": "n", "host": "fuzzhost",
              "pid": 12345, "config": {"lr": 0.1}},
    "rec": {"t": "rec", "run": "fzmem", "rank": 0, "seq": 1, "floor": 0, "n": 1, "keys": [["loss"]],
            "metrics": [[0, b"\x00\x00\x00\x00", struct.pack("<qdd", 1, 1.0, 0.5)]], "others": []},
    "hb": {"t": "hb", "run": "fzmem", "rank": 0},
    "finish": {"t": "finish", "run": "fzmem", "rank": 0, "seq": 1},
    "cack": {"t": "cack", "run": "fzmem", "rank": 0, "cid": "c1", "cmd": "pause", "state": "applied", "step": 1,
             "detail": "", "applied": {}},
    "q": {"t": "q", "id": 1, "op": "ping"},
    "sub": {"t": "sub", "after": 0, "credit": 4},
    "credit": {"t": "credit", "n": 1},
    "unsub": {"t": "unsub"},
}
assert set(TEMPLATES) == set(INBOUND)


@st.composite
def invalid_message(draw) -> dict:
    """A valid message of any type with one or two fields replaced by garbage or dropped."""
    msg = dict(TEMPLATES[draw(st.sampled_from(sorted(TEMPLATES)))])
    keys = sorted(k for k in msg if k != "t") or ["t"]
    for key in draw(st.lists(st.sampled_from(keys), min_size=1, max_size=2, unique=True)):
        if draw(st.booleans()) and key != "t":
            del msg[key]
        else:
            msg[key] = draw(st.one_of(WEIRD, st.integers(-(2 ** 63), 2 ** 64 - 1)))
    return msg


AFTER_TRAINER = """
import json
run = ph.init(project="after-fuzz", name=ARGS[0], agent=URL, heartbeat=0.2)
for s in range(int(ARGS[1])):
    run.log({"x": float(s), "z": float("nan") if s % 7 == 0 else s * 1e300})
ok = run.finish(timeout=30)
print(json.dumps({"id": run.id, "ok": ok, **run.stats}), flush=True)
"""


def test_agent_memory_bounded_under_fuzz_and_churn(tmp_path):
    """~35k invalid frames (raw bytes, random msgpack, every message type made invalid) on one
    connection, and 1200 connections that subscribe, send garbage and vanish: the agent's RSS after
    a warm-up grows less than 24 MiB, it answers, the stored run is unchanged, and a trainer started
    afterwards gets every point stored."""
    pool: list[bytes] = []
    types: set = set()

    @settings(SETTINGS, max_examples=400)
    @given(st.one_of(st.binary(max_size=1024).map(lambda b: ("raw", b)), RANDOM_MSGPACK,
                     invalid_message().filter(invalid).map(lambda m: ("obj", m))))
    def collect(item):
        frame = build(item, {})
        if item[0] == "obj" and isinstance(item[1], dict) and isinstance(item[1].get("t"), str):
            types.add(item[1]["t"])
        pool.append(frame)

    collect()
    # every message type is fuzzed, whatever the draw: one broken copy of each is added by hand
    # (an unsub has no fields: only a broken type makes it invalid)
    for kind, template in TEMPLATES.items():
        broken = {**template, "t": kind + "\x00"} if kind == "unsub" else {**template, "run": 3.5, "id": "x",
                                                                              "n": -1, "after": -1}
        assert invalid(broken), kind
        pool.append(msgpack.packb(broken, use_bin_type=True))
        types.add(kind)
    assert set(INBOUND) <= types, types
    proc = AgentProcess(tmp_path / "agent", free_port(), ["--stale-after", "3"]).start()
    try:
        run = ph.init("fuzz", "base", {"lr": 1e-3}, agent=proc.url, id="fuzzbase2", heartbeat=3600)
        for s in range(100):
            run.log({"loss": 1.0 / (s + 1), "odd": [float("nan"), float("-inf"), -0.0, 5e-324][s % 4]}, step=s)
        assert run.finish(timeout=10)
        base = snapshot(proc.data, "fuzzbase2")
        ctx = zmq.Context.instance()
        rng = random.Random(20240601)
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        as_owner(sock)
        sock.connect(proc.url)
        ping_id = iter(range(10 ** 9, 2 * 10 ** 9))

        def sync() -> None:
            """A ping on the fuzz connection: its answer means every frame before it was handled."""
            want = next(ping_id)
            sock.send(msgpack.packb({"t": "q", "id": want, "op": "ping"}))
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if sock.poll(100, zmq.POLLIN):
                    msg = msgpack.unpackb(sock.recv(), raw=False, strict_map_key=False)
                    if msg.get("t") == "r" and msg.get("id") == want:
                        return
                assert proc.proc.poll() is None, "agent died:\n" + proc.log.read_text()[-3000:]
            raise AssertionError("the agent stopped answering:\n" + proc.log.read_text()[-3000:])

        def blast(frames: int, connections: int) -> None:
            for i in range(frames):
                frame = pool[rng.randrange(len(pool))]
                if frame and i % 3 == 0:  # a flipped byte: more variety than the pool
                    j = rng.randrange(len(frame))
                    flipped = frame[:j] + bytes([rng.randrange(256)]) + frame[j + 1:]
                    frame = flipped if rejected(flipped) else frame
                sock.send(frame)
                if i % 500 == 499:
                    sync()
            for k in range(connections):
                churn = ctx.socket(zmq.DEALER)
                churn.setsockopt(zmq.LINGER, 0)
                as_owner(churn)
                churn.connect(proc.url)
                churn.send(msgpack.packb({"t": "sub", "after": rng.randrange(0, 50), "credit": 8,
                                          "kinds": ["m", "e"]}))
                for _ in range(3):
                    churn.send(pool[rng.randrange(len(pool))])
                if k % 2:
                    churn.poll(200, zmq.POLLIN)  # half wait for their first page, half vanish at once
                churn.close(linger=0)
                if k % 100 == 99:
                    sync()
            sync()

        agent_rss = psutil.Process(proc.proc.pid).memory_info
        blast(5_000, 200)  # warm-up
        time.sleep(0.3)
        rss0 = agent_rss().rss
        t0 = time.monotonic()
        blast(30_000, 1_000)
        took = time.monotonic() - t0
        time.sleep(0.3)
        rss1 = agent_rss().rss
        sock.close(linger=0)
        print(f"\nagent under 30000 invalid frames + 1000 churned readers in {took:.1f} s: "
              f"RSS {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB (+{(rss1 - rss0) / 2**20:.1f})")
        assert rss1 - rss0 < 24 * 2 ** 20, "the agent's memory grows under fuzz"
        with proc.client(timeout=10) as c:
            assert c.ping()["bad_frames"] >= 35_000
        n = 300
        stats = json.loads(finish(start_trainer(tmp_path, AFTER_TRAINER, proc.url, "after", str(n))).splitlines()[-1])
        assert stats["ok"] and stats["acked_seq"] == n and stats["dropped_records"] == 0, stats
        with proc.client(timeout=10) as c:
            for metric, want in (("x", [float(s) for s in range(n)]),
                                 ("z", [float("nan") if s % 7 == 0 else s * 1e300 for s in range(n)])):
                steps, vals, _ = c.series(stats["id"], metric)
                assert steps.tolist() == list(range(n)), metric
                assert vals.tobytes() == np.array(want).tobytes(), metric
        assert snapshot(proc.data, "fuzzbase2") == base, "fuzzing changed the stored run"
        assert proc.proc.poll() is None
    finally:
        proc.stop()

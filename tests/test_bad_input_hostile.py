"""Hostile peers: hellos that try to take what is not theirs, frames built to stall or balloon the
agent, floods, and text meant for a terminal or a spreadsheet.  Each is refused alone.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
from support.processes import AgentProcess
from support.sockets import free_port
from support.waiting import wait_until
from support.wire_peer import (
    HELLO,
    RawPeer,
    assert_serving,
    hello,
    rec,
    series,
)

import pilothouse as ph
from pilothouse.wire.messages import MAX_INBOUND_BYTES, MAX_INBOUND_CONTAINERS

NODE = {"host": "node-b", "agent": "tcp://127.0.0.1:7766", "ranks": [2, 3]}


@pytest.mark.parametrize("nodes, why", [
    ([], "1 to 4096 entries"),
    ("node-b", "1 to 4096 entries"),
    ([{**NODE, "extra": 1}], "exactly host, agent and ranks"),
    ([{**NODE, "agent": "http://node-b"}], "node agent: agent URL scheme"),
    ([{**NODE, "host": "node\u202eb"}], "invisible format character"),
    ([NODE, NODE], "listed twice"),
    ([{**NODE, "ranks": [3, 2]}], "ascending, each once"),
    ([{**NODE, "ranks": [-1]}], "rank"),
    ([{**NODE, "ranks": [True]}], "list of integers"),
    ([{**NODE, "ranks": [65536]}], "rank must be an int in [0, 65535]"),
    ([NODE, {**NODE, "host": "node-c"}], "rank 2 is listed on two nodes"),
], ids=["empty", "not-a-list", "extra-key", "bad-url", "bidi-host", "twice", "unsorted", "negative", "bool",
        "rank-too-big", "rank-twice"])
def test_wire_hello_with_bad_job_nodes_is_refused_and_creates_nothing(agent_proc, nodes, why):
    with RawPeer(agent_proc.url) as peer:
        reply = peer.ask({**HELLO, "run": "badjob1", "nodes": nodes})
    assert reply is not None and reply["t"] == "err" and why in reply["msg"], reply
    with agent_proc.client() as c:
        assert not any(r["id"] == "badjob1" for r in c.runs())


def test_wire_hello_of_a_bad_watcher_or_across_kinds_is_refused_and_changes_nothing(agent_proc):
    """A watched run and a trainer's run never take each other's id; 'watched' names what is read."""
    with RawPeer(agent_proc.url) as peer:
        bad = peer.ask({**HELLO, "run": "tbbad1", "watched": "comet"})
        assert peer.ask({**HELLO, "run": "tbok1", "watched": "tensorboard", "session": "tensorboard"})["t"] == "welcome"
        trainer = peer.ask({**HELLO, "run": "tbok1", "pid": 4243, "session": "tensorboard"})
        assert peer.ask({**HELLO, "run": "trained1", "session": "s1"})["t"] == "welcome"
        watcher = peer.ask({**HELLO, "run": "trained1", "watched": "tensorboard", "session": "s1"})
    assert bad["t"] == "err" and "watched must be one of" in bad["msg"], bad
    assert trainer["t"] == "err" and "a trainer cannot take it over" in trainer["msg"], trainer
    assert watcher["t"] == "err" and "a watcher cannot write into it" in watcher["msg"], watcher
    with agent_proc.client() as c:
        runs = {r["id"]: r for r in c.runs()}
    assert "tbbad1" not in runs and runs["tbok1"]["kind"] == "watched" and runs["trained1"]["kind"] == "train"
    assert runs["tbok1"]["attempts"] == runs["trained1"]["attempts"] == 1


def test_wire_hello_config_with_bytes_key_is_rejected(agent_proc):
    with RawPeer(agent_proc.url) as peer:
        reply = peer.ask({**HELLO, "run": "cfgkey1", "config": {b"lr": 0.1}})
    with agent_proc.client() as c:
        created = any(r["id"] == "cfgkey1" for r in c.runs())
    assert reply is not None and reply["t"] == "err" and "config" in reply["msg"], reply
    assert not created


def test_wire_hello_with_bad_pid_does_not_kill_the_agent(agent_proc):
    host = assert_serving(agent_proc)["host"]
    with RawPeer(agent_proc.url) as peer:
        a = peer.ask({**HELLO, "run": "negpid1", "host": host, "pid": -1})
        b = peer.ask({**HELLO, "run": "strstart1", "host": host, "pid": os.getpid(), "pid_started": "yesterday"})
    # Either the hellos are refused, or the agent lives on through the stale check (--stale-after 3).
    if a["t"] == "err" and b["t"] == "err":
        return
    time.sleep(5.0)
    assert agent_proc.proc.poll() is None, "agent died:\n" + agent_proc.log.read_text()[-2000:]
    assert_serving(agent_proc)


def test_wire_hello_cannot_take_over_the_system_run(agent_proc):
    with agent_proc.client() as c:
        sys_run = next(r for r in c.runs() if r["kind"] == "system")
    with RawPeer(agent_proc.url) as peer:
        reply = peer.ask({**HELLO, "run": sys_run["id"], "pid": 4242})
    with agent_proc.client() as c:
        after = next(r for r in c.runs() if r["id"] == sys_run["id"])
    assert (after["host"], after["pid"]) == (sys_run["host"], sys_run["pid"])
    assert reply is not None and reply["t"] == "err", reply


# --- hostile frames are refused alone: no stall, no rollback of anyone else's work ------------------

def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_a_deep_hello_in_the_middle_of_a_burst_is_refused_alone(tmp_path):
    """A 600-deep config list used to raise RecursionError outside validation and roll back the
    whole turn, other trainers' batches included: now only it is refused."""
    proc = AgentProcess(tmp_path / "agent", free_port()).start()
    peer = RawPeer(proc.url)
    try:
        assert peer.ask(hello("goodrun1"))["t"] == "welcome"
        steps = [[0, s, 1.0 + s, {"loss": float(s)}] for s in range(50)]
        burst = [{**rec(1, *steps[:25], run="goodrun1"), "floor": 1},
                 hello("deeprun1", config={"layers": _nested(600)}),
                 {**rec(26, *steps[25:], run="goodrun1"), "floor": 1}]
        for msg in burst:  # back to back: one turn of the agent sees all three
            peer.send(msg)
        replies = [peer.reply(5) for _ in range(3)]
        errs = [r for r in replies if r and r["t"] == "err"]
        assert len(errs) == 1 and "nests deeper than" in errs[0]["msg"]
        with proc.client() as client:
            wait_until(lambda: len(client.series("goodrun1", "loss")[0]) == 50, what="both good batches stored")
            assert all(r["id"] != "deeprun1" for r in client.runs())
        assert "Traceback" not in proc.log.read_text()
    finally:
        peer.close()
        proc.stop()


@pytest.fixture
def victim(tmp_path):
    """A fresh agent, a trainer run logging to it, and a raw peer to send it hostile frames."""
    proc = AgentProcess(tmp_path / "agent", free_port()).start()
    run = ph.init(project="hostile", name="victim", agent=proc.url, heartbeat=0.2)
    peer = RawPeer(proc.url)
    yield proc, run, peer
    run.finish()
    peer.close()
    proc.stop()


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc")


def _just_under(build, fill: int) -> bytes:
    """The largest frame ``build(n)`` makes below the agent's frame bound (n items of ``fill`` bytes)."""
    frame = build((MAX_INBOUND_BYTES - 1024) // fill)
    assert len(frame) <= MAX_INBOUND_BYTES
    return frame


def test_frames_full_of_tiny_objects_cannot_balloon_the_agent(victim):
    """A 60 MB frame of empty maps took the agent from 53 MB to 4.4 GB.  Now the frame is bounded and
    decoding stops at the first map or list past MAX_INBOUND_CONTAINERS: eight frames just under the
    bound, of each kind of tiny object, leave the agent's peak RSS far below that, and a trainer
    logging meanwhile keeps every point."""
    proc, run, peer = victim
    run.log({"loss": 0.0}, step=0)
    assert run.flush(10)
    base = _peak_rss_mb(proc.proc.pid)
    frames = {
        "empty maps": _just_under(lambda n: msgpack.packb({"t": "hb", "x": [{}] * n}), 1),
        "nested lists": _just_under(lambda n: msgpack.packb({"t": "rec", "x": [[[]] * 1000] * (n // 1003)}), 1),
        "two-char strings": _just_under(lambda n: msgpack.packb({"t": "rec", "run": "victim", "x": ["ab"] * n}),
                                        3),
        "uint16s": _just_under(lambda n: msgpack.packb({"t": "rec", "x": [40_000] * n}), 3),
    }
    for kind, frame in frames.items():
        for _ in range(2):
            reply = peer.ask(frame, timeout=20)
            assert reply is not None and reply["t"] == "err", (kind, reply)
        if kind in ("empty maps", "nested lists"):
            assert f"more than {MAX_INBOUND_CONTAINERS} maps and lists" in reply["msg"]
    for s in range(1, 101):
        run.log({"loss": float(s)}, step=s)
    assert run.flush(20)
    peak = _peak_rss_mb(proc.proc.pid)
    print(f"agent peak RSS {base:.0f} MB before, {peak:.0f} MB after 8 hostile frames")
    assert peak - base < 32 * MAX_INBOUND_BYTES / 2 ** 20, (base, peak)  # the frame, its copy, ~20x decoded
    assert series(proc, run.id, "loss")[0].tolist() == list(range(101))
    assert "Traceback" not in proc.log.read_text()


def test_a_flood_of_hostile_frames_is_logged_in_lines_not_tracebacks(victim):
    """200 deep hellos: the agent keeps ingesting a trainer, and its log grows by lines, not 180 KB
    of traceback each."""
    proc, run, peer = victim
    size_before = proc.log.stat().st_size
    for i in range(200):
        peer.send(hello(f"flood{i}", config={"x": _nested(700)}))
        run.log({"loss": float(i)}, step=i)
    assert run.flush(20)
    assert len(series(proc, run.id, "loss")[0]) == 200
    grown = proc.log.stat().st_size - size_before
    assert grown < 20_000, proc.log.read_text()[-2000:]
    assert "Traceback" not in proc.log.read_text()


# --- what reaches a terminal, a spreadsheet or a name is safe ----------------------------------------

def test_a_trainers_text_never_drives_the_terminal(tmp_path, agent_proc):
    """A trainer's acknowledgement with ESC [2J (clear screen) and an OSC title: `set` and
    `events` print it escaped."""
    import subprocess

    from support.processes import run_cli

    peer = RawPeer(agent_proc.url)
    try:
        assert peer.ask(hello("escrun1", session="s1", config={"lr": 0.1},
                               schema={"lr": {"type": "float"}}))["t"] == "welcome"
        cli = subprocess.Popen([sys.executable, "-m", "pilothouse", "set", "escrun1", "lr=0.5", "--agent",
                                agent_proc.url, "--timeout", "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        cmd = None
        deadline = time.monotonic() + 15
        while cmd is None and time.monotonic() < deadline:
            peer.send({"t": "hb", "run": "escrun1", "rank": 0, "session": "s1", "step": 3})
            msg = peer.reply(0.5)
            cmd = msg if msg and msg.get("t") == "cmd" else None
        assert cmd is not None, "the command never reached the trainer"
        peer.send({"t": "cack", "run": "escrun1", "rank": 0, "session": "s1", "cid": cmd["cid"], "cmd": "set",
                   "state": "applied", "step": 3, "detail": "lr=0.5 \x1b[2J\x1b]0;pwned\x07 applied",
                   "applied": {"lr": 0.5}})
        out, err = cli.communicate(timeout=30)
        assert cli.returncode == 0, err
        assert "\x1b" not in out and "\x07" not in out and "\\x1b[2J" in out
        events = run_cli("events", "escrun1", "--agent", agent_proc.url)
        assert "\x1b" not in events.stdout and "\\x1b]0;pwned\\x07" in events.stdout
    finally:
        peer.close()


def test_a_metric_name_is_text_in_a_spreadsheet(tmp_path, agent_proc):
    import csv

    from support.processes import run_cli

    run = ph.init(project="csv", name="formula", agent=agent_proc.url)
    run.log({"=cmd|' /C calc'!A0": 1.0, "+1": 2.0, "-x": 3.0, "@sum": 4.0, "loss": 5.0}, step=0)
    assert run.finish()
    out = run_cli("export", run.id, "--agent", agent_proc.url, "-o", str(tmp_path / "run.csv"))
    assert out.returncode == 0, out.stderr
    cells = {row["metric"]: row["value"] for row in csv.DictReader((tmp_path / "run.csv").open())}
    assert cells == {"'=cmd|' /C calc'!A0": "1.0", "'+1": "2.0", "'-x": "3.0", "'@sum": "4.0", "loss": "5.0"}


@pytest.mark.parametrize("args, message", [
    (["set", "someone", "n=99999999999999999999"], "does not fit in a 64-bit integer"),
    (["set", "someone", "n=9223372036854775808"], "does not fit in a 64-bit integer"),
    (["set", "someone", "lr=0.1", "--at-step", "99999999999999999999"], "a step must be an int in"),
    (["set", "someone", "lr=0.1", "--at-step", "-1"], "a step must be an int in"),
])
def test_out_of_range_integers_are_one_line_errors(args, message):
    from support.processes import run_cli

    out = run_cli(*args, "--agent", f"tcp://127.0.0.1:{free_port()}")
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_an_int64_overflow_is_refused_on_the_wire_too(agent_proc):
    with RawPeer(agent_proc.url) as peer:
        _overflow(peer)


def _overflow(peer: RawPeer) -> None:
    assert peer.ask(hello("bigint1", session="b1", config={"n": 1}, schema={"n": {"type": "int"}}))["t"] == "welcome"
    reply = peer.ask({"t": "q", "id": 3, "op": "command", "args": {"cid": "big-1", "run": "bigint1", "cmd": "set",
                                                                  "values": {"n": 2 ** 63}, "who": {}}})
    assert reply["t"] == "r" and reply["data"]["state"] == "rejected"
    assert "does not fit in a 64-bit integer" in reply["data"]["detail"]

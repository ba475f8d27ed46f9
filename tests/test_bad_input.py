"""Bad input, from the trainer API and from raw sockets: a clear error, the agent keeps serving,
and nothing already stored changes.

Real components only: agents are real ``pilothouse agent`` subprocesses, trainers talk to them
over real ZeroMQ sockets on loopback, and stored data is read back from the agent's SQLite file.
"""

from __future__ import annotations

import os
import random
import re
import sqlite3
import struct
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import zmq
from conftest import TOKEN, AgentProcess, as_owner, batch_fields, free_port, wait_until
from zmq.utils.monitor import recv_monitor_message

import pilothouse as ph
from pilothouse.trainer.run import Run
from pilothouse.wire.messages import MAX_HELLO_BYTES, MAX_INBOUND_BYTES, MAX_INBOUND_CONTAINERS

torch = pytest.importorskip("torch")


# --- helpers ---------------------------------------------------------------------------------

def snapshot(data_dir: Path) -> dict[str, list]:
    """Every stored row of the training runs (the agent's own system-sample runs excluded)."""
    con = sqlite3.connect(data_dir / "journal.sqlite", timeout=10)
    try:
        train = [r[0] for r in con.execute("SELECT id FROM runs WHERE kind='train' ORDER BY id")]
        marks = ",".join("?" * len(train))
        return {
            "runs": con.execute(f"SELECT * FROM runs WHERE id IN ({marks}) ORDER BY id", train).fetchall(),
            "journal": con.execute(f"SELECT * FROM journal WHERE run IN ({marks}) ORDER BY id", train).fetchall(),
            "streams": con.execute(f"SELECT * FROM streams WHERE run IN ({marks}) ORDER BY run, rank",
                                   train).fetchall(),
        }
    finally:
        con.close()


def stored_seq(data_dir: Path, run_id: str, rank: int = 0) -> int:
    con = sqlite3.connect(data_dir / "journal.sqlite", timeout=10)
    try:
        row = con.execute("SELECT max_seq FROM streams WHERE run=? AND rank=?", [run_id, rank]).fetchone()
        return row[0] if row else 0
    finally:
        con.close()


class RawPeer:
    """A bare DEALER socket that speaks (or mis-speaks) the wire protocol."""

    def __init__(self, url: str):
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        as_owner(self.sock)
        self.sock.connect(url)

    def send(self, msg: Any) -> None:
        self.sock.send(msg if isinstance(msg, bytes) else msgpack.packb(msg, use_bin_type=True))

    def reply(self, timeout: float = 3.0) -> dict | None:
        if not self.sock.poll(int(timeout * 1000), zmq.POLLIN):
            return None
        return msgpack.unpackb(self.sock.recv(), raw=False)

    def ask(self, msg: Any, timeout: float = 3.0) -> dict | None:
        self.send(msg)
        return self.reply(timeout)

    def close(self) -> None:
        self.sock.close(linger=0)

    def __enter__(self) -> RawPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def assert_serving(proc: AgentProcess) -> dict:
    assert proc.proc is not None and proc.proc.poll() is None, "agent process died:\n" + proc.log.read_text()
    with proc.client(timeout=5) as c:
        return c.ping()


def expect_rejected(call, exc: type | tuple, match: str) -> None:
    """``call()`` must raise ``exc`` with a message matching ``match``; a Run it wrongly returns is closed."""
    try:
        result = call()
    except exc as e:
        assert re.search(match, str(e)), f"unclear message: {e!r} (wanted /{match}/)"
        return
    if isinstance(result, Run):
        result.finish(timeout=0.2)
    pytest.fail(f"accepted (wanted {exc} /{match}/)")


def bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).view(np.uint64)


HELLO = {"t": "hello", "rank": 0, "token": TOKEN, "project": "wire", "name": "raw", "config": {}, "host": "elsewhere",
         "pid": 1}


# --- fixtures --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def api_agent(tmp_path_factory):
    """One agent for the trainer-API tests; every test uses its own run and finishes it."""
    proc = AgentProcess(tmp_path_factory.mktemp("api") / "agent", free_port(), ["--stale-after", "3"]).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def wire_agent(tmp_path_factory):
    """One agent for raw-wire tests, seeded with a finished training run (rank 0) worth protecting."""
    proc = AgentProcess(tmp_path_factory.mktemp("wire") / "agent", free_port(), ["--stale-after", "3"]).start()
    run = ph.init("seed", "seed-run", {"lr": 0.1}, agent=proc.url, id="seedrun1", heartbeat=3600)
    for s, v in enumerate([0.5, float("nan"), float("inf"), -0.0, 1e308]):
        run.log({"loss": v, "acc": s / 10}, step=s)
    run.log_rollouts(4, [{"prompt": "2+2", "completion": "4", "reward": 1.0}])
    assert run.finish(timeout=10)
    with proc.client() as c:
        wait_until(lambda: next(r for r in c.runs() if r["id"] == "seedrun1")["status"] == "finished",
                   what="seed run finished")
    time.sleep(0.2)  # let any straggling trainer frame land before tests take snapshots
    yield proc
    proc.stop()


@pytest.fixture
def wire(wire_agent):
    """(agent, raw peer, snapshot before); afterwards: the agent serves and stored data is unchanged."""
    before = snapshot(wire_agent.data)
    with RawPeer(wire_agent.url) as peer:
        yield wire_agent, peer, before
    assert_serving(wire_agent)
    assert snapshot(wire_agent.data) == before, "bad input changed stored training data"


# =============================================================================================
# 1. Trainer-side API
# =============================================================================================

BAD_NAMES = [
    pytest.param("a\x00b", r"control character U\+0000", id="nul"),
    pytest.param("tab\there", r"control character U\+0009", id="tab"),
    pytest.param("two\nlines", r"control character U\+000A", id="newline"),
    pytest.param("\x1b[31mred", r"control character U\+001B", id="ansi-escape"),
    pytest.param("del\x7f", r"control character U\+007F", id="del"),
    pytest.param("nel\x85", r"control character U\+0085", id="c1-nel"),
    pytest.param("half\ud800", r"control character U\+D800", id="lone-surrogate"),
    pytest.param("x" * 251, r"1 to 250 characters, got 251", id="251-chars"),
    pytest.param(123, r"must be a string, not int", id="int"),
    pytest.param(b"proj", r"must be a string, not bytes", id="bytes"),
    pytest.param(["p"], r"must be a string, not list", id="list"),
]


@pytest.mark.parametrize("bad, why", [*BAD_NAMES,
                                      pytest.param("", r"1 to 250 characters, got 0", id="empty"),
                                      pytest.param(None, r"must be a string, not NoneType", id="none")])
def test_init_rejects_bad_project(api_agent, bad, why):
    expect_rejected(lambda: ph.init(bad, "ok", agent=api_agent.url), (ValueError, TypeError),
                    rf"^project .*{why}|^project {why}")


@pytest.mark.parametrize("bad, why", BAD_NAMES)
def test_init_rejects_bad_run_name(api_agent, bad, why):
    expect_rejected(lambda: ph.init("proj", bad, agent=api_agent.url), (ValueError, TypeError),
                    rf"^run name .*{why}|^run name {why}")


@pytest.mark.parametrize("bad", ["", 0, False], ids=["empty", "zero", "false"])
def test_init_rejects_falsy_run_name(api_agent, bad):
    expect_rejected(lambda: ph.init("proj", bad, agent=api_agent.url), (ValueError, TypeError), r"run name")


def test_init_accepts_names_at_the_limit(api_agent):
    name = "n" * 250
    run = ph.init("é" * 250, name, agent=api_agent.url, heartbeat=3600)
    run.log({"x": 1.0})
    assert run.finish(timeout=10)
    with api_agent.client() as c:
        row = next(r for r in c.runs() if r["id"] == run.id)
    assert (row["project"], row["name"]) == ("é" * 250, name)


@pytest.mark.parametrize("config, why", [
    ({1: "a"}, r"config keys must be strings"),
    ({"a": object()}, r"config\.a has type object"),
    ({"opt": {"betas": {1, 2}}}, r"config\.opt\.betas has type set"),
    ({"layers": [1, b"x"]}, r"config\.layers\._ has type bytes|config\.layers"),
], ids=["int-key", "object", "nested-set", "bytes-in-list"])
def test_init_rejects_bad_config(api_agent, config, why):
    expect_rejected(lambda: ph.init("proj", "cfg", config, agent=api_agent.url), TypeError, why)


@pytest.mark.parametrize("url", ["http://127.0.0.1:7766", "tcp://127.0.0.1", "tcp://127.0.0.1:99999",
                                 "127.0.0.1:7766"])
def test_init_rejects_bad_agent_url(url):
    expect_rejected(lambda: ph.init("proj", "u", agent=url), ValueError, r"agent URL|URL")


@pytest.mark.parametrize("bad", ["has space", "semi;colon", "-leading-dash", "x" * 65, "ünï"])
def test_init_rejects_bad_run_id(api_agent, bad):
    expect_rejected(lambda: ph.init("proj", "n", agent=api_agent.url, id=bad), ValueError, r"run id")


@pytest.mark.parametrize("bad", ["0", True, 1.5])
def test_init_rejects_bad_rank(api_agent, bad):
    expect_rejected(lambda: ph.init("proj", "n", agent=api_agent.url, rank=bad), (TypeError, ValueError),
                    r"rank")


@pytest.mark.parametrize("bad", [-1, 0])
def test_init_rejects_non_positive_buffer(api_agent, bad):
    expect_rejected(lambda: ph.init("proj", "n", agent=api_agent.url, buffer_mb=bad), ValueError, r"buffer")


@pytest.fixture
def api_run(api_agent, request):
    run = ph.init("api", request.node.name[:200], agent=api_agent.url, heartbeat=3600)
    yield run
    run.finish(timeout=1)


def series(proc: AgentProcess, run_id: str, metric: str):
    with proc.client() as c:
        return c.series(run_id, metric)


BAD_VALUES = [
    pytest.param("1.5", "str", id="str"),
    pytest.param(None, "NoneType", id="none"),
    pytest.param([1.0], "list", id="list"),
    pytest.param({"v": 1.0}, "dict", id="dict"),
    pytest.param(b"1.5", "bytes", id="bytes"),
    pytest.param(np.str_("2"), "str_", id="numpy-str"),
    pytest.param(1 + 2j, "complex", id="complex"),
    pytest.param(object(), "object", id="object"),
]


@pytest.mark.parametrize("bad, tname", BAD_VALUES)
def test_log_rejects_non_numeric_value_and_logs_nothing(api_agent, api_run, bad, tname):
    api_run.log({"loss": 1.0, "acc": 0.5}, step=0)
    with pytest.raises(TypeError, match=rf"metric 'loss' must be a number, got {tname}"):
        api_run.log({"acc": 0.75, "loss": bad}, step=1)  # the good metric of the bad call is not kept either
    api_run.log({"loss": 2.0, "acc": 0.25})  # default step: the bad call did not advance it
    assert api_run.flush(timeout=10)
    for metric, want in (("loss", [1.0, 2.0]), ("acc", [0.5, 0.25])):
        steps, vals, _ = series(api_agent, api_run.id, metric)
        assert steps.tolist() == [0, 1] and vals.tolist() == want, metric


@pytest.mark.parametrize("bad", [np.array([1.0, 2.0]), torch.tensor([1.0, 2.0])], ids=["numpy", "torch"])
def test_log_rejects_array_value_naming_the_metric(api_run, bad):
    with pytest.raises(TypeError, match=r"'loss'"):
        api_run.log({"loss": bad})


@pytest.mark.parametrize("bad", [2 ** 64, -(2 ** 63) - 1], ids=["2**64", "-2**63-1"])
def test_log_rejects_out_of_range_int_and_keeps_working(api_agent, api_run, bad):
    api_run.log({"loss": 1.0}, step=0)
    try:
        api_run.log({"loss": bad}, step=1)
        rejected = None
    except (TypeError, ValueError, OverflowError) as exc:
        rejected = exc
    api_run.log({"loss": 2.0}, step=1)
    # Flush before asserting: today the outbox thread dies here with log.exception(), and CPython 3.11's
    # traceback formatting (ast.parse) must not race pytest formatting this test's failure.
    delivered = api_run.flush(timeout=2)
    assert rejected is not None and "'loss'" in str(rejected), rejected
    assert delivered
    assert series(api_agent, api_run.id, "loss")[1].tolist() == [1.0, 2.0]


@pytest.mark.parametrize("bad, exc, why", [
    ("", ValueError, r"metric name must be 1 to 250 characters, got 0"),
    ("x" * 251, ValueError, r"metric name must be 1 to 250 characters, got 251"),
    ("a\x00b", ValueError, r"metric name .* control character U\+0000"),
    ("\x1b[31mloss", ValueError, r"metric name .* control character U\+001B"),
    ("loss\n", ValueError, r"metric name .* control character U\+000A"),
    (5, (ValueError, TypeError), r"metric name must be a string, not int"),
    (None, (ValueError, TypeError), r"metric name must be a string, not NoneType"),
    (b"loss", (ValueError, TypeError), r"metric name must be a string, not bytes"),
    (("a", "b"), (ValueError, TypeError), r"metric name must be a string, not tuple"),
], ids=["empty", "251", "nul", "ansi", "newline", "int", "none", "bytes", "tuple"])
def test_log_rejects_bad_metric_name_and_logs_nothing(api_agent, api_run, bad, exc, why):
    with pytest.raises(exc, match=why):
        api_run.log({"ok": 1.0, bad: 2.0}, step=0)
    api_run.log({"ok": 3.0}, step=0)
    assert api_run.flush(timeout=10)
    assert series(api_agent, api_run.id, "ok")[1].tolist() == [3.0]
    with api_agent.client() as c:
        chunks = [e for page in c.history(api_run.id, ["m"]) for e in page.entries]
    assert {e.metric for e in chunks} == {"ok"}


@pytest.mark.parametrize("bad, exc, why", [
    (-1, ValueError, r"step must be in \[0, \d+\], got -1"),
    (-(2 ** 40), ValueError, r"step must be in \[0, "),
    (1.0, TypeError, r"step must be an int, got float"),
    (float("nan"), TypeError, r"step must be an int, got float"),
    (True, TypeError, r"step must be an int, got bool"),
    ("3", TypeError, r"step must be an int, got str"),
    (np.float64(2.0), TypeError, r"step must be an int, got float64"),
    (np.int64(-5), ValueError, r"step must be in \[0, \d+\], got -5"),
], ids=["neg", "neg-big", "float", "nan", "bool", "str", "np-float", "np-neg-int"])
def test_log_rejects_bad_step_and_logs_nothing(api_agent, api_run, bad, exc, why):
    api_run.log({"x": 1.0}, step=3)
    with pytest.raises(exc, match=why):
        api_run.log({"x": 99.0}, step=bad)
    with pytest.raises(exc, match=why):
        api_run.log_rollouts(bad, [{"prompt": "p"}])
    api_run.log({"x": 2.0})  # the rejected call left the step counter alone
    api_run.log({"x": 3.0}, step=np.int64(7))  # any __index__ int is fine
    assert api_run.flush(timeout=10)
    steps, vals, _ = series(api_agent, api_run.id, "x")
    assert steps.tolist() == [3, 4, 7] and vals.tolist() == [1.0, 2.0, 3.0]
    with api_agent.client() as c:
        assert c.read(0, api_run.id, ["r"]).entries == []


def test_log_rejects_step_beyond_int64(api_agent, api_run):
    api_run.log({"x": 1.0}, step=0)
    with pytest.raises((ValueError, OverflowError), match=r"step"):
        api_run.log({"x": 2.0}, step=2 ** 63)
    api_run.log({"x": 3.0}, step=1)
    assert api_run.flush(timeout=5)
    assert series(api_agent, api_run.id, "x")[1].tolist() == [1.0, 3.0]


def _f(bits64: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits64))[0]


SPECIAL = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e308, -1e308, 5e-324, -5e-324,
           2.2250738585072014e-308, 1.7976931348623157e308, _f(0x7FF8000000000123), _f(0xFFF8000000000000),
           0.1, 2.0 ** 53 + 2]


def test_special_floats_are_accepted_and_come_back_bit_exact(api_agent, api_run):
    for step, value in enumerate(SPECIAL):
        api_run.log({"v": value, "w": -value}, step=step)
    assert api_run.flush(timeout=10)
    for metric, want in (("v", SPECIAL), ("w", [-x for x in SPECIAL])):
        steps, vals, times = series(api_agent, api_run.id, metric)
        assert steps.tolist() == list(range(len(SPECIAL)))
        assert vals.dtype == np.float64 and np.array_equal(vals.view(np.uint64), bits(want)), metric
        assert np.all(np.isfinite(times)) and np.all(times > 1e9)


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True")
def test_numpy_and_torch_scalars_are_accepted(api_agent, api_run):
    logged = {
        "np_f32": (np.float32(0.1), float(np.float32(0.1))),
        "np_f64": (np.float64(-2.5), -2.5),
        "np_i64": (np.int64(-7), -7.0),
        "np_u8": (np.uint8(200), 200.0),
        "np_nan32": (np.float32("nan"), float("nan")),
        "np_0d": (np.array(4.5), 4.5),
        "torch_f32": (torch.tensor(0.1), float(torch.tensor(0.1))),
        "torch_f64": (torch.tensor(1e308, dtype=torch.float64), 1e308),
        "torch_i64": (torch.tensor(3), 3.0),
        "torch_grad": (torch.tensor(1.25, requires_grad=True) * 2, 2.5),
        "py_int": (2 ** 63 - 1, float(2 ** 63 - 1)),
        "py_bool": (True, 1.0),
    }
    api_run.log({k: v for k, (v, _) in logged.items()}, step=5)
    assert api_run.flush(timeout=10)
    for metric, (_, want) in logged.items():
        steps, vals, _ = series(api_agent, api_run.id, metric)
        assert steps.tolist() == [5], metric
        assert bits(vals).tolist() == bits([want]).tolist(), f"{metric}: {vals[0]!r} != {want!r}"


@pytest.mark.parametrize("rows, exc, why", [
    ([{"prompt": {"nested": 1}}], ValueError, r"rollout field 'prompt' has unsupported type dict"),
    ([{"tokens": [1, 2, 3]}], ValueError, r"rollout field 'tokens' has unsupported type list"),
    ([{"raw": b"\x00\x01"}], ValueError, r"rollout field 'raw' has unsupported type bytes"),
    ([{"obj": object()}], ValueError, r"rollout field 'obj' has unsupported type object"),
    ([{1: "x"}], ValueError, r"rollout field '1'"),
    ([{"ok": "y"}, "not a row"], (ValueError, TypeError), r"."),
    ([5], (ValueError, TypeError), r"."),
    ([None], (ValueError, TypeError), r"."),
    ([{"ok": 1}] * 10_001, ValueError, r"at most 10000 rows"),
    ([{"completion": "é" * (1 << 20)}] * 2, ValueError, r"take \d+ bytes; log them in several calls"),
    ([{"completion": "\ud800"}], ValueError, r"surrogate"),
], ids=["nested-dict", "list", "bytes", "object", "int-key", "str-row", "int-row", "none-row", "too-many",
        "too-big-in-utf8", "lone-surrogate"])
def test_log_rollouts_rejects_bad_rows_and_logs_nothing(api_agent, api_run, rows, exc, why):
    api_run.log_rollouts(0, [{"prompt": "good", "reward": 1.0, "ok": True, "note": None}])
    with pytest.raises(exc, match=why):
        api_run.log_rollouts(1, rows)
    api_run.log({"x": 1.0}, step=1)
    assert api_run.flush(timeout=10)
    with api_agent.client() as c:
        entries = c.read(0, api_run.id, ["r"]).entries
    assert len(entries) == 1 and entries[0].n == 1


@pytest.mark.parametrize("row", ["not a row", 5, None], ids=["str", "int", "none"])
def test_log_rollouts_non_dict_row_message_says_row(api_run, row):
    with pytest.raises((TypeError, ValueError), match=r"row"):
        api_run.log_rollouts(0, [{"prompt": "ok"}, row])


def test_log_after_finish_is_an_error(api_agent):
    run = ph.init("api", "closed", agent=api_agent.url, heartbeat=3600)
    run.log({"x": 1.0})
    assert run.finish(timeout=10)
    with pytest.raises(RuntimeError, match="is finished"):
        run.log({"x": 2.0})
    with pytest.raises(RuntimeError, match="is finished"):
        run.log_rollouts(0, [{"p": "q"}])
    assert series(api_agent, run.id, "x")[1].tolist() == [1.0]


# =============================================================================================
# 2. Raw wire input
# =============================================================================================

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


SEED = "seedrun1"


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


@pytest.mark.parametrize("op, args, why", [
    ("drop_tables", {}, r"unknown query 'drop_tables'"),
    ("resolve", {}, r"ref must be str"),
    ("resolve", {"ref": 5}, r"ref must be str"),
    ("resolve", {"ref": "no-such-run"}, r"no run with id or name 'no-such-run'"),
    ("read", {}, r"after must be int"),
    ("read", {"after": "0"}, r"after must be int"),
    ("read", {"after": True}, r"after must be int"),
    ("read", {"after": 0, "run": 5}, r"run must be a string"),
    ("read", {"after": 0, "kinds": ["x"]}, r"kinds must be a list drawn from"),
    ("read", {"after": 0, "limit_points": "9"}, r"limit_points must be int"),
])
def test_wire_bad_query_gets_err_with_its_id(wire, op, args, why):
    _, peer, _ = wire
    reply = peer.ask({"t": "q", "id": 4242, "op": op, "args": args})
    assert reply == {"t": "err", "id": 4242, "msg": reply and reply.get("msg")}, reply
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


def rec(seq: int, *records: list, run: str = SEED, **fields: Any) -> dict:
    """A 'rec' message of readable records (see conftest.batch_fields), with ``fields`` put over its batch."""
    return {"t": "rec", "run": run, "rank": 0, "seq": seq, "floor": seq, **batch_fields(list(records)), **fields}


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
    ([[1, 10, 1.0, [{"p": {"nested": 1}}]]], {}, r"rollout field 'p' has unsupported type dict"),
    ([[1, 10, 1.0, ["row"]]], {}, r"a rollout row must be a dict, got str"),
    ([[1, 10, 1.0, [{"p": b"x"}]]], {}, r"rollout field 'p' has unsupported type bytes"),
    ([M1, [1, 11, 1.0, [{"p": [1]}]]], {}, r"rollout field 'p'"),
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
    proc, peer, _ = wire
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


def test_wire_query_with_non_map_args_says_so(wire):
    _, peer, _ = wire
    reply = peer.ask({"t": "q", "id": 5, "op": "ping", "args": [1, 2]})
    assert reply is not None and reply["t"] == "err" and reply["id"] == 5, reply
    assert "args" in reply["msg"], reply["msg"]


def test_wire_read_after_beyond_int64_gets_err(wire):
    _, peer, _ = wire
    reply = peer.ask({"t": "q", "id": 77, "op": "read", "args": {"after": 2 ** 63}}, timeout=1.0)
    assert reply is not None and reply["t"] == "err" and reply["id"] == 77, reply


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


def test_no_process_builds_a_message_outside_the_closed_sets():
    from pilothouse.wire.messages import INBOUND, OUTBOUND, message

    assert message("ack", run="r", rank=0, seq=3) == {"t": "ack", "run": "r", "rank": 0, "seq": 3}
    assert not set(INBOUND) & OUTBOUND  # a type means one direction
    with pytest.raises(ValueError, match="unknown message type 'bogus'"):
        message("bogus", x=1)


# --- hostile frames are refused alone: no stall, no rollback of anyone else's work ------------------

def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _hello(run: str, **extra: Any) -> dict:
    return {"t": "hello", "run": run, "rank": 0, "token": TOKEN, "project": "hostile", "name": run, "host": "h",
            "pid": 1, "config": {}, **extra}


def test_a_deep_hello_in_the_middle_of_a_burst_is_refused_alone(tmp_path):
    """A 600-deep config list used to raise RecursionError outside validation and roll back the
    whole turn, other trainers' batches included: now only it is refused."""
    proc = AgentProcess(tmp_path / "agent", free_port()).start()
    peer = RawPeer(proc.url)
    try:
        assert peer.ask(_hello("goodrun1"))["t"] == "welcome"
        steps = [[0, s, 1.0 + s, {"loss": float(s)}] for s in range(50)]
        burst = [{**rec(1, *steps[:25], run="goodrun1"), "floor": 1},
                 _hello("deeprun1", config={"layers": _nested(600)}),
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


def test_a_hello_past_its_bound_is_refused_and_the_trainer_api_says_why(tmp_path, api_agent):
    with RawPeer(api_agent.url) as peer:
        reply = peer.ask(_hello("bighello", config={"blob": "x" * MAX_HELLO_BYTES}))
        assert reply is not None and reply["t"] == "err" and "limited to" in reply["msg"], reply
    expect_rejected(lambda: ph.init("p", "big", config={"blob": "x" * MAX_HELLO_BYTES}, agent=api_agent.url),
                    ValueError, "keep large values")


def test_a_run_past_its_metric_limit_is_told_at_log_and_by_the_agent(api_agent):
    """The trainer API refuses the 10,001st name (nothing of that call is logged); a process that
    resumes the run and logs a new name gets its other points stored and an error in its stats."""
    from pilothouse.wire.records import MAX_METRICS_PER_RUN

    run = ph.init("p", "wide", agent=api_agent.url)
    run.log({f"m{i}": 1.0 for i in range(MAX_METRICS_PER_RUN)}, step=0)
    expect_rejected(lambda: run.log({"m1": 2.0, "one_more": 2.0}, step=1), ValueError,
                    r"would have 10001 distinct metrics; the limit is 10000")
    assert run.finish(timeout=20)
    again = ph.init("p", "wide", id=run.id, agent=api_agent.url)
    try:
        again.log({"m1": 3.0, "one_more": 3.0}, step=2)
        assert again.flush(10)
        wait_until(lambda: again.stats["errors"] > 0, what="the agent's refusal in the trainer's stats")
        assert "the most a run may have: 1 new metric not stored ('one_more')" in again.stats["last_error"]
    finally:
        again.finish(timeout=10)
    assert series(api_agent, run.id, "m1")[0].tolist() == [0, 2]
    with api_agent.client() as client:
        row = next(r for r in client.runs() if r["id"] == run.id)
        assert row["metrics"] == MAX_METRICS_PER_RUN and "one_more" not in row["summary"]


def test_a_flood_of_hostile_frames_is_logged_in_lines_not_tracebacks(victim):
    """200 deep hellos: the agent keeps ingesting a trainer, and its log grows by lines, not 180 KB
    of traceback each."""
    proc, run, peer = victim
    size_before = proc.log.stat().st_size
    for i in range(200):
        peer.send(_hello(f"flood{i}", config={"x": _nested(700)}))
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

    from conftest import run_cli

    peer = RawPeer(agent_proc.url)
    try:
        assert peer.ask(_hello("escrun1", session="s1", config={"lr": 0.1},
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

    from conftest import run_cli

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
    from conftest import run_cli

    out = run_cli(*args, "--agent", f"tcp://127.0.0.1:{free_port()}")
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_an_int64_overflow_is_refused_on_the_wire_too(agent_proc):
    with RawPeer(agent_proc.url) as peer:
        _overflow(peer)


def _overflow(peer: RawPeer) -> None:
    assert peer.ask(_hello("bigint1", session="b1", config={"n": 1}, schema={"n": {"type": "int"}}))["t"] == "welcome"
    reply = peer.ask({"t": "q", "id": 3, "op": "command", "args": {"cid": "big-1", "run": "bigint1", "cmd": "set",
                                                                  "values": {"n": 2 ** 63}, "who": {}}})
    assert reply["t"] == "r" and reply["data"]["state"] == "rejected"
    assert "does not fit in a 64-bit integer" in reply["data"]["detail"]


@pytest.mark.parametrize("name, why", [
    ("loss\u200b", "invisible format character U+200B"),
    ("\u202egnp.exe", "invisible format character U+202E"),
    ("a\u2066b", "invisible format character U+2066"),
    ("\ufeffloss", "invisible format character U+FEFF"),
])
def test_names_that_hide_what_they_are_are_refused(api_agent, name, why):
    for call in (lambda: ph.init(project=name, agent=api_agent.url),
                 lambda: ph.init(project="p", name=name, agent=api_agent.url)):
        with pytest.raises(ValueError, match=re.escape(why)):
            call()
    run = ph.init(project="p", name="ok", agent=api_agent.url)
    try:
        with pytest.raises(ValueError, match=re.escape(why)):
            run.log({name: 1.0}, step=0)
    finally:
        run.finish()


def test_names_have_one_spelling(api_agent):
    """'café' typed as e + combining accent (NFD) is the same metric and run name as the usual one."""
    run = ph.init(project="caf\u0065\u0301", name="r\u0065\u0301sum\u0065\u0301", agent=api_agent.url)
    run.log({"caf\u0065\u0301": 1.0}, step=0)
    run.log({"caf\u00e9": 2.0}, step=1)
    assert run.finish()
    assert (run.project, run.name) == ("caf\u00e9", "r\u00e9sum\u00e9")
    assert series(api_agent, run.id, "caf\u00e9")[1].tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="one metric twice"):
        ph.init(project="p", agent=api_agent.url).log({"caf\u0065\u0301": 1.0, "caf\u00e9": 2.0})


def test_a_name_not_in_nfc_is_refused_on_the_wire(wire):
    proc, peer, _ = wire
    reply = peer.ask(_hello("nfdrun1", session="n1") | {"name": "caf\u0065\u0301"})
    assert reply["t"] == "err" and "not in Unicode NFC" in reply["msg"]

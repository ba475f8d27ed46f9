"""Peers, fixtures and checks shared by the bad-input tests (tests/test_bad_input_*.py).

Real components only: agents are real ``pilothouse agent`` subprocesses, trainers talk to them
over real ZeroMQ sockets on loopback, and stored data is read back from the agent's SQLite file.
A test module takes its fixtures with ``pytest_plugins = ["support.wire_peer"]``.
"""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any, Self

import msgpack
import numpy as np
import pytest
import zmq

import pilothouse as ph
from pilothouse.trainer.run import Run
from support.messages import TOKEN, batch_fields
from support.processes import AgentProcess
from support.sockets import as_owner, free_port
from support.waiting import wait_until

SEED = "seedrun1"  # wire_agent's finished run, worth protecting


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

    def __enter__(self) -> Self:
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


def hello(run: str, **extra: Any) -> dict:
    """A hello of rank 0 of ``run``, with ``extra`` over its fields."""
    return {"t": "hello", "run": run, "rank": 0, "token": TOKEN, "project": "hostile", "name": run, "host": "h",
            "pid": 1, "config": {}, **extra}


def series(proc: AgentProcess, run_id: str, metric: str):
    with proc.client() as c:
        return c.series(run_id, metric)


def rec(seq: int, *records: list, run: str = SEED, **fields: Any) -> dict:
    """A 'rec' message of readable records (see support.messages.batch_fields), with ``fields`` put over its batch."""
    return {"t": "rec", "run": run, "rank": 0, "seq": seq, "floor": seq, **batch_fields(list(records)), **fields}


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

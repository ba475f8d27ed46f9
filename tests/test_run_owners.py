"""A run answers only to its own job: a process of the same user without the run's token can neither
join a live run as a rank nor take it over when the agent restarts; only rank 0 answers a command,
for that command; an answer's config passes the same checks as a hello's.  Real trainers, a real
agent killed and started again, raw frames with the owner's keys (another process of the owner)."""

from __future__ import annotations

import os
import secrets
import signal

import pytest
import zmq
from support.processes import LOOP_UNTIL_STOPPED, finish, start_trainer
from support.runs import run_events
from support.sockets import as_owner
from support.waiting import wait_until

from pilothouse.client import Client
from pilothouse.wire.messages import ProtocolError, decode, message, pack, unpack
from pilothouse.wire.tuning import build_schema

# the steering loop, printing the run's token too (what a launcher hands to the ranks it starts) and
# logging the lr it trains with
HOLDER = LOOP_UNTIL_STOPPED.replace("print(run.id, flush=True)", "print(run.id, run.token, flush=True)") \
    .replace('{"loss": 1.0 / (step + 1)}', '{"lr": run.config["lr"]}') + 'print("lr", run.config["lr"], flush=True)\n'

# ARGS: run id, project, name, and how long its flush and finish wait for the agent's acks
RANK1 = """
run = ph.init(project=ARGS[1], name=ARGS[2], id=ARGS[0], agent=URL, rank=1, heartbeat=0.2)
for step in range(5):
    run.log({"rank1": float(step)}, step=step)
print(run.flush(float(ARGS[3])), run.stats["last_error"], flush=True)
run.finish(timeout=float(ARGS[3]))
"""


class Peer:
    """A raw DEALER with the owner's keys, speaking the trainer protocol by hand."""

    def __init__(self, url: str, run: str, rank: int, token: str, session: str):
        self.run, self.rank, self.session, self.token = run, rank, session, token
        self.sock = as_owner(zmq.Context.instance().socket(zmq.DEALER))
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(url)

    def hello(self, project: str, name: str) -> dict:
        config = {"lr": 0.1}
        self.send("hello", token=self.token, project=project, name=name, host="elsewhere", pid=4242,
                  config=config, schema=build_schema(config))
        return self.answer()

    def send(self, kind: str, **fields) -> None:
        self.sock.send(pack(message(kind, run=self.run, rank=self.rank, session=self.session, **fields)))

    def answer(self, kind: str | None = None) -> dict:
        while True:
            assert self.sock.poll(5000), "no answer from the agent"
            msg = unpack(self.sock.recv())
            if kind is None or msg["t"] == kind:
                return msg

    def ack(self, cid: str, cmd: str = "set", **extra) -> None:
        self.send("cack", cid=cid, cmd=cmd, state="applied", step=3, detail=f"lr=0.5 applied by rank {self.rank}",
                  applied={"lr": 0.5}, **extra)

    def close(self) -> None:
        self.sock.close(linger=0)


@pytest.fixture
def holder(tmp_path, agent_proc):
    """A real trainer, steerable, on its own run: (process, run id, token)."""
    proc = start_trainer(tmp_path, HOLDER, agent_proc.url, "own", "holder", name="holder")
    run, token = proc.stdout.readline().split()
    with Client(agent_proc.url) as client:
        wait_until(lambda: len(client.series(run, "lr")[0]) > 5, what="the holder's steps")
    yield proc, run, token
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_a_process_without_the_runs_token_cannot_join_a_live_run(tmp_path, agent_proc, holder, monkeypatch):
    """The probe's rank 1 stored points in the run's series and pushed its step to 2^63-1: now its
    hello is refused, so nothing it sends is stored; a rank handed the token joins."""
    proc, run, token = holder
    forger = Peer(agent_proc.url, run, 1, secrets.token_hex(16), "forger")
    client = Client(agent_proc.url)
    try:
        refused = forger.hello("own", "holder")
        assert refused["t"] == "err" and "not of its job" in refused["msg"] and "run.token" in refused["msg"]
        forger.send("rec", seq=1, floor=0, n=1, keys=[["lr"]], others=[],
                    metrics=[[0, b"\x00\x00\x00\x00", (2 ** 63 - 1).to_bytes(8, "little") + bytes(16)]])
        assert forger.answer()["reason"] == "hello"  # nothing of it stored: it must open the run first
        # refused at its hello, it is never acked: a short flush says so as well as a long one
        alone = finish(start_trainer(tmp_path, RANK1, agent_proc.url, run, "own", "holder", "2", name="alone"))
        assert alone.startswith("False") and "not of its job" in alone
        monkeypatch.setenv("PILOTHOUSE_RUN_TOKEN", token)  # as a launcher passes rank 0's run.token
        assert finish(start_trainer(tmp_path, RANK1, agent_proc.url, run, "own", "holder", "10", name="joined")) \
            .startswith("True")
        row = client.command(run, "set", {"lr": 0.5})
        assert row["state"] == "applied" and row["applied"] == {"lr": 0.5}
        last = next(r for r in client.runs() if r["id"] == run)["last_step"]
        assert last < 100_000  # the step --at-step is checked against is the trainer's
        later = client.command(run, "set", {"lr": 0.25}, at_step=last + 20)
        assert later["state"] in ("applied", "scheduled")
        wait_until(lambda: client.request("command_status", cid=later["cid"])["state"] == "applied",
                   what="the set scheduled for a later step")  # before the stop, or the run ends without it
        assert list(client.series(run, "rank1")[1]) == [0.0, 1.0, 2.0, 3.0, 4.0]  # the joined rank's, once
        assert any("not of the job" in e["detail"] for e in run_events(client, run, "refused"))
        client.command(run, "stop")
        assert "lr 0.25" in finish(proc)
    finally:
        forger.close()
        client.close()


def test_only_rank_0_answers_a_command_and_only_for_that_command(agent_proc):
    """Commands go to rank 0: an ack from another rank of the same job, one for another command
    type, or one that changes settings the command did not ask for is refused; rank 0's own counts."""
    token = secrets.token_hex(16)
    rank0, rank1 = (Peer(agent_proc.url, "acked1", r, token, f"rank{r}") for r in (0, 1))
    client = Client(agent_proc.url)
    try:
        assert rank0.hello("acks", "two")["t"] == "welcome" and rank1.hello("acks", "two")["t"] == "welcome"
        cid = secrets.token_hex(10)
        client.request("command", cid=cid, run="acked1", cmd="set", values={"lr": 0.5}, who={})
        assert rank0.answer("cmd")["cid"] == cid
        rank1.ack(cid)
        assert "from rank 1 is refused" in rank1.answer("err")["msg"]
        rank0.ack(cid, cmd="pause")
        assert "a 'pause' answer" in rank0.answer("err")["msg"]
        rank0.ack(cid, config={"lr": 0.5, "api_key": "forged"})
        assert "may not change other settings" in rank0.answer("err")["msg"]
        assert client.request("command_status", cid=cid)["state"] == "pending"
        rank0.ack(cid, config={"lr": 0.5})
        wait_until(lambda: client.request("command_status", cid=cid)["state"] == "applied", what="rank 0's answer")
        assert client.request("command_status", cid=cid)["detail"] == "lr=0.5 applied by rank 0"
    finally:
        for peer in (rank0, rank1):
            peer.close()
        client.close()


def test_after_an_agent_restart_the_run_is_still_its_jobs(tmp_path, agent_proc, holder):
    """The probe's first hello after a restart owned a live run; now the journal keeps the run's
    proof, so a forger that speaks first is refused and the trainer re-proves it when it reconnects."""
    proc, run, _ = holder
    agent_proc.kill()
    os.kill(proc.pid, signal.SIGSTOP)  # the forger speaks first, before the trainer reconnects
    forger = None
    try:
        agent_proc.start()
        forger = Peer(agent_proc.url, run, 0, secrets.token_hex(16), "forger")
        refused = forger.hello("own", "holder")
        assert refused["t"] == "err" and "not of its job" in refused["msg"]
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        if forger is not None:
            forger.close()
    with Client(agent_proc.url) as client:
        before = len(client.series(run, "lr")[0])
        wait_until(lambda: len(client.series(run, "lr")[0]) > before + 5, what="the trainer's points again")
        row = client.command(run, "set", {"lr": 0.5})
        assert row["state"] == "applied" and row["applied"] == {"lr": 0.5}
        client.command(run, "stop")
        assert "lr 0.5" in finish(proc)
        assert set(client.series(run, "lr")[1].tolist()) <= {0.1, 0.5}


@pytest.mark.parametrize("config, error", [
    ({"x": [[[[[[[[[[[[1]]]]]]]]]]]]}, "nests deeper"),
    ({"x": 2 ** 64 - 1}, "must be an int"),
    ({"lr\x1b[31m": 0.5}, "control character"),
])
def test_an_answers_config_is_checked_as_a_hellos(config, error):
    with pytest.raises(ProtocolError, match=error):
        decode(pack(message("cack", run="r1", rank=0, cid="c1", cmd="set", state="applied", step=1, detail="",
                            applied={}, config=config)))
    with pytest.raises(ProtocolError, match=error):
        decode(pack(message("hello", run="r1", rank=0, token="ab" * 16, project="p", name="n", host="h", pid=1,
                            config=config)))

"""The agent's command and liveness state machines, in-process on a real journal (SQLite in tmp_path):
the command desk (each command recorded and applied once, an answer recorded once and only from the
rank it was sent to, "applied" only when the trainer applied it), liveness (silence, heartbeats,
pauses) and the sessions that own a run's ranks.

No agent process and no trainer: the messages are the wire's own (``message("cack", ...)``), the
replies the desk queues are collected as the agent's socket would send them.  The process tests
(test_steering, test_applied, test_sessions, test_faults) cover the same promises end to end.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from pilothouse.node import command_desk
from pilothouse.node.command_desk import CommandDesk
from pilothouse.node.journal import Store
from pilothouse.node.liveness import HELLO, Liveness, Session, Sessions
from pilothouse.wire.entries import KIND_EVENT
from pilothouse.wire.messages import ProtocolError, message, unpack

HOST = socket.gethostname()
RUN = "r1"
WHO = {"via": "loopback"}
TRAINER = b"trainer"
CLIENT = b"cli"


def hello(run: str = RUN, host: str = HOST, pid: int | None = None) -> dict:
    pid = os.getpid() if pid is None else pid
    started = psutil.Process(pid).create_time() if pid == os.getpid() else 1.0
    return {"run": run, "rank": 0, "session": "s1", "project": "p", "name": run, "host": host, "pid": pid,
            "pid_started": started, "config": {"lr": 0.1}, "schema": {"lr": {"type": "float", "above": 0}}}


def gone_pid() -> int:
    """A pid no process has: above the kernel's highest."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


class Node:
    """The agent's command state as the agent wires it, on a journal of its own; every call is one
    turn (one transaction), as in the agent's loop."""

    def __init__(self, path: Path):
        self.store = Store(path)
        self.liveness = Liveness(self.store, HOST, stale_after=60.0)
        self.sent: list[tuple[bytes, dict]] = []
        self.desk = CommandDesk(self.store, self.liveness, lambda ident, msg: self.sent.append((ident, msg)))

    def turn(self, action: Callable[..., Any], *args: Any) -> Any:
        self.store.begin()
        try:
            result = action(*args)
        except Exception:
            self.store.rollback()
            raise
        self.store.commit()
        return result

    def open_run(self, run: str = RUN, **fields: Any) -> None:
        msg = hello(run, **fields)
        self.turn(self.store.upsert_run, msg, time.time())
        self.liveness.started(run, msg["host"], msg["pid"], msg["pid_started"])
        self.desk.trainer_seen(TRAINER, run, 0)

    def command(self, cid: str, cmd: str, run: str = RUN, wait: float = 0, **args: Any) -> dict | None:
        return self.turn(self.desk.op_command, {"cid": cid, "run": run, "cmd": cmd, "who": WHO, "wait": wait, **args},
                         CLIENT, 1)

    def ack(self, cid: str, cmd: str, state: str = "applied", run: str = RUN, rank: int = 0, step: int = 5,
            **fields: Any) -> None:
        msg = message("cack", run=run, rank=rank, session="s1", cid=cid, cmd=cmd, state=state, step=step,
                      detail=f"{cmd} {state}", applied={}, **fields)
        self.turn(self.desk.on_ack, msg, time.time())

    def state(self, cid: str) -> str:
        return self.desk.op_command_status({"cid": cid}, CLIENT, 1)["state"]

    def forwarded(self, cid: str | None = None) -> list[bytes]:
        """The connections a command went to, in order."""
        return [ident for ident, msg in self.sent if msg["t"] == "cmd" and cid in (None, msg["cid"])]

    def events(self, name: str, run: str = RUN) -> list[dict]:
        entries, _ = self.store.read(0, run=run, kinds=[KIND_EVENT])
        return [body for body in (unpack(e.body) for e in entries) if body["event"] == name]


@pytest.fixture
def node(tmp_path) -> Node:
    n = Node(tmp_path / "journal.sqlite")
    n.open_run()
    return n


# --- the command desk ------------------------------------------------------------------------

def test_a_retried_command_id_is_recorded_and_forwarded_once(node):
    assert node.command("c1", "pause")["state"] == "pending"
    assert node.command("c1", "pause")["state"] == "pending"  # the CLI retried: the same command
    assert node.forwarded() == [TRAINER] and len(node.events("command")) == 1


def test_an_ack_for_a_command_id_the_agent_never_sent_changes_nothing(node):
    node.open_run("r2")
    node.command("c2", "pause", run="r2")
    node.ack("nope", "pause")
    node.ack("c2", "pause")  # a command of another run: not this run's to answer
    assert node.events("ack") == [] and node.events("ack", run="r2") == []
    assert node.state("c2") == "pending" and node.liveness.status(RUN) == "running"


def test_an_answer_resent_after_a_lost_ack_is_recorded_once(node):
    node.command("c1", "pause")
    node.ack("c1", "pause")
    node.ack("c1", "pause")  # the trainer answered the agent's resend from its first answer
    assert node.state("c1") == "applied" and len(node.events("ack")) == 1
    assert [e["status"] for e in node.events("status")] == ["running", "paused"]


def test_answers_out_of_order_settle_each_command(node):
    node.command("c1", "pause")
    node.command("c2", "checkpoint")
    node.ack("c2", "checkpoint", "applied")
    node.ack("c1", "pause", "rejected")
    assert (node.state("c1"), node.state("c2")) == ("rejected", "applied")
    assert [e["cid"] for e in node.events("ack")] == ["c2", "c1"] and len(node.events("checkpoint")) == 1
    assert node.liveness.status(RUN) == "running"  # a rejected pause paused nothing


@pytest.mark.parametrize("wrong", [{"rank": 1}, {"cmd": "resume"}, {"config": {"beta": 0.5}}],
                         ids=["another rank", "another command", "another setting"])
def test_only_the_rank_sent_to_answers_and_only_for_what_it_was_asked(node, wrong):
    node.command("c1", "set", values={"lr": 0.2})
    ack = {"cid": "c1", "cmd": "set", **({} if "config" in wrong else {"config": {"lr": 0.2}}), **wrong}
    with pytest.raises(ProtocolError):
        node.ack(**ack)
    assert node.state("c1") == "pending" and node.events("ack") == []
    assert node.store.config_and_schema(RUN)[0] == {"lr": 0.1}


def test_a_scheduled_change_is_not_resent_and_settles_once_applied(node, monkeypatch):
    monkeypatch.setattr(command_desk, "RESEND_AFTER", 0.0)
    node.command("c1", "set", values={"lr": 0.2}, at_step=9)
    node.ack("c1", "set", "scheduled")
    node.ack("c1", "set", "scheduled")  # the trainer's answer to a resend sent before the first arrived
    node.desk.trainer_seen(TRAINER, RUN, 0)
    assert node.forwarded() == [TRAINER] and len(node.events("ack")) == 1
    node.ack("c1", "set", "applied", step=9, config={"lr": 0.2})
    assert node.state("c1") == "applied" and node.store.config_and_schema(RUN)[0] == {"lr": 0.2}


def test_a_pending_command_is_resent_to_rank_0s_latest_connection_until_answered(node, monkeypatch):
    node.command("c1", "pause")
    node.desk.trainer_seen(TRAINER, RUN, 0)  # within RESEND_AFTER of sending: not yet
    assert node.forwarded() == [TRAINER]
    monkeypatch.setattr(command_desk, "RESEND_AFTER", 0.0)
    node.desk.trainer_seen(b"rank1", RUN, 1)
    node.desk.trainer_seen(b"reconnected", RUN, 0)
    assert node.forwarded() == [TRAINER, b"reconnected"]
    node.ack("c1", "pause")
    node.desk.trainer_seen(b"reconnected", RUN, 0)
    assert node.forwarded() == [TRAINER, b"reconnected"]


def test_a_stop_before_a_pause_leaves_the_run_running_and_a_pause_before_a_stop_ends_with_the_heartbeat(node):
    node.command("s", "stop")
    node.command("p", "pause")
    node.ack("s", "stop")
    node.ack("p", "pause", "rejected")  # the trainer refuses a pause once stopping
    assert node.liveness.status(RUN) == "running"
    node.command("p2", "pause")
    node.command("s2", "stop")
    node.ack("p2", "pause")
    node.ack("s2", "stop")
    assert node.liveness.status(RUN) == "paused"  # until the trainer's heartbeat says it holds no more
    node.turn(node.liveness.paused, RUN, False, time.time())
    assert node.liveness.status(RUN) == "running"


def test_a_command_open_when_the_run_ends_is_rejected_and_a_late_ack_cannot_apply_it(node):
    node.command("c1", "pause")
    node.turn(node.desk.close, RUN, "the run finished before applying it", time.time())
    node.ack("c1", "pause")
    assert node.state("c1") == "rejected" and [e["state"] for e in node.events("ack")] == ["rejected"]
    assert node.liveness.status(RUN) == "running"


def test_a_waiting_client_is_answered_in_the_turn_that_records_the_ack(node):
    assert node.command("c1", "pause", wait=30) is None  # held
    assert [ident for ident, _ in node.sent] == [TRAINER]
    node.ack("c1", "pause")
    ident, reply = node.sent[-1]
    assert ident == CLIENT and reply["t"] == "r" and reply["data"]["state"] == "applied"


# --- liveness ---------------------------------------------------------------------------------

def test_silence_makes_a_run_stale_or_crashed_once_and_a_heartbeat_brings_it_back(tmp_path):
    node = Node(tmp_path / "journal.sqlite")
    node.open_run("alive")
    node.open_run("gone", pid=gone_pid())
    node.open_run("elsewhere", host="another-host", pid=gone_pid())  # its process cannot be checked from here
    later = time.time() + 61
    verdicts = {run: status for run, status, _ in node.liveness.verdicts(later)}
    assert verdicts == {"alive": "stale", "gone": "crashed", "elsewhere": "stale"}
    assert node.liveness.verdicts(later + 1) == []  # a verdict is given once
    node.turn(node.liveness.heard, "alive", later + 2)
    assert node.liveness.status("alive") == "running"
    assert node.events("status", run="alive")[-1]["reason"] == "heartbeat resumed"


def test_a_heartbeat_moves_a_run_between_running_and_paused_but_not_out_of_its_end(node):
    node.turn(node.liveness.paused, RUN, True, time.time())
    assert node.liveness.status(RUN) == "paused"
    node.turn(node.liveness.paused, RUN, False, time.time())
    assert node.liveness.status(RUN) == "running"
    assert node.liveness.finished(RUN) and not node.liveness.finished(RUN)  # a run ends once
    node.turn(node.liveness.paused, RUN, True, time.time())
    assert node.liveness.status(RUN) == "finished"


# --- sessions: who speaks for a run's rank ------------------------------------------------------

def test_a_stale_session_is_taken_over_by_a_hello_and_then_refused():
    sessions = Sessions(HOST, alive_for=0.05)
    first, second = hello(), {**hello(), "session": "s2"}
    assert sessions.speak(RUN, 0, "s1", first) is None
    owner = sessions.speak(RUN, 0, "s2", second)
    assert isinstance(owner, Session) and owner.id == "s1"  # a live owner is not displaced
    time.sleep(0.06)
    assert sessions.speak(RUN, 0, "s2") == HELLO  # silent long enough, but only a hello takes a run over
    assert sessions.speak(RUN, 0, "s2", second) is None
    stale = sessions.speak(RUN, 0, "s1")
    assert isinstance(stale, Session) and stale.id == "s2"  # the old process's late ack is refused
    sessions.release(RUN, 0, "s1")  # the stale session cannot end the new one's hold either
    assert sessions.open_ranks(RUN) == {0}


def test_a_session_whose_process_is_gone_from_this_host_is_displaced_at_once():
    sessions = Sessions(HOST, alive_for=60.0)
    assert sessions.speak(RUN, 0, "s1", hello(pid=gone_pid())) is None
    assert sessions.speak(RUN, 0, "s2", {**hello(), "session": "s2"}) is None

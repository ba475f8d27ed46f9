"""The trainer's command state machines, in-process: the inbox (every command applied once, a resend
answered from the first answer), the helm (an ack says what is true), the outbox thread speaking to a
ROUTER socket that plays the agent with the real wire messages, and a Run steered through it.

No agent process: the process tests (test_steering, test_applied, test_faults) cover the same
promises end to end; these pin each transition down in milliseconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import zmq
from support.sockets import free_port, owner_agent_socket
from support.waiting import wait_until

import pilothouse
from pilothouse.trainer.helm import NOTHING, Helm, Refused
from pilothouse.trainer.inbox import Inbox
from pilothouse.trainer.outbox import Outbox
from pilothouse.wire.messages import decode, message, pack

SCHEMA = {"lr": {"type": "float", "above": 0}, "beta": {"type": "float"}}


def command(cid: str, kind: str, **args: object) -> dict:
    return message("cmd", cid=cid, cmd=kind, **args)


def answer(cid: str, kind: str, state: str = "applied", step: int = 3) -> dict:
    return {"cid": cid, "cmd": kind, "state": state, "step": step, "detail": f"{kind} {state}", "applied": {}}


# --- the inbox: exactly once -------------------------------------------------------------------

def test_a_command_received_twice_reaches_the_helm_once():
    inbox = Inbox()
    pause = command("c1", "pause")
    assert inbox.receive(pause) is None and inbox.receive(pause) is None
    assert inbox.take() == [pause]
    assert inbox.receive(pause) is None  # in hand (taken, not answered yet): still ignored
    assert inbox.take() == [] and not inbox.pending()


def test_a_resend_after_a_lost_ack_gets_the_first_answer_not_a_second_application():
    inbox = Inbox()
    inbox.receive(command("c1", "pause"))
    inbox.take()
    first = answer("c1", "pause")
    inbox.answered(first)
    assert inbox.receive(command("c1", "pause")) == first
    assert inbox.take() == []


def test_a_scheduled_answer_is_not_final_and_the_applied_one_is():
    inbox = Inbox()
    inbox.receive(command("c1", "set", values={"lr": 0.5}, at_step=9))
    inbox.take()
    inbox.answered(answer("c1", "set", "scheduled"))
    assert inbox.receive(command("c1", "set", values={"lr": 0.5}, at_step=9)) is None
    assert inbox.take() == []  # still in hand: not applied a second time when it falls due
    applied = answer("c1", "set", "applied", 9)
    inbox.answered(applied)
    assert inbox.receive(command("c1", "set", values={"lr": 0.5}, at_step=9)) == applied


def test_commands_keep_their_arrival_order_and_one_without_an_id_is_dropped():
    inbox = Inbox()
    later, earlier = command("c2", "resume"), command("c1", "pause")
    for cmd in (later, {"t": "cmd", "cid": 7, "cmd": "stop"}, earlier):
        inbox.receive(cmd)
    assert inbox.take() == [later, earlier]


def test_a_waiting_take_wakes_when_a_command_arrives():
    inbox = Inbox()
    stop = command("c1", "stop")
    threading.Timer(0.05, inbox.receive, [stop]).start()
    started = time.monotonic()
    assert inbox.take(wait=5.0) == [stop]
    assert time.monotonic() - started < 2.0


# --- the helm: what an ack says is true --------------------------------------------------------

@pytest.fixture
def acks() -> list[tuple[dict, bool]]:
    return []


@pytest.fixture
def helm(acks) -> Helm:
    inbox = Inbox()
    # each ack with the paused state the heartbeat would report when it goes out
    return Helm({"lr": 0.1, "beta": 0.0}, SCHEMA, inbox, lambda a: acks.append((a, inbox.paused)), lambda *a: None)


def states(acks: list[tuple[dict, bool]]) -> list[tuple[str, str, str]]:
    return [(a["cid"], a["cmd"], a["state"]) for a, _ in acks]


def test_the_paused_state_changes_before_its_ack_goes_out(helm, acks):
    helm.apply([command("p", "pause")], 3)
    helm.apply([command("r", "resume")], 3)
    assert [(a["cmd"], paused) for a, paused in acks] == [("pause", True), ("resume", False)]


def test_a_pause_then_a_stop_in_one_step_stops(helm, acks):
    ctl = helm.apply([command("p", "pause"), command("s", "stop")], 4)
    assert ctl.stop and not helm.paused
    assert states(acks) == [("p", "pause", "applied"), ("s", "stop", "applied")]


def test_a_pause_after_a_stop_is_refused_and_does_not_hold_the_run(helm, acks):
    ctl = helm.apply([command("s", "stop"), command("p", "pause")], 4)
    assert ctl.stop and not helm.paused
    assert states(acks) == [("s", "stop", "applied"), ("p", "pause", "rejected")]
    helm.apply([command("p2", "pause")], 5)  # the loop has not ended yet: still stopping
    assert not helm.paused and states(acks)[-1] == ("p2", "pause", "rejected")


def test_a_stop_while_held_at_a_pause_ends_the_hold(helm):
    arriving = [[], [command("s", "stop")]]
    ctl = helm.hold(helm.apply([command("p", "pause")], 6), lambda: arriving.pop(0), 6)
    assert ctl.stop and not helm.paused and not arriving


def test_a_refused_change_is_undone_everywhere_and_answered_as_not_applied(helm, acks):
    seen: list[dict] = []
    helm.callbacks.append((seen.append, frozenset({"lr"})))

    def refuse(values: dict) -> None:
        if values["beta"] != 0.0:  # the value it had is taken back
            raise Refused("beta is fixed while warming up")

    helm.callbacks.append((refuse, frozenset({"beta"})))
    ctl = helm.apply([command("c1", "set", values={"lr": 0.5, "beta": 0.9})], 7)
    assert ctl is NOTHING and helm.config == {"lr": 0.1, "beta": 0.0}
    assert seen == [{"lr": 0.5}, {"lr": 0.1}]  # the callback that took it was given the old value back
    (ack, _), = acks
    assert ack["state"] == "rejected" and ack["applied"] == {} and "not applied" in ack["detail"]


def test_scheduled_changes_apply_at_their_steps_whatever_order_they_came_in(helm, acks):
    helm.apply([command("late", "set", values={"lr": 0.7}, at_step=9),
                command("soon", "set", values={"lr": 0.3}, at_step=8)], 7)
    assert helm.config["lr"] == 0.1 and states(acks) == [("late", "set", "scheduled"), ("soon", "set", "scheduled")]
    assert dict(helm.apply([], 8).changes) == {"lr": 0.3}
    assert dict(helm.apply([], 9).changes) == {"lr": 0.7}
    assert states(acks)[2:] == [("soon", "set", "applied"), ("late", "set", "applied")]
    assert helm.apply([], 10) is NOTHING  # each applied once


def test_a_checkpoint_nobody_saved_is_rejected_at_the_next_step(helm, acks):
    assert helm.apply([command("k", "checkpoint")], 2).checkpoint
    helm.expire_checkpoints(3)
    assert states(acks) == [("k", "checkpoint", "rejected")]
    helm.saved("/tmp/ckpt-3", 3)  # saved later: recorded as the loop's own checkpoint, not as an answer
    assert len(acks) == 1


# --- the outbox thread against a socket that plays the agent ----------------------------------

class FakeAgentSocket:
    """A ROUTER socket holding the owner's agent key: the outbox connects to it as to its agent."""

    def __init__(self) -> None:
        self.sock = owner_agent_socket(zmq.Context.instance().socket(zmq.ROUTER))
        self.sock.setsockopt(zmq.LINGER, 0)
        self.url = f"tcp://127.0.0.1:{free_port()}"
        self.sock.bind(self.url)
        self.ident = b""
        self.kinds: list[str] = []  # of every message received

    def expect(self, kind: str, timeout: float = 5.0, **fields: object) -> dict:
        """The next message of ``kind`` (with these fields) the trainer sends, checked as the agent checks it."""
        deadline = time.monotonic() + timeout
        while self.sock.poll(max(1, int((deadline - time.monotonic()) * 1000))):
            self.ident, frame = self.sock.recv_multipart()
            msg = decode(frame)
            self.kinds.append(msg["t"])
            if msg["t"] == kind and all(msg.get(k) == v for k, v in fields.items()):
                return msg
        raise AssertionError(f"no {kind!r} message with {fields} within {timeout} s")

    def send(self, msg: dict) -> None:
        self.sock.send_multipart([self.ident, pack(msg)])

    def close(self) -> None:
        self.sock.close(linger=0)


@pytest.fixture
def agent() -> Iterator[FakeAgentSocket]:
    peer = FakeAgentSocket()
    yield peer
    peer.close()


def hello(run: str = "r1") -> dict:
    return {"run": run, "rank": 0, "session": "s1", "token": "5eed" * 8, "project": "p", "name": run, "config": {},
            "schema": {}, "host": "h", "pid": 1, "pid_started": 1.0, "created": 1.0}


@pytest.fixture
def outbox(agent) -> Iterator[Outbox]:
    box = Outbox(agent.url, hello(), heartbeat_interval=0.05, inbox=Inbox())
    agent.expect("hello")
    agent.send(message("welcome", run="r1", rank=0, seq=0))
    yield box
    box.stop()


def test_the_outbox_hands_a_resent_command_over_once_and_answers_a_resend_from_its_answer(agent, outbox):
    inbox = outbox.inbox
    for cid in ("c1", "c1", "c2"):  # c1 resent before it was answered
        agent.send(command(cid, "pause"))
    taken: list[dict] = []
    wait_until(lambda: taken.extend(inbox.take()) or len(taken) >= 2, timeout=5, what="both commands")
    assert [c["cid"] for c in taken] == ["c1", "c2"]
    outbox.ack(answer("c1", "pause"))
    first = agent.expect("cack", cid="c1")
    agent.send(command("c1", "pause"))  # the agent lost that ack and asks again
    assert agent.expect("cack", cid="c1") == first
    agent.send(command("c3", "resume"))
    wait_until(inbox.pending, timeout=5, what="the next command")
    assert [c["cid"] for c in inbox.take()] == ["c3"]  # c1 was not handed over again


def test_an_ack_for_an_id_the_outbox_never_received_still_goes_out_once(agent, outbox):
    outbox.ack(answer("k9", "checkpoint"))  # an unasked checkpoint's answer has no command behind it
    agent.expect("cack", cid="k9")
    agent.send(command("k9", "checkpoint"))  # a late resend of it is answered, never applied
    assert agent.expect("cack", cid="k9")["state"] == "applied"
    assert not outbox.inbox.pending()


def test_the_heartbeat_reports_the_paused_state_the_helm_set(agent, outbox):
    outbox.inbox.paused = True
    agent.expect("hb", paused=True)
    outbox.inbox.paused = False
    agent.expect("hb", paused=False)


def test_a_watcher_outbox_takes_no_commands(agent):
    box = Outbox(agent.url, hello("w1"), heartbeat_interval=0.05)
    try:
        agent.expect("hello", run="w1")
        agent.send(command("c1", "pause"))
        for _ in range(3):
            assert agent.expect("hb", run="w1")["paused"] is False
        assert "cack" not in agent.kinds
    finally:
        box.stop()


# --- a Run steered through the real outbox ----------------------------------------------------

def steer(agent: FakeAgentSocket, *commands: dict) -> tuple[pilothouse.Run, threading.Thread, list]:
    """A run whose training loop syncs until told to stop (in a thread); the commands go out once it said hello."""
    run = pilothouse.init("p", agent=agent.url, heartbeat=0.05)
    agent.expect("hello", run=run.id)
    agent.send(message("welcome", run=run.id, rank=0, seq=0))
    for cmd in commands:
        agent.send(cmd)
    deadline = time.monotonic() + 5.0
    while len(run._inbox._commands) < len(commands) and time.monotonic() < deadline:
        time.sleep(0.005)  # all received before the loop's first sync takes them (on a busy machine a stop came alone)
    stopped: list = []

    def loop() -> None:
        step = 0
        while not (ctl := run.sync(step)).stop:
            step += 1
            time.sleep(0.002)
        stopped.append((step, ctl))

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return run, thread, stopped


def test_a_run_told_to_stop_and_then_to_pause_stops(agent):
    run, thread, stopped = steer(agent, command("s", "stop"), command("p", "pause"))
    thread.join(timeout=5)
    assert stopped, "the run held at the pause after its stop was acknowledged"
    assert agent.expect("cack", cid="s")["state"] == "applied"
    assert agent.expect("cack", cid="p")["state"] == "rejected"
    run.finish(timeout=0.1)


def test_a_run_held_at_a_pause_stops_when_told_to(agent):
    run, thread, stopped = steer(agent, command("p", "pause"))
    paused_at = agent.expect("cack", cid="p")["step"]
    agent.expect("hb", paused=True)
    time.sleep(0.1)
    assert thread.is_alive() and run.paused  # held in sync at the pause
    agent.send(command("s", "stop"))
    thread.join(timeout=5)
    assert stopped and stopped[0][0] == paused_at  # it stops at the step it paused at
    assert agent.expect("cack", cid="s")["step"] == paused_at
    agent.expect("hb", paused=False)
    run.finish(timeout=0.1)

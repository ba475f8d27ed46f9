"""Steering with real processes: a trainer script, the agent, and commands from the CLI and client."""

from __future__ import annotations

import json
import re
import time

import pytest
from support.processes import finish, start_trainer
from support.processes import run_cli as cli
from support.runs import run_events
from support.sockets import as_owner
from support.waiting import wait_until

from pilothouse.client import AgentError, Client

LOOP = """
import json, os, tempfile
run = ph.init(project="steer", name=ARGS[0], agent=URL, heartbeat=0.2,
                 config={"lr": 1e-3, "kl_coef": 0.05, "group_size": 8, "mode": "grpo"},
                 tunable={"lr": {"min": 0.0, "max": 1.0}, "kl_coef": None, "group_size": {"choices": [4, 8, 16]},
                          "mode": None})
print(run.id, flush=True)
changes = []
run.on_change(lambda ch: changes.append(ch))
delay = float(ARGS[1])
for step in range(100000):
    ctl = run.sync(step)
    if ctl.checkpoint:
        path = os.path.join(ARGS[2], f"ckpt-{step}.pt")
        with tempfile.NamedTemporaryFile("w", dir=ARGS[2], delete=False) as tmp:
            tmp.write(json.dumps({"step": step, "lr": run.config["lr"]}))
        os.replace(tmp.name, path)
        run.checkpoint_saved(path, step)
    if ctl.stop:
        break
    run.log({"lr": run.config["lr"], "kl_coef": run.config["kl_coef"], "group_size": run.config["group_size"]},
            step=step)
    time.sleep(delay)
run.finish()
print(json.dumps({"stopped_at": step, "changes": changes}), flush=True)
"""


@pytest.fixture
def trainer(tmp_path, agent_proc):
    proc = start_trainer(tmp_path, LOOP, agent_proc.url, "loop", "0.01", str(tmp_path))
    run_id = proc.stdout.readline().strip()
    client = Client(agent_proc.url, timeout=5)
    wait_until(lambda: _run(client, run_id)["last_step"], what="the trainer's first steps")
    yield proc, run_id, client
    if proc.poll() is None:
        client.command(run_id, "stop", wait=10)
        finish(proc)
    client.close()


def _run(client: Client, run_id: str) -> dict:
    return next((r for r in client.runs() if r["id"] == run_id), {"last_step": None, "status": None})


def test_pause_holds_the_step_and_resume_releases_it(trainer, agent_proc):
    proc, run_id, client = trainer
    out = cli("pause", "loop", "--agent", agent_proc.url)
    assert out.returncode == 0, out.stderr
    paused_at = int(out.stdout.split("paused at step ")[1].split()[0])
    assert _run(client, run_id)["last_step"] == paused_at  # the answer and the run's step agree at once
    time.sleep(4)  # longer than --stale-after 3: heartbeats must keep the run "paused", not "stale"
    row = _run(client, run_id)
    assert row["status"] == "paused" and row["last_step"] == paused_at
    out = cli("resume", run_id, "--agent", agent_proc.url)
    assert out.returncode == 0 and f"resumed at step {paused_at}" in out.stdout
    wait_until(lambda: _run(client, run_id)["last_step"] > paused_at + 5, what="steps after resume")
    assert _run(client, run_id)["status"] == "running"
    for _ in range(3):  # and again: pause/resume is routine
        assert client.command(run_id, "pause")["state"] == "applied"
        assert client.command(run_id, "resume")["state"] == "applied"


def test_set_reaches_the_next_sync_with_types_kept(trainer, agent_proc):
    proc, run_id, client = trainer
    out = cli("set", "loop", "lr=5e-4", "group_size=16", "--agent", agent_proc.url)
    assert out.returncode == 0, out.stderr
    step = int(out.stdout.split("applied at step ")[1].split()[0])
    assert "lr=0.0005 group_size=16" in out.stdout
    client.command(run_id, "stop")
    result = json.loads(finish(proc).splitlines()[-1])
    assert result["changes"] == [{"lr": 5e-4, "group_size": 16}]
    steps, lrs, _ = client.series(run_id, "lr")
    assert set(lrs[steps < step]) == {1e-3} and set(lrs[steps >= step]) == {5e-4}  # from that very step on
    assert _run(client, run_id)["config"]["group_size"] == 16


@pytest.mark.parametrize("assignment, why", [
    ("lr=nan", "lr must be finite"),
    ("lr=2.0", r"lr=2.0 is out of range [0.0, 1.0]"),
    ("lr=fast", "lr must be float, got str"),
    ("group_size=2.5", "group_size must be int, got float"),
    ("group_size=5", "group_size=5 is not one of [4, 8, 16]"),
    ("momentum=0.9", "'momentum' is not a tunable hyperparameter of this run (tunable: group_size, kl_coef, lr, mode)"),
])
def test_bad_values_are_rejected_by_the_agent_and_change_nothing(trainer, agent_proc, assignment, why):
    proc, run_id, client = trainer
    out = cli("set", run_id, assignment, "kl_coef=0.5", "--agent", agent_proc.url)
    assert out.returncode == 1 and why in out.stderr, out.stderr
    client.command(run_id, "stop")
    result = json.loads(finish(proc).splitlines()[-1])
    assert result["changes"] == []  # all or nothing: the valid kl_coef did not slip through
    assert set(client.series(run_id, "kl_coef")[1]) == {0.05}


def test_checkpoint_is_written_and_reported(trainer, agent_proc, tmp_path):
    proc, run_id, client = trainer
    row = client.command(run_id, "checkpoint")
    assert row["state"] == "applied"
    path = row["applied"]["path"]
    assert path.endswith(f"ckpt-{row['step']}.pt") and json.loads(open(path).read())["step"] == row["step"]
    out = cli("events", run_id, "--agent", agent_proc.url)
    assert f"checkpoint saved at step {row['step']}: {path}" in out.stdout


def test_scheduled_change_applies_at_its_step(trainer, agent_proc):
    proc, run_id, client = trainer
    at = _run(client, run_id)["last_step"] + 60
    row = client.command(run_id, "set", {"kl_coef": 0.2}, at_step=at)
    assert row["state"] == "scheduled" and f"scheduled for step {at}" in row["detail"]
    wait_until(lambda: client.request("command_status", cid=row["cid"])["state"] == "applied", timeout=20,
               what="the scheduled change")
    assert client.request("command_status", cid=row["cid"])["step"] == at
    client.command(run_id, "stop")
    finish(proc)
    steps, vals, _ = client.series(run_id, "kl_coef")
    assert set(vals[steps < at]) == {0.05} and set(vals[steps >= at]) == {0.2}


def test_a_change_for_a_past_step_is_refused_with_the_current_step(trainer, agent_proc):
    """--at-step 5 on a run at step 767 was applied at once, silently."""
    proc, run_id, client = trainer
    wait_until(lambda: (_run(client, run_id)["last_step"] or 0) >= 20, what="the run past step 20")
    now = _run(client, run_id)["last_step"]
    out = cli("set", run_id, "kl_coef=0.3", "--at-step", "5", "--agent", agent_proc.url)
    said = re.search(r"--at-step 5 is in the past: the run is at step (\d+)", out.stderr)
    assert out.returncode == 1 and said and int(said[1]) >= now, out.stderr
    client.command(run_id, "stop")
    finish(proc)
    assert set(client.series(run_id, "kl_coef")[1]) == {0.05}


def test_a_trainer_refuses_a_past_step_the_agent_did_not_know_of():
    """The agent checks against the last step it stored; the trainer, at its own step, checks too."""
    from pilothouse.trainer.helm import Helm
    from pilothouse.trainer.inbox import Inbox

    acks = []
    helm = Helm({"lr": 0.1}, {"lr": {"type": "float", "above": 0}}, Inbox(), acks.append, lambda *a: None)
    ctl = helm.apply([{"cid": "c1", "cmd": "set", "values": {"lr": 0.5}, "at_step": 3}], 10)
    assert not ctl.changes and helm.config["lr"] == 0.1
    assert [(a["state"], a["step"], a["detail"]) for a in acks] == \
        [("rejected", 10, "--at-step 3 is in the past: the run is at step 10")]


def test_stop_ends_the_loop_and_later_commands_fail_clearly(trainer, agent_proc):
    proc, run_id, client = trainer
    out = cli("stop", run_id, "--agent", agent_proc.url)
    assert out.returncode == 0 and "stopping at step" in out.stdout
    result = json.loads(finish(proc).splitlines()[-1])
    wait_until(lambda: _run(client, run_id)["status"] == "finished", what="finished")
    out = cli("pause", run_id, "--agent", agent_proc.url)
    assert out.returncode == 1 and f"run {run_id} is finished: only a running run can be steered" in out.stderr
    out = cli("pause", "no-such-run", "--agent", agent_proc.url)
    assert out.returncode == 1 and "no run with id or name 'no-such-run'" in out.stderr
    assert result["stopped_at"] > 0


def test_a_retried_command_id_is_applied_once(tmp_path, agent_proc):
    # slow steps: the command waits at the agent while the trainer's heartbeats make it resend
    proc = start_trainer(tmp_path, LOOP, agent_proc.url, "slow", "2.5", str(tmp_path))
    run_id = proc.stdout.readline().strip()
    with Client(agent_proc.url) as client:
        wait_until(lambda: _run(client, run_id)["last_step"] is not None, what="first step")
        args = {"cid": "retry-me-1", "run": run_id, "cmd": "set", "values": {"lr": 2e-4}, "who": {"client": "test"}}
        first = client.request("command", **args)
        again = client.request("command", **args)  # a client retrying after a lost answer
        assert first["cid"] == again["cid"] == "retry-me-1"
        wait_until(lambda: client.request("command_status", cid="retry-me-1")["state"] == "applied", timeout=20,
                   what="the change")
        client.command(run_id, "stop", wait=20)
        result = json.loads(finish(proc).splitlines()[-1])
        assert result["changes"] == [{"lr": 2e-4}]
        events = run_events(client, run_id)
        assert sum(1 for e in events if e["event"] == "command" and e["cid"] == "retry-me-1") == 1
        assert sum(1 for e in events if e["event"] == "ack" and e["cid"] == "retry-me-1") == 1


def test_commands_to_a_crashed_trainer_are_closed(tmp_path, agent_proc):
    proc = start_trainer(tmp_path, LOOP, agent_proc.url, "doomed", "0.01", str(tmp_path))
    run_id = proc.stdout.readline().strip()
    with Client(agent_proc.url) as client:
        wait_until(lambda: _run(client, run_id)["last_step"], what="steps")
        proc.kill()
        proc.wait()
        row = client.command(run_id, "pause", wait=1)  # nobody left to answer
        assert row["state"] == "timeout"
        wait_until(lambda: client.request("command_status", cid=row["cid"])["state"] == "rejected", timeout=15,
                   what="the open command to be closed")
        assert "crashed" in client.request("command_status", cid=row["cid"])["detail"]


def test_a_checkpoint_saved_unasked_is_recorded_even_right_after_init(agent_proc):
    import pilothouse as ph

    run = ph.init(project="steer", name="eager", agent=agent_proc.url)
    run.checkpoint_saved("/ckpt/eager-7.pt", 7)  # before the agent even heard the hello
    assert run.finish()
    with Client(agent_proc.url) as c:
        events = run_events(c, run.id)
    saved = [e for e in events if e["event"] == "checkpoint"]
    assert len(saved) == 1 and saved[0]["step"] == 7 and saved[0]["applied"] == {"path": "/ckpt/eager-7.pt"}


# --- the agent answers a waiting client when the trainer's ack commits -------------------------

SLEEPER = """
run = ph.init(project="steer", name="sleeper", agent=URL, heartbeat=0.2, config={"lr": 0.1})
run.log({"lr": run.config["lr"]}, step=0)
print(run.id, flush=True)
time.sleep(float(ARGS[0]))  # no step boundary for a while: a command stays pending
step = 0
while not run.sync(step).stop:
    step += 1
    time.sleep(0.01)
run.finish()
"""


def _sleeper(tmp_path, url: str, seconds: float) -> tuple:
    """A trainer that sleeps ``seconds`` before its first step boundary, once the agent knows its run."""
    proc = start_trainer(tmp_path, SLEEPER, url, str(seconds))
    run_id = proc.stdout.readline().strip()
    with Client(url) as client:
        wait_until(lambda: _run(client, run_id)["status"] == "running", what="the sleeper's hello")
    return proc, run_id


def _query(url: str, op: str, timeout: float, **args) -> tuple[list[dict], float]:
    """One raw query; every message that comes back within ``timeout``, and when the first came."""
    import zmq

    from pilothouse.wire.messages import message, pack, unpack

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    as_owner(sock)
    sock.connect(url)
    try:
        sock.send(pack(message("q", id=7, op=op, args=args)))
        start, first, got = time.monotonic(), None, []
        while time.monotonic() - start < timeout:
            if sock.poll(50):
                got.append(unpack(sock.recv()))
                first = first or time.monotonic() - start
                if got[-1].get("t") in ("r", "err"):
                    timeout = min(timeout, time.monotonic() - start + 0.3)  # anything more would be a second answer
        return got, first or timeout
    finally:
        sock.close()


def test_a_waiting_command_is_answered_once_when_the_trainer_acks(tmp_path, agent_proc):
    """The first and only answer to a waiting `command` is the trainer's own: no early 'pending'
    reply, no polling; and it comes after the ack event was committed."""
    proc, run_id = _sleeper(tmp_path, agent_proc.url, 2.5)
    got, after = _query(agent_proc.url, "command", 20, cid="held-set-1", run=run_id, cmd="set",
                        values={"lr": 0.5}, who={"client": "test"}, wait=15)
    assert [m["t"] for m in got] == ["r"] and got[0]["id"] == 7, got
    row = got[0]["data"]
    assert row["state"] == "applied" and row["applied"] == {"lr": 0.5}
    assert after > 1.0  # the trainer was asleep: held until its next step boundary, not answered at once
    with Client(agent_proc.url) as client:
        acks = run_events(client, run_id, "ack")
        assert [a["cid"] for a in acks] == ["held-set-1"]
        client.command(run_id, "stop", wait=10)
    finish(proc)


def test_a_held_request_ends_at_its_wait_and_the_status_follows(tmp_path, agent_proc):
    proc, run_id = _sleeper(tmp_path, agent_proc.url, 6)
    got, after = _query(agent_proc.url, "command", 10, cid="held-pause-1", run=run_id, cmd="pause",
                        who={"client": "test"}, wait=0.5)
    assert [m["t"] for m in got] == ["r"] and got[0]["data"]["state"] == "pending"
    assert 0.4 < after < 3.0  # the wait, give or take the agent's 1 s timer
    got, _ = _query(agent_proc.url, "command_status", 20, cid="held-pause-1", wait=15)
    assert got[0]["data"]["state"] == "applied" and got[0]["data"]["detail"].startswith("paused at step")
    with Client(agent_proc.url) as client:
        assert client.command(run_id, "stop", wait=10)["state"] == "applied"
    finish(proc)


@pytest.mark.parametrize("wait", [-1, "soon", True, float("nan"), float("inf"), [1]])
def test_a_bad_wait_is_refused_and_records_nothing(agent_proc, logged_run_id, wait):
    got, _ = _query(agent_proc.url, "command", 5, cid="bad-wait-1", run=logged_run_id, cmd="pause",
                    who={"client": "test"}, wait=wait)
    assert [m["t"] for m in got] == ["err"] and "wait must be" in got[0]["msg"]
    with Client(agent_proc.url) as client:
        with pytest.raises(AgentError, match="no command with id"):
            client.request("command_status", cid="bad-wait-1")
        assert run_events(client, logged_run_id, "command") == []


@pytest.fixture
def logged_run_id(agent_proc, tmp_path):
    proc, run_id = _sleeper(tmp_path, agent_proc.url, 30)
    yield run_id
    proc.kill()
    proc.wait()

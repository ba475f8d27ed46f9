"""A run belongs to its process, and a resume loses nothing: real trainer processes resuming one
run id, a second process on a live run, and raw frames that claim to be the trainer."""

from __future__ import annotations

import time

from support.processes import finish, start_trainer
from support.runs import run_events
from support.sockets import as_owner
from support.waiting import wait_until

from pilothouse.client import Client

RESUMER = """
run = ph.init(project="resume", name="again", id=ARGS[0], agent=URL, heartbeat=0.2)
first, count = int(ARGS[1]), int(ARGS[2])
for step in range(first, first + count):
    run.log({"x": float(step)}, step=step)
print(run.finish(timeout=30), run.stats["dropped_records"], flush=True)
"""


def test_a_run_resumed_by_id_keeps_every_point_of_every_process(tmp_path, agent_proc):
    """Three processes in turn open run id X and log 10,000 points each: 30,000 stored, each resume
    an event, nothing counted lost.  (Each new process numbers its records from 1 again.)"""
    for k in range(3):
        proc = start_trainer(tmp_path, RESUMER, agent_proc.url, "resumed1", str(k * 10_000), "10000", name=f"t{k}")
        assert finish(proc).split() == ["True", "0"]
    with Client(agent_proc.url) as client:
        steps, vals, _ = client.series("resumed1", "x")
        assert sorted(steps.tolist()) == list(range(30_000)) and vals.tolist() == [float(s) for s in steps.tolist()]
        row = next(r for r in client.runs() if r["id"] == "resumed1")
        assert row["lost_records"] == 0 and row["status"] == "finished"
        resumes = [e for e in run_events(client, "resumed1", "status") if "resumed by pid" in e.get("reason", "")]
        assert len(resumes) == 2


def test_a_step_logged_again_after_a_resume_is_kept(tmp_path, agent_proc):
    for k, (first, count) in enumerate([(0, 100), (50, 100)]):  # the second process goes back 50 steps
        proc = start_trainer(tmp_path, RESUMER, agent_proc.url, "overlap1", str(first), str(count), name=f"o{k}")
        assert finish(proc).split()[0] == "True"
    with Client(agent_proc.url) as client:
        steps, _, _ = client.series("overlap1", "x")
    assert len(steps) == 200 and sorted(steps.tolist()) == sorted([*range(100), *range(50, 150)])


HOLDER = """
run = ph.init(project="own", name="holder", id=ARGS[0], agent=URL, heartbeat=0.2, config={"lr": 0.1})
print(run.id, flush=True)
step = 0
while not run.sync(step).stop:
    run.log({"lr": run.config["lr"]}, step=step)
    step += 1
    time.sleep(0.01)
print("lr", run.config["lr"], flush=True)
run.finish()
"""

INTRUDER = """
run = ph.init(project="own", name="intruder", id=ARGS[0], agent=URL, heartbeat=0.2)
for step in range(20):
    run.log({"lr": 99.0}, step=10_000 + step)
print(run.flush(3), run.stats["last_error"], flush=True)
run.finish(timeout=1)
"""


def test_a_second_process_cannot_write_to_a_live_run(tmp_path, agent_proc):
    holder = start_trainer(tmp_path, HOLDER, agent_proc.url, "owned1", name="holder")
    assert holder.stdout.readline().strip() == "owned1"
    client = Client(agent_proc.url)
    try:
        wait_until(lambda: len(client.series("owned1", "lr")[0]) > 5, what="the holder's steps")
        intruder = start_trainer(tmp_path, INTRUDER, agent_proc.url, "owned1", name="intruder")
        flushed, _, reason = finish(intruder).strip().partition(" ")
        assert flushed == "False" and "is open in another process" in reason
        steps, vals, _ = client.series("owned1", "lr")
        assert steps.max() < 10_000 and set(vals.tolist()) == {0.1}  # not one point of the intruder's
        refused = run_events(client, "owned1", "refused")
        assert refused and refused[0]["detail"].startswith("run owned1 rank 0 belongs to pid")
        assert client.command("owned1", "set", {"lr": 0.2})["state"] == "applied"
        client.command("owned1", "stop")
        assert "lr 0.2" in finish(holder)
    finally:
        client.close()


def test_forged_acks_and_heartbeats_do_not_speak_for_the_trainer(tmp_path, agent_proc):
    """A peer that answers the run's commands (every 1 ms) and beats its heart: the operator's
    "applied" still comes from the trainer, with the trainer's own value."""
    import zmq

    from pilothouse.wire.messages import message, pack

    holder = start_trainer(tmp_path, HOLDER, agent_proc.url, "owned2", name="holder")
    assert holder.stdout.readline().strip() == "owned2"
    forger = as_owner(zmq.Context.instance().socket(zmq.DEALER))
    forger.setsockopt(zmq.LINGER, 0)
    forger.connect(agent_proc.url)
    client = Client(agent_proc.url)
    try:
        wait_until(lambda: len(client.series("owned2", "lr")[0]) > 5, what="the holder's steps")
        for i in range(200):  # heartbeats and acks for commands it guesses, as fast as it can
            forger.send(pack(message("hb", run="owned2", rank=0, session="forger", step=i, paused=True)))
            time.sleep(0.001)
        row = client.command("owned2", "set", {"lr": 0.5})
        assert row["state"] == "applied" and row["applied"] == {"lr": 0.5}
        forger.send(pack(message("cack", run="owned2", rank=0, session="forger", cid=row["cid"], cmd="set",
                                 state="applied", step=1, detail="forged", applied={"lr": 7.0})))
        assert next(r for r in client.runs() if r["id"] == "owned2")["status"] == "running"  # no forged pause
        client.command("owned2", "stop")
        assert "lr 0.5" in finish(holder)
        acks = [e for e in run_events(client, "owned2", "ack") if e["cmd"] == "set"]
        assert [a["detail"] for a in acks] == [row["detail"]] and "forged" not in row["detail"]
        assert run_events(client, "owned2", "refused")
    finally:
        forger.close()
        client.close()

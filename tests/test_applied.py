"""The plain Run API's side of "applied means applied": a change a callback refuses is undone,
an acknowledgement says what is in effect and why, and a checkpoint asked while paused is saved
at once by a registered save function (or, without one, answered as waiting for the resume)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from support.processes import finish, start_trainer
from support.waiting import wait_until

LOOP = """
import json, os
from pilothouse import Effect, Refused
run = ph.init(project="applied", name=ARGS[0], agent=URL, heartbeat=0.2,
              config={"lr": 1e-3, "clip": 1.0, "warmup": 10})
print(run.id, flush=True)
used = {"lr": run.config["lr"], "clip": run.config["clip"]}


def optimizer(changes):  # the training code's own copy of the settings, one key after the other
    for key, value in changes.items():
        if key == "clip" and value > 8:
            raise Refused("clip above 8 would overflow")
        used[key] = value
    if "lr" in changes:
        return {"lr": Effect(changes["lr"] / 2, "halved during warmup")}


def clip(changes):
    if changes["clip"] > 5:
        raise Refused("clip above 5 would not fit the fp16 range")
    used["clip"] = changes["clip"]


run.on_change(optimizer, keys=["lr", "clip"])
run.on_change(clip, keys=["clip"])
if ARGS[1] == "saver":
    def save(step):
        path = os.path.join(ARGS[2], f"ckpt-{step}.json")
        with open(path, "w") as f:
            json.dump({"step": step, **used}, f)
        return path
    run.on_checkpoint(save)
for step in range(100000):
    ctl = run.sync(step)
    if ctl.checkpoint:  # without a saver, the loop saves
        path = os.path.join(ARGS[2], f"loop-{step}.json")
        open(path, "w").write("{}")
        run.checkpoint_saved(path, step)
    if ctl.stop:
        break
    run.log({"loss": 1.0 / (step + 1), "lr": used["lr"], "clip": used["clip"]}, step=step)
    time.sleep(0.01)
print(json.dumps({"used": used, "config": dict(run.config)}), flush=True)
run.finish()
"""


def _start(tmp_path, url, mode):
    proc = start_trainer(tmp_path, LOOP, url, mode, mode, str(tmp_path))
    return proc, proc.stdout.readline().strip()


def test_refused_change_is_undone_and_effects_are_said(agent_proc, tmp_path):
    proc, run_id = _start(tmp_path, agent_proc.url, "nosaver")
    with agent_proc.client() as c:
        wait_until(lambda: c.series(run_id, "loss")[0].size > 3, what="first steps")
        refused = c.command(run_id, "set", {"clip": 6.0}, wait=10)
        assert refused["state"] == "rejected" and "fp16" in refused["detail"], refused
        halfway = c.command(run_id, "set", {"lr": 9e-3, "clip": 9.0}, wait=10)
        assert halfway["state"] == "rejected" and "overflow" in halfway["detail"], halfway
        wait_until(lambda: c.series(run_id, "clip")[0][-1] > halfway["step"] + 2, what="steps after the refusals")
        _, clips, _ = c.series(run_id, "clip")
        _, lrs, _ = c.series(run_id, "lr")
        assert set(clips.tolist()) == {1.0}  # the first callback had taken clip=6: it was put back at once
        assert set(lrs.tolist()) == {1e-3}  # and lr=9e-3, taken before clip=9 was refused in the same callback
        changed = c.command(run_id, "set", {"lr": 4e-3, "clip": 2.0}, wait=10)
        assert changed["state"] == "applied", changed
        assert changed["applied"] == {"lr": 2e-3, "clip": 2.0}  # in effect, not as asked
        assert "lr=0.002 (halved during warmup)" in changed["detail"]
        run = next(r for r in c.runs() if r["id"] == run_id)
        assert run["config"]["lr"] == 4e-3 and run["config"]["clip"] == 2.0  # the settings, as set
        c.command(run_id, "stop", wait=10)
        result = json.loads(finish(proc).splitlines()[-1])
    assert result["used"] == {"lr": 4e-3, "clip": 2.0} and result["config"]["clip"] == 2.0


def test_checkpoint_while_paused_with_a_save_function(agent_proc, tmp_path):
    proc, run_id = _start(tmp_path, agent_proc.url, "saver")
    with agent_proc.client() as c:
        wait_until(lambda: c.series(run_id, "loss")[0].size > 3, what="first steps")
        paused = c.command(run_id, "pause", wait=10)
        at = paused["step"]
        started = time.monotonic()
        saved = c.command(run_id, "checkpoint", wait=10)
        assert saved["state"] == "applied" and saved["step"] == at and time.monotonic() - started < 2, saved
        assert json.loads(Path(saved["applied"]["path"]).read_text())["step"] == at
        time.sleep(0.5)
        run = next(r for r in c.runs() if r["id"] == run_id)
        assert run["status"] == "paused" and run["last_step"] == at  # still paused, at the same step
        assert c.command(run_id, "resume", wait=10)["state"] == "applied"
        running = c.command(run_id, "checkpoint", wait=10)  # and while running, at the next step boundary
        assert running["state"] == "applied" and running["step"] > at
        c.command(run_id, "stop", wait=10)
        finish(proc)


def test_checkpoint_while_paused_without_one_waits_for_the_resume(agent_proc, tmp_path):
    proc, run_id = _start(tmp_path, agent_proc.url, "nosaver")
    with agent_proc.client() as c:
        wait_until(lambda: c.series(run_id, "loss")[0].size > 3, what="first steps")
        at = c.command(run_id, "pause", wait=10)["step"]
        started = time.monotonic()
        waiting = c.command(run_id, "checkpoint", wait=10)
        assert waiting["state"] == "scheduled" and time.monotonic() - started < 2, waiting
        assert "saved when the run resumes" in waiting["detail"] and "run.on_checkpoint" in waiting["detail"]
        c.command(run_id, "resume", wait=10)
        wait_until(lambda: c.request("command_status", cid=waiting["cid"])["state"] == "applied",
                   what="the checkpoint after the resume")
        done = c.request("command_status", cid=waiting["cid"])
        assert done["step"] == at and done["applied"]["path"].endswith(f"loop-{at}.json")
        c.command(run_id, "stop", wait=10)
        finish(proc)

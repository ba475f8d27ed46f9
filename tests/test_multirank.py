"""A real 4-rank torch.distributed job (gloo, CPU, started by torchrun): every rank pauses,
applies a change, checkpoints and stops at the same step, and nothing hangs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import wait_until

from pilothouse.client import Client

torch = pytest.importorskip("torch")

WORLD = 4
SCRIPT = """
import json, sys, time
import torch
import torch.distributed as dist
import pilothouse as ph

dist.init_process_group("gloo")
url, out = sys.argv[1], sys.argv[2]
run = ph.init(project="ddp", name="four-ranks", agent=url, config={"lr": 0.1}, heartbeat=0.2)
rank = dist.get_rank()
if rank == 0:
    print(run.id, flush=True)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=run.config["lr"])


def follow(changes):
    for group in opt.param_groups:
        group["lr"] = changes.get("lr", group["lr"])


run.on_change(follow)
trace = open(f"{out}/rank{rank}.jsonl", "w")
for step in range(100_000):
    ctl = run.sync(step)
    trace.write(json.dumps({"step": step, "t": time.time(), "lr": opt.param_groups[0]["lr"],
                            "ckpt": ctl.checkpoint, "stop": ctl.stop}) + "\\n")
    trace.flush()
    if ctl.checkpoint and rank == 0:
        run.checkpoint_saved(f"{out}/ckpt-{step}", step)
    if ctl.stop:
        break
    grad = torch.ones(1)
    dist.all_reduce(grad)  # the job's own collective, as DDP's gradient all-reduce
    run.log({"loss": 1.0 / (step + 1)}, step=step)
    time.sleep(0.01)
run.finish()
dist.destroy_process_group()
"""


def traces(folder) -> list[list[dict]]:
    return [[json.loads(line) for line in open(folder / f"rank{r}.jsonl")] for r in range(WORLD)]


@pytest.mark.timeout(180)
def test_four_ranks_act_at_the_same_step(tmp_path, agent_proc):
    script = tmp_path / "ddp.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            f"--nproc_per_node={WORLD}", str(script), agent_proc.url, str(tmp_path)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        run_id = job.stdout.readline().strip()
        assert run_id, job.stderr.read()
        with Client(agent_proc.url) as c:
            wait_until(lambda: any(r["id"] == run_id and (r["last_step"] or 0) > 5 for r in c.runs()),
                       timeout=60, what="the job's first steps")
            paused = c.command(run_id, "pause")
            assert paused["state"] == "applied", paused
            time.sleep(2.0)
            assert c.command(run_id, "resume")["state"] == "applied"
            changed = c.command(run_id, "set", {"lr": 0.05})
            assert changed["state"] == "applied", changed
            saved = c.command(run_id, "checkpoint")
            assert saved["state"] == "applied" and saved["applied"]["path"].endswith(f"ckpt-{saved['step']}")
            stopped = c.command(run_id, "stop")
            assert stopped["state"] == "applied", stopped["detail"]
        job.wait(timeout=60)
        assert job.returncode == 0, job.stderr.read()
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()

    for trace in traces(tmp_path):
        gaps = [(b["t"] - a["t"], b["step"]) for a, b in zip(trace, trace[1:])]
        longest, at = max(gaps)
        assert longest > 1.5 and at == paused["step"], "every rank held at the pause step"
        assert next(t["step"] for t in trace if t["lr"] == 0.05) == changed["step"]
        assert [t["step"] for t in trace if t["ckpt"]] == [saved["step"]]
        assert trace[-1]["stop"] and trace[-1]["step"] == stopped["step"]

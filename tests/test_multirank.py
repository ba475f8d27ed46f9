"""A real 4-rank torch.distributed job (gloo, CPU, started by torchrun) over two agents, as two nodes
would be: every rank pauses, applies a change, checkpoints and stops at the same step, nothing hangs,
and either agent knows the whole job (``pilothouse runs --job``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from support.processes import AgentProcess
from support.sockets import free_port
from support.waiting import wait_until

from pilothouse.client import Client

torch = pytest.importorskip("torch")

WORLD = 4
SCRIPT = """
import json, sys, time
import torch
import torch.distributed as dist
import pilothouse as ph

dist.init_process_group("gloo")
urls, out = sys.argv[1].split(","), sys.argv[2]
rank = dist.get_rank()
url = urls[rank * len(urls) // dist.get_world_size()]  # ranks 0-1 on one "node's" agent, 2-3 on the other's
run = ph.init(project="ddp", name="four-ranks", agent=url, config={"lr": 0.1}, heartbeat=0.2)
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
    other = AgentProcess(tmp_path / "other-agent", free_port()).start()
    try:
        _steer_and_check(tmp_path, script, env, agent_proc.url, other.url)
    finally:
        other.stop()


def _steer_and_check(tmp_path, script, env, url, other_url) -> None:
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            f"--nproc_per_node={WORLD}", str(script), f"{url},{other_url}", str(tmp_path)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        run_id = job.stdout.readline().strip()
        assert run_id, job.stderr.read()
        with Client(url) as c:
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

    host = socket.gethostname()
    for asked in (url, other_url):  # either agent of the job leads to all of it
        out = subprocess.run([sys.executable, "-m", "pilothouse", "runs", "--job", run_id, "--agent", asked, "--json"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        nodes = json.loads(out.stdout)["nodes"]
        assert [(n["host"], n["agent"], n["ranks"]) for n in nodes] == [(host, url, [0, 1]), (host, other_url, [2, 3])]
        assert [n["status"] for n in nodes] == ["finished", "finished"]
        assert all(n["last_step"] is not None for n in nodes)
    text = subprocess.run([sys.executable, "-m", "pilothouse", "runs", "--job", "four-ranks", "--agent", other_url],
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 0 and "2 nodes, 4 ranks" in text.stdout and "0-1" in text.stdout, text
    assert f"pilothouse gui --agent {url} --agent {other_url}" in text.stdout

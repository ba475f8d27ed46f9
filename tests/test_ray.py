"""Ray: an agent on each node of a real two-node local cluster, actors that find theirs unasked, and
the driver's step loop steering every actor at one step (examples/ray_grpo.py, run as users run it)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
from ray.cluster_utils import Cluster
from support.paths import ROOT
from support.waiting import wait_until

from pilothouse.client import Client, reachable
from pilothouse.ray import agent_here, start_agents


def agents_of(data: str) -> list[psutil.Process]:
    """The agent processes whose data dir lies under ``data`` (ours, by their command line)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "agent" in cmd and any(a.startswith(data) for a in cmd):
            found.append(p)
    return found


def by_rank(client: Client, run: str, metric: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{rank: (steps, values)} of one metric of ``run`` on one agent."""
    out: dict[int, list] = {}
    for page in client.history(run, ["m"]):
        for e in page.entries:
            if e.metric == metric:
                out.setdefault(e.rank, []).append((np.frombuffer(e.steps, np.int64), np.frombuffer(e.vals)))
    return {r: (np.concatenate([s for s, _ in c]), np.concatenate([v for _, v in c])) for r, c in out.items()}


@pytest.mark.timeout(240)
def test_a_two_node_job_is_steered_at_one_step_for_every_actor(tmp_path):
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    data = str(tmp_path / "agents")
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        with open(tmp_path / "driver.err", "w") as err:  # a file, not a pipe: Ray's forwarded logs fill no buffer
            driver = subprocess.Popen([sys.executable, str(ROOT / "examples/ray_grpo.py"), "--address", cluster.address,
                                       "--steps", "0", "--pace", "0.05", "--agent-port", "0",
                                       "--agent-data", data + "/{node}", "--checkpoint-dir", str(tmp_path / "ckpt")],
                                      cwd=tmp_path, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            started = json.loads(driver.stdout.readline())
            agents, run = started["agents"], started["run"]
            assert len(agents) == 2 and len(set(agents.values())) == 2, "not one agent per node"
            assert set(started["workers"]) == set(agents), "the rollout workers do not span both nodes"
            assert started["here"] in agents.values(), "the driver did not find its node's agent"
            assert len(agents_of(data)) == 2
            with Client(started["here"]) as c:
                wait_until(lambda: (next(r for r in c.runs() if r["id"] == run).get("last_step") or 0) >= 3,
                           what="the job's first steps", timeout=60)
                paused = c.command(run, "pause", wait=20)
                assert paused["state"] == "applied", paused
                held = paused["step"]
                changed = c.command(run, "set", {"temperature": 0.5, "lr": 1e-3}, wait=20)
                assert changed["state"] == "applied" and changed["step"] == held, changed
                assert changed["applied"] == {"temperature": 0.5, "lr": 1e-3}  # the actors' own values
                saved = c.command(run, "checkpoint", wait=20)
                assert saved["state"] == "applied" and saved["step"] == held, saved
                assert (tmp_path / "ckpt" / run / f"step-{held}.pt").is_file()
                assert c.command(run, "resume", wait=20)["state"] == "applied"
                wait_until(lambda: (next(r for r in c.runs() if r["id"] == run).get("last_step") or 0) >= held + 3,
                           what="steps after the resume", timeout=60)
                assert c.command(run, "stop", wait=20)["state"] == "applied"
            driver.wait(timeout=60)
            assert driver.returncode == 0, (tmp_path / "driver.err").read_text()[-3000:]
        finally:
            if driver.poll() is None:
                driver.send_signal(signal.SIGINT)
                driver.wait(timeout=30)

        temps: dict[int, tuple] = {}
        lrs: dict[int, tuple] = {}
        for url in agents.values():  # each worker logged to its own node's agent
            with Client(url) as c:
                assert any(r["id"] == run for r in c.runs()), f"the run never reached the agent at {url}"
                temps.update(by_rank(c, run, "worker/temperature"))
                lrs.update(by_rank(c, run, "learner/lr"))
        assert sorted(temps) == [2, 3] and sorted(lrs) == [1]
        for rank, (steps, values) in {**temps, **lrs}.items():
            before, after = (1.0, 0.5) if rank in temps else (3e-3, 1e-3)
            assert steps.max() >= held + 2, f"rank {rank} did not go on after the resume"
            assert np.array_equal(steps, np.arange(steps.size)), f"rank {rank} skipped or repeated a step"
            np.testing.assert_array_equal(values, np.where(steps < held, before, after),
                                          err_msg=f"rank {rank} did not switch exactly at step {held}")
        def job_nodes() -> list[dict]:
            job = subprocess.run([sys.executable, "-m", "pilothouse", "runs", "--job", run, "--agent",
                                  started["here"], "--json"], capture_output=True, text=True, timeout=60)
            assert job.returncode == 0, job.stderr
            return json.loads(job.stdout)["nodes"]  # the driver's agent knows every agent of the job

        nodes = job_nodes()
        assert sorted(n["agent"] for n in nodes) == sorted(agents.values())
        deadline = time.monotonic() + 30  # a finish the agent had not taken when its rank stopped waiting (load)
        while [n["status"] for n in nodes] != ["finished", "finished"] and time.monotonic() < deadline:
            time.sleep(1)
            nodes = job_nodes()
        assert [n["status"] for n in nodes] == ["finished", "finished"], \
            (nodes, (tmp_path / "driver.err").read_text()[-3000:])  # each with its last rank there
        assert len(agents_of(data)) == 2, "an agent ended with the driver: it must outlive it"
        killed = agents_of(data)[0]
        url = killed.cmdline()[killed.cmdline().index("--bind") + 1]
        killed.kill()  # the actor starts its agent again, on the same URL, with its journal
        killed.wait(10)
        wait_until(lambda: len(agents_of(data)) == 2, what="the killed agent started again", timeout=30)
        assert url in agents.values()
        with Client(url) as c:
            wait_until(lambda: reachable(url), what="the restarted agent answering", timeout=30)
            assert any(r["id"] == run for r in c.runs()), "the restarted agent lost the run"
    finally:
        cluster.shutdown()
    deadline = time.monotonic() + 20
    while agents_of(data) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not agents_of(data), "an agent outlived its cluster"


@pytest.mark.parametrize("port", [-1, 65536, "7766", True, 1.5])
def test_a_bad_port_is_refused_before_anything_starts(port):
    with pytest.raises(ValueError, match="port must be"):
        start_agents(port=port)


def test_start_agents_outside_a_ray_job_says_what_to_do():
    with pytest.raises(RuntimeError, match=r"ray.init\(\)"):
        start_agents(port=0)
    assert agent_here() is None  # and a trainer outside Ray is not sent looking for one

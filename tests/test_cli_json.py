"""``--json`` on the read commands that lacked it (issue 35: scripts and agents parse them): `tail`,
`agents`, `keys show` and `gc --dry-run`, each against real processes, each line standard JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.paths import ROOT
from support.processes import finish, run_cli, start_trainer

import pilothouse as ph


def strict(line: str):
    """Standard JSON only: a bare NaN or Infinity fails the test."""
    return json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c} in {line}"))


def test_tail_json_prints_the_run_then_steps_then_the_ending_event(tmp_path, agent_proc):
    trainer = start_trainer(tmp_path, """
run = ph.init(project="t", name="tailed-json", agent=URL)
print(run.id, flush=True)
time.sleep(1.5)
for s in range(30):
    run.log({"loss": math.nan if s == 7 else 1.0 / (s + 1), "reward/mean": s / 30}, step=s)
    time.sleep(0.02)
run.finish()
""", agent_proc.url)
    run_id = trainer.stdout.readline().strip()
    tail = subprocess.Popen([sys.executable, "-m", "pilothouse", "tail", run_id, "--json", "--metric", "loss",
                             "--agent", agent_proc.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)
    finish(trainer)
    out, err = tail.communicate(timeout=30)
    assert tail.returncode == 0, err
    lines = [strict(line) for line in out.splitlines()]
    assert lines[0]["run"] == run_id and lines[0]["name"] == "tailed-json" and lines[0]["status"] == "running"
    steps = {line["step"]: line["values"] for line in lines if "values" in line}
    assert sorted(steps) == list(range(30))
    assert steps[7] == {"loss": "nan"} and steps[3] == {"loss": 0.25}  # --metric chose loss alone
    assert lines[-1]["event"] == "status" and lines[-1]["status"] == "finished"


def test_agents_json_lists_each_agent_with_its_runs(agent_proc):
    ph.init(project="j", name="listed", agent=agent_proc.url).finish()
    out = run_cli("agents", "--json")
    assert out.returncode == 0, out.stderr
    [agent] = strict(out.stdout)
    assert (agent["url"], agent["pid"], agent["runs"]) == (agent_proc.url, agent_proc.proc.pid, 1)
    assert agent["data"] == str(agent_proc.data.resolve())


def test_gc_dry_run_json_says_what_would_go_and_removes_nothing(agent_proc):
    run = ph.init(project="j", name="old", agent=agent_proc.url)
    run.log({"x": 1.0}, step=0)
    run.finish()
    out = run_cli("gc", "--older-than", "0s", "--dry-run", "--json", "--agent", agent_proc.url)
    assert out.returncode == 0, out.stderr
    plan = strict(out.stdout)
    assert [r["id"] for r in plan["runs"]] == [run.id] and plan["left"] < plan["total"]
    assert run_cli("gc", "--older-than", "0s", "--json", "--agent", agent_proc.url).returncode == 2
    with agent_proc.client() as client:
        assert run.id in {r["id"] for r in client.runs()}


def test_keys_show_json_holds_the_public_keys_allowed_clients_and_trusted_agents(tmp_path):
    keys = str(tmp_path / "keys")
    assert run_cli("keys", "init", "--keys", keys).returncode == 0
    text = run_cli("keys", "show", "--keys", keys).stdout
    publics = {line.split()[0]: line.split()[-1] for line in text.splitlines() if "public key" in line}
    client_key = publics["client"]
    assert run_cli("keys", "allow", client_key, "--name", "laptop", "--keys", keys).returncode == 0
    assert run_cli("keys", "trust", "tcp://node7:7767", publics["agent"], "--keys", keys).returncode == 0
    out = run_cli("keys", "show", "--json", "--keys", keys)
    assert out.returncode == 0, out.stderr
    assert strict(out.stdout) == {"agent": publics["agent"], "client": client_key, "allowed": {client_key: "laptop"},
                                  "trusted": {"tcp://node7:7767": publics["agent"]}}

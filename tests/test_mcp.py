"""`pilothouse mcp`: the official MCP client over stdio, against a real agent and a real trainer.

One server per mode for the module (read-only, and --allow-steer), one trainer whose reward collapses
at step 70 (a NaN at step 30), with rollouts and a firing alert; the tests run in file order on one
worker (the steering test ends by stopping the trainer)."""

from __future__ import annotations

import getpass
import json
import math
import socket
import subprocess
import sys

import pytest
from support.mcp_session import McpSession, text
from support.processes import AgentProcess, finish, run_cli, start_trainer
from support.sockets import free_port
from support.waiting import wait_until

import pilothouse as ph
from pilothouse.mcp_tools import history
from pilothouse.mcp_tools.reach import Reach, ToolFailure
from pilothouse.security import Keyring

pytestmark = pytest.mark.xdist_group("mcp")

READS = {"list_runs", "run_summary", "metric_history", "rollouts", "search_rollouts", "events", "alerts"}
STEERS = {"pause", "resume", "checkpoint", "stop", "set_hyperparameters"}

# reward/mean rises to 0.69 by step 69, then collapses to 0.05; NaN at step 30; logged for steps 0..99 only,
# then the loop keeps syncing (it stays steerable) and prints lr after each change it applies
TRAINER = """
import os
run = ph.init(project="mcp", name="grpo", agent=URL, config={"lr": 1e-3, "batch": 32}, heartbeat=0.2,
              alerts=[{"name": "reward-collapse", "kind": "below", "metric": "reward/mean", "threshold": 0.2,
                       "for_steps": 5}])
print(run.id, flush=True)
for step in range(100000):
    ctl = run.sync(step)
    if ctl.checkpoint:
        path = os.path.join(ARGS[0], f"ckpt-{step}.pt")
        open(path, "w").write(str(step))
        run.checkpoint_saved(path, step)
    if ctl.stop:
        break
    if ctl.changes:
        print(f"lr={run.config['lr']!r}", flush=True)
    if step < 100:
        reward = math.nan if step == 30 else (step / 100 if step < 70 else 0.05)
        run.log({"reward/mean": reward, "loss": 1.0 / (step + 1)}, step=step)
    if step in (50, 90):
        good = step == 50
        run.log_rollouts(step, [{"prompt": "peel a carrot", "completion": "with a knife" * (300 if good else 1),
                                 "reward": 1.0 if good else 0.0},
                                {"prompt": "peel a carrot", "completion": "no", "reward": 0.0},
                                {"prompt": "add 2+2", "completion": "4", "reward": 1.0 if good else 0.0},
                                {"prompt": "add 2+2", "completion": "5", "reward": 0.0}])
    time.sleep(0.02)
run.finish()
print("finished", flush=True)
"""


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    proc = AgentProcess(tmp_path_factory.mktemp("mcp") / "agent", free_port(), ["--stale-after", "3"]).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def trainer(agent, tmp_path_factory):
    """(process, run id): logged steps 0..99 and its rollouts, still running."""
    folder = tmp_path_factory.mktemp("trainer")
    proc = start_trainer(folder, TRAINER, agent.url, str(folder))
    run_id = proc.stdout.readline().strip()
    with agent.client() as client:
        wait_until(lambda: (row := _row(client, run_id)) and (row["last_step"] or 0) >= 99 and row["alerts"],
                   timeout=30, what="the trainer's first 100 steps and its alert")
    yield proc, run_id
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def reader(agent, tmp_path_factory):
    session = McpSession(["--agent", agent.url], env=_env(tmp_path_factory))
    yield session
    session.close()


@pytest.fixture(scope="module")
def steerer(agent, tmp_path_factory):
    session = McpSession(["--agent", agent.url, "--allow-steer"], env=_env(tmp_path_factory))
    yield session
    session.close()


def _env(tmp_path_factory) -> dict[str, str]:
    """A module-scoped process starts before the per-test keyring fixture: its own empty keys and runtime dirs."""
    home = tmp_path_factory.mktemp("mcp-env")
    return {"PILOTHOUSE_KEYS": str(home / "no-keys"), "PILOTHOUSE_RUNTIME": str(home / "runtime")}


def _row(client, run_id: str) -> dict | None:
    return next((r for r in client.runs() if r["id"] == run_id), None)


def _commands(agent, run_id: str) -> int:
    out = run_cli("events", run_id, "--json", "--agent", agent.url)
    assert out.returncode == 0, out.stderr
    return sum(json.loads(line)["event"] == "command" for line in out.stdout.splitlines())


def test_every_tool_is_listed_and_the_read_tools_answer(reader, trainer, agent):
    _, run_id = trainer
    assert set(reader.tools()) == READS | STEERS

    runs = reader.call("list_runs")
    assert not runs.is_error, text(runs)
    [run] = [r for r in runs.structured_content["runs"] if r["id"] == run_id]
    assert (run["name"], run["status"], run["agent"], run["key_metric"]["name"]) == (
        "grpo", "running", agent.url, "reward/mean")
    assert f"mcp/grpo ({run_id}) running" in text(runs)

    summary = reader.call("run_summary", {"run": "grpo"})  # by name: the live run
    data = summary.structured_content
    assert not summary.is_error and data["id"] == run_id and data["config"] == {"lr": 1e-3, "batch": 32}
    assert data["tunable"] == ["batch", "lr"] and data["last_values"]["reward/mean"] == 0.05
    assert [a["rule"] for a in data["alerts_firing"]] == ["reward-collapse"]
    assert "ALERT reward-collapse firing" in text(summary)
    assert data["last_events"] and data["last_events"][0]["text"].startswith("status: running")

    history = reader.call("metric_history", {"run": run_id, "metric": "reward/mean", "buckets": 10})
    data = history.structured_content
    assert not history.is_error, text(history)
    assert (data["points"], data["nonfinite"], data["first_nonfinite_step"]) == (100, 1, 30)
    assert len(data["buckets"]) == 10 and data["min"] == 0.0 and data["last"] == 0.05 and data["last_step"] == 99
    by_start = {b["from_step"]: b for b in data["buckets"]}
    assert by_start[30]["nonfinite"] == 1 and by_start[30]["count"] == 10
    assert math.isclose(by_start[30]["mean"], sum(range(31, 40)) / 100 / 9)  # the NaN left out of the mean
    assert math.isclose(by_start[60]["mean"], 0.645) and by_start[80]["mean"] == by_start[80]["max"] == 0.05
    assert "1 NaN/Inf value, the first at step 30" in text(history)
    assert json.loads(history.content[1].text) == data  # the same data as text, for clients that show only text

    rows = reader.call("rollouts", {"run": run_id, "limit": 2, "chars": 100})
    data = rows.structured_content
    assert not rows.is_error and data["step"] == 90 and data["rows_total"] == 4 and len(data["rows"]) == 2
    assert (data["groups"], data["groups_all_equal"]) == (2, 2)  # the collapse: no GRPO signal left
    early = reader.call("rollouts", {"run": run_id, "step": 50, "chars": 100}).structured_content
    assert early["rows"][0]["completion"].startswith("with a knife") and "more characters]" in early["rows"][0][
        "completion"] and len(early["rows"][0]["completion"]) < 200
    found = reader.call("search_rollouts", {"run": run_id, "words": "carrot", "limit": 3}).structured_content
    assert [h["step"] for h in found["hits"]] == [90, 90, 50]

    trail = reader.call("events", {"run": run_id, "limit": 3})
    assert not trail.is_error and len(trail.structured_content["events"]) <= 3
    fired = reader.call("alerts").structured_content
    assert [(a["run"], a["rule"]) for a in fired["firing"]] == [(run_id, "reward-collapse")]
    assert [r["name"] for r in fired["rules"]] == ["reward-collapse"]


def test_a_large_runs_history_is_folded_from_its_tiers_with_the_same_totals(trainer, agent, monkeypatch):
    """Above RAW_POINTS a run is not read point by point: its agent folds the tiers; the totals agree."""
    _, run_id = trainer
    reach = Reach([agent.url], Keyring())
    exact = history.metric_history(reach, run_id, "reward/mean", buckets=10).data
    monkeypatch.setattr(history, "RAW_POINTS", 0)
    tiered = wait_until(lambda: _tiers_answer(reach, run_id), timeout=20, what="the run's tiers").data
    assert tiered["resolution"] == 16 and len(tiered["buckets"]) <= 10
    assert sum(b["count"] for b in tiered["buckets"]) == 100
    for key in ("points", "nonfinite", "first_nonfinite_step", "min", "max", "last", "last_step"):
        assert tiered[key] == exact[key], key
    [nan_bucket] = [b for b in tiered["buckets"] if b["nonfinite"]]
    assert nan_bucket["from_step"] <= 30 <= nan_bucket["to_step"]


def _tiers_answer(reach, run_id):
    try:
        return history.metric_history(reach, run_id, "reward/mean", buckets=10)
    except ToolFailure as exc:
        assert "still folding" in str(exc)
        return None


def test_steering_is_refused_without_allow_steer_and_changes_nothing(reader, trainer, agent):
    proc, run_id = trainer
    before = _commands(agent, run_id)
    for tool, args in (("pause", {}), ("resume", {}), ("checkpoint", {}), ("stop", {}),
                       ("set_hyperparameters", {"changes": {"lr": 0.5}})):
        answer = reader.call(tool, {"run": run_id, **args})
        assert answer.is_error and "--allow-steer" in text(answer), (tool, text(answer))
    with agent.client() as client:
        row = _row(client, run_id)
    assert row["status"] == "running" and row["config"]["lr"] == 1e-3
    assert _commands(agent, run_id) == before  # nothing reached the agent
    assert proc.poll() is None


def test_steering_with_allow_steer_answers_in_the_trainers_words(steerer, trainer, agent):
    proc, run_id = trainer
    paused = steerer.call("pause", {"run": "grpo"})
    assert not paused.is_error and text(paused).startswith("paused at step"), text(paused)
    assert steerer.call("run_summary", {"run": run_id}).structured_content["status"] == "paused"

    applied = steerer.call("set_hyperparameters", {"run": run_id, "changes": {"lr": 0.0005}})
    assert not applied.is_error and "lr=0.0005 applied at step" in text(applied), text(applied)
    assert applied.structured_content["state"] == "applied"
    refused = steerer.call("set_hyperparameters", {"run": run_id, "changes": {"lr": "fast"}})
    assert refused.is_error and "lr must be float" in text(refused), text(refused)
    unknown = steerer.call("set_hyperparameters", {"run": run_id, "changes": {"momentum": 0.9}})
    assert unknown.is_error and "not a tunable hyperparameter" in text(unknown), text(unknown)

    resumed = steerer.call("resume", {"run": run_id})
    assert not resumed.is_error and text(resumed).startswith("resumed at step"), text(resumed)
    assert proc.stdout.readline().strip() == "lr=0.0005"  # the trainer's own config holds it
    with agent.client() as client:
        assert _row(client, run_id)["config"]["lr"] == 0.0005

    saved = steerer.call("checkpoint", {"run": run_id})
    assert not saved.is_error and "ckpt-" in text(saved), text(saved)
    stopped = steerer.call("stop", {"run": run_id})
    assert not stopped.is_error, text(stopped)
    assert "finished" in finish(proc, timeout=30)

    trail = run_cli("events", run_id, "--agent", agent.url)
    me = f"{getpass.getuser()}@{socket.gethostname()} (mcp)"
    asked = [line.split("  ", 1)[1].removesuffix(f" requested by {me}") for line in trail.stdout.splitlines()
             if line.endswith(f" requested by {me}")]
    assert asked == ["pause", "set lr=0.0005", "set lr=fast", "set momentum=0.9", "resume", "checkpoint", "stop"], \
        trail.stdout  # the audit trail names MCP as the way each command came
    mcp_trail = steerer.call("events", {"run": run_id, "limit": 200}).structured_content["events"]
    assert any("(mcp)" in e["text"] and "lr=0.0005" in e["text"] for e in mcp_trail)


def test_unknown_runs_and_bad_arguments_are_error_results(reader, agent):
    for tool, args, says in (
            ("run_summary", {"run": "no-such-run"}, "no run with id or name 'no-such-run'"),
            ("events", {"run": ""}, "run must be a run id or name"),
            ("metric_history", {"run": "grpo", "metric": "nope"}, "has no metric 'nope'; its metrics: reward/mean"),
            ("metric_history", {"run": "grpo", "metric": "loss", "start_step": 9, "end_step": 3}, "before start_step"),
            ("metric_history", {"run": "grpo", "metric": "loss", "buckets": "many"}, "buckets"),
            ("list_runs", {"limit": 0}, "limit"),
            ("rollouts", {"run": "grpo", "step": 7}, "no rollouts at step 7"),
            ("search_rollouts", {"run": "grpo", "words": "  "}, "cannot search"),
            ("run_summary", {}, "run"),
            ("list_runs", {"agent": "tcp://10.1.2.3:7766"}, "not one this server reaches"),
            ("no_such_tool", {}, "no_such_tool")):
        answer = reader.call(tool, args)
        assert answer.is_error and says in text(answer), (tool, text(answer))
        assert "Traceback" not in text(answer)
    assert not reader.call("list_runs").is_error  # and it goes on serving


def test_without_the_sdk_the_command_says_which_extra_to_install():
    code = "import sys; sys.modules['mcp'] = None; from pilothouse.cli import main; sys.exit(main(['mcp']))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "pip install 'pilothouse[mcp]'" in out.stderr, out.stderr


def test_without_agent_urls_the_server_reads_your_agents_on_this_machine(agent_proc):
    run = ph.init(project="local", name="found", agent=agent_proc.url)
    run.finish()
    session = McpSession([])  # this test's runtime dir, where agent_proc recorded itself, as `pilothouse agents` reads
    try:
        runs = session.call("list_runs", {"project": "local"})
        assert [(r["id"], r["agent"]) for r in runs.structured_content["runs"]] == [(run.id, agent_proc.url)]
        assert session.call("run_summary", {"run": "found"}).structured_content["agent"] == agent_proc.url
    finally:
        session.close()

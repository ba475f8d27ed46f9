"""Alerts with real processes: rules in the agent fire on what trainers log, with no app connected.

The engine's conditions are also checked directly (numpy in, edges out), because their edge
cases (a flapping metric, an episode spanning chunks, a window across chunks) are easier to
pin down there than through a trainer's timing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from support.messages import TOKEN
from support.paths import ROOT
from support.processes import AgentProcess, finish, run_cli, start_trainer
from support.runs import run_events
from support.sockets import as_owner, free_port
from support.waiting import wait_until

import pilothouse as ph
from pilothouse.client import AgentError, Client
from pilothouse.node.alert_engine import AlertEngine, RunView, sliding_max, window_best
from pilothouse.node.rules_file import load_rules
from pilothouse.wire.alert_rules import RuleError, check_rule

# --- the engine ----------------------------------------------------------------------------------


def engine(*specs: dict) -> AlertEngine:
    e = AlertEngine()
    for spec in specs:
        e.add("user", "", check_rule(spec))
    return e


def edges(e: AlertEngine, metric: str, values: list[float], first_step: int = 0, run: str = "r1") -> list[tuple]:
    steps = np.arange(first_step, first_step + len(values))
    return [(a.state, a.step) for a in e.observe(run, "name", metric, steps, np.array(values, dtype=np.float64))]


def test_nonfinite_fires_at_the_first_bad_point_and_clears_at_the_first_good_one():
    e = engine({"name": "nan", "kind": "nonfinite", "metric": "loss"})
    assert edges(e, "loss", [1.0, 2.0, np.nan, np.inf, -np.inf]) == [("firing", 2)]
    assert edges(e, "loss", [np.nan, np.nan], 5) == []  # same episode: no repeat
    assert edges(e, "loss", [3.0], 7) == [("cleared", 7)]
    assert edges(e, "other", [np.nan], 8) == []  # another metric: not this rule's


def test_a_flapping_metric_gives_at_most_two_edges_per_chunk():
    e = engine({"name": "nan", "kind": "nonfinite", "metric": "*"})
    assert edges(e, "x", [np.nan, 1, np.nan, 1, np.nan, 1]) == [("firing", 0), ("cleared", 5)]
    assert edges(e, "x", [np.nan, 1, np.nan], 6) == [("firing", 6)]


def test_above_for_n_consecutive_steps_counts_across_chunks():
    e = engine({"name": "kl", "kind": "above", "metric": "kl", "threshold": 0.5, "for_steps": 4})
    assert edges(e, "kl", [0.6, 0.7]) == []
    assert edges(e, "kl", [0.8], 2) == []
    assert edges(e, "kl", [0.9, 0.9], 3) == [("firing", 3)]
    assert edges(e, "kl", [0.4, 0.9, 0.9, 0.9], 5) == [("cleared", 5)]  # the count restarts
    assert edges(e, "kl", [np.nan], 9) == []  # NaN is not "above": not yet 4 in a row
    e2 = engine({"name": "low", "kind": "below", "metric": "reward", "threshold": 0.0})
    assert edges(e2, "reward", [1.0, -1.0, -2.0]) == [("firing", 1)]


def test_drop_from_the_running_best_fires_once_per_collapse():
    e = engine({"name": "collapse", "kind": "drop", "metric": "reward", "pct": 30, "window": 5})
    rising = [0.1, 0.2, 0.4, 0.6, 0.8]
    assert edges(e, "reward", rising) == []
    fired = [edges(e, "reward", [v], 5 + i) for i, v in enumerate([0.7, 0.5, 0.5, 0.5])]
    assert fired == [[], [("firing", 6)], [], []]  # 0.5 < 0.8 * 0.7, then stays low: one alert
    # the 0.8 peak has left the 5-step window, but the episode is held against the best it fell
    # from: it ends only when the metric is back within 30% of 0.8
    assert edges(e, "reward", [0.5, 0.5, 0.55], 9) == []
    assert edges(e, "reward", [0.57, 0.3], 12) == [("cleared", 12), ("firing", 13)]


def test_sliding_max_matches_the_definition():
    rng = np.random.default_rng(7)
    for n in (1, 2, 9, 64, 257):
        for w in (2, 3, 8, 100):
            x = rng.normal(size=n)
            x[rng.random(n) < 0.15] = np.nan
            ref = [max((v for v in x[max(0, i - w + 1): i + 1] if not np.isnan(v)), default=-np.inf)
                   for i in range(n)]
            assert np.array_equal(sliding_max(x, w), np.array(ref)), (n, w)
            for cut in {0, n // 2, n - 1}:  # the same best, split into a stored tail and a new chunk
                tail, chunk = x[max(0, cut - (w - 1)):cut], x[cut:]
                assert np.array_equal(window_best(tail, chunk, w), np.array(ref[cut:])), (n, w, cut)


def test_stale_and_gpu_idle_rules_follow_the_liveness_view():
    e = engine({"name": "silent", "kind": "stale", "seconds": 5},
               {"name": "idle", "kind": "gpu_idle", "util": 10, "seconds": 30})
    assert [a.state for a in e.tick([RunView("r1", "n", "running", 4.0)])] == []
    assert [(a.state, a.rule.name) for a in e.tick([RunView("r1", "n", "crashed", 6.0)])] == [("firing", "silent")]
    assert e.tick([RunView("r1", "n", "crashed", 60.0)]) == []
    assert [a.state for a in e.tick([RunView("r1", "n", "running", 0.2)])] == ["cleared"]
    job = [RunView("r1", "n", "running", 0.1)]
    assert e.observe_gpus({"gpu0/util": 3.0, "cpu/util": 1.0}, 100.0, job) == []
    assert e.observe_gpus({"gpu0/util": 95.0}, 110.0, job) == []  # busy again: the clock restarts
    assert e.observe_gpus({"gpu0/util": 2.0}, 120.0, job) == []
    fired = e.observe_gpus({"gpu0/util": 1.0}, 150.0, job)
    assert [(a.state, a.run, a.metric) for a in fired] == [("firing", "r1", "gpu0/util")]
    assert [a.state for a in e.observe_gpus({"gpu0/util": 1.0}, 151.0, [])] == ["cleared"]  # job stopped


def test_rules_are_scoped_to_runs_by_glob_and_by_owner():
    e = AlertEngine()
    e.add("user", "", check_rule({"name": "g", "kind": "nonfinite", "runs": "grpo-*"}))
    e.add("run", "r2", check_rule({"name": "mine", "kind": "nonfinite"}))
    nan = np.array([np.nan])
    assert [a.rule.name for a in e.observe("r1", "grpo-7b", "x", np.array([0]), nan)] == ["g"]
    assert [a.rule.name for a in e.observe("r2", "sft", "x", np.array([0]), nan)] == ["mine"]
    assert e.observe("r3", "sft", "x", np.array([0]), nan) == []


# --- rule checking -----------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, message", [
    ({"kind": "nonfinite"}, "name must be"),
    ({"name": "a b", "kind": "nonfinite"}, "name must be"),
    ({"name": "x", "kind": "sometimes"}, "kind must be one of"),
    ({"name": "x", "kind": "above", "metric": "kl"}, "need threshold"),
    ({"name": "x", "kind": "above", "metric": "kl", "threshold": float("nan")}, "threshold must be a finite"),
    ({"name": "x", "kind": "above", "metric": "kl", "threshold": 1, "for_steps": 0}, "for_steps must be"),
    ({"name": "x", "kind": "drop", "metric": "r", "pct": 150}, "pct must be"),
    ({"name": "x", "kind": "drop", "metric": "r", "pct": 10, "window": 1}, "window must be"),
    ({"name": "x", "kind": "stale", "seconds": -1}, "seconds must be"),
    ({"name": "x", "kind": "gpu_idle", "util": 10}, "need seconds"),
    ({"name": "x", "kind": "nonfinite", "pause": "yes"}, "pause must be true or false"),
    ({"name": "x", "kind": "nonfinite", "exec": "rm -rf /"}, "exec must be a command as a list"),
    ({"name": "x", "kind": "nonfinite", "exec": ["a\x00b"]}, "exec must be"),
    ({"name": "x", "kind": "nonfinite", "thresold": 1}, "unknown field 'thresold'"),
    ({"name": "x", "kind": "nonfinite", "metric": ""}, "metric must be"),
    ([1, 2], "a rule is a table"),
])
def test_a_bad_rule_is_refused_with_the_field_named(spec, message):
    with pytest.raises(RuleError, match=message):
        check_rule(spec)


def test_a_bad_rules_file_names_the_file_the_rule_and_the_field(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text('[[rule]]\nname = "ok"\nkind = "nonfinite"\n\n[[rule]]\nname = "bad"\nkind = "drop"\n'
                    'metric = "reward"\npct = 0\n')
    with pytest.raises(RuleError, match=r"rules.toml\[1\] 'bad': pct must be"):
        load_rules(path)
    path.write_text("[[rule]\nname=")
    with pytest.raises(RuleError, match="not valid TOML"):
        load_rules(path)
    path.write_text('[alerts]\nx = 1\n')
    with pytest.raises(RuleError, match="only \\[\\[rule\\]\\] tables"):
        load_rules(path)


def test_init_refuses_bad_alerts_before_sending_anything(tmp_path):
    with pytest.raises(ValueError, match="pct must be"):
        ph.init(project="p", agent=f"tcp://127.0.0.1:{free_port()}",
                   alerts=[{"name": "c", "kind": "drop", "metric": "r", "pct": -3}])


# --- with real processes --------------------------------------------------------------------------

HOOK = "import json, sys; open(sys.argv[1], 'w').write(sys.stdin.read())"

NAN_TRAINER = """
run = ph.init(project="alerts", name=ARGS[0], agent=URL, heartbeat=0.2,
                 alerts=[{"name": "collapse", "kind": "drop", "metric": "reward", "pct": 30, "window": 20}])
print(run.id, flush=True)
bad_at = int(ARGS[1])
step = 0
for step in range(400):
    ctl = run.sync(step)
    if ctl.stop:
        break
    reward = min(1.0, step / 20) if step < 30 else 0.2
    loss = float("nan") if step >= bad_at else 1.0 / (step + 1)
    run.log({"loss": loss, "reward": reward}, step=step)
    time.sleep(0.2 if step >= bad_at - 1 else 0.01)
run.finish()
print("stopped at", step, flush=True)
"""


def rules_file(tmp_path: Path, hook_out: Path) -> Path:
    path = tmp_path / "rules.toml"
    path.write_text(f"""
[[rule]]
name = "nan-loss"
kind = "nonfinite"
metric = "loss"
pause = true
exec = [{json.dumps(sys.executable)}, "-c", {json.dumps(HOOK)}, {json.dumps(str(hook_out))}]

[[rule]]
name = "silent"
kind = "stale"
seconds = 1.5
""")
    return path


@pytest.fixture
def alert_agent(tmp_path):
    hook_out = tmp_path / "hook.json"
    proc = AgentProcess(tmp_path / "agent", free_port(),
                        ["--alerts", str(rules_file(tmp_path, hook_out)), "--stale-after", "1"]).start()
    yield proc, hook_out
    proc.stop()


def alert_events(client: Client, run_id: str) -> list[dict]:
    return run_events(client, run_id, "alert", "ack", "command", "alert_hook")


def test_nan_alerts_pauses_at_that_step_and_runs_the_hook(tmp_path, alert_agent):
    proc, hook_out = alert_agent
    trainer = start_trainer(tmp_path, NAN_TRAINER, proc.url, "nanny", "25")
    run_id = trainer.stdout.readline().strip()
    with proc.client() as client:
        wait_until(lambda: any(e.get("event") == "ack" for e in alert_events(client, run_id)), timeout=20,
                   what="the alert's pause acknowledged")
        events = alert_events(client, run_id)
        nan = [e for e in events if e["event"] == "alert" and e["rule"] == "nan-loss"]
        assert [(e["state"], e["step"], e["metric"]) for e in nan] == [("firing", 25, "loss")]
        assert np.isnan(nan[0]["value"]) and nan[0]["actions"] == ["pause", "exec"]
        command = next(e for e in events if e["event"] == "command")
        assert command["cmd"] == "pause" and command["who"] == {"via": "alert", "rule": "nan-loss", "source": "file"}
        ack = next(e for e in events if e["event"] == "ack")
        assert ack["state"] == "applied" and ack["step"] == 26  # the next step boundary after the NaN
        run = next(r for r in client.runs() if r["id"] == run_id)
        assert run["status"] == "paused" and run["last_step"] == 26 and run["alerts"] == ["nan-loss"]  # the ack's
        listing = run_cli("runs", "--agent", proc.url).stdout
        assert "ALERTS" in listing and "nan-loss" in listing.splitlines()[1]

        wait_until(hook_out.exists, what="the hook's output")
        wait_until(lambda: hook_out.read_text().endswith("}"), what="the hook's whole input")
        sent = json.loads(hook_out.read_text())  # strict JSON: NaN travels as a string
        assert sent["rule"] == "nan-loss" and sent["run"] == run_id and sent["step"] == 25
        assert sent["state"] == "firing" and sent["value"] == "nan"
        wait_until(lambda: any(e["event"] == "alert_hook" for e in alert_events(client, run_id)),
                   what="the hook's result recorded")
        hook = next(e for e in alert_events(client, run_id) if e["event"] == "alert_hook")
        assert hook["returncode"] == 0 and hook["timed_out"] is False

        listed = client.alerts()
        assert [(a["run"], a["rule"]) for a in listed["firing"]] == [(run_id, "nan-loss")]
        assert client.command(run_id, "stop", wait=10)["state"] == "applied"
    finish(trainer)


COLLAPSE_TRAINER = """
run = ph.init(project="alerts", name="collapse", agent=URL, heartbeat=0.2,
                 alerts=[{"name": "collapse", "kind": "drop", "metric": "reward", "pct": 30, "window": 50}])
print(run.id, flush=True)
for step in range(300):
    reward = step / 100 if step < 100 else 0.3  # rises to 0.99, collapses, stays down for 200 steps
    run.log({"reward": reward}, step=step)
    time.sleep(0.001)
run.finish()
"""


def test_reward_collapse_fires_once_not_once_per_step(tmp_path, alert_agent):
    proc, _ = alert_agent
    trainer = start_trainer(tmp_path, COLLAPSE_TRAINER, proc.url)
    run_id = trainer.stdout.readline().strip()
    finish(trainer)
    with proc.client() as client:
        wait_until(lambda: any(e["event"] == "alert" for e in alert_events(client, run_id)), what="the alert")
        alerts = [e for e in alert_events(client, run_id) if e["event"] == "alert"]
        assert [(a["rule"], a["state"], a["step"]) for a in alerts] == [("collapse", "firing", 100)]
        assert "70% below its best 0.99" in alerts[0]["detail"]
        assert alerts[0]["source"] == "run"


def test_a_killed_trainer_raises_the_stale_alert_within_t_plus_2_s(tmp_path, alert_agent):
    proc, _ = alert_agent
    trainer = start_trainer(tmp_path, NAN_TRAINER, proc.url, "victim", "100000")
    run_id = trainer.stdout.readline().strip()
    with proc.client() as client:
        wait_until(lambda: any(r["id"] == run_id and r["last_step"] for r in client.runs()), what="steps")
        trainer.kill()
        killed = time.monotonic()
        trainer.wait()

        def stale_alert():
            return next((a for a in client.alerts()["firing"] if a["run"] == run_id and a["rule"] == "silent"), None)

        alert = wait_until(stale_alert, timeout=10, interval=0.05, what="the stale alert")
        took = time.monotonic() - killed
        assert took <= 1.5 + 2.0, f"stale alert after {took:.1f} s"
        assert "no heartbeat" in alert["detail"] and alert["step"] > 0  # placed at the run's last step
        wait_until(lambda: "crashed" in json.dumps(client.alerts()["recent"]) or
                   next(r for r in client.runs() if r["id"] == run_id)["status"] == "crashed", what="crashed")


def test_a_bad_rules_file_edit_is_refused_and_the_old_rules_keep_working(tmp_path, alert_agent):
    proc, hook_out = alert_agent
    path = tmp_path / "rules.toml"
    good = path.read_text()
    path.write_text(good.replace('kind = "stale"', 'kind = "stale"\nsecondz = 3'))
    with proc.client() as client:
        sys_run = next(r["id"] for r in client.runs() if r["kind"] == "system")
        refusal = wait_until(lambda: next(iter(run_events(client, sys_run, "rules")), None),
                             what="the refusal recorded")
        assert refusal["ok"] is False and "unknown field 'secondz'" in refusal["detail"]
        assert {r["name"] for r in client.alerts()["rules"]} == {"nan-loss", "silent"}
    assert "alert rules not reloaded" in proc.log.read_text()
    trainer = start_trainer(tmp_path, NAN_TRAINER, proc.url, "after-bad-edit", "5")
    run_id = trainer.stdout.readline().strip()
    with proc.client() as client:
        wait_until(lambda: any(e["event"] == "alert" and e["rule"] == "nan-loss"
                               for e in alert_events(client, run_id)), what="the old rule firing")
        client.command(run_id, "stop", wait=10)
    finish(trainer)


def test_an_agent_refuses_to_start_on_a_bad_rules_file(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text('[[rule]]\nname = "x"\nkind = "above"\nmetric = "kl"\n')
    out = subprocess.run([sys.executable, "-m", "pilothouse", "agent", "--bind", f"tcp://127.0.0.1:{free_port()}",
                          "--data", str(tmp_path / "d"), "--alerts", str(path)], capture_output=True, text=True,
                         cwd=ROOT, timeout=30)
    assert out.returncode == 2 and "'x': above rules need threshold" in out.stderr, out.stderr
    assert not (tmp_path / "d").exists()


def cli(url: str, *args: str) -> subprocess.CompletedProcess:
    return run_cli("alerts", "--agent", url, *args)


def test_cli_adds_lists_and_removes_rules_and_they_survive_a_restart(tmp_path, agent_proc):
    url = agent_proc.url
    added = cli(url, "add", "kl-high", "above", "metric=kl", "threshold=0.5", "for_steps=3", "pause=true")
    assert added.returncode == 0, added.stderr
    assert cli(url, "add", "nan", "nonfinite", "metric=loss").returncode == 0
    listing = cli(url, "ls").stdout
    assert "kl-high" in listing and "threshold=0.5" in listing and "metric=loss" in listing
    agent_proc.kill()
    agent_proc.start()
    rules = json.loads(cli(url, "ls", "--json").stdout)
    assert {(r["name"], r["source"]) for r in rules} == {("kl-high", "user"), ("nan", "user")}
    assert cli(url, "rm", "kl-high").returncode == 0
    assert [r["name"] for r in json.loads(cli(url, "ls", "--json").stdout)] == ["nan"]


@pytest.mark.parametrize("args, message", [
    (["add", "x"], "needs NAME KIND"),
    (["add", "x", "above", "metric=kl"], "above rules need threshold"),
    (["add", "x", "drop", "metric=r", "pct=30", "window=huge"], "window must be an integer"),
    (["add", "x", "nonfinite", "exec=[oops"], "bad rule field"),
    (["add", "x", "nonfinite", 'exec=["sh", "-c", "id > /tmp/owned"]'], "taken only from the agent's --alerts file"),
    (["add", "x", "nonfinite", "--run", "nosuchrun"], "no run"),
    (["rm", "nosuch"], "no rule named 'nosuch'"),
    (["rm"], "one rule name"),
    (["ls", "extra"], "unexpected arguments"),
])
def test_bad_alert_commands_get_a_clear_error_and_change_nothing(agent_proc, args, message):
    before = cli(agent_proc.url, "ls", "--json").stdout
    out = cli(agent_proc.url, *args)
    assert out.returncode in (1, 2) and message in out.stderr, out
    assert "Traceback" not in out.stderr
    assert cli(agent_proc.url, "ls", "--json").stdout == before


def test_bad_alerts_in_a_hello_are_refused_and_no_run_is_made(agent_proc):
    import zmq

    from pilothouse.wire.messages import pack, unpack

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    as_owner(sock)
    sock.connect(agent_proc.url)
    sock.send(pack({"t": "hello", "run": "badrules1", "rank": 0, "token": TOKEN, "project": "p", "name": "n",
                    "host": "h", "pid": 1, "config": {}, "alerts": [{"name": "x", "kind": "drop", "metric": "r", "pct": 900}]}))
    assert sock.poll(5000)
    reply = unpack(sock.recv())
    sock.close()
    assert reply["t"] == "err" and "pct must be" in reply["msg"]
    with agent_proc.client() as client:
        assert all(r["id"] != "badrules1" for r in client.runs())
        with pytest.raises(AgentError, match="no rule named"):
            client.remove_alert("x")


def test_programs_run_only_from_the_rules_file(agent_proc, tmp_path):
    """exec runs a program as the agent's user: a rule carrying one is refused from a trainer's
    hello, from ph.init and from a client (CLI, app, CURVE peer alike), and nothing runs."""
    import zmq

    from pilothouse.wire.messages import message, pack, unpack

    marker = tmp_path / "owned"
    rule = {"name": "shell", "kind": "nonfinite", "exec": ["sh", "-c", f"id > {marker}"]}
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    as_owner(sock)
    sock.connect(agent_proc.url)
    sock.send(pack(message("hello", run="execrun1", rank=0, token=TOKEN, project="p", name="n", host="h", pid=1,
                           config={}, alerts=[rule])))
    assert sock.poll(5000)
    reply = unpack(sock.recv())
    sock.close()
    assert reply["t"] == "err" and "taken only from the agent's --alerts file" in reply["msg"]
    with pytest.raises(RuleError, match="taken only from the agent's --alerts file"):
        ph.init(project="p", name="n", agent=agent_proc.url, alerts=[rule])
    with agent_proc.client() as client:
        with pytest.raises(AgentError, match="taken only from the agent's --alerts file"):
            client.add_alert(rule)
        assert client.alerts()["rules"] == []
        assert all(r["id"] != "execrun1" for r in client.runs())
    assert not marker.exists()


# --- GPU rules (NVML faked: this machine has no NVIDIA GPU) and hooks ----------------------------------

IDLE_TRAINER = """
run = ph.init(project="alerts", name="hung", agent=URL, heartbeat=0.2)
print(run.id, flush=True)
for step in range(100000):
    if run.sync(step).stop:
        break
    run.log({"loss": 1.0}, step=step)
    time.sleep(0.02)
run.finish()
"""


def test_an_idle_gpu_under_a_running_job_fires_on_that_job(tmp_path):
    """The real agent loop and sampler; only NVML is faked, reporting a GPU stuck at 3 %."""
    import threading

    from support.nvml_fake import fake_nvml

    from pilothouse.node.sampler import SystemSampler
    from pilothouse.node.server import Agent

    nvml = fake_nvml(1)
    nvml.nvmlDeviceGetUtilizationRates = lambda h: type("U", (), {"gpu": 3, "memory": 0})()
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nname = "hung-rank"\nkind = "gpu_idle"\nutil = 10\nseconds = 1\npause = true\n')
    url = f"tcp://127.0.0.1:{free_port()}"
    nodes: list[Agent] = []

    def serve() -> None:  # the agent's SQLite connection belongs to the thread that runs its loop
        nodes.append(Agent(url, tmp_path / "agent", sample_interval=0.2, sampler=SystemSampler(nvml), alerts=rules))
        nodes[0].serve_forever()

    loop = threading.Thread(target=serve, daemon=True)
    loop.start()
    wait_until(lambda: nodes, what="the agent")
    trainer = start_trainer(tmp_path, IDLE_TRAINER, url)
    try:
        run_id = trainer.stdout.readline().strip()
        with Client(url, timeout=5) as client:
            alert = wait_until(lambda: next((a for a in client.alerts()["firing"] if a["rule"] == "hung-rank"), None),
                               timeout=15, what="the gpu_idle alert")
            assert alert["run"] == run_id and alert["metric"] == "gpu0/util" and alert["value"] == 3.0
            assert "below 10% for" in alert["detail"]
            wait_until(lambda: next(r for r in client.runs() if r["id"] == run_id)["status"] == "paused",
                       what="the rule's pause")
            assert client.command(run_id, "stop", wait=10)["state"] == "applied"
        finish(trainer)
    finally:
        if trainer.poll() is None:
            trainer.kill()
        nodes[0].stop()
        loop.join(timeout=10)


def test_a_hook_that_hangs_is_killed_at_its_timeout_and_a_missing_one_is_reported():
    from pilothouse.node.hooks import run_hook

    started = time.monotonic()
    result = run_hook("r1", "slow", ("sh", "-c", "sleep 30 & sleep 30"), "{}", 0.5)
    assert result.timed_out and time.monotonic() - started < 5  # the whole process group is killed
    missing = run_hook("r1", "gone", ("/nonexistent/pager",), "{}", 1.0)
    assert missing.returncode is None and "could not start" in missing.error
    failing = run_hook("r1", "bad", ("sh", "-c", "echo no route >&2; exit 3"), "{}", 5.0)
    assert failing.returncode == 3 and failing.error == "no route"


FLAG_TRAINER = """
import os
run = ph.init(project="alerts", name="restart", agent=URL, heartbeat=0.2)
print(run.id, flush=True)
for step in range(100000):
    if os.path.exists(ARGS[0] + ".stop"):
        break
    run.log({"loss": 1.0 if os.path.exists(ARGS[0]) else float("nan")}, step=step)
    time.sleep(0.01)
run.finish()
"""


def test_an_episode_firing_across_an_agent_restart_is_not_reported_twice(tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nname = "nan-loss"\nkind = "nonfinite"\nmetric = "loss"\n')
    proc = AgentProcess(tmp_path / "agent", free_port(), ["--alerts", str(rules)]).start()
    flag = tmp_path / "healed"
    trainer = start_trainer(tmp_path, FLAG_TRAINER, proc.url, str(flag))
    try:
        run_id = trainer.stdout.readline().strip()
        with proc.client() as client:
            wait_until(lambda: client.alerts()["firing"], what="the NaN alert")
        proc.kill()
        proc.start()
        with proc.client() as client:
            assert [a["rule"] for a in client.alerts()["firing"]] == ["nan-loss"]  # still firing, not re-fired
            time.sleep(1.0)  # NaNs keep coming into the restarted agent
            flag.touch()
            wait_until(lambda: not client.alerts()["firing"], what="the episode cleared")
            alerts = [(e["state"], e["rule"]) for e in alert_events(client, run_id) if e["event"] == "alert"]
            assert alerts == [("firing", "nan-loss"), ("cleared", "nan-loss")]
    finally:
        (tmp_path / "healed.stop").touch()
        finish(trainer)
        proc.stop()

"""The ``pilothouse`` command against a real agent, as a user runs it."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import signal
import subprocess
import sys

import pytest
from support.float_bits import SPECIAL, bits
from support.paths import ROOT
from support.processes import ON_THE_DEFAULT_PORT, AgentProcess, finish, start_trainer
from support.processes import run_cli as cli
from support.sockets import free_port
from support.waiting import wait_until

import pilothouse as ph
from pilothouse.client import AgentUnavailable, Client
from pilothouse.wire.urls import DEFAULT_URL


@pytest.fixture
def logged_run(agent_proc):
    run = ph.init(project="grpo-math", name="lr3e-6", config={"lr": 3e-6, "kl_coef": 0.05},
                     agent=agent_proc.url)
    for step, v in enumerate(SPECIAL):
        run.log({"reward/mean": v, "kl": 0.01 * step}, step=step)
    assert run.finish()
    return run


def test_runs_lists_status_step_host_and_last_values(agent_proc, logged_run):
    out = cli("runs", "--agent", agent_proc.url)
    assert out.returncode == 0, out.stderr
    header, line = out.stdout.splitlines()[:2]
    assert header.split()[:6] == ["ID", "RUN", "STATUS", "STEP", "HOST", "LOST"]
    assert line.split()[:4] == [logged_run.id, "grpo-math/lr3e-6", "finished", str(len(SPECIAL) - 1)]
    assert "reward/mean=0.1" in line and "kl=0.06" in line
    rows = json.loads(cli("runs", "--agent", agent_proc.url, "--json").stdout)
    row = next(r for r in rows if r["id"] == logged_run.id)
    assert row["config"] == {"lr": 3e-6, "kl_coef": 0.05} and row["lost_records"] == 0


def test_export_csv_round_trips_every_point_bit_exact(agent_proc, logged_run, tmp_path):
    target = tmp_path / "out.csv"
    out = cli("export", "lr3e-6", "--agent", agent_proc.url, "-o", str(target))
    assert out.returncode == 0, out.stderr
    assert f"wrote {2 * len(SPECIAL)} points" in out.stderr
    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert list(rows[0]) == ["metric", "step", "value", "wall_time"]
    reward = [float(r["value"]) for r in rows if r["metric"] == "reward/mean"]
    assert bits(reward) == bits(SPECIAL)
    assert [int(r["step"]) for r in rows if r["metric"] == "kl"] == list(range(len(SPECIAL)))


def test_export_jsonl_is_standard_json_with_nonfinite_as_strings(agent_proc, logged_run):
    out = cli("export", logged_run.id, "--agent", agent_proc.url, "--format", "jsonl")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
            for line in out.stdout.splitlines()]
    reward = [r["value"] for r in rows if r["metric"] == "reward/mean"]
    assert reward[:4] == ["nan", "inf", "-inf", -0.0] and reward[4] == 1e308


def test_tail_prints_live_steps_and_ends_with_the_run(tmp_path, agent_proc):
    trainer = start_trainer(tmp_path, """
run = ph.init(project="t", name="tailed", agent=URL)
print(run.id, flush=True)
time.sleep(1.5)
for s in range(40):
    run.log({"loss": 1.0 / (s + 1), "reward/mean": s / 40}, step=s)
    time.sleep(0.02)
run.finish()
""", agent_proc.url)
    run_id = trainer.stdout.readline().strip()
    tail = subprocess.Popen([sys.executable, "-m", "pilothouse", "tail", run_id, "--agent", agent_proc.url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    finish(trainer)
    out, err = tail.communicate(timeout=30)
    assert tail.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"t/tailed ({run_id})")
    step_lines = [line for line in lines if line.startswith("step")]
    assert step_lines[-1].split()[:2] == ["step", "39"] and "loss=0.025" in step_lines[-1]
    assert lines[-1].startswith("-- status:") and "finished" in lines[-1]


def test_agent_stops_cleanly_on_sigterm_and_sigint(tmp_path):
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc = AgentProcess(tmp_path / sig.name, free_port()).start()
        proc.kill(sig)
        assert proc.proc.returncode == 0
        assert "pilothouse agent stopped" in proc.log.read_text()


@ON_THE_DEFAULT_PORT
def test_init_without_url_starts_the_default_local_agent(tmp_path):
    with Client(DEFAULT_URL, timeout=0.3) as c:
        try:
            c.ping()
            pytest.skip(f"an agent already answers on {DEFAULT_URL}; cannot test autostart here")
        except AgentUnavailable:
            pass
    env_backup = os.environ.get("PILOTHOUSE_DATA")
    os.environ["PILOTHOUSE_DATA"] = str(tmp_path / "data")
    try:
        body = """
run = ph.init(project="auto", name=ARGS[0])
for s in range(100):
    run.log({"x": float(s)}, step=s)
print(run.finish(timeout=30), flush=True)
"""
        out, err = start_trainer(tmp_path, body, "unused", "started-for-me").communicate(timeout=60)
        with Client(DEFAULT_URL) as c:
            info = c.ping()
            try:
                assert out.strip() == "True", err
                said = [line for line in err.splitlines() if "background agent" in line]
                assert said == [f"pilothouse: started a background agent on {DEFAULT_URL} (pid {info['pid']}, data in "
                                f"{tmp_path / 'data' / 'agent'}); it keeps running after this script, stop it with "
                                f"`pilothouse agents stop {info['pid']}`"], err
                run = next(r for r in c.runs() if r["name"] == "started-for-me")
                assert run["status"] == "finished" and run["last_step"] == 99
                assert (tmp_path / "data" / "agent" / "journal.sqlite").exists()
                out, err = start_trainer(tmp_path, body, "unused", "reuses-it", name="second").communicate(timeout=60)
                assert out.strip() == "True" and "agent" not in err, err  # the running agent: nothing to say
                assert c.ping()["pid"] == info["pid"]
            finally:
                os.kill(info["pid"], signal.SIGTERM)  # the agent this test caused to start
        wait_until(lambda: _gone(info["pid"]), what="the autostarted agent to stop")
    finally:
        if env_backup is None:
            os.environ.pop("PILOTHOUSE_DATA", None)
        else:
            os.environ["PILOTHOUSE_DATA"] = env_backup


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return False
    except ProcessLookupError:
        return True


def test_special_floats_survive_the_wire(agent_proc, logged_run):
    with agent_proc.client() as c:
        _, vals, _ = c.series(logged_run.id, "reward/mean")
    assert bits(vals) == bits(SPECIAL) and math.isnan(vals[0])


def test_quickstart_example_runs_and_is_steerable(agent_proc):
    proc = subprocess.Popen([sys.executable, "examples/quickstart.py", "--steps", "400", "--delay", "0.01",
                             "--agent", agent_proc.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    run_id = proc.stdout.readline().split()[1].rstrip(":")
    with agent_proc.client() as c:
        wait_until(lambda: any(r["id"] == run_id and r["last_step"] for r in c.runs()), what="steps")
        assert c.command(run_id, "set", {"kl_coef": 0.1})["state"] == "applied"
        assert c.command(run_id, "stop")["state"] == "applied"
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "delivered=True" in out, err

"""Runs with rollouts for the ``pilothouse rollouts`` tests: a real trainer process logs a plan of
batches to a real agent, and the real CLI reads them back."""

from __future__ import annotations

import json
import subprocess

from .processes import AgentProcess, finish, run_cli, start_trainer

# ARGS: the run's name, a JSON file of [step, [batch of rows, ...]] pairs, logged in that order
TRAINER = """
import json
run = ph.init(project="rl", name=ARGS[0], id=ARGS[0], agent=URL)
for step, batches in json.load(open(ARGS[1])):
    for rows in batches:
        run.log_rollouts(step, rows)
    run.log({"loss": 1.0 / (step + 1)}, step=step)
assert run.finish(timeout=60)
"""


def run_trainer(tmp_path, url: str, name: str, plan: list) -> None:
    (tmp_path / f"{name}.json").write_text(json.dumps(plan))
    finish(start_trainer(tmp_path, TRAINER, url, name, str(tmp_path / f"{name}.json"), name=name), timeout=120)


def rollouts(agent: AgentProcess, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_cli("rollouts", *args, "--agent", agent.url, env=env)


def json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def headers(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("== ")]


def same(a: object, b: object) -> bool:
    """Equal, with NaN equal to NaN and -0.0 told from 0.0: the values exactly as logged."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)

"""The examples run long enough to steer: by default minutes at a human pace (``--steps 0``: until
stopped), so the README's steering commands never meet "is finished"; and a re-run is steered by its
name while the run before it, finished, shares that name.  The quickstart is run as the README runs
it (its default pace) against a real agent, steered by the real CLI."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest
from support.paths import ROOT
from support.processes import run_cli
from support.waiting import wait_until

EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
MINUTES = 2.0  # the least a default run lasts: time to read the README and type its commands


def _defaults(path) -> dict[str, float]:
    """The ``default=`` of each ``add_argument("--steps"/"--pace", ...)`` in an example's source."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument" and node.args:
            name = getattr(node.args[0], "value", None)
            for kw in node.keywords:
                if name in ("--steps", "--pace") and kw.arg == "default":
                    found[name] = ast.literal_eval(kw.value)
    return found


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_each_example_runs_minutes_by_default(path):
    defaults = _defaults(path)
    assert set(defaults) == {"--steps", "--pace"}, f"{path.name}: --steps and --pace need defaults: {defaults}"
    steps, pace = defaults["--steps"], defaults["--pace"]
    assert steps == 0 or steps * pace >= MINUTES * 60, f"{path.name}: {steps} steps of {pace} s end too soon"
    text = path.read_text()
    assert "--steps 0" in text.split('"""')[1] and "--pace 0" in text.split('"""')[1], \
        f"{path.name}: its header should say how to run until stopped, and at full speed"


def _run(args: list[str], url: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "examples/quickstart.py", *args, "--agent", url], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_rerun_quickstart_is_steered_by_name_at_its_default_pace(agent_proc):
    url = agent_proc.url
    first = _run(["--steps", "3", "--pace", "0"], url)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0 and "delivered=True" in out, err
    first_id = out.split()[1].rstrip(":")

    again = _run([], url)  # the README's way: its defaults
    try:
        run_id = again.stdout.readline().split()[1].rstrip(":")
        assert run_id != first_id
        with agent_proc.client() as c:
            wait_until(lambda: any(r["id"] == run_id and r["last_step"] for r in c.runs()), what="steps")
        for command in (["pause", "quickstart"], ["set", "quickstart", "kl_coef=0.1"], ["checkpoint", "quickstart"],
                        ["resume", "quickstart"]):
            out = run_cli(*command, "--agent", url)
            assert out.returncode == 0 and f"(run {run_id}, " in out.stdout, (command, out.stderr)
        with agent_proc.client() as c:
            row = next(r for r in c.runs() if r["id"] == run_id)
        assert row["status"] == "running" and row["last_step"] < 1000, row  # far from its end: minutes left
        tail = run_cli("events", "quickstart", "--agent", url)
        assert tail.returncode == 0 and "kl_coef" in tail.stdout, tail.stderr
        stopped = run_cli("stop", "quickstart", "--agent", url)
        assert stopped.returncode == 0 and f"(run {run_id}, " in stopped.stdout, stopped.stderr
        out, err = again.communicate(timeout=60)
        assert again.returncode == 0 and "delivered=True" in out, err
    finally:
        if again.poll() is None:
            again.kill()
            again.wait()

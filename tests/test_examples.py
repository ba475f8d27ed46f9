"""The examples users copy, run as they would run them (short step counts), against a real agent."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT

from pilothouse.client import Client

pytest.importorskip("torch")


def run_example(cmd: list[str], url: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([*cmd, "--agent", url], capture_output=True, text=True, timeout=180, cwd=ROOT, env=env)


def finished(url: str, run_id: str) -> dict:
    with Client(url) as c:
        return next(r for r in c.runs() if r["id"] == run_id)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("cmd, steps", [
    ([sys.executable, "examples/pytorch_loop.py", "--steps", "50"], 49),
    ([sys.executable, "examples/hf_trainer.py", "--steps", "10"], 10),
    ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
      "examples/torchrun_ddp.py", "--steps", "30"], 29),
    ([sys.executable, "examples/trl_grpo.py", "--steps", "10"], 10),
], ids=["pytorch-loop", "hf-trainer", "torchrun-2-ranks", "trl-grpo"])
def test_example_runs_to_the_end_and_is_recorded(agent_proc, cmd, steps):
    if "examples/hf_trainer.py" in cmd:
        pytest.importorskip("transformers")
    zero_config = "examples/trl_grpo.py" in cmd  # its callback names the run: no id is printed
    if zero_config:
        pytest.importorskip("trl")
    out = run_example(cmd, agent_proc.url)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    if zero_config:
        with Client(agent_proc.url) as c:
            run_id = next(r["id"] for r in c.runs() if (r["project"], r["name"]) == ("examples", "trl-grpo"))
    else:
        run_id = out.stdout.split()[0]
    run = finished(agent_proc.url, run_id)
    assert run["status"] == "finished" and run["last_step"] == steps
    if zero_config:
        assert run["key"] == "reward"

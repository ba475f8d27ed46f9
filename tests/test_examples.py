"""The examples users copy, run as they would run them (short step counts at full speed: by default
each runs minutes, for a human to steer), against a real agent."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest
from support.paths import ROOT

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
    ([sys.executable, "examples/pytorch_loop.py", "--steps", "50", "--pace", "0"], 49),
    ([sys.executable, "examples/hf_trainer.py", "--steps", "10", "--pace", "0"], 10),
    ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
      "examples/torchrun_ddp.py", "--steps", "30", "--pace", "0"], 29),
    ([sys.executable, "examples/trl_grpo.py", "--steps", "10", "--pace", "0"], 10),
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


SHELL_BREAKS = re.compile(r"\s(?:&&|\|\||[;|&]|>|2>&1)(?:\s|$)|\s&$")


def commands(text: str, program: str) -> list[list[str]]:
    """Every ``program ...`` command of a script's lines or a README's code (blocks and `spans`),
    continuation lines joined, cut at the shell's operators, $VARIABLES and <placeholders> filled."""
    text = text.replace("\\\n", " ")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    code = [span for line in lines for span in (re.findall(r"`([^`]+)`", line) or [line])]
    out = []
    for piece in code:
        for m in re.finditer(rf"(?:^|[\s(]){program} .*", piece):
            line = SHELL_BREAKS.split(m.group(0).strip(" (") + " ")[0]
            line = re.sub(r'"?\$\(?\{?[A-Za-z_][A-Za-z0-9_]*\}?(?::\d+)?"?|<[^>]+>', "x", line)
            out.append(shlex.split(line, comments=True)[1:])
    return out


def test_the_slurm_script_and_its_readme_section_use_only_flags_that_exist():
    """No Slurm here, so the script is not run; each `pilothouse` and `torchrun` command in it and in
    the Slurm section of docs/examples.md is parsed by the real parsers (a renamed or missing flag fails)."""
    from torch.distributed.run import get_args_parser

    from pilothouse.cli import _parser
    from pilothouse.gui.__main__ import arguments as gui_arguments

    script = (ROOT / "examples" / "slurm_job.sbatch").read_text()
    assert subprocess.run(["bash", "-n", str(ROOT / "examples" / "slurm_job.sbatch")]).returncode == 0
    page = (ROOT / "docs" / "examples.md").read_text()
    section = page[page.index("## A multi-node Slurm job"):page.index("## A Ray cluster")]
    found = commands(script, "pilothouse") + commands(section, "pilothouse")
    assert {argv[0] for argv in found} >= {"agent", "runs", "gui", "keys"}
    for argv in found:
        try:
            (gui_arguments().parse_args(argv[1:]) if argv[0] == "gui" else _parser().parse_args(argv))
        except SystemExit:
            raise AssertionError(f"pilothouse {' '.join(argv)}: not a valid command") from None
    runs = commands(script, "torchrun")
    assert len(runs) == 1 and "examples/torchrun_ddp.py" in runs[0]
    assert [argv for argv in commands(section, "torchrun") if argv[:1] == ["--nnodes"]] == runs  # as documented
    args = get_args_parser().parse_args(runs[0])
    assert (args.rdzv_backend, args.training_script) == ("c10d", "examples/torchrun_ddp.py")
    assert (ROOT / args.training_script).exists() and "--steps" in args.training_script_args

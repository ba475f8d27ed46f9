"""`pilothouse demo --headless` end to end: an agent, two real GRPO runs, a summary, a clean exit."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

pytest.importorskip("torch")


@pytest.mark.timeout(240)
def test_headless_demo_trains_two_runs_and_says_where_to_look(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pilothouse", "demo", "--headless", "--steps", "30",
                          "--data", str(tmp_path / "demo")], capture_output=True, text=True, timeout=200, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "pilothouse tail lr3e-3 --agent tcp://127.0.0.1:" in out.stdout
    summary = [line for line in out.stdout.splitlines() if "reward/mean" in line]
    assert len(summary) == 2 and all("finished at step 29" in line for line in summary), out.stdout

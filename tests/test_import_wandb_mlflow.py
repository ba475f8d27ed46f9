"""``pilothouse import`` of W&B offline runs and of MLflow's file store: runs written by the real
wandb and mlflow packages, imported by a real ``pilothouse import`` process into a real agent;
every point is checked against what was written (step, value with NaN/±Inf, wall time), and a
second import adds nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from support.processes import run_cli
from support.runs import assert_series, run_events, run_of

SPECIAL = {6: np.nan, 9: np.inf, 12: -np.inf}  # step -> value of "loss" there
STEPS = range(0, 60, 3)

# ARGS: the folder W&B writes wandb/ into; each run logs loss/train/reward at STEPS with its own times
WANDB_WRITER = """
import math, sys, wandb
for name, offset in (("grpo-a", 0.0), ("grpo-b", 100.0)):
    run = wandb.init(project="rl", name=name, dir=sys.argv[1], config={"lr": 3e-6, "opt": {"name": "adam"}})
    for step in range(0, 60, 3):
        loss = {6: math.nan, 9: math.inf, 12: -math.inf}.get(step, 1.0 / (step + 1))
        run.log({"loss": loss + offset, "train/reward": step * 0.5, "note": "text", "_timestamp": 1.7e9 + step / 4},
                step=step)
    run.finish()
"""
# ARGS: the store; one run logs loss at STEPS (reward beside it, same step and time) with its own times
MLFLOW_WRITER = """
import math, sys, mlflow
mlflow.set_tracking_uri("file:" + sys.argv[1])
mlflow.set_experiment("sweep")
with mlflow.start_run(run_name="lr3e-6"):
    mlflow.log_param("lr", 3e-6)
    mlflow.log_param("opt", "adam")
    for step in range(0, 60, 3):
        loss = {6: math.nan, 9: math.inf, 12: -math.inf}.get(step, 1.0 / (step + 1))
        mlflow.log_metric("loss", loss, step=step, timestamp=1_700_000_000_000 + step * 250)
        mlflow.log_metric("train/reward", step * 0.5, step=step, timestamp=1_700_000_000_000 + step * 250)
"""


# ARGS: the store, the agent; an import cut short: its process sends the run's first 7 records (14 points) and ends
CUT_IMPORT = """
import secrets, sys
from pathlib import Path
from pilothouse.trainer.outbox import Outbox
from pilothouse.watch.finished import watched_hello
from pilothouse.watch.mlflow_run import read_runs
(run,) = read_runs(Path(sys.argv[1]), None)
cut = Outbox(sys.argv[2], watched_hello(run.id, run.project, run.name, "mlflow", run.created, run.config,
                                        secrets.token_hex(16)))
cut.queue.extend(run.records()[:7])
assert cut.flush(10, 7)
cut.stop()
"""


def write(tmp_path: Path, body: str, folder: Path, *args: str, **env: str) -> None:
    script = tmp_path / "writer.py"
    script.write_text(textwrap.dedent(body))
    done = subprocess.run([sys.executable, str(script), str(folder), *args], check=False, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]


def expected(offset: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    vals = np.array([SPECIAL.get(s, 1.0 / (s + 1)) + offset for s in STEPS])
    return np.array(list(STEPS)), vals, np.array([1.7e9 + s / 4 for s in STEPS])


def watched_runs(client) -> dict:
    """The imported runs as the agent has them, and their journals ("silent": seconds since last heard of)."""
    return {r["id"]: ({k: v for k, v in r.items() if k != "silent"}, run_events(client, r["id"]))
            for r in client.runs() if r["kind"] == "watched"}


def imported_twice(client, folder: Path, url: str, names: list[str]) -> None:
    """A second import of ``folder`` says so, and neither the runs nor their journals change."""
    before = watched_runs(client)
    again = run_cli("import", str(folder), "--agent", url)
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("imported before, nothing new") == len(names), again.stderr
    assert watched_runs(client) == before


def test_wandb_offline_runs_every_point_once(agent_proc, tmp_path):
    write(tmp_path, WANDB_WRITER, tmp_path, WANDB_MODE="offline", WANDB_SILENT="true")
    folder = tmp_path / "wandb"
    client = agent_proc.client()
    done = run_cli("import", str(folder), "--agent", agent_proc.url)
    assert done.returncode == 0, done.stderr
    assert "history values that are not numbers are left out: 'note'" in done.stderr
    for name, offset in (("grpo-a", 0.0), ("grpo-b", 100.0)):
        run = run_of(client, name)
        assert run["kind"] == "watched" and run["project"] == "rl" and run["status"] == "finished"
        assert run["id"].startswith("wandb-") and run["points"] == 2 * len(STEPS)
        assert run["config"] == {"lr": 3e-6, "opt": {"name": "adam"}}
        assert_series(client, run["id"], "loss", expected(offset))
        steps, _, times = expected()
        assert_series(client, run["id"], "train/reward", (steps, steps * 0.5, times))
    imported_twice(client, folder, agent_proc.url, ["grpo-a", "grpo-b"])
    one = next(folder.glob("offline-run-*"))  # a single run's folder is imported the same way
    assert "imported before, nothing new" in run_cli("import", str(one), "--agent", agent_proc.url).stderr

    # bad input: a damaged run file, a folder that holds no runs, an MLflow experiment folder; nothing changes
    runs = watched_runs(client)
    damaged = tmp_path / "damaged" / one.name
    shutil.copytree(one, damaged)
    run_file = next(damaged.glob("run-*.wandb"))
    data = bytearray(run_file.read_bytes())
    data[len(data) // 2:len(data) // 2 + 64] = bytes(range(64))
    run_file.write_bytes(bytes(data))
    for copy in ("offline-run-1", "offline-run-2"):  # a run resumed offline: two folders, one run id
        shutil.copytree(one, tmp_path / "twice" / copy)
    (tmp_path / "nothing").mkdir()
    (tmp_path / "nothing" / "notes.txt").write_text("no runs here")
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "meta.yaml").write_text("name: x\n")
    for path, code, why in ((damaged, 1, "is not a readable W&B run file"),
                            (tmp_path / "twice", 1, "is in another folder too"),
                            (tmp_path / "nothing", 1, "nor W&B run files (run-*.wandb) nor an MLflow file store"),
                            (tmp_path / "experiment", 2, "import the store it is in")):
        bad = run_cli("import", str(path), "--agent", agent_proc.url, env={"PILOTHOUSE_DATA": str(tmp_path / "ph")})
        assert bad.returncode == code and why in bad.stderr, bad.stderr
    assert watched_runs(client) == runs


def test_mlflow_file_store_every_point_once(agent_proc, tmp_path):
    store = tmp_path / "mlruns"
    write(tmp_path, MLFLOW_WRITER, store, MLFLOW_ALLOW_FILE_STORE="true")
    client = agent_proc.client()
    write(tmp_path, CUT_IMPORT, store, agent_proc.url)  # the agent holds 14 points of the run, not its end
    assert run_of(client, "lr3e-6")["points"] == 14
    done = run_cli("import", str(store), "--agent", agent_proc.url)
    assert done.returncode == 0 and "(14 of them held already)" in done.stderr, done.stderr
    run = run_of(client, "lr3e-6")
    assert run["kind"] == "watched" and run["project"] == "sweep" and run["status"] == "finished"
    assert run["id"].startswith("mlflow-") and run["points"] == 2 * len(STEPS) and run["attempts"] == 1
    assert run["config"] == {"lr": "3e-06", "opt": "adam"}  # MLflow keeps params as text
    assert_series(client, run["id"], "loss", expected())
    steps, _, times = expected()
    assert_series(client, run["id"], "train/reward", (steps, steps * 0.5, times))
    imported_twice(client, store, agent_proc.url, ["lr3e-6"])
    other = run_cli("import", str(store), "--agent", agent_proc.url, "--project", "mine")
    assert other.returncode == 0 and run_of(client, "lr3e-6")["project"] == "sweep", other.stderr

    damaged = tmp_path / "damaged"  # a metric file with a line that is not "timestamp value step"
    shutil.copytree(store, damaged)
    with open(next(damaged.glob("*/*/metrics/loss")), "a") as f:
        f.write("garbage line\n")
    runs = watched_runs(client)
    bad = run_cli("import", str(damaged), "--agent", agent_proc.url)
    assert bad.returncode == 1 and "is not a readable MLflow file store" in bad.stderr, bad.stderr
    assert watched_runs(client) == runs

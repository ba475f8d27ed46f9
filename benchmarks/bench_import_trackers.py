"""``pilothouse import`` of a W&B offline run and of an MLflow file store against each tracker's
own reading of the same files (the reader the import uses, with nothing sent):

- W&B: a run of ``--points`` values (two metrics per history row) written by the real wandb
  (offline); its own ``DataStore`` scan parsing every ``Record``, against ``pilothouse import``
  to the command's exit (every point acknowledged by a fresh agent, the run finished).
- MLflow: a run of ``--points`` values (two metrics, ``log_batch``) in a file store written by the
  real mlflow; ``MlflowClient.get_metric_history`` of every metric, against ``pilothouse import``.

Medians over trials; the import includes its process start and its imports of wandb or mlflow
(1-2 s each here), the own read does not (loaded once, before).

    python benchmarks/bench_import_trackers.py [--points 200000] [--trials 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from _common import ROOT, AgentProcess, median, table, write_result

os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # this process reads the store too

from mlflow.tracking import MlflowClient  # noqa: E402 (after the switch above)
from wandb.proto.wandb_internal_pb2 import Record  # noqa: E402
from wandb.sdk.internal.datastore import DataStore  # noqa: E402

from pilothouse.client import Client  # noqa: E402

WANDB = """
import sys, wandb
run = wandb.init(project="bench", name="run", dir=sys.argv[1])
for step in range(int(sys.argv[2]) // 2):
    run.log({"loss": 1.0 / (step + 1), "reward": step * 0.5, "_timestamp": 1.7e9 + step}, step=step)
run.finish()
"""
MLFLOW = """
import sys, mlflow
from mlflow.entities import Metric
mlflow.set_tracking_uri("file:" + sys.argv[1] + "/mlruns")
mlflow.set_experiment("bench")
client = mlflow.MlflowClient()
with mlflow.start_run(run_name="run") as run:
    metrics = [Metric(key, value, 1_700_000_000_000 + step, step) for step in range(int(sys.argv[2]) // 2)
               for key, value in (("loss", 1.0 / (step + 1)), ("reward", step * 0.5))]
    for at in range(0, len(metrics), 1000):
        client.log_batch(run.info.run_id, metrics=metrics[at:at + 1000])
"""


def write(body: str, folder: Path, points: int, **env: str) -> None:
    script = folder / "writer.py"
    script.write_text(textwrap.dedent(body))
    subprocess.run([sys.executable, str(script), str(folder), str(points)], check=True, cwd=folder,
                   capture_output=True, env={**os.environ, **env})


def wandb_read(folder: Path) -> int:
    values = 0
    for path in folder.glob("wandb/offline-run-*/run-*.wandb"):
        store = DataStore()
        store.open_for_scan(str(path))
        while (data := store.scan_data()) is not None:
            record = Record.FromString(data)
            if record.WhichOneof("record_type") == "history":
                values += sum(not i.nested_key[0].startswith("_") for i in record.history.item)
    return values


def mlflow_read(folder: Path) -> int:
    client = MlflowClient(tracking_uri=(folder / "mlruns").as_uri())
    values = 0
    for experiment in client.search_experiments():
        for run in client.search_runs([experiment.experiment_id]):
            values += sum(len(client.get_metric_history(run.info.run_id, key)) for key in run.data.metrics)
    return values


def trial(tracker: str, points: int) -> dict:
    with AgentProcess() as agent, tempfile.TemporaryDirectory(prefix="pilothouse-bench-trackers-") as tmp:
        folder = Path(tmp)
        if tracker == "wandb":
            write(WANDB, folder, points, WANDB_MODE="offline", WANDB_SILENT="true")
            source, read = folder / "wandb", wandb_read
        else:
            write(MLFLOW, folder, points, MLFLOW_ALLOW_FILE_STORE="true")
            source, read = folder / "mlruns", mlflow_read
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pilothouse", "import", str(source), "--agent", agent.url],
                              cwd=ROOT, capture_output=True, text=True)
        imported = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        got = sum(r["points"] for r in Client(agent.url, timeout=30).runs() if r["kind"] == "watched")
        t0 = time.perf_counter()
        kept = read(folder)
        own = time.perf_counter() - t0
    return {"tracker": tracker, "points": got, "import_s": imported, "own_read_s": own,
            "exact": got == kept == points}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", type=int, default=200_000)
    p.add_argument("--trials", type=int, default=3)
    args = p.parse_args(argv)
    result: dict = {}
    rows = []
    for tracker, own in (("wandb", "wandb DataStore scan + Record parse"), ("mlflow", "MlflowClient metric history")):
        trials = [trial(tracker, args.points) for _ in range(args.trials)]
        imp, read = median([t["import_s"] for t in trials]), median([t["own_read_s"] for t in trials])
        rows += [[f"pilothouse import ({tracker})", trials[0]["points"], f"{imp:.2f} s",
                  f"{trials[0]['points'] / imp:,.0f} points/s"],
                 [own, trials[0]["points"], f"{read:.2f} s", f"import / own read = {imp / read:.2f}x"]]
        result[tracker] = {"trials": trials, "median_import_s": imp, "median_own_read_s": read, "ratio": imp / read}
    print(table(["case", "points", "median", "note"], rows))
    write_result("bench_import_trackers", result)
    if not passed(result):
        print("LOSS: the agent did not hold exactly the points the files hold")
    return result


def passed(result: dict) -> bool:
    return all(t["exact"] for r in result.values() for t in r["trials"])


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)

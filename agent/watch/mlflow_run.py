"""MLflow's file store (``mlruns/<experiment>/<run>/``) read with mlflow's own client: each run's
metric histories become points with their exact step, value and time; its params become its config
(text, as MLflow keeps them).  Needs ``pilothouse[mlflow]``."""

from __future__ import annotations

import os
from pathlib import Path

from pilothouse.watch.finished import ForeignRun, SourceError
from pilothouse.wire.checks import check_run_id, normal_name

# MLflow 3 refuses to open a file store unless told to (it wants users to move to a database);
# reading one that exists is what this is for.
os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")

from mlflow.entities import Run  # noqa: E402 (after the switch above)
from mlflow.exceptions import MlflowException  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402


def read_runs(store: Path, project: str | None) -> list[ForeignRun]:
    """Every active run of every experiment in the store, read whole before anything is sent."""
    client = MlflowClient(tracking_uri=store.resolve().as_uri())
    out = []
    try:
        for experiment in client.search_experiments():
            for run in client.search_runs([experiment.experiment_id]):
                out.append(_run(client, experiment.name, run, project))
    except SourceError:
        raise
    except Exception as exc:  # noqa: BLE001 (mlflow says damage with MlflowException, ValueError, YAML errors...)
        why = exc.message if isinstance(exc, MlflowException) else f"{type(exc).__name__}: {exc}"
        raise SourceError(f"{store} is not a readable MLflow file store ({why}); nothing imported") from None
    return out


def _run(client: MlflowClient, experiment: str, run: Run, project: str | None) -> ForeignRun:
    info = run.info
    try:
        out = ForeignRun(id=check_run_id(f"mlflow-{info.run_id}"),
                         project=project or normal_name(experiment, "project"),
                         name=normal_name(info.run_name or info.run_id, "run name"),
                         source="mlflow", created=info.start_time / 1000, config=dict(run.data.params))
    except ValueError as exc:
        raise SourceError(f"MLflow run {info.run_id!r}: {exc}") from None
    points = sorted((m.timestamp, m.step, key, i, m.value)
                    for key in run.data.metrics
                    for i, m in enumerate(client.get_metric_history(info.run_id, key)))
    for timestamp, step, key, _, value in points:  # one row per (time, step), as the values were logged
        last = out.rows[-1] if out.rows else None
        if last is None or (last[0], last[1]) != (step, timestamp / 1000) or key in last[2]:
            out.rows.append((step, timestamp / 1000, {}))
        out.rows[-1][2][key] = value
    return out

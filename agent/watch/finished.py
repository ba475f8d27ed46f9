"""Finished runs read whole from another tracker's files (W&B offline runs, MLflow's file store)
sent once into an agent, as watched runs, through a trainer's ``Outbox`` (numbered records,
resent until acknowledged), as ``watch`` sends TensorBoard runs.

No state file is needed: a run's records are built the same way from the same files every time,
so the agent's welcome (the last seq it holds of the run) says which of them it has.  A run the
agent holds whole is not even announced again; one it holds in part (an import cut short, a run
that grew since) gets only the records after what it holds.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from pilothouse.client import Client
from pilothouse.security import Keyring
from pilothouse.trainer.outbox import Outbox
from pilothouse.watch.points import MetricRecords

WELCOME_TIMEOUT_S = 30.0  # also: how long the agent may go without acknowledging anything before the import stops
CLOSE_TIMEOUT_S = 60.0
MAX_UNACKED = 200_000  # records sent and not yet acknowledged, per run: past it the files (or rows) wait
MAX_UNACKED_BYTES = 64 << 20
QUEUE_RECORDS = 4096  # records handed to the outbox at a time
WANDB_FILE = "run-*.wandb"  # in each W&B run folder (wandb/offline-run-<time>-<id>/)
MLFLOW_META = "meta.yaml"  # in each experiment folder of an MLflow file store, and each run folder

Say = Callable[[str], None]


class SourceError(ValueError):
    """Files that cannot be imported (missing, damaged, not of the format they look like); the text says why."""


@dataclass
class ForeignRun:
    """One finished run as another tracker wrote it: its metric rows in the order written."""

    id: str  # the agent's run id: fixed by the tracker's own run id, so a second import finds the run
    project: str
    name: str
    source: str  # pilothouse.wire.watched.SOURCES
    created: float
    config: dict = field(default_factory=dict)
    rows: list[tuple[int, float, dict[str, float]]] = field(default_factory=list)  # (step, wall time, tag -> value)
    skipped: list[str] = field(default_factory=list)  # what was left out, one line each

    def records(self) -> list[tuple]:
        """The run's metric records, the same ones every time for the same files."""
        return MetricRecords().rows(self.rows, self.skipped)


def source_of(path: Path) -> str | None:
    """What a folder holds: "wandb" (a W&B run folder, or a folder of them such as ``wandb/``),
    "mlflow" (an MLflow file store such as ``mlruns/``), else None (a TensorBoard logdir, maybe)."""
    if wandb_files(path):
        return "wandb"
    if (path / MLFLOW_META).is_file():
        raise SourceError(f"{path} is one experiment or run of an MLflow file store: import the store it is in "
                          f"(the folder of experiments, such as mlruns/)")
    if any(path.glob(f"*/{MLFLOW_META}")):
        return "mlflow"
    return None


def wandb_files(path: Path) -> list[Path]:
    """The run file of a W&B run folder, or of each run folder in ``path`` (not ``latest-run``, a link)."""
    return sorted(path.glob(WANDB_FILE)) or sorted(f for f in path.glob(f"*/{WANDB_FILE}")
                                                    if not f.parent.is_symlink())


def watched_hello(run: str, project: str, name: str, source: str, created: float, config: dict,
                  token: str) -> dict:
    """The hello of a run a watcher or an import sends: kind watched, no process to steer; ``token``
    the run's secret (a watcher keeps it in its state, so a restarted one is the run's job again)."""
    return {"run": run, "rank": 0, "session": source, "token": token, "project": project,
            "name": name, "config": config,
            "host": socket.gethostname(), "pid": os.getpid(), "pid_started": psutil.Process().create_time(),
            "created": created, "watched": source}


def send_finished(runs: list[ForeignRun], agent: str, keys: Keyring | None, say: Say) -> int:
    """Send each run the agent does not hold whole, and end it; 1 if any was not imported whole."""
    with Client(agent, timeout=10.0, keys=keys) as client:
        held = {r["id"]: r for r in client.runs()}
    failed = 0
    seen: set[str] = set()
    for run in runs:
        if run.id in seen:  # W&B writes a run resumed offline to a folder of its own, under the same id
            say(f"{run.name}: not imported: run {run.id} is in another folder too (a run resumed offline); "
                "the two are not merged, only the first is imported")
            failed += 1
            continue
        seen.add(run.id)
        records = run.records()
        for line in run.skipped:
            say(f"{run.name}: {line}")
        points = sum(len(r[1]) for r in records)
        have = held.get(run.id)
        if have is not None and have["kind"] == "watched" and have["points"] == points \
                and have["status"] == "finished":
            say(f"{run.name} ({run.id}): imported before, nothing new")
            continue
        failed += not _send(run, records, points, agent, keys, say)
    return 1 if failed else 0


def _send(run: ForeignRun, records: list[tuple], points: int, agent: str, keys: Keyring | None, say: Say) -> bool:
    outbox = Outbox(agent, watched_hello(run.id, run.project, run.name, run.source, run.created, run.config,
                                         secrets.token_hex(16)), keys=keys)
    deadline = time.monotonic() + WELCOME_TIMEOUT_S
    while not outbox.welcomed.wait(0.05) and not outbox.stats.last_error and time.monotonic() < deadline:
        pass  # a refused hello is answered with an error, never a welcome
    if not outbox.welcomed.is_set() or outbox.stats.last_error:
        outbox.stop()
        why = outbox.stats.last_error or f"the agent did not answer within {WELCOME_TIMEOUT_S:.0f} s"
        say(f"{run.name}: not imported: {why}")
        return False
    held = outbox.stats.acked_seq
    if held > len(records):
        outbox.stop()
        say(f"{run.name}: not imported: the agent holds {held} records of run {run.id}, its files make "
            f"{len(records)}; remove it first to import it again: pilothouse rm {run.id}")
        return False
    outbox.continue_after(held)
    outbox.last_step = max((row[0] for row in run.rows), default=-1)
    if not _queue(outbox, records, held):
        outbox.stop()
        say(f"{run.name}: not imported whole: the agent acknowledged nothing for {WELCOME_TIMEOUT_S:.0f} s "
            f"(it holds {outbox.stats.acked_seq} of {len(records)} records; a new import sends the rest)")
        return False
    if not outbox.close(timeout=CLOSE_TIMEOUT_S):
        say(f"{run.name}: the agent did not confirm the end of the run")
        return False
    say(f"imported {run.name} ({run.id}) into {run.project}: {points} points"
        f"{f' ({points - sum(len(r[1]) for r in records[held:])} of them held already)' if held else ''}"
        f"{', config' if run.config else ''}")
    return True


def _queue(outbox: Outbox, records: list[tuple], held: int) -> bool:
    """Hand the records after ``held`` to the outbox only as fast as the agent acknowledges them (its
    buffer drops the oldest past its bound); False if the agent stops acknowledging."""
    sent, acked, since = held, held, time.monotonic()
    while sent < len(records):
        if outbox.stats.acked_seq > acked:
            acked, since = outbox.stats.acked_seq, time.monotonic()
        elif time.monotonic() - since > WELCOME_TIMEOUT_S:
            return False
        if sent - acked > MAX_UNACKED or outbox.stats.buffered_bytes > MAX_UNACKED_BYTES:
            time.sleep(0.01)
            continue
        outbox.queue.extend(records[sent:sent + QUEUE_RECORDS])
        sent = min(sent + QUEUE_RECORDS, len(records))
    return True


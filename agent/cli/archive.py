"""``pilothouse archive RUN -o run.parquet`` and ``pilothouse import run.parquet``: a whole run
(every point, its config, events and rollouts) out of an agent into one file, and back into an
agent, any agent, as the same run.  The file's layout is in ``archive_file``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from pilothouse.cli import import_runs, watch
from pilothouse.cli.archive_file import ArchiveError, open_archive, write_archive
from pilothouse.cli.common import EXIT_ERROR, EXIT_USAGE, Reader, client_for
from pilothouse.client import CALL_ERRORS, Client, claimed_sender
from pilothouse.text import printable
from pilothouse.wire.run_import import COUNTERS, IMPORT_BATCH_BYTES, IMPORT_BATCH_ENTRIES, entry_size

RUN_FIELDS = ("id", "project", "name", "kind", "host", "status", "created", "ended", "last_step", *COUNTERS,
              "config", "schema")  # what of a `runs` row an archive keeps


def add_parsers(reader: Reader) -> None:
    a = reader("archive", "write a whole run (points, config, events, rollouts) to one parquet file", cmd_archive)
    a.add_argument("run", help="run id or unambiguous run name")
    a.add_argument("-o", "--output", required=True, type=Path, help="the parquet file to write")
    a.add_argument("--force", action="store_true", help="overwrite the file if it exists")

    i = reader("import", "bring an archived run back into an agent (same id, name, config and status), "
                         "or the runs of a TensorBoard logdir, W&B offline run folders or an MLflow file store",
               cmd_import)
    i.add_argument("file", type=Path, metavar="FILE|FOLDER",
                   help="a parquet file written by `pilothouse archive`, a folder of TensorBoard runs, a W&B run "
                        "folder or a folder of them (wandb/), or an MLflow file store (mlruns/)")
    watch.add_project(i)


def cmd_archive(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        run = client.resolve(args.run)
        try:
            counts = write_archive(args.output, client.history(run), lambda: _run_meta(client, run), args.force)
        except ArchiveError as exc:
            return _fail(exc)
    print(f"archived run {run}: {counts.points} points, {counts.events} events, {counts.rollouts} rollout batches "
          f"to {args.output} ({args.output.stat().st_size} bytes)", file=sys.stderr)
    return 0


def _run_meta(client: Client, run: str) -> dict:
    """The run as the agent has it once every entry is read (a live run's status and step move on)."""
    row = next(r for r in client.runs() if r["id"] == run)
    return {key: row.get(key) for key in RUN_FIELDS}


def cmd_import(args: argparse.Namespace) -> int:
    if args.file.is_dir():
        return import_runs.cmd_import_dir(args)
    if "tfevents" in args.file.name:
        print(f"pilothouse: {args.file} is a TensorBoard event file: import its folder (the logdir) instead",
              file=sys.stderr)
        return EXIT_USAGE
    if args.project is not None:
        print("pilothouse: --project is for a folder of runs; an archive keeps its run's project", file=sys.stderr)
        return EXIT_USAGE
    try:
        archive = open_archive(args.file)
    except ArchiveError as exc:
        return _fail(exc)
    run = archive.run
    with client_for(args) as client:
        token = client.request("import_begin", run=run)["token"]
        try:
            batches = entries = 0
            for batch in _batches(archive.entries()):
                client.request("import_batch", token=token, batch=batches, entries=batch)
                batches, entries = batches + 1, entries + len(batch)
            done = client.request("import_end", token=token, batches=batches, entries=entries,
                                  source=args.file.name, who=claimed_sender())
        except BaseException as exc:  # a bad row, the agent's refusal, Ctrl+C: the agent drops what it got
            try:
                client.request("import_abort", token=token)
            except CALL_ERRORS:
                pass  # it drops an abandoned import by itself, later
            if isinstance(exc, ArchiveError):
                return _fail(exc)
            raise
    print(printable(f"imported run {run['id']} ({run['project']}/{run['name']}, {done['status']}): "
                    f"{archive.counts.points} points, {archive.counts.events} events, {archive.counts.rollouts} "
                    f"rollout batches from {args.file} into {args.agent}"), file=sys.stderr)
    return 0


def _batches(entries: Iterable[list]) -> Iterator[list[list]]:
    """Entries in batches an agent takes in one frame (IMPORT_BATCH_BYTES, IMPORT_BATCH_ENTRIES)."""
    batch: list[list] = []
    size = 0
    for entry in entries:
        if batch and (size + entry_size(entry) > IMPORT_BATCH_BYTES or len(batch) == IMPORT_BATCH_ENTRIES):
            yield batch
            batch, size = [], 0
        batch.append(entry)
        size += entry_size(entry)
    if batch:
        yield batch


def _fail(exc: ArchiveError) -> int:
    print(printable(f"pilothouse: {exc}"), file=sys.stderr)
    return EXIT_ERROR

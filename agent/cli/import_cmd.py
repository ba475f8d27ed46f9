"""``pilothouse import FILE|FOLDER`` (``import`` is Python's keyword, hence the name): a run archived
by ``pilothouse archive`` back into an agent, any agent, as the same run; or the finished runs of a
folder: W&B offline runs or an MLflow file store, read with that tracker's own reader (an optional
extra each), or else a TensorBoard logdir, followed once as ``pilothouse watch`` follows it live.
The archive's layout is in ``archive_file``."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType

from pilothouse.cli import watch
from pilothouse.cli.archive_file import ArchiveError, open_archive
from pilothouse.cli.common import EXIT_ERROR, EXIT_USAGE, Reader, client_for
from pilothouse.client import CALL_ERRORS, AgentUnavailable, claimed_sender
from pilothouse.security import Keyring
from pilothouse.text import printable
from pilothouse.wire.run_import import IMPORT_BATCH_BYTES, IMPORT_BATCH_ENTRIES, entry_size

TRACKERS = {"wandb": "W&B", "mlflow": "MLflow"}
WHY_MISSING = {"wandb": "; wandb 0.30 and later no longer have it, the extra holds wandb below 0.30", "mlflow": ""}


def add_parser(reader: Reader) -> None:
    i = reader("import", "bring an archived run back into an agent (same id, name, config and status), "
                         "or the runs of a TensorBoard logdir, W&B offline run folders or an MLflow file store",
               cmd_import)
    i.add_argument("paths", type=Path, nargs="+", metavar="FILE|FOLDER",
                   help="a parquet file written by `pilothouse archive`, a folder of TensorBoard runs or of an RL "
                        "framework's runs (a TRL output_dir), a W&B run folder or a folder of them (wandb/), or an "
                        "MLflow file store (mlruns/); with --run, the files and folders of one run")
    watch.add_project(i)
    watch.add_run(i)


def cmd_import(args: argparse.Namespace) -> int:
    if args.run is not None:  # the PATHs are one run's files, read once as `watch --run` follows them
        return watch.follow(args, threading.Event(), once=True, logdirs=args.paths)
    if len(args.paths) > 1:
        print("pilothouse: import takes one FILE|FOLDER; several are the files of one run with --run NAME",
              file=sys.stderr)
        return EXIT_USAGE
    args.file = args.paths[0]
    if args.file.is_dir():
        return _import_dir(args)
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
        return _say_exit(f"pilothouse: {exc}", EXIT_ERROR)
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
                return _say_exit(f"pilothouse: {exc}", EXIT_ERROR)
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


def _import_dir(args: argparse.Namespace) -> int:
    from pilothouse.watch.finished import SourceError, send_finished, source_of

    try:
        source = source_of(args.file)
    except SourceError as exc:
        return _say_exit(f"pilothouse: {exc}", EXIT_USAGE)
    if source is None:  # a TensorBoard logdir: each run once, then finished; importing it again adds nothing
        return watch.follow(args, threading.Event(), once=True, logdirs=[args.file])
    try:
        reader = _reader(source)
    except ImportError as exc:
        return _say_exit(f"pilothouse: {args.file} holds {TRACKERS[source]} runs; reading them needs {source}'s own "
                         f"reader ({exc}{WHY_MISSING[source]}): pip install 'pilothouse[{source}]'", EXIT_USAGE)
    try:
        runs = reader.read_runs(args.file, args.project)
    except SourceError as exc:
        return _say_exit(f"pilothouse: {exc}", EXIT_ERROR)
    try:
        return send_finished(runs, args.agent, Keyring(args.keys), _say)
    except AgentUnavailable as exc:
        return _say_exit(f"pilothouse: {exc}", EXIT_ERROR)


def _reader(source: str) -> ModuleType:
    """The reader module of ``source``, loaded only now (each needs its tracker's package)."""
    if source == "wandb":
        from pilothouse.watch import wandb_run
        return wandb_run
    from pilothouse.watch import mlflow_run
    return mlflow_run


def _say(line: str) -> None:
    print(printable(line), file=sys.stderr, flush=True)


def _say_exit(line: str, code: int) -> int:
    _say(line)
    return code

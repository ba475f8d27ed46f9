"""``pilothouse archive RUN -o run.parquet``: a whole run (every point, its config, events and
rollouts) out of an agent into one file, which ``pilothouse import`` (``import_cmd``) brings back into
an agent, any agent, as the same run.  The file's layout is in ``archive_file``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pilothouse.cli.archive_file import ArchiveError, write_archive
from pilothouse.cli.common import EXIT_ERROR, RUN_HELP, Reader, client_for
from pilothouse.client import Client
from pilothouse.text import printable
from pilothouse.wire.run_import import COUNTERS

RUN_FIELDS = ("id", "project", "name", "kind", "host", "status", "created", "ended", "last_step", *COUNTERS,
              "config", "schema")  # what of a `runs` row an archive keeps


def add_parser(reader: Reader) -> None:
    a = reader("archive", "write a whole run (points, config, events, rollouts) to one parquet file", cmd_archive)
    a.add_argument("run", help=RUN_HELP)
    a.add_argument("-o", "--output", required=True, type=Path, help="the parquet file to write")
    a.add_argument("--force", action="store_true", help="overwrite the file if it exists")


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


def _fail(exc: ArchiveError) -> int:
    print(printable(f"pilothouse: {exc}"), file=sys.stderr)
    return EXIT_ERROR

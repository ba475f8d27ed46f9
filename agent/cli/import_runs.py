"""``pilothouse import FOLDER``: a folder of W&B offline runs or an MLflow file store, read with
that tracker's own reader (an optional extra each), or else a TensorBoard logdir (``watch``)."""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from pilothouse.cli import watch
from pilothouse.cli.common import EXIT_ERROR, EXIT_USAGE
from pilothouse.client import AgentUnavailable
from pilothouse.security import Keyring
from pilothouse.text import printable

TRACKERS = {"wandb": "W&B", "mlflow": "MLflow"}
WHY_MISSING = {"wandb": "; wandb 0.30 and later no longer have it, the extra holds wandb below 0.30", "mlflow": ""}


def cmd_import_dir(args: argparse.Namespace) -> int:
    from pilothouse.watch.finished import SourceError, send_finished, source_of

    try:
        source = source_of(args.file)
    except SourceError as exc:
        return _say_exit(f"pilothouse: {exc}", EXIT_USAGE)
    if source is None:
        return watch.cmd_import_logdir(args)
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

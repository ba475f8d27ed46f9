"""``python -m pilothouse.gui [--agent URL ...] [--store FILE] [--keys DIR]``: the desktop app
(``pilothouse gui`` runs this).  Without ``--agent`` it follows the user's running local agents (as
``pilothouse agents`` lists them, those started later too) besides the remembered ones; an explicit
``--agent`` is followed as given, and only the remembered agents with it."""

from __future__ import annotations

import argparse
import os
import sys

from pilothouse.security import ENV_KEYS, SecurityError, client_keys
from pilothouse.text import url_arg


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pilothouse gui", description="The Pilothouse desktop app.")
    parser.add_argument("--agent", action="append", type=url_arg, default=[],
                        help="agent URL to follow (repeatable); added to the remembered agents. Without it, the "
                             "app follows your running local agents (`pilothouse agents`) and the remembered ones")
    parser.add_argument("--store", help="the app's local store file (default: the user data dir)")
    parser.add_argument("--keys", help=f"CurveZMQ keyring directory (default: ${ENV_KEYS} or the user config dir)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = arguments()
    args = parser.parse_args(argv)
    if args.keys:
        os.environ[ENV_KEYS] = args.keys  # every link's Client reads the keyring from here
    for url in args.agent:
        try:
            client_keys(url)
        except SecurityError as exc:
            parser.error(str(exc))
    from ._qt.app import run_app  # Qt only once the arguments are known to be good

    return run_app(sys.argv[:1], args.store, args.agent, local=not args.agent)


if __name__ == "__main__":
    raise SystemExit(main())

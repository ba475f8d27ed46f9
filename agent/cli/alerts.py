"""``pilothouse alerts``: what fired, across runs; ``alerts ls|add|rm`` manage the agent's rules."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from pilothouse.cli.common import EXIT_USAGE, Reader, client_for
from pilothouse.text import parse_assignment, printable


def add_parser(reader: Reader) -> None:
    parser = reader("alerts", "firing and recent alerts; `alerts ls|add|rm` manage the rules", cmd_alerts)
    parser.add_argument("action", nargs="?", choices=["ls", "add", "rm"],
                        help="ls: the rules; add NAME KIND KEY=VALUE...; rm NAME (default: firing and recent alerts)")
    parser.add_argument("words", nargs="*", metavar="ARG", help="for add: NAME KIND KEY=VALUE ...; for rm: NAME")
    parser.add_argument("--run", help="add/rm: a rule for this run only (id or name)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def cmd_alerts(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        if args.action == "add":
            try:
                rule = _rule(args.words)
            except ValueError as exc:
                return _usage(str(exc))
            stored = client.add_alert(rule, run=args.run)
            print(json.dumps(stored) if args.json else f"added {_rule_line(stored)}")
        elif args.action == "rm":
            if len(args.words) != 1:
                return _usage("alerts rm takes one rule name")
            gone = client.remove_alert(args.words[0], run=args.run)
            print(json.dumps(gone) if args.json else f"removed {gone['name']} ({gone['source']} rule)")
        elif args.words:
            return _usage(f"unexpected arguments: {' '.join(args.words)}")
        elif args.action == "ls":
            rules = client.alerts()["rules"]
            if args.json:
                print(json.dumps(rules))
            for rule in [] if args.json else rules:
                print(_rule_line(rule))
            if not rules and not args.json:
                print("no alert rules: add one with `pilothouse alerts add NAME KIND KEY=VALUE...`, "
                      "start the agent with --alerts FILE, or pass alerts=[...] to pilothouse.init")
        else:
            data = client.alerts()
            if args.json:
                print(json.dumps({"firing": data["firing"], "recent": data["recent"]}))
                return 0
            print(f"FIRING ({len(data['firing'])})")
            for alert in data["firing"]:
                print("  " + _alert_line(alert))
            print(f"RECENT ({len(data['recent'])})")
            for alert in data["recent"]:
                print("  " + _alert_line(alert))
    return 0


def _rule(words: list[str]) -> dict:
    """NAME KIND KEY=VALUE... as a rule map; a list value is JSON (exec='["cmd", "arg"]')."""
    if len(words) < 2:
        raise ValueError("alerts add needs NAME KIND [KEY=VALUE ...], "
                         "like: alerts add nan-loss nonfinite metric=loss pause=true")
    rule: dict[str, Any] = {"name": words[0], "kind": words[1]}
    for word in words[2:]:
        try:
            key, value = parse_assignment(word)
            if isinstance(value, str) and value.startswith("["):
                value = json.loads(value)
        except ValueError as exc:  # JSONDecodeError is one
            raise ValueError(f"bad rule field {word!r}: {exc}") from None
        rule[key] = value
    return rule


def _rule_line(rule: dict) -> str:
    spec = " ".join(f"{k}={json.dumps(v) if isinstance(v, list) else v}" for k, v in rule["spec"].items()
                    if k not in ("name", "kind"))
    scope = f"run {rule['run']}" if rule.get("run") else "all runs"
    return printable(f"{rule['name']:<20} {rule['kind']:<10} {rule['source']:<5} {scope:<16} {spec}")


def _alert_line(alert: dict) -> str:
    when = time.strftime("%m-%d %H:%M:%S", time.localtime(alert.get("time") or 0))
    return printable(f"{when}  {alert.get('run')}  {alert.get('rule')}  {alert.get('state')}  {alert.get('detail')}")


def _usage(text: str) -> int:
    print(f"pilothouse alerts: {text}", file=sys.stderr)
    return EXIT_USAGE

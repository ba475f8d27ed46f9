"""``pilothouse key-metric PROJECT [METRIC]``: the metric a project's runs are summed up by.

The choice lives in the agent's journal, so `pilothouse runs`, the app and every other client of
that agent show the same headline."""

from __future__ import annotations

import argparse
import json

from pilothouse.cli.common import Reader, client_for, name_arg
from pilothouse.text import printable

AUTOMATIC = "automatic (a reward, else the loss)"


def add_parser(reader: Reader) -> None:
    parser = reader("key-metric", "show or choose the metric a project's runs are headed by", cmd_key_metric)
    parser.add_argument("project", type=name_arg("project"), help="project name, as given to pilothouse.init")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("metric", nargs="?", type=name_arg("metric name"),
                        help="the metric to head the project's runs (default: show the current choice)")
    choice.add_argument("--clear", action="store_true", help="go back to the automatic choice")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def cmd_key_metric(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        if args.metric is None and not args.clear:
            data = client.request("key_metric", project=args.project)
        else:
            data = client.request("key_metric_set", project=args.project, metric=args.metric)
    if args.json:
        print(json.dumps(data))
        return 0
    metric = data["metric"]
    line = f"project {data['project']}: key metric {AUTOMATIC if metric is None else metric}"
    if metric is not None:
        line += (f" (logged by {data['logging']} of its {data['runs']} runs)" if data["logging"] else
                 f" (no run of it logs {metric} yet: those without it show their automatic choice)")
    print(printable(line))
    return 0

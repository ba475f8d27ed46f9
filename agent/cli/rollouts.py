"""``pilothouse rollouts RUN``: a run's sample rollouts in a terminal, as on-call reads them on a GPU node
where the app's Rollouts panel is not at hand."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from collections.abc import Callable
from typing import Any

from pilothouse.cli.common import Reader, client_for
from pilothouse.text import fmt_value, printable, step_arg
from pilothouse.wire.rollouts import MAX_ROLLOUT_STEPS, fts_query

TEXT_ROWS = 20  # rows per step in the text view unless --limit says otherwise
SEARCH_ROWS = 1000  # rows a search with --json prints unless --limit says otherwise
TEXT_LINES = 3  # lines shown of a prompt or a completion
MAX_LIMIT = 1_000_000
TEXTS = ("prompt", "completion")
NUMBERS = ("reward", "advantage")  # first on a row's line of numbers, then rewards/*, then the rest


def add_parser(reader: Reader) -> None:
    r = reader("rollouts", "a run's sample rollouts (prompt, completion, reward, advantage) by step", cmd_rollouts)
    r.add_argument("run", help="run id or unambiguous run name")
    which = r.add_mutually_exclusive_group()
    which.add_argument("--step", type=step_arg, help="this step (default: the latest step with rollouts)")
    which.add_argument("--last", type=_count("--last", MAX_ROLLOUT_STEPS), metavar="N",
                       help=f"the last N steps with rollouts (N at most {MAX_ROLLOUT_STEPS})")
    which.add_argument("--search", type=_words, metavar="WORDS",
                       help='rows of every step whose prompt or completion holds each word, newest first '
                            '("a phrase" in quotes, word* a prefix; case and accents do not matter)')
    r.add_argument("--limit", type=_count("--limit", MAX_LIMIT), metavar="K",
                   help=f"rows per step (default: all with --json, else {TEXT_ROWS}); with --search, rows "
                        f"found (default {SEARCH_ROWS} with --json, else {TEXT_ROWS})")
    r.add_argument("--sort", type=_sort_key, metavar="KEY",
                   help="order rows by reward, advantage or rewards/NAME, highest first with a leading '-' "
                        "(rows without a number there come last); default: as logged")
    r.add_argument("--json", action="store_true",
                   help="one JSON object per step, every row in full (a NaN reward as NaN, as Python writes it)")


def join_sort(argv: list[str]) -> list[str]:
    """``--sort -reward`` read as ``--sort=-reward``: argparse takes a value that starts with '-' for an
    option, and highest-first is the order on-call asks for most."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] == "--sort" and arg.startswith("-") and not arg.startswith("--"):
            out[-1] = f"--sort={arg}"
        else:
            out.append(arg)
    return out


def _count(option: str, most: int) -> Callable[[str], int]:
    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if not 1 <= value <= most:
            raise argparse.ArgumentTypeError(f"{option} must be a whole number from 1 to {most}, got {text!r}")
        return value
    return check


def _words(text: str) -> str:
    try:
        fts_query(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(printable(str(exc))) from None
    return text


def _sort_key(text: str) -> str:
    field = text.removeprefix("-")
    name = field.removeprefix("rewards/")
    if field not in NUMBERS and not (field.startswith("rewards/") and name and printable(name) == name):
        raise argparse.ArgumentTypeError(f"sort by reward, advantage or rewards/NAME (a leading '-': highest "
                                         f"first), got '{printable(text)}'")
    return text


def cmd_rollouts(args: argparse.Namespace) -> int:
    if args.search is not None:
        return _search(args)
    with client_for(args) as client:
        run = client.resolve(args.run)
        batches = client.rollouts(run, step=args.step, last=args.last or 1)
    if args.sort:  # checked against every row before anything is printed
        field = args.sort.removeprefix("-")
        if not any(_number(row.get(field)) is not None for b in batches for row in b["rows"]):
            fields = sorted({k for b in batches for row in b["rows"] for k, v in row.items() if _number(v) is not None})
            print(printable(f"pilothouse: no rollout row of run {run} has a number {field!r} to sort by; "
                        f"numbers there: {', '.join(fields) or 'none'}"), file=sys.stderr)
            return 1
    for i, batch in enumerate(batches):
        rows = _sorted(batch["rows"], args.sort)
        if args.json:
            shown = rows if args.limit is None else rows[:args.limit]
            print(json.dumps({"run": run, "step": batch["step"], "time": batch["time"], "rows": shown}))
        else:
            print("\n".join(([""] if i else []) + _text_view(run, batch["step"], rows, args.limit)))
    return 0


def _search(args: argparse.Namespace) -> int:
    """The rows holding the words, newest first (``--sort`` reorders those found)."""
    limit = args.limit or (SEARCH_ROWS if args.json else TEXT_ROWS)
    with client_for(args) as client:
        run = client.resolve(args.run)
        hits, indexing = client.search_rollouts(run, args.search, limit=limit)
    order = {id(row): i for i, row in enumerate(_sorted([h["rollout"] for h in hits], args.sort))}
    hits.sort(key=lambda h: order[id(h["rollout"])])
    if args.json:
        for hit in hits:
            print(json.dumps({"run": run, **hit}))
    else:
        width = max(40, shutil.get_terminal_size((100, 24)).columns)
        found = f"{len(hits)} row{'s' * (len(hits) != 1)}" + (" (the newest: use --limit)" * (len(hits) == limit))
        lines = [printable(f"== run {run}: {found} holding {args.search!r}")]
        for hit in hits:
            lines.extend(_row_lines(f"step {hit['step']} row {hit['row']}", hit["rollout"], width))
        print("\n".join(lines))
    if indexing:
        print("pilothouse: the agent is still indexing rollouts; the latest may be missing from this search",
              file=sys.stderr)
    return 0


def _number(value: Any) -> float | None:
    """A row's value as a number to sort or average by; None for text, booleans, None and NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _sorted(rows: list[dict], key: str | None) -> list[dict]:
    if not key:
        return rows
    field, high_first = key.removeprefix("-"), key.startswith("-")
    numbered = [(v, row) for row in rows if (v := _number(row.get(field))) is not None]
    rest = [row for row in rows if _number(row.get(field)) is None]
    numbered.sort(key=lambda pair: -pair[0] if high_first else pair[0])  # stable: ties stay as logged
    return [row for _, row in numbered] + rest


def _text_view(run: str, step: int, rows: list[dict], limit: int | None) -> list[str]:
    """A step's header, then a block per row; every string from the run goes through printable()."""
    width = max(40, shutil.get_terminal_size((100, 24)).columns)
    rewards = [r for r in (_number(row.get("reward")) for row in rows) if r is not None]
    mean = f", mean reward {fmt_value(sum(rewards) / len(rewards))}" if rewards else ""
    lines = [printable(f"== run {run} step {step}: {len(rows)} row{'s' * (len(rows) != 1)}{mean}")]
    shown = rows[:limit or TEXT_ROWS]
    for i, row in enumerate(shown, 1):
        lines.extend(_row_lines(str(i), row, width))
    if len(rows) > len(shown):
        lines.append(f"… {len(rows) - len(shown)} more rows (use --limit)")
    return lines


def _row_lines(label: str, row: dict, width: int) -> list[str]:
    """A row's numbers on one line after ``[label]``, then a block per text field."""
    numbers = "  ".join(f"{k[:60]}={_value(row[k])}" for k in _numbers(row))
    lines = [_clip(printable(f"[{label}] {numbers}"), width)]
    for key in [*TEXTS, *(k for k, v in row.items() if isinstance(v, str) and k not in TEXTS)]:
        if key in row:
            lines.extend(_block(key, row[key], width))
    return lines


def _numbers(row: dict) -> list[str]:
    keys = [k for k, v in row.items() if not isinstance(v, str)]
    return sorted(keys, key=lambda k: (NUMBERS.index(k) if k in NUMBERS else 2 + (not k.startswith("rewards/"))))


def _value(value: Any) -> str:
    return fmt_value(value) if isinstance(value, float) else str(value)


def _block(key: str, text: str, width: int) -> list[str]:
    """A text field: its first TEXT_LINES lines, each cut to the terminal's width, with an ellipsis
    where anything was left out."""
    label = printable(key)[:12].ljust(12) + " "
    lines = text.splitlines() or [""]
    out = [_clip(" " * 4 + (label if i == 0 else " " * len(label)) + printable(line[:width].expandtabs(4)), width)
           for i, line in enumerate(lines[:TEXT_LINES])]
    if len(lines) > TEXT_LINES:
        tail = f" … (+{len(lines) - TEXT_LINES} more lines)"
        out[-1] = _clip(out[-1], width - len(tail)) + tail
    return out


def _clip(line: str, width: int) -> str:
    return line if len(line) <= width else line[:max(0, width - 1)] + "…"

"""``pilothouse rollouts RUN``: a run's sample rollouts in a terminal, as on-call reads them on a GPU node
where the app's Rollouts panel is not at hand."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable

from pilothouse.cli.common import EXIT_USAGE, RUN_HELP, Reader, client_for
from pilothouse.cli.transcript import NUMBERS, clip, field_lines, gist, number, row_lines
from pilothouse.text import fmt_value, printable, step_arg
from pilothouse.wire.rollout_groups import Group, groups
from pilothouse.wire.rollouts import MAX_ROLLOUT_STEPS, fts_query

TEXT_ROWS = 20  # rows per step in the text view unless --limit says otherwise; groups per step with --groups
SEARCH_ROWS = 1000  # rows a search with --json prints unless --limit says otherwise
MAX_LIMIT = 1_000_000


def add_parser(reader: Reader) -> None:
    r = reader("rollouts", "a run's sample rollouts (prompt, completion, reward, advantage) by step", cmd_rollouts)
    r.add_argument("run", help=RUN_HELP)
    which = r.add_mutually_exclusive_group()
    which.add_argument("--step", type=step_arg, help="this step (default: the latest step with rollouts)")
    which.add_argument("--last", type=_count("--last", MAX_ROLLOUT_STEPS), metavar="N",
                       help=f"the last N steps with rollouts (N at most {MAX_ROLLOUT_STEPS})")
    which.add_argument("--search", type=_words, metavar="WORDS",
                       help='rows of every step whose prompt or completion holds each word, newest first '
                            '("a phrase" in quotes, word* a prefix; case and accents do not matter); of a '
                            'chat, any message, tool call (name and arguments) or tool result')
    which.add_argument("--prompt", type=_words, metavar="WORDS",
                       help="as --search, in the rows' prompts only: what the model did with one task over training")
    r.add_argument("--groups", action="store_true",
                   help="a step's GRPO groups (rows of one prompt, or of one 'group' field): size, reward mean "
                        "and std, groups whose rewards are all equal marked (they give GRPO no signal), each row "
                        "with its reward and advantage; with --step or --last; --limit counts groups, --sort "
                        "orders the rows in each group (groups stay in the order they were logged)")
    r.add_argument("--limit", type=_count("--limit", MAX_LIMIT), metavar="K",
                   help=f"rows per step (default: all with --json, else {TEXT_ROWS}); with --search or --prompt, "
                        f"rows found (default {SEARCH_ROWS} with --json, else {TEXT_ROWS}); with --groups, "
                        f"groups per step (default: all with --json, else {TEXT_ROWS})")
    r.add_argument("--sort", type=_sort_key, metavar="KEY",
                   help="order rows by reward, advantage or rewards/NAME, highest first with a leading '-' "
                        "(rows without a number there come last); default: as logged")
    r.add_argument("--json", action="store_true",
                   help="one JSON object per step (per row found by --search or --prompt), every row exactly as "
                        "logged, chats as lists of messages (a NaN reward as NaN, as Python writes it)")


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
    if args.groups and (args.search is not None or args.prompt is not None):
        print("pilothouse rollouts: --groups shows a step's groups: use it with --step or --last, not a search",
              file=sys.stderr)
        return EXIT_USAGE
    if args.search is not None or args.prompt is not None:
        return _search(args)
    with client_for(args) as client:
        run = client.resolve(args.run)
        batches = client.rollouts(run, step=args.step, last=args.last or 1)
    if args.sort:  # checked against every row before anything is printed
        field = args.sort.removeprefix("-")
        if not any(number(row.get(field)) is not None for b in batches for row in b["rows"]):
            fields = sorted({k for b in batches for row in b["rows"] for k, v in row.items() if number(v) is not None})
            print(printable(f"pilothouse: no rollout row of run {run} has a number {field!r} to sort by; "
                            f"numbers there: {', '.join(fields) or 'none'}"), file=sys.stderr)
            return 1
    show = _groups_view if args.groups else _rows_view
    for i, batch in enumerate(batches):
        lines = show(run, batch, args)
        print("\n".join(([""] if i and not args.json else []) + lines))
    return 0


def _rows_view(run: str, batch: dict, args: argparse.Namespace) -> list[str]:
    rows = _sorted(batch["rows"], args.sort)
    if args.json:
        shown = rows if args.limit is None else rows[:args.limit]
        return [json.dumps({"run": run, "step": batch["step"], "time": batch["time"], "rows": shown})]
    return _text_view(run, batch["step"], rows, args.limit)


def _search(args: argparse.Namespace) -> int:
    """The rows holding the words (in their prompts with --prompt), newest first (``--sort`` reorders
    those found)."""
    words, in_prompt = (args.prompt, True) if args.prompt is not None else (args.search, False)
    limit = args.limit or (SEARCH_ROWS if args.json else TEXT_ROWS)
    with client_for(args) as client:
        run = client.resolve(args.run)
        hits, indexing = client.search_rollouts(run, words, limit=limit, in_prompt=in_prompt)
    order = {id(row): i for i, row in enumerate(_sorted([h["rollout"] for h in hits], args.sort))}
    hits.sort(key=lambda h: order[id(h["rollout"])])
    if args.json:
        for hit in hits:
            print(json.dumps({"run": run, **hit}))
    else:
        width = _width()
        found = f"{len(hits)} row{'s' * (len(hits) != 1)}" + (" (the newest: use --limit)" * (len(hits) == limit))
        where = "whose prompt holds" if in_prompt else "holding"
        lines = [printable(f"== run {run}: {found} {where} {words!r}")]
        for hit in hits:
            lines.extend(row_lines(f"step {hit['step']} row {hit['row']}", hit["rollout"], width))
        print("\n".join(lines))
    if indexing:
        print("pilothouse: the agent is still indexing rollouts; the latest may be missing from this search",
              file=sys.stderr)
    return 0


def _sorted(rows: list[dict], key: str | None) -> list[dict]:
    if not key:
        return rows
    field, high_first = key.removeprefix("-"), key.startswith("-")
    numbered = [(v, row) for row in rows if (v := number(row.get(field))) is not None]
    rest = [row for row in rows if number(row.get(field)) is None]
    numbered.sort(key=lambda pair: -pair[0] if high_first else pair[0])  # stable: ties stay as logged
    return [row for _, row in numbered] + rest


def _width() -> int:
    return max(40, shutil.get_terminal_size((100, 24)).columns)


def _text_view(run: str, step: int, rows: list[dict], limit: int | None) -> list[str]:
    """A step's header, then a block per row; every string from the run goes through printable()."""
    width = _width()
    rewards = [r for r in (number(row.get("reward")) for row in rows) if r is not None]
    mean = f", mean reward {fmt_value(sum(rewards) / len(rewards))}" if rewards else ""
    lines = [printable(f"== run {run} step {step}: {len(rows)} row{'s' * (len(rows) != 1)}{mean}")]
    shown = rows[:limit or TEXT_ROWS]
    for i, row in enumerate(shown, 1):
        lines.extend(row_lines(str(i), row, width))
    if len(rows) > len(shown):
        lines.append(f"… {len(rows) - len(shown)} more rows (use --limit)")
    return lines


# --- --groups ---------------------------------------------------------------------------------------

def _groups_view(run: str, batch: dict, args: argparse.Namespace) -> list[str]:
    """A step's groups as GRPO formed them; JSON keeps each row whole, with its place in the step."""
    rows = batch["rows"]
    found = groups(rows)
    shown = found[:args.limit or (len(found) if args.json else TEXT_ROWS)]
    if args.json:
        return [json.dumps({"run": run, "step": batch["step"], "time": batch["time"],
                            "groups": [_group_json(g, rows, args.sort) for g in shown]})]
    equal = sum(g.all_equal for g in found)
    lines = [printable(f"== run {run} step {batch['step']}: {len(rows)} row{'s' * (len(rows) != 1)} in "
                       f"{len(found)} group{'s' * (len(found) != 1)}, {equal} with all rewards equal "
                       f"(no GRPO signal)")]
    width = _width()
    for n, group in enumerate(shown, 1):
        lines.extend(_group_lines(n, group, rows, args.sort, width))
    if len(found) > len(shown):
        lines.append(f"… {len(found) - len(shown)} more groups (use --limit)")
    return lines


def _members(group: Group, rows: list[dict], key: str | None) -> list[tuple[int, dict]]:
    """(place in the step, row) of a group's rows, ordered by ``--sort``."""
    members = [(i, rows[i]) for i in group.rows]
    order = {id(row): k for k, row in enumerate(_sorted([row for _, row in members], key))}
    return sorted(members, key=lambda m: order[id(m[1])])


def _group_json(group: Group, rows: list[dict], key: str | None) -> dict:
    first = rows[group.rows[0]]
    return {"prompt": first.get("prompt"), **({"group": first["group"]} if first.get("group") is not None else {}),
            "size": group.size, "mean": group.mean, "std": group.std, "all_equal": group.all_equal,
            "rows": [{"row": i, "reward": number(row.get("reward")), "advantage": group.advantage(row), "rollout": row}
                     for i, row in _members(group, rows, key)]}


def _group_lines(n: int, group: Group, rows: list[dict], key: str | None, width: int) -> list[str]:
    """A group's header, its prompt (once: every row has it), then a line per row: its place in the
    step, reward, advantage and the completion's gist."""
    first = rows[group.rows[0]]
    stats = "no rewards" if group.mean is None else f"reward mean {fmt_value(group.mean)} std {fmt_value(group.std)}"
    named = f" (group {first['group']})" if first.get("group") is not None else ""
    flat = "  ALL EQUAL: no GRPO signal" if group.all_equal else ""
    lines = [clip(printable(f"-- group {n}{named}: {group.size} row{'s' * (group.size != 1)}, {stats}{flat}"), width)]
    if first.get("prompt") is not None:
        lines.extend(field_lines("prompt", first["prompt"], width))
    for i, row in _members(group, rows, key):
        answer = row.get("completion") if row.get("completion") is not None else row.get("messages")
        lines.append(clip(f"    [row {i}] reward={_number_text(row.get('reward'))}  "
                          f"advantage={_number_text(group.advantage(row))}  {gist(answer)}", width))
    return lines


def _number_text(value: object) -> str:
    return fmt_value(value) if isinstance(value, float) else printable(value) if value is not None else "-"

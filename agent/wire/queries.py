"""The queries a client may send the agent and the arguments each takes, in one table.

Why one table: when every op checked its own arguments, each did it its own way and most
ignored an argument they did not know, so a misspelt ``lmit`` silently asked for the default.
Here every query is checked before its op runs: an unknown op, an unknown argument, a missing or
bad value is refused with one error that names the op and the argument, and nothing runs.  The
ops check only what needs the journal (whether a run or a command exists, a config's schema).

``READ_OPS`` (the ops that change nothing) is what the agent still answers on a full disk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pilothouse.wire.checks import (
    check_command_id,
    check_int,
    check_name,
    check_run_id,
    check_seconds,
    check_step_bound,
)
from pilothouse.wire.entries import check_kinds
from pilothouse.wire.messages import COMMANDS, MAX_PAGE_POINTS, MAX_TIER_METRICS, MAX_TIER_PIXELS
from pilothouse.wire.rollouts import MAX_ROLLOUT_STEPS, MAX_SEARCH_HITS

Check = Callable[[Any, str], Any]  # (value, argument name) -> the value the op gets; raises naming the argument
_REQUIRED = object()


class QueryError(ValueError):
    """A query's argument is unknown or bad: the message names the op and the argument; nothing ran."""

    def __init__(self, op: str, arg: str, message: str):
        super().__init__(message)
        self.op, self.arg = op, arg


def bad_argument(op: str, arg: str, detail: str) -> QueryError:
    """The one form of a bad value's error, for the table's checks and an op's own."""
    return QueryError(op, arg, f"{op} query, argument {arg!r}: {detail}")


@dataclass(frozen=True)
class Arg:
    """One argument: its check, and what the op gets when it is absent (a required one is checked
    as None, so its check says what it must be)."""
    check: Check
    default: Any = _REQUIRED


@dataclass(frozen=True)
class Query:
    """An op's arguments; ``writes``: it may change the journal (refused while the disk is full);
    ``whole``: the rules across arguments, given the checked ones and the names that were sent."""
    args: dict[str, Arg] = field(default_factory=dict)
    writes: bool = False
    whole: Callable[[dict, frozenset[str]], None] | None = None


def check_query(op: Any, args: Any) -> dict[str, Any]:
    """The arguments of query ``op``, checked, with the defaults of those not sent."""
    if not isinstance(args, dict):
        raise TypeError("query args must be a map")
    query = QUERIES.get(op) if isinstance(op, str) else None
    if query is None:
        raise ValueError(f"unknown query {str(op)[:40]!r}")
    unknown = sorted(str(k)[:40] for k in args if k not in query.args)
    if unknown:
        takes = _listed(list(query.args)) if query.args else "no arguments"
        raise QueryError(op, unknown[0], f"a {op} query takes {takes}, not {', '.join(unknown)}")
    out = {}
    for name, arg in query.args.items():
        if name not in args and arg.default is not _REQUIRED:
            out[name] = arg.default
            continue
        try:
            out[name] = arg.check(args.get(name), name)
        except (ValueError, TypeError) as exc:
            raise bad_argument(op, name, str(exc)) from None
    if query.whole is not None:
        query.whole(out, frozenset(args))
    return out


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


# --- checks ----------------------------------------------------------------------------------------

def _typed(kind: type) -> Check:
    def check(value: Any, name: str) -> Any:
        if not isinstance(value, kind) or isinstance(value, bool):
            raise TypeError(f"{name} must be {kind.__name__}")
        return value
    return check


def _maybe(check: Check) -> Check:
    """``check``, or None (the op's "not given")."""
    return lambda value, name: None if value is None else check(value, name)


def _count(lo: int = 0, hi: int | None = None) -> Check:
    return lambda value, name: check_int(value, name, lo) if hi is None else check_int(value, name, lo, hi)


def _anything(value: Any, name: str) -> Any:
    """Checked by the op's rules across arguments (``whole``)."""
    return value


def _flag(value: Any, name: str) -> bool:
    if type(value) is not bool:
        raise TypeError(f"{name} must be true or false")
    return value


def _page_points(value: Any, name: str) -> int:
    return min(check_int(value, name, 1), MAX_PAGE_POINTS)


def _metrics(value: Any, name: str) -> list[str]:
    if not isinstance(value, list):
        raise TypeError(f"{name} must be list")
    if not 1 <= len(value) <= MAX_TIER_METRICS:
        raise ValueError(f"{name} must list 1 to {MAX_TIER_METRICS} metric names, got {len(value)}")
    return [check_name(m, "metric name") for m in value]


def _run_refs(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(r, str) for r in value):
        raise TypeError(f"{name} must be a list of run ids or names")
    return value


def _command(value: Any, name: str) -> str:
    if value not in COMMANDS:
        raise ValueError(f"unknown command {str(value)[:40]!r}; one of {', '.join(COMMANDS)}")
    return value


_text, _map, _list = _typed(str), _typed(dict), _typed(list)
_WHO = Arg(_maybe(_map), None)  # who a client says it is; the agent keeps it beside what it knows


# --- rules across arguments -----------------------------------------------------------------------

def _step_range(args: dict, sent: frozenset[str]) -> None:
    if args["x1"] < args["x0"]:
        raise bad_argument("tiers", "x1", f"x1 must not be below x0, got {args['x0']:g}..{args['x1']:g}")


_SEARCH = ("run", "search", "before", "limit", "in_prompt")


def _rollouts_form(args: dict, sent: frozenset[str]) -> None:
    """One step, the last steps (``seen``: those an earlier page began), or a search of the rows."""
    if "search" in sent:
        other = sorted(sent - set(_SEARCH))
        if other:
            raise QueryError("rollouts", other[0], f"a rollouts search takes {_listed(list(_SEARCH))}, "
                                                   f"not {', '.join(other)}")
        return
    for arg in ("limit", "in_prompt"):
        if arg in sent:
            raise bad_argument("rollouts", arg, f"{arg} is for a search: a rollouts query without search pages "
                                                "by before")
    if args["step"] is not None and "last" in sent:
        raise bad_argument("rollouts", "last", "ask for one step or for the last steps, not both")
    seen = args["seen"]
    if not isinstance(seen, list) or len(seen) > args["last"]:
        raise bad_argument("rollouts", "seen", f"seen must be a list of at most {args['last']} steps")
    for step in seen:
        try:
            check_int(step, "a seen step")
        except ValueError as exc:
            raise bad_argument("rollouts", "seen", str(exc)) from None


def _gc_says_which(args: dict, sent: frozenset[str]) -> None:
    if args["older_than"] is None and args["max_size"] is None:
        raise bad_argument("gc", "older_than", "say which runs: older_than, max_size or both")


# --- the table -------------------------------------------------------------------------------------

QUERIES: dict[str, Query] = {
    "ping": Query(),
    "runs": Query(),
    "alerts": Query(),
    "resolve": Query({"ref": Arg(_text)}),
    "read": Query({"after": Arg(_count()), "run": Arg(_maybe(lambda v, _: check_run_id(v, system=True)), None),
                   "kinds": Arg(lambda v, _: check_kinds(v), ()), "limit_points": Arg(_page_points, MAX_PAGE_POINTS)}),
    "tiers": Query({"run": Arg(_text), "metrics": Arg(_metrics), "level": Arg(_count()),
                    "x0": Arg(check_step_bound), "x1": Arg(check_step_bound),
                    "pixels": Arg(_maybe(_count(1, MAX_TIER_PIXELS)), None)}, whole=_step_range),
    "rollouts": Query({"run": Arg(_text), "step": Arg(_maybe(_count()), None),
                       "last": Arg(_count(1, MAX_ROLLOUT_STEPS), 1), "before": Arg(_maybe(_count(1)), None),
                       "seen": Arg(_anything, []), "search": Arg(_maybe(_text), None),
                       "limit": Arg(_count(1, MAX_SEARCH_HITS), 100), "in_prompt": Arg(_flag, False)},
                      whole=_rollouts_form),
    "key_metric": Query({"project": Arg(check_name)}),
    "key_metric_set": Query({"project": Arg(check_name),
                             "metric": Arg(_maybe(lambda v, _: check_name(v, "metric name")), None)}, writes=True),
    "command": Query({"cid": Arg(lambda v, _: check_command_id(v)), "run": Arg(_maybe(_text), None),
                      "cmd": Arg(_maybe(_command), None), "values": Arg(_maybe(_map), None),
                      "at_step": Arg(_maybe(_count()), None), "wait": Arg(check_seconds, 0), "who": _WHO},
                     writes=True),
    "command_status": Query({"cid": Arg(lambda v, _: check_command_id(v)), "wait": Arg(check_seconds, 0)}),
    "alert_add": Query({"rule": Arg(_map), "run": Arg(_maybe(_text), None)}, writes=True),
    "alert_rm": Query({"name": Arg(_text), "run": Arg(_maybe(_text), None)}, writes=True),
    "import_begin": Query({"run": Arg(_map)}, writes=True),
    "import_batch": Query({"token": Arg(_text), "batch": Arg(_count()), "entries": Arg(_list)}, writes=True),
    "import_end": Query({"token": Arg(_text), "batches": Arg(_count()), "entries": Arg(_count()),
                         "source": Arg(_maybe(_text), None), "who": _WHO}, writes=True),
    "import_abort": Query({"token": Arg(_text)}, writes=True),
    "remove": Query({"runs": Arg(_run_refs), "force": Arg(_flag, False), "plan": Arg(_flag, False), "who": _WHO},
                    writes=True),
    "gc": Query({"older_than": Arg(_maybe(check_seconds), None), "max_size": Arg(_maybe(_count()), None)},
                whole=_gc_says_which),
}
READ_OPS = frozenset(op for op, query in QUERIES.items() if not query.writes)

"""Events as sentences, the same in `pilothouse events`, `pilothouse tail` and the app's Events pane:
"paused at step 42 by alice@laptop (cli)", never a Python dict.

A body comes from the agent's journal, but its text (details, paths, names, who a peer claims to be)
comes from trainers and peers: every sentence goes through ``printable`` before anyone shows it, and
a body of any shape gets a sentence, never an exception.
"""

from __future__ import annotations

import json
import math
import shlex
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pilothouse.text import fmt_bytes, printable

HIDDEN = ("event", "time")  # said by a line's time and its sentence, never as key=value
VALUE_CHARS = 1000  # one value (a path, a detail) shown at most this long
ASKED_KEPT = 10_000  # commands remembered so that their acknowledgements can name who asked

_DONE = {"pause": ("paused", "paused"), "resume": ("resumed", "resumed"), "stop": ("stopping", "stopped")}
_ACTIONS = {"pause": "pausing the run", "exec": "running its hook"}


def value_text(value: Any) -> str:
    """A value as typed on the command line (``lr=0.0005``, ``fp16=true``), floats exact: an
    audit trail says what was set, not a rounding of it; containers read as lists, not reprs."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "none"
    elif isinstance(value, float):
        text = repr(value)
    elif isinstance(value, str):
        plain = value and not any(c.isspace() or c in ",=()[]\"'" for c in value)
        text = value if plain else json.dumps(value, ensure_ascii=False)
    elif isinstance(value, Mapping):
        text = "(" + ", ".join(f"{k}={value_text(v)}" for k, v in value.items()) + ")"
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(value_text(v) for v in value) + "]"
    else:
        text = str(value)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS] + "..."


def assignments(values: Any) -> str:
    """``lr=0.0005 group_size=16``: what a `set` asked for or applied."""
    if not isinstance(values, Mapping):
        return ""
    return " ".join(f"{k}={value_text(v)}" for k, v in values.items())


def sender(who: Any, client: bool = True) -> str:
    """Who sent a command: ``alice@laptop (cli)``, ``alert rule nan-loss``, or over CURVE the key's
    allow-list name first (what a peer claims can be forged, its key cannot)."""
    if not isinstance(who, Mapping):
        return "someone unknown"
    if who.get("via") == "alert":
        return f"alert rule {_text(who.get('rule'))}"
    claimed = f"{_text(who.get('user') or '?')}@{_text(who.get('host') or '?')}"
    if client and who.get("client"):
        claimed += f" ({_text(who['client'])})"
    if who.get("via") == "curve":
        return f"{_text(who.get('name') or '?')} [key {str(who.get('key') or '?')[:12]}...] as {claimed}"
    return claimed


def sentence(body: Any, asked: Mapping | None = None) -> str:
    """One event as a sentence, safe to print.  ``asked``: the command event an acknowledgement
    answers (an ack carries the trainer's answer, not who asked), when the caller has seen it."""
    if not isinstance(body, Mapping):
        return printable(f"unreadable event: {value_text(body)}")
    kind = _text(body.get("event") or "event")
    write = _WRITERS.get(kind)
    text = None
    if write is not None:
        try:
            text = write(body, asked if isinstance(asked, Mapping) else None)
        except (TypeError, ValueError, AttributeError, KeyError, IndexError):
            text = None  # a body of a known kind but a strange shape: said field by field
    return printable(text if text else _fields(kind, body))


def when(body: Any) -> str:
    """An event's local time, ``2025-01-31 14:02:07``; a missing or impossible time says so."""
    stamp = body.get("time") if isinstance(body, Mapping) else None
    try:
        if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) and math.isfinite(stamp):
            return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))
    except (OverflowError, OSError, ValueError):
        pass
    return "????-??-?? ??:??:??"


class Narrator:
    """Sentences for one run's events in journal order: an acknowledgement names who asked for it,
    from the command event before it."""

    def __init__(self) -> None:
        self._asked: dict[str, Mapping] = {}

    def sentence(self, body: Any) -> str:
        if not isinstance(body, Mapping):
            return sentence(body)
        cid = body.get("cid")
        if not isinstance(cid, str):
            return sentence(body)
        if body.get("event") == "command":
            if len(self._asked) >= ASKED_KEPT:
                self._asked.pop(next(iter(self._asked)))
            self._asked[cid] = body
        return sentence(body, self._asked.get(cid) if body.get("event") in ("ack", "checkpoint") else None)

    def line(self, body: Any) -> str:
        """``2025-01-31 14:02:07  paused at step 42 by alice@laptop (cli)``"""
        return f"{when(body)}  {self.sentence(body)}"


def event_lines(bodies: Iterable[Any]) -> list[str]:
    """A run's events, oldest first, one line each: what `pilothouse events` and the app show."""
    narrator = Narrator()
    return [narrator.line(body) for body in bodies]


# --- one writer per event kind --------------------------------------------------------------------

def _status(body: Mapping, asked: Mapping | None) -> str:
    text = f"status: {_word(body, 'status')}"
    if body.get("host"):
        text += f" on {_text(body['host'])}"
    notes = [f"pid {body['pid']}"] if body.get("pid") is not None else []
    if body.get("reason"):
        notes.append(_text(body["reason"]))
    return text + (f" ({'; '.join(notes)})" if notes else "")


def resume_label(attempt: Any, host: Any, after: Any) -> str:
    """``↻ resumed on node-b (attempt 2, after crashed)``: a resume as the charts mark it."""
    notes = [f"attempt {_step(attempt)}"] + ([f"after {_text(after)}"] if after else [])
    return f"↻ resumed on {_text(host or '?')} ({', '.join(notes)})"


def _resumed(body: Mapping, asked: Mapping | None) -> str:
    text = resume_label(body["attempt"], body.get("host"), body.get("after"))
    if body.get("after_step") is not None:
        text = text[:-1] + f" at step {_step(body['after_step'])})"
    return text + (f" by pid {_step(body['pid'])}" if body.get("pid") is not None else "")


def _command(body: Mapping, asked: Mapping | None) -> str:
    text = _what(body)
    if body.get("at_step") is not None:
        text += f" for step {body['at_step']}"
    return f"{text} requested by {sender(body.get('who'))}"


def _ack(body: Mapping, asked: Mapping | None) -> str:
    cmd, state, step = _word(body, "cmd"), _word(body, "state"), _step(body.get("step"))
    detail = _text(body.get("detail") or "")
    by = sender(asked.get("who")) if asked else None
    requested = f" (requested by {sender(asked.get('who'), client=False)})" if asked else ""
    at = f" at step {step}" if step is not None else ""
    if state == "applied":
        if cmd in _DONE and detail == f"{_DONE[cmd][0]} at step {step}":
            return f"{_DONE[cmd][1]} at step {step}" + (f" by {by}" if by else "")
        if cmd == "set":
            done = detail or f"{assignments(body.get('applied'))} applied{at}"
            return f"set {done}{requested}"
        if cmd == "checkpoint":
            path = _path(body)
            if path:
                return f"checkpoint saved{at}{requested}: {path}"
        return (f"{cmd}{at}: {detail}" if detail else f"{cmd} applied{at}") + requested
    what = _what(asked or body)
    if state == "scheduled":
        return f"{what} {detail or 'scheduled'}{requested}"
    return f"{what} {state}{at}" + (f": {detail}" if detail else "") + requested


def _checkpoint(body: Mapping, asked: Mapping | None) -> str:
    path, step = _path(body), _step(body.get("step"))
    if not path:
        return _text(body.get("detail") or "")
    return f"checkpoint saved{'' if step is None else f' at step {step}'}: {path}"


def _alert(body: Mapping, asked: Mapping | None) -> str:
    step = _step(body.get("step"))
    detail = _text(body.get("detail") or "")
    text = f"alert {_word(body, 'rule')} {_word(body, 'state')}"
    if step is not None:
        text += f" at step {step}"
        detail = detail.removesuffix(f" at step {step}")  # a metric alert's detail ends with it
    if detail:
        text += f": {detail}"
    actions = body.get("actions")
    if isinstance(actions, (list, tuple)) and actions:
        text += "; " + ", ".join(_ACTIONS.get(a, _text(a)) for a in actions)
    return text


def _alert_hook(body: Mapping, asked: Mapping | None) -> str:
    argv = body.get("argv")
    command = shlex.join(map(str, argv)) if isinstance(argv, (list, tuple)) else _text(argv or "")
    command = command if len(command) <= 120 else command[:117] + "..."
    head = f"hook of alert {_word(body, 'rule')}" + (f" ({command})" if command else "")
    error = _text(body.get("error") or "")
    if body.get("timed_out"):
        outcome = "timed out"
    elif body.get("returncode") is None:
        outcome = "could not start"
    else:
        outcome = f"exited with {body['returncode']}"
    return f"{head} {outcome}" + (f": {error}" if error else "")


def _refused(body: Mapping, asked: Mapping | None) -> str:
    text = f"refused: {_text(body.get('detail') or 'records from a trainer')}"
    if isinstance(body.get("refused"), int) and body.get("message"):
        n = body["refused"]
        pid = f" from pid {body['pid']}" if body.get("pid") is not None else ""
        text += f" ({n} {_text(body['message'])} message{'s' if n != 1 else ''}{pid})"
    return text


def _loss(body: Mapping, asked: Mapping | None) -> str:
    n = _step(body["records"])
    seqs = (f" (records {body['first_seq']} to {body['last_seq']})"
            if body.get("first_seq") is not None and body.get("last_seq") is not None else "")
    rank = f" of rank {body['rank']}" if body.get("rank") is not None else ""
    why = _text(body["detail"]) if body.get("detail") else "the trainer dropped them when its buffer was full"
    return f"lost {n} record{'s' if n != 1 else ''}{rank}{seqs}: {why}"


def _rules(body: Mapping, asked: Mapping | None) -> str:
    where = f" in {_text(body['file'])}" if body.get("file") else ""
    detail = _text(body.get("detail") or "")
    if body.get("ok"):
        return f"alert rules{where} loaded" + (f": {detail}" if detail else "")
    return f"alert rules{where} not reloaded, the previous ones stay" + (f": {detail}" if detail else "")


def _imported(body: Mapping, asked: Mapping | None) -> str:
    source = f" from {_text(body['source'])}" if body.get("source") else ""
    was = f" (archived while {_word(body, 'archived_status')})" if body.get("archived_status") else ""
    return f"imported{source} by {sender(body.get('who'))}: {_step(body['points'])} points{was}"


def _removed(body: Mapping, asked: Mapping | None) -> str:
    return (f"run {_text(body['project'])}/{_text(body['name'])} ({_text(body['run'])}) removed by "
            f"{sender(body.get('who'))}: {_step(body['points'])} points, {fmt_bytes(_step(body['bytes']))}")


Writer = Callable[[Mapping, "Mapping | None"], str]
_WRITERS: dict[str, Writer] = {"status": _status, "command": _command, "ack": _ack, "checkpoint": _checkpoint,
                               "alert": _alert, "alert_hook": _alert_hook, "refused": _refused, "loss": _loss,
                               "rules": _rules, "imported": _imported,
                               "removed": _removed, "resumed": _resumed}


# --- helpers ----------------------------------------------------------------------------------------

def _text(value: Any) -> str:
    """A field that should be text: shown as text whatever it is, and not endlessly long."""
    text = value if isinstance(value, str) else value_text(value)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS] + "..."


def _word(body: Mapping, key: str) -> str:
    """A field a sentence is built around (a status, a command, a rule): text, or no sentence."""
    value = body[key]
    if not isinstance(value, str) or not value:
        raise TypeError(f"{key} is not text")
    return _text(value)


def _step(value: Any) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise TypeError("not a step")
    return value


def _what(body: Mapping) -> str:
    """``set lr=0.0005``, ``pause``: a command and what it asks for."""
    values = assignments(body.get("values"))
    return _text(body.get("cmd") or "command") + (f" {values}" if values else "")


def _path(body: Mapping) -> str:
    applied = body.get("applied")
    path = applied.get("path") if isinstance(applied, Mapping) else None
    return _text(path) if path else ""


def _fields(kind: str, body: Mapping) -> str:
    """An event no writer knows: ``kind: key=value ...``."""
    fields = " ".join(f"{_text(k)}={value_text(v)}" for k, v in body.items() if k not in HIDDEN)
    return f"{kind}: {fields}" if fields else kind

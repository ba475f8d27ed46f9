"""Alert rules: what each kind needs, checked field by field, from TOML, the wire or the CLI.

A rule is a flat map, the same wherever it comes from::

    [[rule]]
    name = "reward-collapse"
    kind = "drop"              # nonfinite | above | below | drop | stale | gpu_idle
    metric = "reward/mean"     # a name or a glob ("*" for every metric)
    pct = 30                   # drop: % below the best of the last `window` steps
    window = 50
    pause = true               # pause the run through the acknowledged command path
    exec = ["notify-me", "--urgent"]   # the alert as JSON on stdin, killed after exec_timeout s

A bad rule is refused with a message naming the rule and the field; nothing half-applies.
``exec`` runs a program as the agent's user, so it is taken only from the agent's own rules file
(``node.rules_file``); a rule from any connection may pause and notify, never run a program.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

KINDS: dict[str, dict[str, Any]] = {  # kind -> its own fields and their defaults (None: required)
    "nonfinite": {"metric": "*"},
    "above": {"metric": None, "threshold": None, "for_steps": 1},
    "below": {"metric": None, "threshold": None, "for_steps": 1},
    "drop": {"metric": None, "pct": None, "window": 100},
    "stale": {"seconds": None},
    "gpu_idle": {"util": None, "seconds": None},
}
COMMON = {"name": None, "kind": None, "runs": "*", "pause": False, "exec": None, "exec_timeout": 10.0}
MAX_RULES = 200
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_GLOB = re.compile(r"[^\x00-\x1f\x7f]{1,200}")


class RuleError(ValueError):
    """A rule that cannot be used, and why."""


@dataclass(frozen=True)
class Rule:
    name: str
    kind: str
    runs: str = "*"
    metric: str | None = None
    threshold: float | None = None
    for_steps: int = 1
    pct: float | None = None
    window: int = 100
    seconds: float | None = None
    util: float | None = None
    pause: bool = False
    exec: tuple[str, ...] = ()
    exec_timeout: float = 10.0
    spec: dict = field(default_factory=dict, compare=False)  # as given, with defaults: what `alerts ls` shows


def check_rule(spec: Any, where: str = "rule", *, programs: bool = False) -> Rule:
    """``programs``: the rule comes from the node owner's rules file, so ``exec`` may run."""
    if not isinstance(spec, dict):
        raise RuleError(f"{where}: a rule is a table of fields, got {type(spec).__name__}")
    name = spec.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise RuleError(f"{where}: name must be 1-64 letters, digits or _.- (starting with a letter or digit), "
                        f"got {name!r:.80}")
    where = f"{where} {name!r}"
    kind = spec.get("kind")
    if kind not in KINDS:
        raise RuleError(f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r:.40}")
    allowed = {**COMMON, **KINDS[kind]}
    unknown = sorted(str(k) for k in spec if k not in allowed)
    if unknown:
        raise RuleError(f"{where}: {kind} rules take {', '.join(sorted(allowed))}; unknown field {unknown[0]!r:.60}")
    missing = [k for k, default in allowed.items() if default is None and k not in ("exec",) and k not in spec]
    if missing:
        raise RuleError(f"{where}: {kind} rules need {missing[0]}")
    full = {k: spec.get(k, default) for k, default in allowed.items()}
    values: dict[str, Any] = {"name": name, "kind": kind, "spec": {k: v for k, v in full.items() if v is not None}}
    values["runs"] = _glob(full["runs"], where, "runs")
    if "metric" in KINDS[kind]:
        values["metric"] = _glob(full["metric"], where, "metric")
    if "threshold" in KINDS[kind]:
        values["threshold"] = _number(full["threshold"], where, "threshold", -math.inf, math.inf)
    if "for_steps" in KINDS[kind]:
        values["for_steps"] = _integer(full["for_steps"], where, "for_steps", 1, 1_000_000)
    if "pct" in KINDS[kind]:
        values["pct"] = _number(full["pct"], where, "pct", 0.0, 100.0, low_open=True)
    if "window" in KINDS[kind]:
        values["window"] = _integer(full["window"], where, "window", 2, 100_000)
    if "seconds" in KINDS[kind]:
        values["seconds"] = _number(full["seconds"], where, "seconds", 0.0, 86_400.0, low_open=True)
    if "util" in KINDS[kind]:
        values["util"] = _number(full["util"], where, "util", 0.0, 100.0)
    if type(full["pause"]) is not bool:
        raise RuleError(f"{where}: pause must be true or false, got {full['pause']!r:.40}")
    values["pause"] = full["pause"]
    values["exec"] = _argv(full["exec"], where)
    if values["exec"] and not programs:
        raise RuleError(f"{where}: exec runs a program as the agent's user, so it is taken only from the agent's "
                        "--alerts file on the node; a rule sent over a connection may pause and notify")
    values["exec_timeout"] = _number(full["exec_timeout"], where, "exec_timeout", 0.0, 3600.0, low_open=True)
    return Rule(**values)


def check_rules(specs: Any, where: str = "rules", *, programs: bool = False) -> list[Rule]:
    if not isinstance(specs, list):
        raise RuleError(f"{where}: expected a list of rules, got {type(specs).__name__}")
    if len(specs) > MAX_RULES:
        raise RuleError(f"{where}: at most {MAX_RULES} rules, got {len(specs)}")
    rules = [check_rule(spec, f"{where}[{i}]", programs=programs) for i, spec in enumerate(specs)]
    names = [r.name for r in rules]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise RuleError(f"{where}: rule name {dup!r} is used twice")
    return rules


def _glob(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str) or not _GLOB.fullmatch(value):
        raise RuleError(f"{where}: {key} must be a name or glob of 1-200 printable characters, got {value!r:.80}")
    return value


def _number(value: Any, where: str, key: str, low: float, high: float, low_open: bool = False) -> float:
    ok = type(value) in (int, float) and math.isfinite(value) and (value > low if low_open else value >= low) \
        and value <= high
    if not ok:
        bounds = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise RuleError(f"{where}: {key} must be a finite number in {bounds}, got {value!r:.40}")
    return float(value)


def _integer(value: Any, where: str, key: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise RuleError(f"{where}: {key} must be an integer in [{low}, {high}], got {value!r:.40}")
    return value


def _argv(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not 1 <= len(value) <= 64 or not all(
            isinstance(a, str) and 0 < len(a) <= 4096 and "\x00" not in a for a in value):
        raise RuleError(f"{where}: exec must be a command as a list of 1-64 non-empty strings "
                        f'(like ["notify-send", "pilothouse"]), got {value!r:.80}')
    return tuple(value)

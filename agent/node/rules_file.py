"""The node owner's alert rules file (``pilothouse agent --alerts FILE``): the one source of rules
that may run programs (``exec``), as the agent's user.  So it is read only while only that user can
write it: theirs, not writable by others, in folders no one else can swap it out of (the rule of
OpenSSH's StrictModes, ``pilothouse.security.read_owned``); else SecurityError says what to fix."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pilothouse.security import read_owned
from pilothouse.wire.alert_rules import Rule, RuleError, check_rules


def load_rules(path: str | Path) -> list[Rule]:
    """Rules from a TOML file of ``[[rule]]`` tables; RuleError names the file, rule and field,
    SecurityError the file or folder others could write, and the command that fixes it."""
    path = Path(path)
    try:
        data = tomllib.loads(read_owned(path).decode("utf-8"))
    except OSError as exc:
        raise RuleError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RuleError(f"{path}: not valid TOML: {exc}") from None
    extra = sorted(k for k in data if k != "rule")
    if extra:
        raise RuleError(f"{path}: only [[rule]] tables belong here, found {extra[0]!r}")
    return check_rules(data.get("rule", []), str(path), programs=True)

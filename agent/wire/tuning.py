"""Which hyperparameters may change while a run trains, and what values they accept.

The schema travels in the trainer's hello, so the agent rejects a bad change before it
reaches the trainer; the trainer checks again with the same code.  Every top-level
scalar of ``config`` is tunable with its type kept (an int stays an int, a float also
accepts an int), unless ``tunable=`` names the tunable keys (with min/max/choices) or
``frozen=`` excludes some.  Well-known hyperparameters get a safe range when ``tunable=``
declares none for them (``SAFE_RANGES``): a learning rate of -1 is gradient ascent, not a tweak.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pilothouse.wire.checks import INT64_MAX

_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}
_SPEC_KEYS = {"min", "max", "above", "choices"}  # above: an exclusive lower bound

# (name pattern, bounds) for keys with no declared range, matched on the last dotted/slashed part
# of the name; the first match wins.  A starting value outside its range keeps the key unbounded
# (the user's config is theirs), so init never fails on a default.
SAFE_RANGES: tuple[tuple[re.Pattern, dict[str, float]], ...] = tuple((re.compile(p, re.IGNORECASE), b) for p, b in (
    (r"(^|_)(lr|learning_rate)$", {"above": 0}),
    (r"temperature$", {"above": 0}),
    (r"(^|_)(beta|kl_coef|kl_coeff|init_kl_coef|kl_penalty|entropy_coef|ent_coef|entropy_coeff|vf_coef)$",
     {"min": 0}),
    (r"(^|_)(epsilon|epsilon_low|epsilon_high|clip_range|cliprange|clip_eps|clip_ratio|clip_range_vf)$",
     {"above": 0}),
    (r"(^|_)(top_p)$", {"above": 0, "max": 1}),
    (r"(^|_)(weight_decay|max_grad_norm|warmup_ratio)$", {"min": 0}),
    (r"(batch_size|_steps|^steps|num_generations|epochs|_tokens|_length|_len)$", {"min": 1}),
))


def build_schema(config: Mapping[str, Any], tunable: Mapping[str, Mapping[str, Any] | None] | None = None,
                 frozen: Iterable[str] = ()) -> dict[str, dict[str, Any]]:
    """{key: {"type": ..., "min"?, "max"?, "choices"?}} for every key that may change."""
    frozen = set(frozen)
    unknown = (set(tunable or {}) | frozen) - set(config)
    if unknown:
        raise ValueError(f"tunable/frozen name keys that are not in config: {sorted(unknown)}")
    keys = list(tunable) if tunable is not None else list(config)
    schema = {}
    for key in keys:
        value = config[key]
        kind = _TYPES.get(type(value))
        if key in frozen or kind is None:  # nested lists/dicts and None stay as they are
            continue
        spec: dict[str, Any] = {"type": kind}
        extra = dict((tunable or {}).get(key) or {})
        if set(extra) - _SPEC_KEYS:
            raise ValueError(f"tunable[{key!r}] accepts only {sorted(_SPEC_KEYS)}, got {sorted(extra)}")
        if kind in ("int", "float") and not set(extra) & {"min", "max", "above", "choices"}:
            extra = _safe_range(key, value, kind)
        for bound in ("min", "max", "above"):
            if bound in extra:
                if kind not in ("int", "float") or not _is_number(extra[bound]):
                    raise ValueError(f"tunable[{key!r}][{bound!r}] needs a numeric hyperparameter and a number")
                spec[bound] = extra[bound]
        if "choices" in extra:
            spec["choices"] = [coerce(key, c, {"type": kind}) for c in extra["choices"]]
        coerce(key, value, spec)  # the starting value itself must be allowed
        schema[key] = spec
    return schema


def safe_bounds(key: str) -> dict[str, float]:
    """The SAFE_RANGES bounds of a name (matched on its last dotted/slashed part), or none."""
    name = re.split(r"[./]", key)[-1]
    return next((dict(bounds) for pattern, bounds in SAFE_RANGES if pattern.search(name)), {})


def _safe_range(key: str, value: Any, kind: str) -> dict[str, float]:
    bounds = safe_bounds(key)
    try:
        coerce(key, value, {"type": kind, **bounds})
    except ValueError:
        return {}
    return bounds


def check_schema(schema: Any) -> dict[str, dict[str, Any]]:
    """The agent's check of a schema received from the wire."""
    if not isinstance(schema, dict):
        raise ValueError("schema must be a map")
    for key, spec in schema.items():
        if not isinstance(key, str) or not isinstance(spec, dict) or spec.get("type") not in _TYPES.values():
            raise ValueError(f"schema entry {str(key)[:40]!r} is malformed")
        for bound in ("min", "max", "above"):
            if bound in spec and not _is_number(spec[bound]):
                raise ValueError(f"schema entry {key!r} has a non-numeric {bound}")
        if "choices" in spec and not isinstance(spec["choices"], list):
            raise ValueError(f"schema entry {key!r} has malformed choices")
    return schema


def validate_changes(schema: Mapping[str, Mapping[str, Any]], changes: Any) -> dict[str, Any]:
    """Coerced values, or ValueError naming the first problem; all or nothing."""
    if not isinstance(changes, dict) or not changes:
        raise ValueError("a change needs at least one key=value")
    return {key: coerce(key, value, _spec(schema, key)) for key, value in changes.items()}


def _spec(schema: Mapping[str, Mapping[str, Any]], key: Any) -> Mapping[str, Any]:
    spec = schema.get(key) if isinstance(key, str) else None
    if spec is None:
        tunable = ", ".join(sorted(schema)) or "none"
        raise ValueError(f"{str(key)[:60]!r} is not a tunable hyperparameter of this run (tunable: {tunable})")
    return spec


def coerce(key: str, value: Any, spec: Mapping[str, Any]) -> Any:
    kind = spec["type"]
    if kind == "float" and type(value) in (int, float):
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"{key} must be finite, got {value}")
    elif kind == "int" and type(value) is not int or kind == "bool" and type(value) is not bool \
            or kind == "str" and type(value) is not str or kind == "float":
        raise ValueError(f"{key} must be {kind}, got {type(value).__name__} {str(value)[:40]!r}")
    if kind == "int" and not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ValueError(f"{key}={str(value)[:40]} does not fit in a 64-bit integer")
    if "min" in spec and value < spec["min"] or "max" in spec and value > spec["max"]:
        raise ValueError(f"{key}={value} is out of range [{spec.get('min', '-inf')}, {spec.get('max', 'inf')}]")
    if "above" in spec and not value > spec["above"]:
        raise ValueError(f"{key}={value} must be greater than {spec['above']}")
    if "choices" in spec and value not in spec["choices"]:
        raise ValueError(f"{key}={value!r} is not one of {spec['choices']}")
    return value


def past_step(at_step: int, step: int) -> str:
    """Why a change for a step already trained is refused (said the same by the agent and the trainer)."""
    return f"--at-step {at_step} is in the past: the run is at step {step}"


def _is_number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)

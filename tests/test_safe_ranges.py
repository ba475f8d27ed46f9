"""Every SAFE_RANGES entry holds at its bounds, and the demo and examples never declare a looser range.

A declared ``tunable=`` range replaces the safe default, so a shipped trainer that writes
``{"lr": {"min": 0.0}}`` silently lets ``set lr=0`` freeze training; the check over their source
keeps what users copy at least as safe as what the README documents.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pilothouse.wire.tuning import SAFE_RANGES, build_schema, safe_bounds, validate_changes

ROOT = Path(__file__).resolve().parents[1]

# One name per SAFE_RANGES entry, in its order, with a starting value inside the range.
NAMES = [("learning_rate", 1e-5), ("temperature", 1.0), ("kl_coef", 0.05), ("clip_range", 0.2),
         ("top_p", 0.9), ("max_grad_norm", 1.0), ("per_device_train_batch_size", 8)]
NUDGE = 1e-9  # "just past" a float bound; ints move by one


def _accepts(name: str, start: float, value: float) -> bool:
    try:
        validate_changes(build_schema({name: start}), {name: value})
    except ValueError:
        return False
    return True


def test_every_entry_has_a_name_here():
    assert [next(i for i, (p, _) in enumerate(SAFE_RANGES) if p.search(n)) for n, _ in NAMES] == \
        list(range(len(SAFE_RANGES)))


@pytest.mark.parametrize("name, start", NAMES)
def test_each_safe_range_at_its_bounds(name, start):
    bounds = safe_bounds(name)
    step = 1 if isinstance(start, int) else NUDGE
    assert bounds, name
    if "above" in bounds:  # exclusive: the bound itself is refused, just above it accepted
        assert not _accepts(name, start, bounds["above"])
        assert _accepts(name, start, bounds["above"] + step)
    if "min" in bounds:  # inclusive: the bound accepted, just below it refused
        assert _accepts(name, start, bounds["min"])
        assert not _accepts(name, start, bounds["min"] - step)
    if "max" in bounds:
        assert _accepts(name, start, bounds["max"])
        assert not _accepts(name, start, bounds["max"] + step)


def _declared_ranges(path: Path) -> list[tuple[str, dict]]:
    """(key, spec) of every literal ``tunable={...}`` in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.keyword) and node.arg == "tunable" and isinstance(node.value, ast.Dict):
            found += list(ast.literal_eval(node.value).items())
    return found


def _lowest(spec: dict) -> tuple[float, bool] | None:
    """(lower bound, exclusive?) of a spec; None when unbounded below."""
    if "above" in spec:
        return spec["above"], True
    return (spec["min"], False) if "min" in spec else None


def _as_safe(spec: dict | None, bounds: dict) -> bool:
    spec = spec or bounds  # a None spec keeps the safe default
    low, safe_low = _lowest(spec), _lowest(bounds)
    if safe_low is not None and (low is None or low[0] < safe_low[0]
                                 or low[0] == safe_low[0] and safe_low[1] and not low[1]):
        return False
    return "max" not in bounds or spec.get("max", float("inf")) <= bounds["max"]


SHIPPED = [ROOT / "agent/demo/grpo.py", *sorted((ROOT / "examples").glob("*.py"))]


def test_the_lenient_check_itself():  # a looser declared range is caught, an equal or tighter one is not
    assert not _as_safe({"min": 0.0, "max": 1.0}, {"above": 0})
    assert _as_safe({"above": 0.0, "max": 1.0}, {"above": 0}) and _as_safe({"min": 0.05}, {"above": 0})
    assert not _as_safe({"min": 0.0, "max": 2.0}, {"above": 0, "max": 1}) and _as_safe(None, {"min": 1})


def test_shipped_trainers_declare_ranges_at_least_as_safe():
    declared = [(path.name, key, spec) for path in SHIPPED for key, spec in _declared_ranges(path)]
    assert {(name, key) for name, key, _ in declared} >= {("grpo.py", "lr"), ("ray_grpo.py", "lr")}
    loose = [(name, key, spec, safe_bounds(key)) for name, key, spec in declared if not _as_safe(spec, safe_bounds(key))]
    assert loose == []

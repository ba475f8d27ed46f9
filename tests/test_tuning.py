"""Which changes the schema lets through, and the command path's bad input over a real agent."""

from __future__ import annotations

import math

import pytest

import pilothouse as ph
from pilothouse.client import AgentError, Client
from pilothouse.text import parse_assignment
from pilothouse.wire.tuning import build_schema, validate_changes

CONFIG = {"lr": 1e-5, "kl_coef": 0.05, "group_size": 8, "use_kl": True, "mode": "grpo", "layers": [1, 2]}


def test_every_scalar_is_tunable_by_default_with_its_type():
    schema = build_schema(CONFIG)
    assert schema == {"lr": {"type": "float", "above": 0}, "kl_coef": {"type": "float", "min": 0},
                      "group_size": {"type": "int"}, "use_kl": {"type": "bool"},
                      "mode": {"type": "str"}}  # nested values stay frozen; lr and kl_coef get safe ranges
    assert validate_changes(schema, {"lr": 3, "group_size": 16}) == {"lr": 3.0, "group_size": 16}
    assert type(validate_changes(schema, {"lr": 3})["lr"]) is float  # a float accepts an int


@pytest.mark.parametrize("changes, why", [
    ({"lr": math.nan}, "lr must be finite"),
    ({"lr": math.inf}, "lr must be finite"),
    ({"group_size": 2.0}, "group_size must be int, got float"),
    ({"group_size": True}, "group_size must be int, got bool"),
    ({"use_kl": 1}, "use_kl must be bool, got int"),
    ({"mode": 3}, "mode must be str, got int"),
    ({"lr": "1e-5"}, "lr must be float, got str"),
    ({"layers": [1]}, "'layers' is not a tunable hyperparameter"),
    ({}, "a change needs at least one key=value"),
])
def test_bad_changes_name_the_problem(changes, why):
    with pytest.raises(ValueError, match=why.replace("[", r"\[")):
        validate_changes(build_schema(CONFIG), changes)


def test_tunable_restricts_and_bounds_and_frozen_excludes():
    schema = build_schema(CONFIG, tunable={"lr": {"min": 0.0, "max": 1e-3}, "mode": {"choices": ["grpo", "ppo"]}})
    assert set(schema) == {"lr", "mode"}
    with pytest.raises(ValueError, match="out of range"):
        validate_changes(schema, {"lr": 0.5})
    with pytest.raises(ValueError, match="not one of"):
        validate_changes(schema, {"mode": "dpo"})
    with pytest.raises(ValueError, match="not a tunable hyperparameter"):
        validate_changes(schema, {"kl_coef": 0.1})
    assert "lr" not in build_schema(CONFIG, frozen=["lr"])


TRL_LIKE = {"learning_rate": 1e-6, "temperature": 1.0, "beta": 0.04, "epsilon": 0.2, "top_p": 1.0,
            "per_device_train_batch_size": 8, "max_completion_length": 256, "weight_decay": 0.0,
            "max_grad_norm": 1.0, "seed": 42, "optim/lr": 3e-4, "critic/lr": 0.0}


@pytest.mark.parametrize("changes, why", [
    ({"learning_rate": -1}, "learning_rate=-1.0 must be greater than 0"),
    ({"learning_rate": 0}, "must be greater than 0"),
    ({"optim/lr": -1e-3}, "must be greater than 0"),  # the last part of a nested name counts
    ({"temperature": 0}, "temperature=0.0 must be greater than 0"),
    ({"beta": -0.1}, r"beta=-0.1 is out of range \[0, inf\]"),
    ({"epsilon": 0}, "must be greater than 0"),
    ({"top_p": 1.5}, r"out of range \[-inf, 1\]"),
    ({"per_device_train_batch_size": 0}, r"out of range \[1, inf\]"),
    ({"max_completion_length": -3}, "out of range"),
    ({"weight_decay": -0.01}, "out of range"),
    ({"max_grad_norm": -1}, "out of range"),
])
def test_well_known_hyperparameters_get_safe_ranges(changes, why):
    with pytest.raises(ValueError, match=why):
        validate_changes(build_schema(TRL_LIKE), changes)


def test_safe_ranges_leave_good_values_the_users_own_bounds_and_odd_starts_alone():
    schema = build_schema(TRL_LIKE)
    good = {"learning_rate": 5e-4, "temperature": 0.3, "beta": 0.0, "epsilon": 0.1, "top_p": 0.9,
            "per_device_train_batch_size": 16, "weight_decay": 0.1, "seed": -5}
    assert validate_changes(schema, good) == {**good, "seed": -5}
    assert "min" not in schema["seed"] and "above" not in schema["critic/lr"]  # 0.0 to start: no default
    own = build_schema(TRL_LIKE, tunable={"beta": {"min": -1.0}, "learning_rate": None})
    assert validate_changes(own, {"beta": -0.5}) == {"beta": -0.5}  # the user's range replaces the default
    with pytest.raises(ValueError, match="greater than 0"):
        validate_changes(own, {"learning_rate": -1})
    assert validate_changes(build_schema(TRL_LIKE, tunable={"learning_rate": {"above": -1.0}}),
                            {"learning_rate": -0.5}) == {"learning_rate": -0.5}


@pytest.mark.parametrize("kwargs, why", [
    ({"tunable": {"nope": None}}, "not in config"),
    ({"frozen": ["nope"]}, "not in config"),
    ({"tunable": {"lr": {"step": 1}}}, "accepts only"),
    ({"tunable": {"mode": {"min": 0}}}, "needs a numeric hyperparameter"),
    ({"tunable": {"lr": {"max": 1e-9}}}, "out of range"),  # the starting value must be allowed
])
def test_a_bad_schema_fails_at_init(kwargs, why):
    with pytest.raises(ValueError, match=why):
        build_schema(CONFIG, **kwargs)


@pytest.mark.parametrize("text, parsed", [
    ("lr=5e-6", ("lr", 5e-6)), ("group_size=16", ("group_size", 16)), ("use_kl=false", ("use_kl", False)),
    ("mode=ppo", ("mode", "ppo")), ("mode=a=b", ("mode", "a=b")), ("lr=nan", ("lr", math.nan)),
])
def test_cli_assignments(text, parsed):
    key, value = parse_assignment(text)
    assert key == parsed[0] and (value == parsed[1] or math.isnan(value) and math.isnan(parsed[1]))
    assert type(value) is type(parsed[1])


@pytest.mark.parametrize("text", ["lr", "=3", ""])
def test_cli_assignment_without_key_or_equals_is_an_error(text):
    with pytest.raises(ValueError, match="expected key=value"):
        parse_assignment(text)


@pytest.mark.parametrize("args, why", [
    ({"cid": "bad id!", "cmd": "pause"}, "command id must match"),
    ({"cid": "c1", "cmd": "explode"}, "unknown command 'explode'"),
    ({"cid": "c2", "cmd": "pause", "run": 7}, "run must be str"),
    ({"cid": "c3", "cmd": "set", "at_step": -4}, r"at_step must be an int in \[0, "),
    ({"cid": "c4", "cmd": "pause", "run": "ghost"}, "no run with id or name 'ghost'"),
])
def test_command_requests_with_bad_fields_are_refused(agent_proc, target, args, why):
    with Client(agent_proc.url) as c:
        with pytest.raises(AgentError, match=why):
            c.request("command", **{"run": target.id, **args})
        assert c.ping()["head"] > 0  # still serving
        assert c.command(target.id, "pause", wait=0.2)["state"] == "timeout"  # nothing syncs: still queued


def test_at_step_is_only_for_set(agent_proc, target):
    with Client(agent_proc.url) as c:
        row = c.command(target.id, "pause", at_step=10, wait=5)
    assert row["state"] == "rejected" and "--at-step applies to set only" in row["detail"]


@pytest.fixture
def target(agent_proc):
    run = ph.init(project="p", name="target", agent=agent_proc.url, config={"lr": 1e-3})
    run.log({"x": 1.0}, step=0)
    assert run.flush()  # the agent knows the run
    yield run
    run.finish()

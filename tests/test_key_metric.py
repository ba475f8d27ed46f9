"""A run's key metric: the headline of its row in `pilothouse runs` and the app.

Automatic (a reward, else the loss) or chosen per project with `pilothouse key-metric`, stored by
the agent so every client shows the same one.  Real agent, real trainer API, real CLI processes."""

from __future__ import annotations

import json
import re

import pytest
from support.processes import run_cli as cli

import pilothouse as ph
from pilothouse.client import AgentError
from pilothouse.gui.models import RunRow
from pilothouse.wire.metric_order import key_metric

# what TRL's GRPOTrainer logs, step by step
TRL_GRPO = ["reward", "reward_std", "rewards/count_a/mean", "rewards/count_a/std", "loss", "grad_norm",
            "learning_rate", "num_tokens", "frac_reward_zero_std", "completions/mean_length", "kl", "entropy"]


def without(names: list[str], *gone: str) -> list[str]:
    return [n for n in names if n not in gone]


# --- the rule ------------------------------------------------------------------------------

def test_a_trl_grpo_run_is_headed_by_its_reward():
    assert key_metric(TRL_GRPO) == "reward"
    assert key_metric(reversed(TRL_GRPO)) == "reward"  # not the order they came in


def test_without_reward_a_per_function_mean_heads_never_a_spread():
    assert key_metric(without(TRL_GRPO, "reward")) == "rewards/count_a/mean"
    assert key_metric(["reward_std", "frac_reward_zero_std", "rewards/count_a/std", "kl", "loss"]) == "loss"
    assert key_metric(["rewards/a/max", "rewards/a/min", "rewards/a/mean"]) == "rewards/a/mean"


def test_the_agents_derived_series_head_a_run_after_its_own_reward_a_quantile_never_before_the_mean():
    derived = ["rollouts/reward/p10", "rollouts/reward/p50", "rollouts/reward/max", "rollouts/groups/zero_std_frac"]
    assert key_metric([*derived, "critic/score/mean", "rollouts/reward/mean"]) == "rollouts/reward/mean"
    assert key_metric([*derived, "rollouts/reward/mean", "reward/mean"]) == "reward/mean"  # the run's own first
    assert key_metric([*TRL_GRPO, *derived, "rollouts/reward/mean"]) == "reward"


def test_reward_spellings_in_order():
    """Each name added heads the run over those before it."""
    names = ["rewards/b/mean", "rewards/mean", "reward/mean", "train/reward", "reward"]
    assert [key_metric(names[:i + 1]) for i in range(len(names))] == names


@pytest.mark.parametrize("names, key", [
    (["loss", "val_loss", "accuracy", "lr", "epoch"], "loss"),
    (["train/loss", "eval/loss", "train/learning_rate", "train/epoch"], "train/loss"),
    (["loss/max", "policy_loss", "entropy"], "policy_loss"),  # a loss, never its max
    (["reward_model_loss", "lr"], "reward_model_loss"),  # a reward model's loss is a loss
    (["grad_norm", "lr", "kl"], "kl"),  # no reward, no loss: the most important name
    (["gpu0/util", "cpu/percent"], "gpu0/util"),
    ([], None),
])
def test_plain_loops(names, key):
    assert key_metric(names) == key


def test_a_projects_choice_wins_when_the_run_has_it():
    assert key_metric(TRL_GRPO, "kl") == "kl"
    assert key_metric(TRL_GRPO, "eval/accuracy") == "reward"  # a run without it: automatic
    assert key_metric([], "kl") is None


# --- through the agent, the CLI and the app's model ------------------------------------------

def log_run(url: str, project: str, name: str, names: list[str], steps: int = 3) -> ph.Run:
    run = ph.init(project=project, name=name, agent=url, heartbeat=3600)
    for step in range(steps):
        run.log({n: 0.25 * (i + 1) + step for i, n in enumerate(names)}, step=step)
    assert run.finish()
    return run


def headline(url: str, run_id: str) -> str:
    """The KEY cell of a run's line in `pilothouse runs`."""
    out = cli("runs", "--agent", url)
    assert out.returncode == 0, out.stderr
    header, *lines = out.stdout.splitlines()
    column = header.split().index("KEY")
    return next(line.split()[column] for line in lines if line.startswith(run_id + " "))


def reply_row(url: str, run_id: str) -> dict:
    out = cli("runs", "--agent", url, "--json")
    assert out.returncode == 0, out.stderr
    return next(r for r in json.loads(out.stdout) if r["id"] == run_id)


def key_metric_cli(url: str, *args: str):
    return cli("key-metric", *args, "--agent", url)


def test_runs_and_the_app_head_a_grpo_run_by_reward_until_the_project_chooses(agent_proc):
    url = agent_proc.url
    grpo = log_run(url, "grpo-trl", "g1", TRL_GRPO)
    sft = log_run(url, "sft", "s1", ["loss", "grad_norm", "learning_rate"])
    last_reward, last_kl = 2.25, 0.25 * (TRL_GRPO.index("kl") + 1) + 2
    assert headline(url, grpo.id) == "reward=2.25" and headline(url, sft.id) == "loss=2.25"
    with agent_proc.client() as client:
        rows = {r["id"]: RunRow.from_run(r, url) for r in client.runs()}
    assert (rows[grpo.id].key_metric, rows[grpo.id].key_value) == ("reward", last_reward)

    out = key_metric_cli(url, "grpo-trl", "kl")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "project grpo-trl: key metric kl (logged by 1 of its 1 runs)"
    assert headline(url, grpo.id) == f"kl={last_kl:g}" and headline(url, sft.id) == "loss=2.25"
    assert reply_row(url, grpo.id)["key"] == "kl"
    with agent_proc.client() as client:
        row = RunRow.from_run(next(r for r in client.runs() if r["id"] == grpo.id), url)
    assert (row.key_metric, row.key_value) == ("kl", last_kl)

    agent_proc.stop()  # the choice is the agent's, on disk
    agent_proc.start()
    out = key_metric_cli(url, "grpo-trl")
    assert out.returncode == 0 and "key metric kl" in out.stdout, out.stderr
    assert headline(url, grpo.id) == f"kl={last_kl:g}"

    out = key_metric_cli(url, "grpo-trl", "--clear")
    assert out.returncode == 0 and "key metric automatic" in out.stdout, out.stderr
    assert headline(url, grpo.id) == "reward=2.25"
    assert json.loads(key_metric_cli(url, "grpo-trl", "--json").stdout)["metric"] is None


def test_a_project_with_no_runs_yet_may_choose(agent_proc):
    url = agent_proc.url
    out = key_metric_cli(url, "later", "score")
    assert out.returncode == 0, out.stderr
    assert "no run of it logs score yet" in out.stdout
    with_score = log_run(url, "later", "a", ["loss", "score"])
    without_score = log_run(url, "later", "b", ["loss", "reward"])
    assert headline(url, with_score.id) == "score=2.5"
    assert headline(url, without_score.id) == "reward=2.5"  # a run without it: the automatic choice
    assert "logged by 1 of its 2 runs" in key_metric_cli(url, "later").stdout


def test_a_chosen_metric_is_in_the_summary_however_unimportant(agent_proc):
    url = agent_proc.url
    names = ["loss", *(f"z_{i:02d}" for i in range(40))]
    run = log_run(url, "wide", "w", names, steps=1)
    assert "z_39" not in reply_row(url, run.id)["summary"]  # past the 32 most important
    assert key_metric_cli(url, "wide", "z_39").returncode == 0
    row = reply_row(url, run.id)
    assert row["key"] == "z_39" and row["summary"]["z_39"] == 10.25 and len(row["summary"]) == 32
    assert headline(url, run.id) == "z_39=10.25"


@pytest.mark.parametrize("args, why", [
    (["grpo-trl", ""], "argument metric: metric name must be 1 to 250 characters, got 0"),
    (["grpo-trl", "k\x1b[2Jl"], "argument metric: metric name 'k\\x1b[2Jl' contains control character U+001B"),
    (["grpo-trl", "kl\u200b"], "argument metric: metric name 'kl\\u200b' contains invisible format character"),
    (["grpo-trl", "x" * 251], "must be 1 to 250 characters, got 251"),
    (["", "kl"], "argument project: project must be 1 to 250 characters, got 0"),
    (["grpo-trl", "kl", "--clear"], "argument --clear: not allowed with argument metric"),
])
def test_bad_names_are_usage_errors_and_change_nothing(agent_proc, args, why):
    url = agent_proc.url
    assert key_metric_cli(url, "grpo-trl", "loss").returncode == 0
    out = key_metric_cli(url, *args)
    assert out.returncode == 2 and out.stdout == "", out
    assert why in out.stderr and "Traceback" not in out.stderr
    assert "key metric loss" in key_metric_cli(url, "grpo-trl").stdout


def test_the_agent_refuses_what_the_cli_would_and_keeps_the_choice(agent_proc):
    """A client other than the CLI gets the same checks from the agent itself."""
    with agent_proc.client() as client:
        client.request("key_metric_set", project="grpo-trl", metric="loss")
        for args, why in (({"project": "grpo-trl", "metric": ""}, "metric name must be 1 to 250"),
                          ({"project": "grpo-trl", "metric": "a\x00b"}, "contains control character U+0000"),
                          ({"project": "grpo-trl", "metric": 7}, "metric name must be a string"),
                          ({"project": "grpo-trl", "metric": "cafe\u0301"}, "not in Unicode NFC"),
                          ({"metric": "kl"}, "project must be a string"),
                          ({"project": "p\u202e", "metric": "kl"}, "invisible format character")):
            with pytest.raises(AgentError, match=re.escape(why)):
                client.request("key_metric_set", **args)
        assert client.request("key_metric", project="grpo-trl")["metric"] == "loss"
        assert client.request("key_metric", project="p")["metric"] is None

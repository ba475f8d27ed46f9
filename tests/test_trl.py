"""PilothouseCallback in a real TRL GRPOTrainer (examples/trl_grpo.py: a tiny Llama and a tokenizer
built in code, on the CPU, offline), steered through the real agent while it trains.  What is
checked is the trainer's own attributes, printed by the trainer process at the end, not run.config."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from support.paths import ROOT
from support.processes import finish, start_trainer
from support.waiting import wait_until

from pilothouse.wire.entries import KIND_ROLLOUTS, entry_body

pytest.importorskip("trl")

COMMON = f"""
import os, json
os.environ["HF_HUB_OFFLINE"] = "1"
sys.path.insert(0, {str(ROOT / "examples")!r})
from transformers import TrainerCallback
from pilothouse.hf import PilothouseCallback
from pilothouse.hf.knobs import _closure_cell
from trl_grpo import make_trainer


class Pace(TrainerCallback):
    def on_train_begin(self, args, state, control, **kw):
        print("training", flush=True)

    def on_step_end(self, args, state, control, **kw):
        time.sleep(0.03)  # time for the test to steer between steps


def report(trainer):
    groups = trainer.optimizer.param_groups
    heads = [_closure_cell(m.forward, "_fused_forward", "temperature").cell_contents
             for m in (trainer.model, trainer.ref_model) if m is not None]
    print(json.dumps({{"global_step": trainer.state.global_step, "beta": trainer.beta,
                      "temperature": trainer.temperature, "sampling_temperature": trainer.generation_config.temperature,
                      "logprob_temperatures": heads, "top_p": trainer.generation_config.top_p,
                      "epsilon": [trainer.epsilon_low, trainer.epsilon_high],
                      "reward_weights": trainer.reward_weights.tolist(), "lr": [g["lr"] for g in groups],
                      "base_lrs": trainer.lr_scheduler.base_lrs, "max_grad_norm": trainer.args.max_grad_norm}}),
          flush=True)
"""

OWN_RUN = COMMON + """
run = ph.init("trl", name="grpo", config={"learning_rate": 1e-3, "note": "mine"}, agent=URL, heartbeat=0.2)
print(run.id, flush=True)
trainer = make_trainer(400, ARGS[0], callbacks=[Pace(), PilothouseCallback(run)])
trainer.train()
report(trainer)
assert run.finish()
"""

ZERO_CONFIG = COMMON + """
os.environ["PILOTHOUSE_AGENT"] = URL
trainer = make_trainer(400, ARGS[0], beta=0.04, run_name="zero-config")
trainer.add_callback(Pace())
trainer.add_callback(PilothouseCallback(project="trl-zero", rollouts_per_step=2))
trainer.train()
report(trainer)
"""


def _start(tmp_path, body, url):
    proc = start_trainer(tmp_path, body, url, str(tmp_path / "out"))
    return proc


def _rollouts(client, run_id) -> dict[int, list[dict]]:
    by_step: dict[int, list[dict]] = {}
    for page in client.history(run_id, [KIND_ROLLOUTS]):
        for entry in page.entries:
            body = entry_body(entry)
            by_step.setdefault(body["step"], []).extend(body["rows"])
    return by_step


def test_grpo_knobs_pause_checkpoint_and_rollouts(agent_proc, tmp_path):
    proc = _start(tmp_path, OWN_RUN, agent_proc.url)
    run_id = proc.stdout.readline().strip()
    line = proc.stdout.readline()
    assert line.startswith("training"), line + proc.stderr.read()
    with agent_proc.client() as c:
        paused = c.command(run_id, "pause", wait=30)
        assert paused["state"] == "applied", paused
        at = paused["step"]
        assert paused["detail"] == f"paused at step {at}"
        wait_until(lambda: at in c.series(run_id, "reward")[0].tolist(), what="the paused step's metrics")
        row = next(r for r in c.runs() if r["id"] == run_id)
        assert row["last_step"] == at and row["status"] == "paused" and row["key"] == "reward"

        refused = c.command(run_id, "set", {"beta": 0.5}, wait=10)
        assert refused["state"] == "rejected" and "no reference model" in refused["detail"], refused
        frozen = c.command(run_id, "set", {"num_generations": 8}, wait=10)
        assert frozen["state"] == "rejected" and "temperature" in frozen["detail"], frozen  # names what is tunable
        bad = c.command(run_id, "set", {"temperature": 0.0}, wait=10)
        assert bad["state"] == "rejected", bad

        changed = c.command(run_id, "set", {"temperature": 0.5, "top_p": 0.9, "epsilon": 0.3,
                                            "reward_weights/brevity": 0.25, "max_grad_norm": 0.5,
                                            "learning_rate": 5e-4}, wait=10)
        assert changed["state"] == "applied" and changed["step"] == at, changed
        assert changed["applied"]["temperature"] == 0.5 and changed["applied"]["reward_weights/brevity"] == 0.25
        assert "epsilon_high follows" in changed["detail"]
        lr_now = changed["applied"]["learning_rate"]  # in effect: the base times the linear schedule's factor
        assert lr_now == pytest.approx(5e-4 * (400 - at) / 400, rel=1e-6)
        assert "base 0.0005; with the schedule" in changed["detail"]

        started = time.monotonic()
        saved = c.command(run_id, "checkpoint", wait=10)
        took = time.monotonic() - started
        assert saved["state"] == "applied" and saved["step"] == at and took < 3, (saved, took)
        folder = Path(saved["applied"]["path"])
        assert folder == tmp_path / "out" / f"checkpoint-{at}"
        assert json.loads((folder / "trainer_state.json").read_text())["global_step"] == at
        assert next(r for r in c.runs() if r["id"] == run_id)["status"] == "paused"  # and it stays paused
        time.sleep(0.5)
        assert max(c.series(run_id, "reward")[0].tolist()) == at

        assert c.command(run_id, "resume", wait=10)["state"] == "applied"
        wait_until(lambda: max(c.series(run_id, "reward")[0].tolist()) >= at + 5, timeout=60, what="steps after resume")
        stopped = c.command(run_id, "stop", wait=30)
        assert stopped["state"] == "applied", stopped
        result = json.loads(finish(proc).splitlines()[-1])
        config = next(r for r in c.runs() if r["id"] == run_id)["config"]
        rollouts = _rollouts(c, run_id)
        weights_steps = c.series(run_id, "rewards/brevity/mean")[0].tolist()

    assert result["global_step"] == stopped["step"]
    assert result["beta"] == 0.0
    assert result["temperature"] == result["sampling_temperature"] == 0.5
    assert result["logprob_temperatures"] == [0.5]  # the loss's log-probs use the new temperature too
    assert result["top_p"] == 0.9 and result["epsilon"] == [0.3, 0.3] and result["max_grad_norm"] == 0.5
    assert result["reward_weights"] == [1.0, 0.25]
    assert result["base_lrs"] == [5e-4, 5e-4]  # both param groups (decay, no decay)
    assert config["temperature"] == 0.5 and config["learning_rate"] == 5e-4 and config["note"] == "mine"

    assert sorted(rollouts) == list(range(1, result["global_step"] + 1)) == weights_steps  # every step, its own
    for step, rows in rollouts.items():
        assert len(rows) == 4, (step, rows)
        weight = 0.25 if step > at else 1.0
        for row in rows:
            assert set(row) == {"prompt", "completion", "reward", "advantage", "rewards/letter_a", "rewards/brevity"}
            assert row["prompt"] in ("abc", "hello", "xyz", "cat") and isinstance(row["completion"], str)
            assert row["rewards/letter_a"] == row["completion"].count("a")
            assert math.isclose(row["reward"], row["rewards/letter_a"] + weight * row["rewards/brevity"],
                                rel_tol=1e-6, abs_tol=1e-6), (step, row)


def test_zero_config_callback_added_later_steers_beta(agent_proc, tmp_path):
    proc = _start(tmp_path, ZERO_CONFIG, agent_proc.url)
    line = proc.stdout.readline()
    assert line.startswith("training"), line + proc.stderr.read()
    with agent_proc.client() as c:
        wait_until(lambda: any(r["project"] == "trl-zero" for r in c.runs()), what="the run the callback starts")
        row = next(r for r in c.runs() if r["project"] == "trl-zero")
        assert row["name"] == "zero-config"
        assert row["config"]["num_generations"] == 4 and row["config"]["beta"] == 0.04  # shown...
        assert "num_generations" not in row["schema"] and "beta" in row["schema"]  # ...but only knobs are tunable
        changed = c.command(row["id"], "set", {"beta": 0.1, "temperature": 0.8}, wait=30)
        assert changed["state"] == "applied", changed
        assert c.command(row["id"], "stop", wait=30)["state"] == "applied"
        result = json.loads(finish(proc).splitlines()[-1])
        rollouts = _rollouts(c, row["id"])
    assert sorted(rollouts) == list(range(1, result["global_step"] + 1))
    assert {len(rows) for rows in rollouts.values()} == {2}  # rollouts_per_step=2 of the 4 generated
    assert result["beta"] == 0.1
    assert result["logprob_temperatures"] == [0.8, 0.8]  # the policy's and the reference model's
    assert result["sampling_temperature"] == 0.8


@pytest.mark.parametrize("limit", [-1, 1.5, "2", True])
def test_bad_rollouts_per_step_is_refused(limit):
    from pilothouse.hf import PilothouseCallback

    with pytest.raises(ValueError, match="rollouts_per_step"):
        PilothouseCallback(rollouts_per_step=limit)


def test_a_callback_no_trainer_calls_says_so(tmp_path):
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from pilothouse.hf import PilothouseCallback

    callback = PilothouseCallback()
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    with pytest.raises(RuntimeError, match="found no Trainer calling it"):
        callback.on_train_begin(args, TrainerState(), TrainerControl())
    assert callback.run is None  # nothing was started


@pytest.mark.parametrize("config, why", [
    ({"temperature": 0.0}, "temperature=0.0 must be greater than 0"),
    ({"temperature": "hot"}, "temperature must be float"),
    ({"beta": 0.1}, "TRL loaded no reference model"),
])
def test_a_bad_start_value_in_the_runs_config_stops_training_before_it_starts(agent_proc, tmp_path, monkeypatch,
                                                                            config, why):
    import pilothouse as ph
    from pilothouse.hf import PilothouseCallback

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    from trl_grpo import make_trainer

    run = ph.init("trl", name="bad-start", config=config, agent=agent_proc.url, tunable={})
    trainer = make_trainer(3, str(tmp_path), callbacks=[PilothouseCallback(run)])
    with pytest.raises(ValueError, match=why):
        trainer.train()
    assert trainer.state.global_step == 0 and trainer.temperature == 1.0 and trainer.beta == 0.0
    assert run.finish()

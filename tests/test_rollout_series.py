"""Chat rollouts and the rollouts/* series the agent derives from them.

A real trainer process logs tool-calling trajectories (GRPO groups of one prompt, a step's rows in two
calls) to a real agent: the rows come back exactly as logged, search finds words of tool arguments and
tool results, and the agent stores one point per step of each derived series, equal to what numpy
says of the logged numbers.  A run that logs one of those names itself keeps it.  The rules of when a
step's point is written (a later step, the run's end, idleness; a message undone) run on a real
journal in-process.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from support.processes import AgentProcess, finish, start_trainer
from support.sockets import free_port
from support.waiting import wait_until

import pilothouse as ph
from pilothouse.node.journal import Store
from pilothouse.node.rollout_series import DERIVED_RANK, IDLE_SECONDS
from pilothouse.wire.records import REC_ROLLOUTS, encode_batch

# the trainer's rows: per step, 2 prompts x 4 samples; prompt "b" at step 1 scores all alike (no signal)
TRAINER = """
import json
def trajectory(step, i, prompt):
    call = {"id": f"c{i}", "type": "function",
            "function": {"name": "calculator", "arguments": {"expr": f"{step}*{i}+quokka"}}}
    return [{"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "name": "calculator", "content": f"result wombat{step}"},
            {"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]}][: 1 + (i % 3)]
REWARDS = json.loads(ARGS[0])
run = ph.init("chat", "agentic", agent=URL, heartbeat=3600)
for step in range(4):
    rows = []
    for p in ("a", "b"):
        prompt = [{"role": "system", "content": "use tools"}, {"role": "user", "content": f"solve {p}"}]
        for i in range(4):
            rows.append({"prompt": prompt, "completion": trajectory(step, i, p),
                         "reward": REWARDS[str(step)][p][i], "completion_tokens": 10 * step + i})
    run.log_rollouts(step, rows[:5])  # one step in two calls: still one point per series
    run.log_rollouts(step, rows[5:])
    run.log({"loss": 1.0 / (step + 1)}, step=step)
print(run.id, flush=True)
run.finish(timeout=30)
"""
REWARDS = {str(s): {"a": [0.0, 0.5 * s, 1.0, 0.25], "b": [1.0] * 4 if s == 1 else [0.0, 0.0, 1.0, s / 4]}
           for s in range(4)}


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    proc = AgentProcess(tmp_path_factory.mktemp("series") / "agent", free_port(), ["--stale-after", "3"]).start()
    yield proc
    proc.stop()


def test_a_trainers_tool_calling_chats_come_back_whole_and_their_series_are_derived(agent, tmp_path):
    out = finish(start_trainer(tmp_path, TRAINER, agent.url, json.dumps(REWARDS)))
    run = out.split()[0]
    with agent.client() as c:
        wait_until(lambda: len(c.series(run, "rollouts/reward/mean")[0]) == 4, what="four steps' points")
        steps = c.rollouts(run, last=4)
        rewards = {s: REWARDS[str(s)]["a"] + REWARDS[str(s)]["b"] for s in range(4)}
        for batch in steps:
            s = batch["step"]
            assert [r["reward"] for r in batch["rows"]] == rewards[s]
            first = batch["rows"][1]
            assert first["prompt"][1] == {"role": "user", "content": "solve a"}
            assert first["completion"][0]["tool_calls"][0]["function"]["arguments"] == {"expr": f"{s}*1+quokka"}
            assert first["completion"][1]["content"] == f"result wombat{s}"
        want = {
            "rollouts/reward/mean": [np.mean(rewards[s]) for s in range(4)],
            "rollouts/reward/p10": [np.percentile(rewards[s], 10) for s in range(4)],
            "rollouts/reward/p90": [np.percentile(rewards[s], 90) for s in range(4)],
            "rollouts/reward/max": [max(rewards[s]) for s in range(4)],
            # groups of step 0: "b" has 0,0,1,0 -> spreads; step 1: "b" all 1.0 -> one of two groups has no signal
            "rollouts/groups/zero_std_frac": [0.0, 0.5, 0.0, 0.0],
            "rollouts/length/max": [10 * s + 3 for s in range(4)],  # completion_tokens where logged
            "rollouts/turns/mean": [1.25] * 4,  # assistant turns of samples 0..3: 1, 1, 2, 1
            "rollouts/tool_calls/mean": [1.0] * 4,
        }
        for name, values in want.items():
            got_steps, got, _ = c.series(run, name)
            assert got_steps.tolist() == [0, 1, 2, 3], name
            np.testing.assert_allclose(got, values, err_msg=name)
        # a word only in a tool's arguments, one only in a tool's result
        assert {h["step"] for h in c.search_rollouts(run, "quokka")[0]} == {0, 1, 2, 3}
        assert [h["step"] for h in c.search_rollouts(run, "wombat2")[0]] == [2] * 4
        assert c.search_rollouts(run, "solve", in_prompt=True)[0]
        assert not c.search_rollouts(run, "quokka", in_prompt=True)[0]


def test_a_runs_own_metric_of_a_derived_name_wins(agent):
    run = ph.init("chat", "own-mean", agent=agent.url, heartbeat=3600)
    for step in range(3):
        run.log({"rollouts/reward/mean": 100.0 + step}, step=step)
        run.log_rollouts(step, [{"prompt": "p", "completion": "xy", "reward": float(step)}])
    assert run.finish(timeout=10)
    with agent.client() as c:
        wait_until(lambda: len(c.series(run.id, "rollouts/reward/max")[0]) == 3, what="derived points")
        steps, values, _ = c.series(run.id, "rollouts/reward/mean")
        assert steps.tolist() == [0, 1, 2] and values.tolist() == [100.0, 101.0, 102.0]
        assert c.series(run.id, "rollouts/length/mean")[1].tolist() == [2.0] * 3


# --- when a step's points are written: a real journal, in-process --------------------------------

def rollout_batch(step: int, rewards: list[float]) -> dict:
    rows = [{"prompt": "p", "completion": "c" * (i + 1), "reward": r} for i, r in enumerate(rewards)]
    return encode_batch([(REC_ROLLOUTS, None, (step, 1.7e9 + step, rows))])


@pytest.fixture
def journal(tmp_path):
    store = Store(tmp_path / "journal.sqlite")
    store.begin()
    store.upsert_run({"run": "r1", "project": "p", "name": "n", "config": {}, "host": "h", "pid": 1, "rank": 0},
                     1.0)
    store.commit()
    yield store
    store.close()


def derived(store: Store, metric: str = "rollouts/reward/mean") -> list[tuple[int, float]]:
    steps, values, _ = store.series("r1", metric)
    return list(zip(steps.tolist(), values.tolist()))


def ingest(store: Store, seq: int, body: dict, now: float) -> None:
    store.begin()
    store.ingest(("r1", 0, "s"), seq, seq, body, now)
    store.commit()


def test_a_step_is_written_once_two_steps_later_when_idle_or_at_the_end_and_never_twice(journal):
    ingest(journal, 1, rollout_batch(0, [0.0, 1.0]), 100.0)
    ingest(journal, 2, rollout_batch(1, [2.0]), 101.0)
    assert derived(journal) == []  # ranks a step apart may still send step 0's rows
    ingest(journal, 3, rollout_batch(0, [2.0]), 102.0)  # a rank's late part of step 0: folded in
    ingest(journal, 4, rollout_batch(2, [4.0]), 103.0)
    assert derived(journal) == [(0, 1.0)]
    ingest(journal, 5, rollout_batch(0, [100.0]), 104.0)  # step 0 is written: never rewritten
    journal.begin()
    assert journal.close_idle_series(101.0 + IDLE_SECONDS - 0.5) == []
    entries = journal.close_idle_series(103.0 + IDLE_SECONDS)  # steps 1 and 2 went quiet
    journal.commit()
    assert {e.rank for e in entries} == {DERIVED_RANK} and derived(journal) == [(0, 1.0), (1, 2.0), (2, 4.0)]
    ingest(journal, 6, rollout_batch(3, [6.0, 8.0]), 200.0)
    journal.begin()
    journal.set_status("r1", "finished", 201.0)  # the run's end writes its open step
    journal.commit()
    assert derived(journal)[-1] == (3, 7.0) and derived(journal, "rollouts/length/max")[-1] == (3, 2.0)


def test_validation_rows_are_kept_apart_from_the_series(journal):
    body = rollout_batch(0, [1.0, 3.0])
    val = encode_batch([(REC_ROLLOUTS, None, (0, 1.7e9, [{"prompt": "v", "completion": "w", "reward": 100.0,
                                                          "split": "val"}]))])
    ingest(journal, 1, body, 100.0)
    ingest(journal, 2, val, 100.5)
    ingest(journal, 3, rollout_batch(2, [0.0]), 101.0)
    assert derived(journal) == [(0, 2.0)] and derived(journal, "rollouts/reward/max") == [(0, 3.0)]


def test_an_undone_message_leaves_the_open_steps_as_they_were(journal):
    ingest(journal, 1, rollout_batch(0, [1.0]), 100.0)
    journal.begin()
    mark = journal.mark()
    journal.ingest(("r1", 0, "s"), 2, 2, rollout_batch(0, [50.0]), 101.0)
    journal.undo(mark)  # e.g. the message's reply could not be sent: all of it is forgotten
    journal.commit()
    ingest(journal, 2, rollout_batch(0, [3.0]), 102.0)
    ingest(journal, 3, rollout_batch(5, [0.0]), 103.0)
    assert derived(journal) == [(0, 2.0)]

"""A TRL ``output_dir`` as TRL itself writes it, read by ``pilothouse watch`` and ``import``: a real
GRPOTrainer (a tiny chat policy on the CPU, tests/support/trl_chat.py) with ``log_completions=True``
and ``report_to=["tensorboard"]``, once on a standard (text) dataset and once on a conversational
one.  The output_dir must be ONE run holding the scalars of TRL's event files and every completion
of its ``completions_NNNNN.parquet`` files exactly once, although TRL's deques make each file repeat
the samples of the one before (``steps_per_generation=2``: a generation serves two logged steps).

The text run is followed live by a real ``pilothouse watch``, killed (SIGKILL) and started again
while the trainer waits between its steps, then goes on; both runs are also imported after the fact
into a fresh agent.  What is checked is the agent's run against the files TRL wrote, read with
pyarrow and tensorboard's own loader.  Two trainer runs in all, side by side, shared by the tests."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT
from support.processes import AgentProcess, finish, run_cli, start_trainer
from support.runs import run_of
from support.sockets import free_port
from support.waiting import wait_until

from pilothouse.client import AgentError

pytest.importorskip("trl")
pq = pytest.importorskip("pyarrow.parquet")

# one worker runs the module: its two-trainer fixture (about 30 s on 2 cores) ran once in each worker that took one
# of its tests
pytestmark = pytest.mark.xdist_group("watch_trl")

REWARDS = ("letters", "short")
# ARGS: output_dir, "text" or "chat", a file to wait for before step 3 ("" for none)
TRAINER = f"""
import os, pathlib
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.pop("TENSORBOARD_LOGGING_DIR", None)
sys.path.insert(0, {str(ROOT / "tests")!r})
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from support.trl_chat import chat_policy

out, kind, go = ARGS[0], ARGS[1], ARGS[2]


def text(c):
    return c[-1]["content"] if isinstance(c, list) else c


def letters(completions, **_):
    return [float(text(c).count("a")) for c in completions]


def short(completions, **_):
    return [-len(text(c)) / 10 for c in completions]


class Hold(TrainerCallback):
    # before step 3 (steps 1 and 2 logged, their files written), until the test says go
    def on_step_begin(self, args, state, control, **kw):
        if go and state.global_step == 2:
            print("holding", flush=True)
            deadline = time.monotonic() + 60
            while not pathlib.Path(go).exists() and time.monotonic() < deadline:
                time.sleep(0.05)


asks = ["say abc", "say xyz"]
if kind == "chat":
    asks = [[{{"role": "system", "content": "answer with letters"}}, {{"role": "user", "content": a}}] for a in asks]
model, tokenizer = chat_policy()
args = GRPOConfig(output_dir=out, max_steps=4, per_device_train_batch_size=2, num_generations=2,
                  steps_per_generation=2, max_completion_length=6, learning_rate=1e-3, logging_steps=1,
                  log_completions=True, report_to=["tensorboard"], save_strategy="no", use_cpu=True,
                  disable_tqdm=True)
trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[letters, short], args=args,
                      train_dataset=Dataset.from_dict({{"prompt": asks * 4}}), callbacks=[Hold()])
trainer.train()
"""


def _env(tmp: Path) -> dict:
    return {**os.environ, "PILOTHOUSE_DATA": str(tmp / "ph-data"), "PILOTHOUSE_KEYS": str(tmp / "no-keys")}


def watch(tmp: Path, url: str, out: Path) -> subprocess.Popen:
    log = open(tmp / "watch.log", "a")
    proc = subprocess.Popen([sys.executable, "-m", "pilothouse", "watch", str(out), "--agent", url, "--project", "trl"],
                            stdout=log, stderr=log, cwd=ROOT, env=_env(tmp))
    log.close()
    return proc


def samples(out: Path) -> tuple[int, list[tuple[int, dict]]]:
    """(how many rows TRL's files hold, every distinct sample once at the step of the first file holding it)."""
    total, seen, distinct = 0, set(), []
    for path in sorted((out / "completions").glob("completions_*.parquet")):
        for sample in pq.read_table(path).to_pylist():
            total += 1
            step = sample.pop("step")
            key = json.dumps(sample, sort_keys=True)
            if key not in seen:
                seen.add(key)
                distinct.append((step, sample))
    return total, distinct


def scalars(out: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in TRL's event files (runs/<date>_<host>/), as tensorboard's own EventAccumulator keeps them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (folder,) = out.glob("runs/*")
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def stored_rows(client, run_id: str) -> list[tuple[int, dict]]:
    try:
        batches = client.rollouts(run_id, last=1000)
    except AgentError:  # none yet
        return []
    return [(batch["step"], row) for batch in batches for row in batch["rows"]]


def train(tmp: Path, out: Path, url: str, go: str = "") -> subprocess.Popen:
    return start_trainer(tmp, TRAINER, url, str(out), out.name, go, name=f"trainer-{out.name}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both trainers at once; the text one followed live by a watcher killed and restarted midway.
    Yields ({kind: output_dir}, the live agent, the watcher's log)."""
    tmp = tmp_path_factory.mktemp("trl-watch")
    agent = AgentProcess(tmp / "agent", free_port(), ["--stale-after", "3"]).start()
    text, chat = tmp / "text", tmp / "chat"
    text.mkdir()  # there before the trainer starts: the watcher finds TRL's files as they appear
    watcher = watch(tmp, agent.url, text)
    text_proc = train(tmp, text, agent.url, go=str(tmp / "go"))
    chat_proc = train(tmp, chat, agent.url)
    client = agent.client()
    try:
        # the watcher read the first logged steps: killed mid-run, no goodbye, and started again
        wait_until(lambda: (r := run_of(client, "text")) and stored_rows(client, r["id"]), timeout=120,
                   interval=0.2, what="the live watcher's first rollouts")
        os.kill(watcher.pid, signal.SIGKILL)
        watcher.wait()
        watcher = watch(tmp, agent.url, text)
        (tmp / "go").touch()
        finish(text_proc, timeout=180)
        finish(chat_proc, timeout=180)
        expected = len(samples(text)[1])
        points = len(scalars(text)["train/reward"])
        wait_until(lambda: len(stored_rows(client, run_of(client, "text")["id"])) >= expected
                   and len(client.series(run_of(client, "text")["id"], "train/reward")[0]) >= points,
                   timeout=30, interval=0.2, what="every sample and point of the text run")
        watcher.terminate()
        assert watcher.wait(timeout=30) == 0, (tmp / "watch.log").read_text()
        yield {"text": text, "chat": chat}, agent, (tmp / "watch.log").read_text()
    finally:
        for proc in (watcher, text_proc, chat_proc):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        client.close()
        agent.stop()


def check_run(client, out: Path, chat: bool) -> None:
    """The agent holds ONE run of ``out``: TRL's scalars and each distinct sample once, at its step."""
    (run,) = [r for r in client.runs() if r["kind"] == "watched"]
    assert run["name"] == out.name and run["project"] == "trl"
    total, distinct = samples(out)
    assert total > len(distinct) >= 8  # TRL's files did repeat samples (a generation serves two steps)
    got = stored_rows(client, run["id"])
    assert [step for step, _ in got] == [step for step, _ in distinct] == [1, 1, 1, 1, 3, 3, 3, 3]
    for (_, row), (_, sample) in zip(got, distinct):
        assert set(row) == {"prompt", "completion", "reward", "advantage", *(f"rewards/{n}" for n in REWARDS)}
        assert row["prompt"] == sample["prompt"] and row["completion"] == sample["completion"]
        assert row["advantage"] == sample["advantage"]
        for name in REWARDS:
            assert row[f"rewards/{name}"] == sample[name]
        assert math.isclose(row["reward"], sum(sample[n] for n in REWARDS), rel_tol=1e-12)
        if chat:
            assert [m["role"] for m in row["prompt"]] == ["system", "user"]
            assert [m["role"] for m in row["completion"]] == ["assistant"]
            assert isinstance(row["completion"][0]["content"], str)
        else:
            assert isinstance(row["prompt"], str) and isinstance(row["completion"], str)
    events = scalars(out)
    assert {"train/reward", "train/loss", f"train/rewards/{REWARDS[0]}/mean"} <= set(events)
    for tag in ("train/reward", "train/reward_std", "train/loss", f"train/rewards/{REWARDS[1]}/mean"):
        steps, values, _ = client.series(run["id"], tag)
        assert list(zip(steps.tolist(), values.tolist())) == events[tag], tag


def imported(agent_proc, tmp_path, out: Path) -> None:
    r = run_cli("import", str(out), "--agent", agent_proc.url, "--project", "trl", env=_env(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"imported {out.name} (" in r.stderr, r.stderr


def test_live_watch_killed_and_restarted_holds_every_completion_once(runs):
    folders, agent, log = runs
    with agent.client() as client:
        check_run(client, folders["text"], chat=False)
    assert log.count("watching text") == 2 and "runs/" not in log, log  # one run, followed by both watchers


def test_import_text_output_dir(agent_proc, tmp_path, runs):
    imported(agent_proc, tmp_path, runs[0]["text"])
    with agent_proc.client() as client:
        check_run(client, runs[0]["text"], chat=False)


def test_import_conversational_output_dir_keeps_messages(agent_proc, tmp_path, runs):
    imported(agent_proc, tmp_path, runs[0]["chat"])
    with agent_proc.client() as client:
        check_run(client, runs[0]["chat"], chat=True)


def test_a_new_sample_equal_to_an_old_one_is_a_new_sample(agent_proc, tmp_path):
    """TRL's deque holds the newest samples: a file repeats the tail of the one before it, nothing else.
    Files written as GRPOTrainer.log writes them (``pd.DataFrame(table).to_parquet``), a deque of two:
    A B | B C | C B', where B' is a new sample equal to B (a short completion said again)."""
    import pandas as pd

    def sample(prompt: str, completion: str, reward: float) -> dict:
        return {"prompt": prompt, "completion": completion, "letters": reward, "advantage": reward - 0.5}

    a, b, c = sample("say abc", "a", 1.0), sample("say abc", "b", 0.0), sample("say xyz", "aa", 2.0)
    out = tmp_path / "out"
    (out / "completions").mkdir(parents=True)
    for step, held in ((1, [a, b]), (2, [b, c]), (3, [c, b])):
        table = {"step": [step] * len(held), **{k: [s[k] for s in held] for k in a}}
        pd.DataFrame(table).to_parquet(out / "completions" / f"completions_{step:05d}.parquet")
    imported(agent_proc, tmp_path, out)
    with agent_proc.client() as client:
        (run,) = [r for r in client.runs() if r["kind"] == "watched"]
        got = [(step, row["completion"], row["reward"]) for step, row in stored_rows(client, run["id"])]
    assert got == [(1, "a", 1.0), (1, "b", 0.0), (2, "aa", 2.0), (3, "b", 0.0)]

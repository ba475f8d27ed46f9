"""``pilothouse watch`` / ``import LOGDIR`` / ``agent --watch``: real TensorBoard writers (torch's
SummaryWriter, tensorboardX) writing while a real ``pilothouse watch`` process follows them into a
real agent; every point is checked against what was written (step, value, wall time)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from support.paths import ROOT
from support.processes import AgentProcess, run_cli
from support.runs import assert_series, run_events, run_of
from support.sockets import free_port
from support.waiting import wait_until
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto.event_pb2 import Event

from pilothouse.cli import main

# ARGS: library (torch|tbx), folder, first step, last step, text step, hparams (0/1), flush every
WRITER = """
import math, sys, time
lib, folder, first, last, text_at, hparams, every = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:8])
if lib == "torch":
    from torch.utils.tensorboard import SummaryWriter
else:
    from tensorboardX import SummaryWriter
w = SummaryWriter(folder)
if hparams:
    if lib == "torch":
        w.add_hparams({"lr": 0.003, "opt": "adam", "layers": 4}, {"hp/final": 0.25}, run_name=".")
    else:
        w.add_hparams({"lr": 0.003, "opt": "adam", "layers": 4}, {"hp/final": 0.25})
for step in range(first, last + 1):
    w.add_scalar("loss", value(step), step, walltime=1.7e9 + step / 4)
    w.add_scalar("train/reward", step * 0.5, step, walltime=1.7e9 + step / 4)
    if step == text_at:
        table = "| prompt | completion | reward |\\n|---|---|---|\\n| 2+2 | 4 | 1.0 |\\n| hi | yo | nan |"
        w.add_text("samples", table, step, walltime=1.7e9 + step / 4)
    if every and step % every == 0:
        w.flush()
        print(step, flush=True)
w.close()
"""
VALUE = """
def value(step):
    return {7: math.nan, 8: math.inf, 9: -math.inf}.get(step, 1.0 / (step + 1))
"""


def expected_loss(steps: range) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the writers wrote: simple_value is a float32, the wall time a float64."""
    special = {7: np.nan, 8: np.inf, 9: -np.inf}
    vals = np.array([special.get(s, 1.0 / (s + 1)) for s in steps], np.float32).astype(np.float64)
    return np.array(list(steps), np.int64), vals, np.array([1.7e9 + s / 4 for s in steps])


def write(tmp_path: Path, lib: str, folder: Path, first: int, last: int, *, text_at: int = -1, hparams: bool = False,
          every: int = 0, wait: bool = True) -> subprocess.Popen:
    script = tmp_path / "writer.py"
    script.write_text(textwrap.dedent(VALUE) + textwrap.dedent(WRITER))
    proc = subprocess.Popen([sys.executable, str(script), lib, str(folder), str(first), str(last), str(text_at),
                             str(int(hparams)), str(every)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if wait:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    return proc


def watch(tmp_path: Path, url: str, *logdirs: Path) -> subprocess.Popen:
    log = open(tmp_path / "watch.log", "a")
    proc = subprocess.Popen([sys.executable, "-m", "pilothouse", "watch", *map(str, logdirs), "--agent", url,
                             "--project", "tb"], stdout=log, stderr=log, cwd=ROOT, env=_env(tmp_path))
    log.close()
    return proc


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "PILOTHOUSE_DATA": str(tmp_path / "ph-data")}


def points(client, name: str) -> int:
    run = run_of(client, name)
    return run["points"] if run else -1


def file_points(folder: Path) -> dict[str, list[tuple[int, float, float]]]:
    """Every scalar in a folder's event files, as tensorboard's own loader reads them (whole records)."""
    out: dict[str, list] = {}
    for path in sorted(folder.glob("*tfevents*")):
        for record in RawEventFileLoader(str(path)).Load():
            event = Event.FromString(record)
            for v in event.summary.value:
                if v.HasField("simple_value"):
                    out.setdefault(v.tag, []).append((event.step, float(np.float32(v.simple_value)), event.wall_time))
    return out


def test_live_writers_restarted_watcher_every_point_exact(agent_proc, tmp_path):
    logdir = tmp_path / "logs"
    (logdir / "grpo").mkdir(parents=True)
    watcher = watch(tmp_path, agent_proc.url, logdir)
    client = agent_proc.client()
    try:
        write(tmp_path, "torch", logdir / "grpo" / "lr3e-6", 0, 199, text_at=5, hparams=True)
        write(tmp_path, "tbx", logdir / "tbx", 0, 149, text_at=9, hparams=True)
        # a new folder and its points arrive while the watcher runs (it polls every 0.2 s)
        wait_until(lambda: points(client, "grpo/lr3e-6") == 401 and points(client, "tbx") == 300, timeout=30,
                   what="both writers' points")
        os.kill(watcher.pid, signal.SIGKILL)  # mid-stream, no goodbye
        watcher.wait()
        # the writer restarts: a new event file in the same folder continues the run
        write(tmp_path, "tbx", logdir / "grpo" / "lr3e-6", 200, 299)
        watcher = watch(tmp_path, agent_proc.url, logdir)
        wait_until(lambda: points(client, "grpo/lr3e-6") == 601, timeout=30, what="the restarted writer's points")
    finally:
        watcher.terminate()
        assert watcher.wait(timeout=30) == 0, (tmp_path / "watch.log").read_text()
    run = run_of(client, "grpo/lr3e-6")
    assert run["kind"] == "watched" and run["project"] == "tb" and run["attempts"] == 1
    assert not run_events(client, run["id"], "resumed")  # a restarted watcher is not a resume of the run
    assert_series(client, run["id"], "loss", expected_loss(range(300)))
    assert_series(client, run["id"], "train/reward",
                  (np.arange(300), np.arange(300) * 0.5, np.array([1.7e9 + s / 4 for s in range(300)])))
    assert client.series(run["id"], "hp/final")[1].tolist() == [0.25]
    assert run["config"] == {"lr": 0.003, "opt": "adam", "layers": 4}
    rows = client.rollouts(run["id"], step=5)[0]["rows"]
    assert rows[0] == {"prompt": "2+2", "completion": "4", "reward": 1.0} and rows[1]["completion"] == "yo"
    assert np.isnan(rows[1]["reward"])
    tbx = run_of(client, "tbx")
    assert_series(client, tbx["id"], "loss", expected_loss(range(150)))
    assert client.rollouts(tbx["id"], step=9)[0]["rows"][0]["prompt"] == "2+2"
    hp = next(r for r in client.runs() if r["name"].startswith("tbx/"))  # tensorboardX puts hparams in a subfolder
    assert hp["config"] == {"lr": 0.003, "opt": "adam", "layers": 4}
    assert (tmp_path / "ph-data" / "watch").stat().st_mode & 0o077 == 0
    assert all(p.stat().st_mode & 0o077 == 0 for p in (tmp_path / "ph-data" / "watch").iterdir())
    cmd = run_cli("pause", run["id"], "--agent", agent_proc.url)
    assert cmd.returncode != 0 and "cannot be steered" in cmd.stderr and "PilothouseCallback" in cmd.stderr
    listing = run_cli("runs", "--agent", agent_proc.url)
    assert "running (watched)" in listing.stdout and "pilothouse.init" in listing.stdout


def test_torn_records_are_retried_and_a_killed_writer_restarts(agent_proc, tmp_path):
    scratch, logdir = tmp_path / "scratch", tmp_path / "logs"
    write(tmp_path, "tbx", scratch, 0, 49)
    source = next(scratch.glob("*tfevents*"))
    data = source.read_bytes()
    ends = []  # where each record ends, from the framing
    at = 0
    while at < len(data):
        at += 16 + int.from_bytes(data[at:at + 8], "little")
        ends.append(at)
    (logdir / "torn").mkdir(parents=True)
    target = logdir / "torn" / source.name
    cut = ends[30] + 5  # inside the header of record 31
    target.write_bytes(data[:cut])
    watcher = watch(tmp_path, agent_proc.url, logdir)
    client = agent_proc.client()
    try:
        # record 0 is the file version; records 1..30 are 15 steps of two scalars
        wait_until(lambda: points(client, "torn") == 30, timeout=30, what="the whole records")
        with open(target, "r+b") as f:  # the record lands with its size first, its data still zeros
            f.seek(cut)
            f.write(data[cut:ends[31]].replace(data[ends[30] + 12:ends[31] - 4], bytes(ends[31] - 4 - ends[30] - 12)))
        with pytest.raises(AssertionError):  # not read while its data is zeros: retried, not skipped nor fatal
            wait_until(lambda: points(client, "torn") != 30, timeout=1, what="a change")
        with open(target, "r+b") as f:
            f.seek(ends[30])
            f.write(data[ends[30]:])
        wait_until(lambda: points(client, "torn") == 100, timeout=30, what="the rest, once written")

        killed = write(tmp_path, "torch", logdir / "killed", 0, 100_000, every=10, wait=False)
        assert int(killed.stdout.readline()) >= 0
        wait_until(lambda: points(client, "killed") > 100, timeout=30, what="the killed writer's first points")
        killed.kill()  # SIGKILL mid-write: its file may end in part of a record
        killed.wait()
        write(tmp_path, "tbx", logdir / "killed", 200_000, 200_049)  # restarted, another library, same folder
        want = file_points(logdir / "killed")
        wait_until(lambda: points(client, "killed") == sum(map(len, want.values())), timeout=30,
                   what="every whole record of both writers")
    finally:
        watcher.terminate()
        assert watcher.wait(timeout=30) == 0, (tmp_path / "watch.log").read_text()
    assert_series(client, run_of(client, "torn")["id"], "loss", expected_loss(range(50)))
    run = run_of(client, "killed")
    for metric, rows in want.items():
        steps, vals, times = client.series(run["id"], metric)
        np.testing.assert_array_equal(steps, [r[0] for r in rows])
        np.testing.assert_array_equal(vals, [r[1] for r in rows])
        np.testing.assert_array_equal(times, [r[2] for r in rows])


def test_import_once_bad_input_and_lost_state(agent_proc, tmp_path, monkeypatch, capsys):
    logdir = tmp_path / "done"
    write(tmp_path, "torch", logdir / "a", 0, 19, hparams=True)
    (logdir / "junk").mkdir()
    (logdir / "junk" / "events.out.tfevents.1700000000.junk").write_bytes(np.random.default_rng(1).bytes(4000))
    (logdir / "notes.txt").write_text("not an event file")
    env = _env(tmp_path)
    client = agent_proc.client()

    monkeypatch.setenv("PILOTHOUSE_DATA", env["PILOTHOUSE_DATA"])
    event_file = next((logdir / "a").glob("*tfevents*"))
    for args, why in ((["watch", str(tmp_path / "nowhere")], "does not exist"),
                      (["watch", str(logdir / "notes.txt")], "is a file"),
                      (["import", str(event_file)], "import its folder")):
        assert main([*args, "--agent", agent_proc.url]) == 2
        assert why in capsys.readouterr().err
    assert [r for r in client.runs() if r["kind"] == "watched"] == []  # nothing changed

    first = run_cli("import", str(logdir), "--agent", agent_proc.url, env=env)
    assert first.returncode == 1 and "is not a TensorBoard event file" in first.stderr, first.stderr
    assert "imported a " in first.stderr
    run = run_of(client, "a")
    assert run["status"] == "finished" and run["points"] == 41 and run["config"]["lr"] == 0.003
    assert_series(client, run["id"], "loss", expected_loss(range(20)))

    events = run_events(client, run["id"])
    again = run_cli("import", str(logdir), "--agent", agent_proc.url, env=env)  # twice: nothing doubles
    assert "imported before, nothing new" in again.stderr and run_of(client, "a")["points"] == 41
    assert run_events(client, run["id"]) == events  # the agent was not even told
    for state in (tmp_path / "ph-data" / "watch").glob("*.json"):
        state.unlink()  # the state is lost: sent again, the records would be numbered anew
    lost = run_cli("import", str(logdir), "--agent", agent_proc.url, env=env)
    assert lost.returncode == 1 and "the agent already has run" in lost.stderr
    assert f"pilothouse rm {run['id']}" in lost.stderr
    after = run_of(client, "a")
    assert after["points"] == 41 and after["status"] == "finished" and after["attempts"] == 1


def test_agent_watch_runs_the_watcher_in_the_agent(tmp_path):
    logdir = tmp_path / "logs"
    write(tmp_path, "tbx", logdir / "r", 0, 29)
    env_data = tmp_path / "ph-data"
    os.environ["PILOTHOUSE_DATA"] = str(env_data)
    try:
        proc = AgentProcess(tmp_path / "agent", free_port(), ["--watch", str(logdir)]).start()
    finally:
        del os.environ["PILOTHOUSE_DATA"]
    try:
        client = proc.client()
        wait_until(lambda: points(client, "r") == 60, timeout=30, what="the logdir's points")
        assert_series(client, run_of(client, "r")["id"], "loss", expected_loss(range(30)))
    finally:
        proc.stop()
    assert proc.proc.returncode == 0, proc.log.read_text()[-2000:]
    (state,) = (env_data / "watch").glob("*.json")  # what the agent acknowledged, kept for its next start
    assert json.loads(state.read_text())["runs"]
    bad = run_cli("agent", "--bind", f"tcp://127.0.0.1:{free_port()}", "--data", str(tmp_path / "a2"),
                  "--watch", str(tmp_path / "nowhere"))
    assert bad.returncode == 2 and "does not exist" in bad.stderr and not (tmp_path / "a2").exists()


def test_state_resumes_inside_a_chunk_whose_ack_was_lost():
    """The agent stored a batch whose acknowledgement never came back: the watch continues after it."""
    from pilothouse.watch.offsets import RunState

    state = RunState(seq=10, offsets={"a": 500})
    state.queued(14, "a", 700)  # records 11..14 from file a
    state.queued(14, "b", 40)  # file b's header: no records
    state.queued(20, "b", 400)  # records 15..20 from file b
    assert state.acked(13) is False and state.seq == 10  # a part of a chunk: nothing folds yet
    assert state.resume(17) == ("b", 3)  # 15..17 are stored: b from offset 40, its next 3 records passed over
    assert (state.seq, state.offsets, state.chunks) == (14, {"a": 700, "b": 40}, [])
    with pytest.raises(ValueError, match="holds records up to 30"):
        RunState(seq=10, offsets={"a": 500}, chunks=[[14, "a", 700]]).resume(30)
    with pytest.raises(ValueError, match="holds records up to 3"):
        RunState(seq=10).resume(3)


def test_text_tables_become_rollout_rows():
    from pilothouse.watch.summaries import text_rollouts

    verl = ("**Generation Results - Step 4**\n\n### Sample 1\n**Input:** 2+2?\n\n**Output:** it is\n4\n\n"
            "**Score:** 1.0\n\n---\n\n### Sample 2\n**Input:** hi\n\n**Output:** yo\n\n**Score:** 0.0\n\n---\n\n")
    assert text_rollouts(np.array([verl.encode()])) == [{"prompt": "2+2?", "completion": "it is\n4", "reward": 1.0},
                                                         {"prompt": "hi", "completion": "yo", "reward": 0.0}]
    assert text_rollouts(np.array([[b"question", b"response"], [b"a|b", b"c"]])) == [{"prompt": "a|b",
                                                                                      "completion": "c"}]
    assert text_rollouts(np.array([b"just a note"])) is None
    assert text_rollouts(np.array([b"| x | y |\n|---|---|\n| 1 | 2 |"])) is None  # a table, not of rollouts


def test_a_lost_acknowledgement_is_neither_sent_again_nor_missed(agent_proc, tmp_path):
    """The agent stored records whose ack the watcher never saved: the restarted watcher passes over
    exactly those, and sends what the file gained since under the next numbers."""
    import threading

    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.record_writer import RecordWriter

    from pilothouse.watch.follower import Watcher

    path = tmp_path / "logs" / "r" / "events.out.tfevents.1700000000.test"
    path.parent.mkdir(parents=True)

    def append(steps: range) -> None:
        with open(path, "ab") as f:
            writer = RecordWriter(f)
            for s in steps:
                value = Summary.Value(tag="loss", simple_value=1.0 / (s + 1))
                writer.write(Event(wall_time=1.7e9 + s / 4, step=s, summary=Summary(value=[value])).SerializeToString())

    append(range(40))  # no file-version event: record k is step k - 1, one point each
    lines: list[str] = []

    def watch_once(want: int) -> None:
        watcher = Watcher([tmp_path / "logs"], agent_proc.url, say=lines.append, state_dir=tmp_path / "state")
        stop = threading.Event()
        thread = threading.Thread(target=watcher.run, args=(stop,))
        thread.start()
        wait_until(lambda: points(client, "r") >= want, timeout=30, what=f"{want} points")
        stop.set()
        thread.join(timeout=20)

    client = agent_proc.client()
    watch_once(40)
    assert points(client, "r") == 40
    data, ends, at = path.read_bytes(), [], 0
    while at < len(data):
        at += 16 + int.from_bytes(data[at:at + 8], "little")
        ends.append(at)
    state_file = next((tmp_path / "state").glob("*.json"))
    state = json.loads(state_file.read_text())
    (run_state,) = state["runs"].values()
    assert run_state["seq"] == 40 and run_state["offsets"] == {path.name: len(data)}
    # as if the acks of records 11..40 never came back: acknowledged up to 10, records up to 45 sent
    run_state.update(seq=10, offsets={path.name: ends[9]}, chunks=[[45, path.name, ends[-1] + 100]])
    state_file.write_text(json.dumps(state))
    append(range(40, 50))
    watch_once(50)
    run = run_of(client, "r")
    assert run["points"] == 50 and run["attempts"] == 1, lines
    assert_series(client, run["id"], "loss", (np.arange(50), np.array([1.0 / (s + 1) for s in range(50)], np.float32)
                                              .astype(np.float64), np.array([1.7e9 + s / 4 for s in range(50)])))

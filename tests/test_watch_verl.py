"""verl's own files followed by ``pilothouse watch --run NAME PATH...`` into a real agent: verl 0.9.1's
own writer code (``Tracking`` with its ``file`` backend, ``RayPPOTrainer._write_generations``: see
tests/support/verl_writer.py) writes a run's scalars, its rollout dumps and its validation dumps step
by step in a process of its own while a real watcher process follows the three folders as one run.
The watcher is killed and started again mid-way, a logger line and a dump land in two parts, the
writer restarts (its file logger starts the file anew, a step's dump is written again); then the same
files are imported into a second agent.  What the agent holds is checked against what verl wrote."""

from __future__ import annotations

import json
from pathlib import Path

from support.processes import AgentProcess, run_cli
from support.rl_dumps import all_series
from support.runs import run_of
from support.sockets import free_port
from support.verl_writer import EXPERIMENT, PROJECT, ROLLOUTS, VALIDATION, VerlWriter
from support.waiting import wait_until
from support.watch_proc import WatchProcess, import_paths, rows_by_step

from pilothouse.wire.checks import SCALARS


def written_scalars(logger: Path) -> dict[str, tuple[list[int], list[float]]]:
    """Each metric's (steps, values) in verl's file-logger JSONL (its nulls, NaN written, left out)."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    for line in logger.read_text().splitlines():
        obj = json.loads(line)
        for key, value in obj["data"].items():
            if value is not None:
                steps, values = out.setdefault(key, ([], []))
                steps.append(obj["step"])
                values.append(float(value))
    return out


def written_rows(root: Path) -> dict[int, list[dict]]:
    """The rows each dump holds: verl's input, output and score as prompt, completion and reward, validation's
    marked, every other field kept (a ground truth that is not text or a number as its JSON text)."""
    out: dict[int, list[dict]] = {}
    for folder in (VALIDATION, ROLLOUTS):
        for path in sorted((root / folder).glob("*.jsonl"), key=lambda p: int(p.stem)):
            for line in path.read_text().splitlines():
                sample = json.loads(line)
                row = {"prompt": sample.pop("input"), "completion": sample.pop("output"),
                       "reward": float(sample.pop("score"))}
                if folder == VALIDATION:
                    row["split"] = "val"
                    assert sample.pop("reward") == row["reward"]
                assert sample.pop("step") == int(path.stem)
                row.update((k, v if isinstance(v, SCALARS) else json.dumps(v, sort_keys=True))
                           for k, v in sample.items())
                out.setdefault(int(path.stem), []).append(row)
    return out


def last_step(client, run_id: str | None, metric: str) -> int:
    if run_id is None:
        return -1
    steps = client.series(run_id, metric)[0]
    return int(steps[-1]) if len(steps) else -1


def row_steps(client, run_id: str | None) -> list[int]:
    try:
        return sorted(rows_by_step(client, run_id)) if run_id else []
    except Exception:  # the agent says a run with no rollouts yet has none: an AgentError
        return []


def test_verl_run_followed_live_restarted_then_imported(agent_proc, tmp_path):
    root = tmp_path / "verl"
    for folder in ("logs", ROLLOUTS, VALIDATION):
        (root / folder).mkdir(parents=True)
    logger = root / "logs" / PROJECT / f"{EXPERIMENT}.jsonl"
    paths = ("--run", "grpo", root / "logs", root / ROLLOUTS, root / VALIDATION)
    writer = VerlWriter(root)  # imports verl: seconds, while the agents and the watcher start
    second = AgentProcess(tmp_path / "agent2", free_port())
    watcher = WatchProcess(tmp_path, agent_proc.url, *paths, project="verl").start()
    client = agent_proc.client()
    run_id = None

    def progress() -> tuple[int, list[int]]:
        nonlocal run_id
        run_id = run_id or (run_of(client, "grpo") or {}).get("id")
        return last_step(client, run_id, "timing_s/step"), row_steps(client, run_id)

    try:
        second.start()
        writer.ask(None, "ready")
        writer.ask("track")
        writer.ask("log 0")  # validation before training: its metrics and its dump at step 0
        writer.ask(f"gen {VALIDATION} 0 1")
        for step in range(1, 6):
            writer.ask(f"log {step}")
            writer.ask(f"gen {ROLLOUTS} {step} 1")
        wait_until(lambda: progress() == (5, list(range(6))), timeout=30, what="steps 0-5 (dumps read once settled)")

        watcher.kill()  # SIGKILL mid-run: the writer goes on while no one watches
        for step in range(6, 9):
            writer.ask(f"log {step}")
            writer.ask(f"gen {ROLLOUTS} {step} 1")
        writer.ask("torn 9", "half")  # step 9's logger line, half of it written
        watcher.start()
        wait_until(lambda: progress() == (8, list(range(9))), timeout=30, what="steps 6-8 after the restart")
        writer.ask("rest")  # the line whole: read now, not before
        writer.ask(f"slowgen {ROLLOUTS} 9 1", "half")  # step 9's dump, half of it written
        wait_until(lambda: progress()[0] == 9, timeout=10, what="step 9's scalars")
        assert progress() == (9, list(range(9)))  # the dump is not read while it changes
        writer.ask("rest")
        wait_until(lambda: progress() == (9, list(range(10))), timeout=30, what="step 9's dump once settled")

        series = {k: v for k, v in all_series(client, run_id).items() if not k.startswith("rollouts/")}
        assert series == written_scalars(logger)  # every scalar once; actor/pg_loss's NaN (a null) left out
        rows = rows_by_step(client, run_id)
        assert rows == written_rows(root)  # every row once, validation's marked
        run = run_of(client, "grpo")
        assert (run["project"], run["kind"], run["attempts"]) == ("verl", "watched", 1)

        imported = import_paths(tmp_path, second.url, *paths, project="verl")
        assert imported.returncode == 0, imported.stderr
        client2 = second.client()
        run2 = run_of(client2, "grpo")
        assert run2["status"] == "finished" and run2["id"] == run_id
        watched, whole = all_series(client, run_id), all_series(client2, run_id)
        assert {k: v for k, v in whole.items() if not k.startswith("rollouts/")} == series
        # the agent's derived rollouts/* series: a step's point once the rows of a step two later came (the live
        # run is at 9: through 7 at least), the import's at its end too
        derived = [name for name in watched if name.startswith("rollouts/")]
        assert derived and set(whole) == set(watched) and whole["rollouts/reward/mean"][0] == list(range(1, 10))
        for name in derived:
            steps, values = watched[name]
            assert len(steps) >= 7 and (whole[name][0][:len(steps)], whole[name][1][:len(steps)]) == (steps, values)
        assert rows_by_step(client2, run_id) == rows

        # verl resumes from its step-8 checkpoint: a new Tracking starts the logger's file anew, step 9 runs again
        held = all_series(client, run_id)
        writer.ask("track")
        writer.ask("log 9")
        writer.ask(f"gen {ROLLOUTS} 9 22")
        writer.close()
        wait_until(lambda: "was written again" in watcher.log.read_text(), timeout=10, what="the rewrite said")
        said = watcher.log.read_text()
        assert f"{logger} is shorter than the" in said and "verl's file logger starts it anew" in said
        assert f"{root / ROLLOUTS / '9.jsonl'} was written again after it was sent" in said
        assert all_series(client, run_id) == held and rows_by_step(client, run_id) == rows  # nothing changed
    finally:
        watcher.stop()
        writer.stop()
        second.stop()


def test_files_not_verls_are_refused_and_change_nothing(agent_proc, tmp_path):
    """A file named with --run that no reader knows, a {step}.jsonl that is not a dump, a logger whose
    line is damaged: each said, nothing stored from it (the logger's lines before the damage kept)."""
    root = tmp_path / "verl"
    (root / "logs").mkdir(parents=True)
    (root / ROLLOUTS).mkdir()
    logger = root / "logs" / "grpo.jsonl"  # as verl's FileLogger writes (orjson: compact), then damage
    logger.write_text('{"step":1,"data":{"critic/score/mean":0.5}}\n{"step":2,"data":{"critic/score/mean":0.75}}\n'
                      '{"step":3,"data":{"critic/sc\n{"step":4,"data":{"critic/score/mean":1.0}}\n')
    (root / ROLLOUTS / "1.jsonl").write_text(json.dumps({"input": "q", "output": "a", "gts": "1", "score": 1.0,
                                                         "step": 1}, ensure_ascii=False) + "\n")
    (root / ROLLOUTS / "2.jsonl").write_text('{"prompt": "q", "response": "a"}\n')  # another tool's, by its name verl's
    notes = root / "notes.jsonl"
    notes.write_text('{"event": "started", "at": 1700000000}\n')
    got = import_paths(tmp_path, agent_proc.url, "--run", "bad", root / "logs", root / ROLLOUTS, notes, project="verl")
    assert got.returncode == 1, got.stderr
    assert f"{notes} is not a known framework's file (no reader knows its first line, " \
           "'{\"event\": \"started\", \"at\": 1700000000}'" in got.stderr
    assert f"{root / ROLLOUTS / '2.jsonl'} is not a verl generations dump file (line 1 has no input and output)" \
           in got.stderr
    assert f"{logger}: the line at offset 89 is not JSON" in got.stderr
    assert "stopped reading this file (is it a verl file logger file?)" in got.stderr
    client = agent_proc.client()
    run = run_of(client, "bad")
    series = all_series(client, run["id"])
    assert {k: v for k, v in series.items() if not k.startswith("rollouts/")} == {"critic/score/mean": ([1, 2],
                                                                                                    [0.5, 0.75])}
    assert series["rollouts/reward/mean"] == ([1], [1.0])  # the agent's, of step 1's row alone
    assert rows_by_step(client, run["id"]) == {1: [{"prompt": "q", "completion": "a", "reward": 1.0, "gts": "1"}]}


def test_a_backlog_of_unpadded_step_files_goes_in_step_order(agent_proc, tmp_path):
    """verl's {step}.jsonl are not zero padded (10.jsonl sorts before 2.jsonl as text); the agent finds a
    step's rollouts by a binary search over arrival order, and derives rollouts/* at each step in order."""
    dumps = tmp_path / "rollout_data"
    dumps.mkdir()
    for step in range(1, 13):
        with open(dumps / f"{step}.jsonl", "w") as f:  # as verl 0.9.1's _write_generations writes a line
            for i in range(2):
                f.write(json.dumps({"input": f"q{i}", "output": f"a{step}", "gts": "x", "score": float(step),
                                    "step": step}, ensure_ascii=False, default=str) + "\n")
    done = run_cli("import", "--run", "ordered", str(dumps), "--agent", agent_proc.url, "--project", "order",
                   env={"PILOTHOUSE_DATA": str(tmp_path / "ph-import")})
    assert done.returncode == 0, done.stderr
    with agent_proc.client() as client:
        run = run_of(client, "ordered")
        assert [row["completion"] for row in client.rollouts(run["id"], step=3)[0]["rows"]] == ["a3", "a3"]
        assert client.series(run["id"], "rollouts/reward/mean")[0].tolist() == list(range(1, 13))

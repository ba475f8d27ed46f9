"""prime-rl's run folder and ART's model folders followed live by a real ``pilothouse watch`` into a
real agent, the watcher killed and restarted mid-way, and imported with ``pilothouse import`` into a
second agent: every point and row exactly once, each checked against what was written.  The files
are written as each framework's own code writes them (``support/prime_art.py`` cites it)."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from support.prime_art import (
    FileMonitor,
    append_history,
    episode,
    trajectory,
    trajectory_row,
    write_jsonl,
    write_parquet,
)
from support.processes import AgentProcess
from support.runs import run_of
from support.sockets import free_port
from support.waiting import wait_until
from support.watch_proc import WatchProcess, import_paths, row_count, rows_by_step

RUN = "math--tiny--1a2b3c4d"  # prime-rl's default run name: {envs}--{model}--{uuid8}


def _rows(client, name: str) -> int:
    run = run_of(client, name)
    return row_count(client, run["id"] if run else None)


def _series(client, run_id: str, lines: list[dict], key: str) -> None:
    """The metric ``key`` of a run: one point per line that holds it, at its step and time, exactly."""
    want = [(int(line["step"]), line[key], line["time"]) for line in lines if key in line]
    steps, vals, times = client.series(run_id, key)
    assert list(zip(steps.tolist(), vals.tolist(), times.tolist())) == want, key


def _same(a: list[dict], b: list[dict]) -> bool:
    """The same rows, each as often, in any order."""
    return sorted(json.dumps(r, sort_keys=True) for r in a) == sorted(json.dumps(r, sort_keys=True) for r in b)


def _split(rows: list[dict], split: str | None) -> list[dict]:
    return [r for r in rows if r.get("split") == split]


def test_prime_rl_run_followed_live_restarted_and_imported(agent_proc, tmp_path):
    outputs = tmp_path / "outputs"
    monitor = FileMonitor(outputs / RUN)  # trainer and orchestrator append to the run folder's one file
    lines: list[dict] = []
    want: dict[int, list[dict]] = {}

    def step(s: int, *, torn_at: int | None = None) -> None:
        lines.append(monitor.log_metrics({"loss/mean": 1 / (s + 1), "optim/grad_norm": 0.5 + s}, step=s))
        lines.append(monitor.log_metrics({"train/agg/reward/mean": s / 4, "train/agg/bad": math.nan, "step": s}, s))
        records = []
        for n in range(3):
            record, rows = episode(s, n, advantage=0.5 if s == 3 else None)
            records.append(record)
            want.setdefault(s, []).extend(rows)
            if n != torn_at:
                monitor.log_episodes([record], s, "train", "all")  # as each episode finishes
        monitor.log_episodes(records, s, "train", "effective")  # the trained-on cohort again: not read
        if s == 2:
            lines.append(monitor.log_metrics({"eval/math/avg@1": 0.7, "step": 2.0}, step=2))
            for n in range(2):
                record, rows = episode(2, n, kind="eval")
                monitor.log_episodes([record], 2, "eval", "all")
                want[2].extend(rows)

    watcher = WatchProcess(tmp_path, agent_proc.url, outputs, project="prime").start()
    client = agent_proc.client()
    try:
        step(0)
        step(1)
        wait_until(lambda: _rows(client, RUN) == 6, timeout=30, what="steps 0 and 1's rows")
        # step 2's first episode is mid-write: half its line, no newline yet
        step(2, torn_at=0)
        torn, rows0 = episode(2, 0)
        line = json.dumps(torn, separators=(",", ":")).encode() + b"\n"
        path = outputs / RUN / "rollouts/step_2/train/all/traces.jsonl"
        with open(path, "ab") as f:
            f.write(line[: len(line) // 2])
        wait_until(lambda: _rows(client, RUN) == 6 + 2 + 2, timeout=30, what="step 2's whole lines")
        time.sleep(0.5)
        assert _rows(client, RUN) == 10  # the half line is not read
        watcher.kill()
        with open(path, "ab") as f:
            f.write(line[len(line) // 2:])
        step(3)
        watcher = WatchProcess(tmp_path, agent_proc.url, outputs, project="prime").start()
        wait_until(lambda: _rows(client, RUN) == 14, timeout=30, what="every row after the restart")
    finally:
        watcher.stop()
        monitor.close()
    run = run_of(client, RUN)
    assert run["kind"] == "watched" and run["project"] == "prime"
    got = rows_by_step(client, run["id"])
    assert sorted(got) == [0, 1, 2, 3]
    assert got[0] == want[0] and got[1] == want[1] and got[3] == want[3]  # in the order they finished
    assert _same(got[2], want[2]) and got[2][-1] == rows0[0]  # the torn line's episode came last, once
    assert _split(got[2], "eval") == _split(want[2], "eval") and got[3][0]["advantage"] == 0.5
    for key in ("loss/mean", "optim/grad_norm", "train/agg/reward/mean", "eval/math/avg@1"):
        _series(client, run["id"], lines, key)
    assert client.series(run["id"], "train/agg/bad")[0].size == 0  # prime-rl dropped the NaN

    second = AgentProcess(tmp_path / "agent2", free_port(), ["--stale-after", "3"]).start()
    try:
        done = import_paths(tmp_path, second.url, outputs, project="prime")
        assert done.returncode == 0, done.stderr
        again = second.client()
        imported = run_of(again, RUN)
        assert imported["status"] == "finished"
        imported_rows = rows_by_step(again, imported["id"])
        assert sorted(imported_rows) == sorted(got) and all(_same(imported_rows[s], got[s]) for s in got)
        for key in ("loss/mean", "optim/grad_norm", "train/agg/reward/mean", "eval/math/avg@1"):
            _series(again, imported["id"], lines, key)
    finally:
        second.stop()


def test_prime_rl_damaged_files_are_refused(agent_proc, tmp_path):
    outputs = tmp_path / "outputs"
    good = FileMonitor(outputs / "good")
    good.log_metrics({"loss/mean": 0.25}, step=0)
    record, rows = episode(0, 1)
    good.log_episodes([record], 0, "train", "all")
    good.close()
    bad = outputs / "bad" / "rollouts/step_0/train/all/traces.jsonl"
    bad.parent.mkdir(parents=True)
    bad.write_text("this is not json\n" + json.dumps(record) + "\n")
    trace = outputs / "trace-per-line" / "rollouts/step_0/eval/all/traces.jsonl"  # prime-rl's standalone eval shape
    trace.parent.mkdir(parents=True)
    trace.write_text(json.dumps(record["traces"][0]) + "\n")
    done = import_paths(tmp_path, agent_proc.url, outputs, project="prime")
    assert done.returncode == 1
    assert f"{bad}: the line at offset 0 is not JSON" in done.stderr, done.stderr
    assert f"{trace}: the line at offset 0 is not a prime-rl episode record" in done.stderr
    client = agent_proc.client()
    assert _rows(client, "bad") == 0 and _rows(client, "trace-per-line") == 0  # nothing stored from either
    assert rows_by_step(client, run_of(client, "good")["id"]) == {0: rows}


@pytest.mark.parametrize("era", ["jsonl", "parquet"])
def test_art_model_folders_followed_live_restarted_and_imported(agent_proc, tmp_path, era):
    models = tmp_path / ".art" / "proj" / "models"
    model = models / f"agent-{era}"
    write = write_jsonl if era == "jsonl" else write_parquet
    history: list[dict] = []
    want: dict[int, list[dict]] = {}

    def log(step: int, split: str, groups: int = 2) -> None:
        write(model / "trajectories" / split / f"{step:04d}.{era}",
              [[trajectory(step, g, i, split) for i in range(2)] for g in range(groups)])
        want.setdefault(step, []).extend(trajectory_row(step, g, i, split)
                                         for g in range(groups) for i in range(2))
        history.append(append_history(model, {f"{split}/reward": step / 8, f"{split}/loss": math.nan,
                                               "training_step": step}, step))

    log(0, "train")
    watcher = WatchProcess(tmp_path, agent_proc.url, models, project="art").start()
    client = agent_proc.client()
    name = f"agent-{era}"
    try:
        wait_until(lambda: _rows(client, name) == 4, timeout=30, what="step 0's rows")
        # ART writes a step's file again when logged again at it ("w"): said, not doubled
        write(model / "trajectories" / "train" / f"0000.{era}", [[trajectory(0, 0, 0, "train")]])
        watcher.kill()
        log(1, "train")
        log(1, "val", groups=1)
        watcher = WatchProcess(tmp_path, agent_proc.url, models, project="art").start()
        wait_until(lambda: _rows(client, name) == 10, timeout=30, what="step 1's rows")
        wait_until(lambda: "written again after it was sent" in watcher.log.read_text(), timeout=10,
                   what="the rewritten file said")
    finally:
        watcher.stop()
    run = run_of(client, name)
    got = rows_by_step(client, run["id"])
    assert got[0] == want[0]
    assert _split(got[1], None) == _split(want[1], None) and _split(got[1], "val") == _split(want[1], "val")
    for key in ("train/reward", "val/reward", "training_step"):
        wanted = [(h["step"], h[key]) for h in history if key in h]
        steps, vals, _ = client.series(run["id"], key)
        assert list(zip(steps.tolist(), vals.tolist())) == wanted, key
    assert client.series(run["id"], "train/loss")[0].size == 0  # ART filtered the NaN

    second = AgentProcess(tmp_path / "agent2", free_port(), ["--stale-after", "3"]).start()
    try:
        (model / "trajectories" / "train" / f"0009.{era}").write_text('{"not": "a trajectory group"}')
        done = import_paths(tmp_path, second.url, models, project="art")
        assert done.returncode == 1 and f"0009.{era} is not a ART trajectories file" in done.stderr, done.stderr
        again = second.client()
        imported = run_of(again, name)
        rows = rows_by_step(again, imported["id"])
        assert sorted(rows) == [0, 1]  # nothing of the damaged step 9
        assert rows[1] == got[1] and rows[0] == [trajectory_row(0, 0, 0, "train")]
        for key in ("train/reward", "val/reward"):
            np.testing.assert_array_equal(again.series(imported["id"], key)[1], client.series(run["id"], key)[1])
    finally:
        second.stop()

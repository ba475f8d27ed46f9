"""`pilothouse archive` and `pilothouse import`: a run out of one real agent into a parquet file and
back into another, every point bit-exact, config, events and rollouts kept; bad files and repeated
imports refused with nothing changed."""

from __future__ import annotations

import json
import math
import resource
import signal
import sqlite3
import struct
import subprocess
import sys
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.float_bits import bits
from support.paths import ROOT
from support.processes import AgentProcess, run_cli
from support.runs import run_events
from support.sockets import free_port
from support.tier_records import same_buckets
from support.waiting import wait_until

import pilothouse as ph
from pilothouse.cli import main
from pilothouse.cli.archive_file import META_KEY
from pilothouse.client import AgentError, Client
from pilothouse.store.tiers import levels

NAN_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0x7FF8DEAD0000BEEF))[0]
SPECIAL = [1.5, NAN_PAYLOAD, -0.0, math.inf, -math.inf, 5e-324, 1e308]
NAME = "odd / ünï run"
# the run's 14 points and the agent's rollouts/* series of its chats: 11 (no zero_std_frac: a prompt is
# sampled once) at each step
POINTS = 14 + 11 * len(SPECIAL)


def chat_prompt(step: int) -> list[dict]:
    return [{"role": "system", "content": "use tools"}, {"role": "user", "content": f"p{step} ✓"}]


def chat_completion(step: int) -> list[dict]:
    """A tool-calling trajectory: a call with JSON arguments, its result, the answer in a content part."""
    call = {"id": f"call{step}", "type": "function", "function": {"name": "search", "arguments": {"q": step, "x": None}}}
    return [{"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call{step}", "name": "search", "content": "c" * step},
            {"role": "assistant", "content": [{"type": "text", "text": f"answer {step}"}]}]


def log_run(url: str, steer: bool = False) -> str:
    """A finished run with special floats, rollouts, a checkpoint and (``steer``) a `set` applied."""
    run = ph.init(project="arch", name=NAME, agent=url, config={"lr": 0.1, "tags": ["a", 1], "nested": {"x": -0.0}})
    for step, value in enumerate(SPECIAL):
        run.log({"loss": value, "reward/mean": step * 0.25}, step=step)
        run.log_rollouts(step, [{"prompt": chat_prompt(step), "completion": chat_completion(step), "reward": float(step)}])
    run.checkpoint_saved("/tmp/ckpt-3", 3)
    if steer:
        done = threading.Event()

        def loop() -> None:  # the training loop's step boundary, where the change is applied
            while not done.wait(0.01):
                run.sync(len(SPECIAL))

        assert run.flush()  # the agent knows the run
        syncing = threading.Thread(target=loop, daemon=True)
        syncing.start()
        try:
            with Client(url) as client:
                assert client.command(run.id, "set", {"lr": 0.05}, wait=10)["state"] == "applied"
        finally:
            done.set()
            syncing.join()
    assert run.finish()
    return run.id


def everything(client: Client, run: str) -> dict:
    """What must survive an archive and an import."""
    row = next(r for r in client.runs() if r["id"] == run)
    series = {m: client.series(run, m) for m in row["summary"]}
    return {"row": {k: row[k] for k in ("project", "name", "status", "config", "schema", "last_step", "host")},
            "points": {m: (s.tolist(), bits(v), bits(t)) for m, (s, v, t) in series.items()},
            "rollouts": client.rollouts(run, last=100), "events": run_events(client, run),
            "found": found(client, run)}


def found(client: Client, run: str) -> list[dict]:
    """A search of the run's rollouts, once the agent has indexed them (between its turns)."""
    wait_until(lambda: not client.search_rollouts(run, "p3")[1], timeout=10)
    return client.search_rollouts(run, "p3")[0]


def test_a_run_archived_and_imported_comes_back_whole(agent_proc, tmp_path):
    run = log_run(agent_proc.url, steer=True)
    out = tmp_path / "run ü.parquet"
    done = run_cli("archive", NAME, "-o", str(out), "--agent", agent_proc.url)
    assert done.returncode == 0, done.stderr
    assert f"archived run {run}: {POINTS} points" in done.stderr

    table = pq.read_table(out)  # the file, read as any parquet reader would
    meta = json.loads(pq.ParquetFile(out).metadata.metadata[META_KEY])
    assert meta["format"] == 1 and meta["run"]["id"] == run and meta["run"]["config"]["lr"] == 0.05
    assert meta["run"]["status"] == "finished" and meta["run"]["name"] == NAME
    kinds = table.column("kind").to_pylist()
    assert kinds.count("m") == POINTS and kinds.count("r") == len(SPECIAL) and kinds.count("e") == meta["events"] >= 4
    losses = table.filter(pa.compute.equal(table.column("metric").cast(pa.string()), "loss"))
    assert bits(losses.column("value").to_numpy()) == bits(SPECIAL)

    with agent_proc.client() as client:
        before = everything(client, run)
    second = AgentProcess(tmp_path / "second", free_port()).start()
    try:
        done = run_cli("import", str(out), "--agent", second.url)
        assert done.returncode == 0, done.stderr
        with second.client() as client:
            after = everything(client, run)
            assert [r["id"] for r in client.runs() if r["kind"] == "train"] == [run]
            points = client.series(run, "loss")  # its tiers are built between turns, from its points
            wait_until(lambda: client.tiers(run, ["loss"], 0, 100, level=0) is not None, what="the tiers built")
            got = client.tiers(run, ["loss"], 0, 100, level=0)["loss"]
            assert same_buckets(got, dict(levels(*points))[0])
        imported = after["events"].pop()
        assert after == before  # every point bit-exact, config (as steered), status, rollouts, events, search
        assert [h["rollout"]["prompt"] for h in after["found"]] == [chat_prompt(3)]
        assert after["rollouts"][3]["rows"][0]["completion"] == chat_completion(3)  # a chat comes back whole
        assert imported["event"] == "imported" and imported["points"] == POINTS and imported["who"]["via"] == "loopback"
        assert "imported from run ü.parquet by" in run_cli("events", run, "--agent", second.url).stdout

        again = run_cli("import", str(out), "--agent", second.url)
        assert again.returncode == 1 and f"already has a run with id {run}" in again.stderr
        with second.client() as client:
            assert everything(client, run)["events"][-1]["event"] == "imported"
            assert len(run_events(client, run, "imported")) == 1
    finally:
        second.stop()


def rewrite(src, dst, meta: dict | None = None, metric_rows=None) -> None:
    """A copy of an archive with its metadata or its metric column changed."""
    table = pq.read_table(src)
    if metric_rows is not None:
        names = table.column("metric").cast(pa.string()).to_pylist()
        table = table.set_column(1, "metric", pa.array(metric_rows(names)))
    raw = json.dumps(meta) if meta is not None else pq.ParquetFile(src).metadata.metadata[META_KEY]
    pq.write_table(table.replace_schema_metadata({META_KEY: raw}), dst)


def test_bad_archives_are_refused_and_change_nothing(agent_proc, tmp_path, capsys):
    run = log_run(agent_proc.url)
    good = tmp_path / "good.parquet"
    assert main(["archive", run, "-o", str(good), "--agent", agent_proc.url]) == 0
    meta = json.loads(pq.ParquetFile(good).metadata.metadata[META_KEY])
    target = AgentProcess(tmp_path / "target", free_port()).start()
    try:
        (tmp_path / "text.parquet").write_text("metric,step\n")
        pq.write_table(pa.table({"a": [1, 2]}), tmp_path / "other.parquet")
        cases = {"text.parquet": "is not a parquet file",
                 "other.parquet": "not a Pilothouse archive",
                 "missing.parquet": "cannot read"}
        hostile = {"v2": ({**meta, "format": 2}, "format version 2; this pilothouse reads version 1"),
                   "huge": ({**meta, "run": {**meta["run"], "name": "n" * 1_000_000}}, "must be 1 to 250 characters"),
                   "types": ({**meta, "run": {**meta["run"], "config": [1]}}, "config must be a dict"),
                   "nan": ({**meta, "run": {**meta["run"], "created": math.nan}}, "created must be a finite number"),
                   "giant": ({**meta, "run": {**meta["run"], "config": {"x": "x" * 5_000_000}}}, "at most"),
                   "rows": ({**meta, "points": 1}, "rows but its metadata says")}
        for name, (changed, why) in hostile.items():
            rewrite(good, tmp_path / f"{name}.parquet", changed)
            cases[f"{name}.parquet"] = why
        rewrite(good, tmp_path / "bad-name.parquet",  # refused by the agent in the middle of the import
                metric_rows=lambda names: [n if n != "reward/mean" else "bad\x07name" for n in names])
        cases["bad-name.parquet"] = "contains control character U+0007"
        capsys.readouterr()
        for name, why in cases.items():
            assert main(["import", str(tmp_path / name), "--agent", target.url]) == 1, name
            assert why in capsys.readouterr().err, name
        with target.client() as client:
            assert [r for r in client.runs() if r["kind"] == "train"] == [] and client.read(0, run).entries == []
        with sqlite3.connect(target.data / "journal.sqlite") as db:  # the refused import's batches are gone too
            assert db.execute("SELECT COUNT(*) FROM import_entries").fetchone() == (0,)
        assert main(["import", str(good), "--agent", target.url]) == 0  # and the good file goes in
    finally:
        target.stop()


def test_an_import_is_hidden_until_its_last_batch_and_a_new_one_replaces_a_partial(agent_proc):
    meta = {"id": "imp1", "project": "p", "name": "n", "status": "crashed", "created": 1.0, "config": {}}
    point = ["m", "loss", 0, struct.pack("<q", 3), struct.pack("<d", NAN_PAYLOAD), struct.pack("<d", 2.0), None]
    with agent_proc.client() as client, agent_proc.client() as follower:
        head = client.ping()["head"]
        feed = follower.follow(after=head, run="imp1")
        assert next(feed).entries == []  # a reader caught up before the run lands
        first = client.request("import_begin", run=meta)["token"]
        client.request("import_batch", token=first, batch=0, entries=[point])
        assert "imp1" not in [r["id"] for r in client.runs()] and client.read(head, "imp1").entries == []
        second = client.request("import_begin", run=meta)["token"]  # the partial one is dropped
        with pytest.raises(AgentError, match="no import in progress"):
            client.request("import_batch", token=first, batch=1, entries=[point])
        client.request("import_batch", token=second, batch=0, entries=[point, point])
        assert client.request("import_batch", token=second, batch=0, entries=[point]) == {"batches": 1}  # resent
        with pytest.raises(AgentError, match="holds 1 batches and 2 entries"):
            client.request("import_end", token=second, batches=1, entries=3)
        assert client.request("import_end", token=second, batches=1, entries=2)["status"] == "crashed"
        row = next(r for r in client.runs() if r["id"] == "imp1")
        assert row["status"] == "crashed" and row["summary"] == {"loss": pytest.approx(math.nan, nan_ok=True)}
        steps, values, _ = client.series("imp1", "loss")
        assert steps.tolist() == [3, 3] and bits(values) == bits([NAN_PAYLOAD] * 2)
        seen = []
        for page in feed:  # a reader following the journal gets the run's entries once, when it lands
            seen += page.entries
            if any(e.kind == "e" for e in seen):
                break
        assert [e.kind for e in seen] == ["m", "m", "e"]
        assert bits(np.frombuffer(seen[0].vals + seen[1].vals)) == bits([NAN_PAYLOAD] * 2)


def test_archive_refuses_to_overwrite_and_leaves_no_partial_file(agent_proc, tmp_path, capsys, monkeypatch):
    run = log_run(agent_proc.url)
    out = tmp_path / "run.parquet"
    out.write_bytes(b"keep me")
    assert main(["archive", run, "-o", str(out), "--agent", agent_proc.url]) == 1
    assert "exists; --force overwrites it" in capsys.readouterr().err and out.read_bytes() == b"keep me"
    assert main(["archive", run, "-o", str(tmp_path / "no" / "dir.parquet"), "--agent", agent_proc.url]) == 1
    assert "cannot write" in capsys.readouterr().err

    def small_files() -> None:  # a disk that fills up: writes past 2 kB fail (EFBIG)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    full = subprocess.run([sys.executable, "-m", "pilothouse", "archive", run, "-o", str(out), "--force",
                           "--agent", agent_proc.url], capture_output=True, text=True, cwd=ROOT,
                          preexec_fn=small_files, timeout=60)
    assert full.returncode == 1 and "cannot write" in full.stderr, full.stderr
    assert out.read_bytes() == b"keep me" and not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]

    assert main(["archive", run, "-o", str(out), "--force", "--agent", agent_proc.url]) == 0
    assert pq.ParquetFile(out).metadata.num_rows > 14
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # an install without the extra
    assert main(["import", str(out), "--agent", agent_proc.url]) == 1
    assert "pip install 'pilothouse[archive]'" in capsys.readouterr().err

"""Logdirs followed into an agent: every folder holding event files is a run, sent the way a
trainer sends (``Outbox``: numbered records, resent until acknowledged), so nothing is lost.

A run is named after its folder's path under the logdir; its id is fixed by the host and the
folder, so a restarted watcher (or ``import`` run twice) continues the same run.  Records are read
only while the agent keeps up (the files are the buffer), and what the agent acknowledged is kept
in an owner-only state file (``offsets``).  A run the agent already has that the state file does
not know is refused with a line saying so: sent again it would be numbered anew, and the agent
would drop the records as ones it has.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pilothouse.client import AgentUnavailable, Client
from pilothouse.paths import watch_state_dir
from pilothouse.security import Keyring
from pilothouse.trainer.outbox import Outbox
from pilothouse.watch.event_file import EventFileTail, is_event_file
from pilothouse.watch.finished import MAX_UNACKED, MAX_UNACKED_BYTES, Say, watched_hello
from pilothouse.watch.offsets import RunState, WatchState
from pilothouse.watch.summaries import Summaries
from pilothouse.wire.checks import normal_name
from pilothouse.wire.records import REC_METRICS

POLL_S = 0.2  # new folders and appended events reach the agent well within a second
READ_EVENTS = 20_000  # events read from one file per poll
MAX_IMPORTING = 16  # runs an import sends at once (each has a sending thread); the others wait their turn
SESSION = "tensorboard"  # a watched run's one stream: its numbering continues across watchers
SEND_EVERY_S = 0.1  # a run's sending thread wakes this often (a trainer's: 0.02 s); many runs stay cheap
_FILE_TIME = re.compile(r"tfevents\.(\d{9,11})")


class WatchError(ValueError):
    """A logdir cannot be watched (missing, not a folder, its state held by another watcher)."""


@dataclass
class Counts:
    points: int = 0
    rollouts: int = 0


@dataclass
class WatchedRun:
    id: str
    name: str
    folder: Path
    outbox: Outbox
    state: RunState
    summaries: Summaries
    tails: dict[str, EventFileTail] = field(default_factory=dict)
    next_seq: int = 0  # 0 until the agent's welcome says where the stream stands
    skip_file: str | None = None
    skip: int = 0
    config: dict = field(default_factory=dict)
    counts: Counts = field(default_factory=Counts)
    told: set[str] = field(default_factory=set)
    refused: bool = False
    finished: bool = False

    @property
    def unacked(self) -> int:
        return self.next_seq - 1 - self.outbox.stats.acked_seq


class Logdir:
    """One logdir's runs and state file."""

    def __init__(self, path: Path, agent: str, project: str | None, state_dir: Path):
        if not path.exists():
            raise WatchError(f"{path} does not exist")
        if not path.is_dir():
            raise WatchError(f"{path} is a file, not a folder of TensorBoard runs (a LOGDIR holds event files "
                             "in its folders)")
        self.path = path.resolve()
        try:
            self.project = project or normal_name(self.path.name or "tensorboard", "project")
            self.state = WatchState(state_dir, agent, self.path)
        except (ValueError, OSError) as exc:
            raise WatchError(str(exc)) from None
        self.runs: dict[Path, WatchedRun] = {}
        self.refused: set[Path] = set()  # folders not sent, said once
        self.unchanged: set[Path] = set()  # imported before, nothing new since: the agent is not even told
        self.dirty = False  # the state changed since it was saved
        self.waiting = False  # an import left folders for later: MAX_IMPORTING runs were open

    def folders(self) -> dict[Path, list[str]]:
        """Every folder under the logdir that holds event files, with their names in order."""
        found = {}
        for folder, dirs, files in os.walk(self.path):
            dirs.sort()
            events = sorted(f for f in files if is_event_file(f))
            if events:
                found[Path(folder)] = events
        return found


class Watcher:
    """Follows logdirs into the agent at ``agent``; ``once``: read what is there, finish the runs and
    stop (``pilothouse import``)."""

    def __init__(self, logdirs: list[Path], agent: str, project: str | None = None, *, once: bool = False,
                 say: Say = print, state_dir: Path | None = None, keys: Keyring | None = None):
        self.agent = agent
        self.keys = keys
        self.once = once
        self.say = say
        self.logdirs: list[Logdir] = []
        try:
            for path in logdirs:
                self.logdirs.append(Logdir(path, agent, project, state_dir or watch_state_dir()))
        except BaseException:
            self.close()
            raise
        self.host = socket.gethostname()
        self.flush_timeout = 10.0  # at exit: how long to wait for the agent to acknowledge what was sent
        self._unconfirmed = 0  # imported runs whose end the agent did not confirm

    # --- the loop -------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> int:
        """Poll until ``stop`` (or, ``once``, until everything is read and acknowledged); the exit code."""
        try:
            while not stop.is_set():
                busy = self.poll()
                if self.once and self._finish_done():
                    return self._exit_status()
                if not busy:
                    stop.wait(POLL_S)
            return 0
        finally:
            self.close(self.flush_timeout)

    def poll(self) -> bool:
        """One pass: new folders, what the agent acknowledged, new events.  True if events were read."""
        read = False
        for logdir in self.logdirs:
            self._discover(logdir)
            queued: list[tuple[WatchedRun, list[tuple]]] = []
            for run in logdir.runs.values():
                if run.refused or not run.next_seq and not self._start(logdir, run):
                    continue
                logdir.dirty |= run.state.acked(run.outbox.stats.acked_seq)
                records = self._read(run)
                if records is not None:
                    logdir.dirty = True
                    queued.append((run, records))
            if logdir.dirty:  # saved before the records go: a restart finds where they came from
                logdir.state.save()
                logdir.dirty = False
            for run, records in queued:
                run.outbox.queue.extend(records)
                read = read or bool(records)
        return read

    def _finish_done(self) -> bool:
        """Import: end every run read to the end of its files and acknowledged; True once all are."""
        done = True
        for logdir in self.logdirs:
            done = done and not logdir.waiting
            for run in logdir.runs.values():
                if run.refused or run.finished:
                    continue
                if not run.next_seq or run.unacked or any(t.offset < _size(t.path) and not (t.damaged or t.torn)
                                                           for t in run.tails.values()):
                    done = False
                    continue
                self._finish(run)
                logdir.dirty = True
        return done

    def _finish(self, run: WatchedRun) -> None:
        for tail in run.tails.values():
            if tail.torn and not tail.damaged:
                self.say(f"{run.name}: {tail.path.name} ends in part of a record ({_size(tail.path) - tail.offset} "
                         "bytes: its writer stopped mid-record); everything before it was imported")
            tail.close()
        run.finished = True
        run.state.acked(run.outbox.stats.acked_seq)
        if not run.outbox.close(timeout=30):
            self.say(f"{run.name}: the agent did not confirm the end of the run")
            self._unconfirmed += 1
            return
        self.say(f"imported {run.name} ({run.id}): {run.counts.points} points, {run.counts.rollouts} "
                 f"rollout rows{', config' if run.config else ''}")

    def _exit_status(self) -> int:
        """1 if anything was not imported whole (each said as it happened), else 0."""
        failed = self._unconfirmed
        for logdir in self.logdirs:
            if not logdir.runs and not logdir.refused and not logdir.unchanged:
                self.say(f"no TensorBoard event files under {logdir.path}, nor W&B run files (run-*.wandb) nor "
                         "an MLflow file store (<experiment>/meta.yaml): nothing imported")
                failed += 1
            failed += len(logdir.refused) + sum(r.refused for r in logdir.runs.values())
            failed += sum(t.damaged is not None for r in logdir.runs.values() for t in r.tails.values())
        return 1 if failed else 0

    def close(self, timeout: float = 10.0) -> None:
        """Wait (up to ``timeout``) for what was sent to be acknowledged, keep it, and stop."""
        deadline = time.monotonic() + timeout
        for logdir in self.logdirs:
            runs = [r for r in logdir.runs.values() if not r.refused and not r.finished]
            while any(r.next_seq and r.unacked > 0 for r in runs) and time.monotonic() < deadline:
                time.sleep(0.02)
            for run in runs:
                run.state.acked(run.outbox.stats.acked_seq)
                run.outbox.stop()
                for tail in run.tails.values():
                    tail.close()
            logdir.state.save()
            logdir.state.close()
        self.logdirs = []

    # --- runs -----------------------------------------------------------------------------------

    def _discover(self, logdir: Logdir) -> None:
        known: set[str] | None = None  # the agent's runs, asked once per pass that finds a new folder
        logdir.waiting = False
        for folder, files in logdir.folders().items():
            if folder in logdir.runs or folder in logdir.refused or folder in logdir.unchanged:
                continue
            if self.once and sum(not r.refused and not r.finished for d in self.logdirs
                                 for r in d.runs.values()) >= MAX_IMPORTING:
                logdir.waiting = True
                return
            rel = folder.relative_to(logdir.path).as_posix()
            run_id = "tb-" + hashlib.sha256(f"{self.host}:{folder}".encode()).hexdigest()[:16]
            try:
                name = normal_name(logdir.path.name if rel == "." else rel, "run name")
            except ValueError as exc:
                self.say(f"{folder}: not watched: {exc}")
                logdir.refused.add(folder)
                continue
            state = logdir.state.runs.get(run_id)
            if self.once and state is not None and state.seq and not state.chunks \
                    and all(state.offsets.get(f) == _size(folder / f) for f in files):
                self.say(f"{name} ({run_id}): imported before, nothing new in its files")
                logdir.unchanged.add(folder)
                continue
            if state is None and known is None:
                known = self._agent_runs()
            if state is None and run_id in known:
                self.say(f"{name}: not sent: the agent already has run {run_id} from {folder}, and the watch state "
                         f"({logdir.state.path}) does not say what of it the agent holds; records numbered anew would "
                         f"be dropped as ones it has. To send it again, remove it first: pilothouse rm {run_id}")
                logdir.refused.add(folder)
                continue
            if state is None:
                state = logdir.state.runs[run_id] = RunState()
            hello = watched_hello(run_id, logdir.project, name, SESSION, _created(folder, files), {}, state.token)
            outbox = Outbox(self.agent, hello, keys=self.keys, flush_interval=SEND_EVERY_S)
            logdir.runs[folder] = WatchedRun(run_id, name, folder, outbox, state, Summaries(state.plugins))
            self.say(f"{'importing' if self.once else 'watching'} {name} ({run_id}) from {folder}")

    def _agent_runs(self) -> set[str]:
        try:
            with Client(self.agent, timeout=5.0, keys=self.keys) as client:
                return {r["id"] for r in client.runs()}
        except AgentUnavailable:
            if self.once:
                raise
            return set()  # the agent's welcome still tells: see _start

    def _start(self, logdir: Logdir, run: WatchedRun) -> bool:
        """Once the agent welcomed the run: continue its stream where the agent holds it."""
        if not run.outbox.welcomed.is_set():
            if run.outbox.stats.last_error:  # the agent refused the hello: it says why
                self._refuse(run, f"{run.name}: not sent: {run.outbox.stats.last_error}")
            return False
        held = run.outbox.stats.acked_seq
        if held == 0 and run.state.seq:
            self.say(f"{run.name}: the agent no longer has run {run.id}: sending it again from the start")
            run.state = logdir.state.runs[run.id] = RunState()
        try:
            run.skip_file, run.skip = run.state.resume(held)
        except ValueError as exc:
            self._refuse(run, f"{run.name}: not sent: {exc} (was the agent's journal restored, or the state file "
                              f"{logdir.state.path} replaced?)")
            return False
        run.outbox.continue_after(held)
        run.next_seq = held + 1
        return True

    def _refuse(self, run: WatchedRun, line: str) -> None:
        self.say(line)
        run.refused = True
        run.outbox.stop()

    def _read(self, run: WatchedRun) -> list[tuple] | None:
        """New records of the run's files, each file's part noted in its state; None if nothing new."""
        if run.unacked > MAX_UNACKED or run.outbox.stats.buffered_bytes > MAX_UNACKED_BYTES:
            return None  # the agent is behind or away: the files wait
        names = sorted(f for f in os.listdir(run.folder) if is_event_file(f)) if run.folder.is_dir() else []
        if run.skip_file is not None:  # the agent stored these before the watch stopped: first
            names = [run.skip_file, *(n for n in names if n != run.skip_file)]
        out: list[tuple] = []
        read = False
        for name in names:
            tail = run.tails.get(name)
            if tail is None:
                tail = run.tails[name] = EventFileTail(run.folder / name, run.state.offsets.get(name, 0))
            # the skipped records came from one read of at most READ_EVENTS events from this same offset
            skip = run.skip if name == run.skip_file else 0
            events = tail.read(READ_EVENTS)
            if name == run.skip_file:
                run.skip_file, run.skip = None, 0
            if tail.damaged and name not in run.told:
                run.told.add(name)
                self.say(f"{run.name}: {tail.damaged}")
            if not events:
                continue
            out.extend(self._records(run, [e for _, e in events], skip))
            run.state.queued(run.next_seq + len(out) - 1, name, tail.offset)
            read = True
        if not read:
            return None
        run.next_seq += len(out)
        return out

    def _records(self, run: WatchedRun, events: list, skip: int) -> list[tuple]:
        """The events' records, less the first ``skip`` (the agent has them)."""
        out = []
        config = {}
        for event in events:
            decoded = run.summaries.decode(event)
            for line in decoded.skipped:
                self.say(f"{run.name}: {line}")
            config.update(decoded.config)
            for record in decoded.records:
                if skip:
                    skip -= 1
                    continue
                out.append(record)
                if record[0] == REC_METRICS:
                    run.counts.points += len(record[1])
                    run.outbox.last_step = max(run.outbox.last_step, event.step)
                else:
                    run.counts.rollouts += len(record[2][2])
        if config:
            run.config.update(config)
            run.outbox.rehello({**run.outbox.hello, "config": dict(run.config)})
        run.state.plugins.update(run.summaries.plugins)
        return out



def _created(folder: Path, files: list[str]) -> float:
    """When the run began: the time in its first event file's name, else that file's mtime."""
    stamp = _FILE_TIME.search(files[0])
    if stamp:
        return float(stamp.group(1))
    return (folder / files[0]).stat().st_mtime


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0

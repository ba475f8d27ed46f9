"""Folders followed into an agent: every run ``layouts`` finds there (a framework's run folder, or a
folder holding TensorBoard event files), or the one run ``--run NAME`` makes of the PATHs given, is
sent the way a trainer sends (``Outbox``: numbered records, resent until acknowledged), so nothing
is lost.  Each of a run's files is a ``sources`` source, read from the offset the agent holds.

A run is named after its folder's path under the logdir (or by ``--run``); its id is fixed by the
host and the folder (or the project and name), so a restarted watcher (or ``import`` run twice)
continues the same run.  Records are read
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
from typing import Any

from pilothouse.client import AgentUnavailable, Client
from pilothouse.paths import watch_state_dir
from pilothouse.security import Keyring
from pilothouse.trainer.outbox import Outbox
from pilothouse.watch.finished import MAX_UNACKED, MAX_UNACKED_BYTES, Say, watched_hello
from pilothouse.watch.formats.trl import CompletionsSource
from pilothouse.watch.layouts import EVENTS, LINES, TRL_FOLDER, FileSpec, RunSpec, discover, explicit
from pilothouse.watch.offsets import RunState, WatchState
from pilothouse.watch.points import MetricRecords
from pilothouse.watch.sources import LineSource, Source, WholeSource
from pilothouse.wire.checks import normal_name
from pilothouse.wire.records import REC_METRICS, REC_ROLLOUTS

POLL_S = 0.2  # new folders and appended events reach the agent well within a second
READ_RECORDS = 20_000  # events, lines or files read from one source per poll
MAX_IMPORTING = 16  # runs an import sends at once (each has a sending thread); the others wait their turn
SESSION = "tensorboard"  # a watched run's one stream: its numbering continues across watchers
SEND_EVERY_S = 0.1  # a run's sending thread wakes this often (a trainer's: 0.02 s); many runs stay cheap
_FILE_TIME = re.compile(r"tfevents\.(\d{9,11})")
# rollout records (up to 4 MB each) one poll queues at most: the outbox packs what its queue holds and
# halves a batch too big for a frame, so a backlog of files queued at once (an import of a few hundred
# steps' dumps) was packed again and again, its cost growing with the square of the backlog
ROLLOUT_READS = 2


class WatchError(ValueError):
    """A folder cannot be watched (missing, not a folder, its state held by another watcher)."""


@dataclass
class Counts:
    points: int = 0
    rollouts: int = 0


@dataclass
class WatchedRun:
    id: str
    spec: RunSpec
    outbox: Outbox
    state: RunState
    metrics: MetricRecords = field(default_factory=MetricRecords)
    summaries: Any = None  # its event files' Summaries, made with the first (tensorboard is loaded then)
    sources: dict[str, Source] = field(default_factory=dict)
    next_seq: int = 0  # 0 until the agent's welcome says where the stream stands
    skip_file: str | None = None
    skip: int = 0
    config: dict = field(default_factory=dict)
    counts: Counts = field(default_factory=Counts)
    told: set[str] = field(default_factory=set)
    refused: bool = False
    finished: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def unacked(self) -> int:
        return self.next_seq - 1 - self.outbox.stats.acked_seq

    def source(self, key: str, path: Path, spec: FileSpec) -> Source:
        offset = self.state.offsets.get(key, 0)
        if spec.how == EVENTS:
            from pilothouse.watch.event_file import EventSource
            from pilothouse.watch.summaries import Summaries

            self.summaries = self.summaries or Summaries(self.state.plugins, self.metrics)
            return EventSource(key, path, offset, self.summaries)
        if spec.how == TRL_FOLDER:
            return CompletionsSource(key, path, offset, self.metrics)
        if spec.how == LINES:
            return LineSource(key, path, offset, spec.fmt, self.metrics)
        return WholeSource(key, path, offset, spec.fmt, self.metrics)


class Logdir:
    """One watched folder's runs and state file; ``run_name``: the PATHs are one run of that name."""

    def __init__(self, paths: list[Path], agent: str, project: str | None, state_dir: Path,
                 run_name: str | None = None):
        for path in paths:
            if not path.exists():
                raise WatchError(f"{path} does not exist")
        if run_name is None and not paths[0].is_dir():
            raise WatchError(f"{paths[0]} is a file, not a folder of runs (a LOGDIR holds event files in its "
                             "folders, or a framework's run folders); to follow files as one run: --run NAME PATH...")
        self.paths = [p.resolve() for p in paths]
        self.path = self.paths[0] if run_name is None else Path(os.path.commonpath(self.paths))
        self.run_name = run_name
        try:
            self.project = project or normal_name(self.path.name or "tensorboard", "project")
            if run_name is not None:
                self.run_name = normal_name(run_name, "run name")
            where = str(self.path) if run_name is None else "\0".join(map(str, [self.project, run_name, *self.paths]))
            self.state = WatchState(state_dir, agent, where)
        except (ValueError, OSError) as exc:
            raise WatchError(str(exc)) from None
        self.runs: dict[Path, WatchedRun] = {}
        self.refused: set[Path] = set()  # folders not sent, said once
        self.unchanged: set[Path] = set()  # imported before, nothing new since: the agent is not even told
        self.dirty = False  # the state changed since it was saved
        self.waiting = False  # an import left folders for later: MAX_IMPORTING runs were open

    def found(self) -> dict[Path, RunSpec]:
        """The runs and their files now (new files appear while a run is followed)."""
        if self.run_name is None:
            return discover(self.path)
        run = explicit(self.paths, self.run_name)
        return {run.root: run}


class Watcher:
    """Follows logdirs into the agent at ``agent``; ``once``: read what is there, finish the runs and
    stop (``pilothouse import``)."""

    def __init__(self, logdirs: list[Path], agent: str, project: str | None = None, *, once: bool = False,
                 say: Say = print, state_dir: Path | None = None, keys: Keyring | None = None,
                 run_name: str | None = None):
        self.agent = agent
        self.keys = keys
        self.once = once
        self.say = say
        self.logdirs: list[Logdir] = []
        try:
            groups = [logdirs] if run_name is not None else [[path] for path in logdirs]
            for paths in groups:
                self.logdirs.append(Logdir(paths, agent, project, state_dir or watch_state_dir(), run_name))
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
                if not run.next_seq or run.unacked or any(s.pending() for s in run.sources.values()) \
                        or set(run.spec.files) - set(run.sources) - run.told:
                    done = False
                    continue
                self._finish(run)
                logdir.dirty = True
        return done

    def _finish(self, run: WatchedRun) -> None:
        for source in run.sources.values():
            if source.torn and not source.damaged:
                self.say(f"{run.name}: {source.path.name} ends in part of a record ({_size(source.path) - source.offset} "
                         "bytes: its writer stopped mid-record); everything before it was imported")
            source.close()
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
                self.say(f"no TensorBoard event files under {logdir.path}, no file of an RL framework's (TRL "
                         "completions, verl, NeMo RL, prime-rl, SkyRL, ART), nor W&B run files (run-*.wandb) nor an "
                         "MLflow file store (<experiment>/meta.yaml): nothing imported")
                failed += 1
            failed += len(logdir.refused) + sum(r.refused for r in logdir.runs.values())
            failed += sum(s.damaged is not None for r in logdir.runs.values() for s in r.sources.values())
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
                for source in run.sources.values():
                    source.close()
            logdir.state.save()
            logdir.state.close()
        self.logdirs = []

    # --- runs -----------------------------------------------------------------------------------

    def _discover(self, logdir: Logdir) -> None:
        known: set[str] | None = None  # the agent's runs, asked once per pass that finds a new folder
        logdir.waiting = False
        for folder, spec in logdir.found().items():
            if folder in logdir.runs:
                logdir.runs[folder].spec = spec  # with the files it has now
                continue
            if folder in logdir.refused or folder in logdir.unchanged:
                continue
            if self.once and sum(not r.refused and not r.finished for d in self.logdirs
                                 for r in d.runs.values()) >= MAX_IMPORTING:
                logdir.waiting = True
                return
            where = folder if logdir.run_name is None else f"{logdir.project}/{logdir.run_name}"
            run_id = ("fw-" if spec.framework else "tb-") + hashlib.sha256(f"{self.host}:{where}".encode()).hexdigest()[:16]
            try:
                name = normal_name(spec.name, "run name")
            except ValueError as exc:
                self.say(f"{folder}: not watched: {exc}")
                logdir.refused.add(folder)
                continue
            state = logdir.state.runs.get(run_id)
            if self.once and state is not None and state.seq and not state.chunks and not spec.framework \
                    and all(state.offsets.get(k) == _size(p) for k, (p, _) in spec.files.items()):
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
            hello = watched_hello(run_id, logdir.project, name, SESSION, _created(spec), {}, state.token)
            outbox = Outbox(self.agent, hello, keys=self.keys, flush_interval=SEND_EVERY_S)
            logdir.runs[folder] = WatchedRun(run_id, spec, outbox, state)
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
        keys = sorted(run.spec.files, key=_in_step_order)
        if run.skip_file is not None:  # the agent stored these before the watch stopped: first
            keys = [run.skip_file, *(k for k in keys if k != run.skip_file)]
        out: list[tuple] = []
        read = False
        now = time.time()
        for key in keys:
            if key not in run.spec.files:
                continue
            source = run.sources.get(key)
            if source is None:
                path, spec = run.spec.files[key]
                try:
                    source = run.sources[key] = run.source(key, path, spec)
                except ImportError:  # an event file, and no tensorboard: the run's other files are read
                    if key not in run.told:
                        run.told.add(key)
                        self.say(f"{run.name}: {path.name} left out: reading TensorBoard event files needs "
                                 "tensorboard: pip install 'pilothouse[tensorboard]'")
                    continue
            # the skipped records came from one read of at most READ_RECORDS from this same offset
            skip = run.skip if key == run.skip_file else 0
            got = source.read(READ_RECORDS, now, self.once)
            if key == run.skip_file:
                run.skip_file, run.skip = None, 0
            for line in got.said:
                self.say(f"{run.name}: {line}")
            if source.damaged and key not in run.told:
                run.told.add(key)
                self.say(f"{run.name}: {source.damaged}")
            if got.config:
                run.config.update(got.config)
                run.outbox.rehello({**run.outbox.hello, "config": dict(run.config)})
            if run.summaries is not None:
                run.state.plugins.update(run.summaries.plugins)
            if not got.records:
                continue
            out.extend(self._count(run, got.records[skip:]))
            run.state.queued(run.next_seq + len(out) - 1, key, source.offset)
            read = True
            if sum(r[0] == REC_ROLLOUTS for r in out) >= ROLLOUT_READS:
                break  # the rest next poll, at once
        if not read:
            return None
        run.next_seq += len(out)
        return out

    def _count(self, run: WatchedRun, records: list[tuple]) -> list[tuple]:
        for record in records:
            if record[0] == REC_METRICS:
                run.counts.points += len(record[1])
                run.outbox.last_step = max(run.outbox.last_step, int.from_bytes(record[2][:8], "little", signed=True))
            else:
                run.counts.rollouts += len(record[2][2])
        return records


def _in_step_order(key: str) -> tuple[list, list]:
    """A file's key as its files' steps go: numbers as numbers, by the file's name first, then its path.

    Why: the agent finds a step's rollouts by a binary search over arrival order (a trainer logs its
    steps in order), and a backlog of files (an import, a watcher started late) is read in this order.
    As text, verl's ``10.jsonl`` comes before
    ``2.jsonl`` (its step files are not zero padded), and its validation dump of a step sits in
    another folder than the training dumps around it."""
    return _numbers(key.rsplit("/", 1)[-1]), _numbers(key)


def _numbers(text: str) -> list:
    return [int(part) if n % 2 else part for n, part in enumerate(re.split(r"(\d+)", text))]


def _created(spec: RunSpec) -> float:
    """When the run began: the time in its first event file's name, else its oldest file's mtime."""
    paths = [p for p, _ in spec.files.values()]
    for path in sorted(paths):
        stamp = _FILE_TIME.search(path.name)
        if stamp:
            return float(stamp.group(1))
    times = [p.stat().st_mtime for p in paths if p.exists()]
    return min(times) if times else time.time()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0

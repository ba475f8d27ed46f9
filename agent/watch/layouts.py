"""Which files under a watched folder are which run's, and what each file is.

Why here: a run's files come from several writers in layouts each framework fixes (TRL's
``output_dir``, a prime-rl run folder, an ART model folder) or that a user names
(``watch --run NAME PATH...``).  ``discover`` finds the runs of a folder: a framework's run folder
is one run with all its files; any other folder holding TensorBoard event files is a run as before.
``explicit`` makes one run of the files under the PATHs given.  ``classify`` says what one file is,
from its name and place (and, for a JSON-lines log, its first line).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pilothouse.watch.formats import art, nemo_rl, prime_rl, skyrl, trl, verl

EVENTS, LINES, WHOLE, TRL_FOLDER = "events", "lines", "whole", "trl"


def is_event_file(name: str) -> bool:
    return "tfevents" in name and not name.endswith((".tmp", ".swp"))


@dataclass(frozen=True)
class FileSpec:
    """What a file is: how it is read (EVENTS, LINES, WHOLE, TRL_FOLDER) and its format object."""

    how: str
    fmt: Any = None


@dataclass
class RunSpec:
    """A run's root (its id is made of it), its name, and its files by key (their path under the root)."""

    root: Path
    name: str
    files: dict[str, tuple[Path, FileSpec]] = field(default_factory=dict)
    framework: bool = False  # found by a framework's layout (or named by --run), not a TensorBoard folder

    def add(self, path: Path, spec: FileSpec) -> None:
        self.files[os.path.relpath(path, self.root)] = (path, spec)


# (name pattern, the folders it must sit in, what it is): the frameworks' files, by their writers' names
Rule = tuple[re.Pattern, Callable[[Path], bool], Callable[[Path], FileSpec | None]]
RULES: list[Rule] = [
    (trl.FILE, lambda p: p.parent.name == trl.FOLDER, lambda p: FileSpec(TRL_FOLDER)),
    (prime_rl.TRACES, prime_rl.is_traces, lambda p: FileSpec(LINES, prime_rl.Traces())),
    (prime_rl.METRICS, lambda p: True, lambda p: FileSpec(LINES, prime_rl.Metrics()) if prime_rl.is_metrics_log(p)
     else None),
    (art.STEP_FILE, art.is_step_file, lambda p: FileSpec(WHOLE, art.Trajectories())),
    (art.HISTORY, lambda p: True, lambda p: FileSpec(LINES, art.History()) if art.is_history(p) else None),
    (nemo_rl.STEP_FILE, lambda p: True, lambda p: FileSpec(WHOLE, nemo_rl.StepData())),
    (skyrl.FILE, skyrl.is_eval_file, lambda p: FileSpec(WHOLE, skyrl.Evals())),
    (verl.STEP_FILE, lambda p: True, lambda p: FileSpec(WHOLE, verl.Generations())),
    (re.compile(r".*\.jsonl$"), lambda p: True, lambda p: FileSpec(LINES, verl.Scalars()) if verl.is_file_logger(p)
     else None),
]


def classify(path: Path) -> FileSpec | None:
    """What ``path`` is, or None when no reader knows it."""
    if is_event_file(path.name):
        return FileSpec(EVENTS)
    for pattern, place, spec in RULES:
        if pattern.match(path.name) and place(path):
            found = spec(path)
            if found is not None:
                return found
    return None


# framework run folders a bare ``watch DIR`` finds by themselves: (what marks one, the name of the layout)
LAYOUTS: list[tuple[Callable[[Path, list[str], list[str]], bool], str]] = [
    (lambda folder, dirs, files: trl.is_output_dir(folder, dirs), "TRL output_dir"),
    (lambda folder, dirs, files: "rollouts" in dirs and prime_rl.has_steps(folder / "rollouts")
     or "metrics.jsonl" in files and prime_rl.is_metrics_log(folder / "metrics.jsonl"), "prime-rl run folder"),
    (lambda folder, dirs, files: art.FOLDER in dirs and art.has_step_files(folder / art.FOLDER), "ART model folder"),
    (lambda folder, dirs, files: nemo_rl.has_step_files(files) or bool(nemo_rl.EXP_FOLDER.match(folder.name))
     and "tensorboard" in dirs, "NeMo RL log dir"),
    (lambda folder, dirs, files: skyrl.FOLDER in dirs and skyrl.has_evals(folder / skyrl.FOLDER),
     "SkyRL export_path"),
]


def _walk(top: Path) -> list[tuple[Path, list[str], list[str]]]:
    out = []
    for folder, dirs, files in os.walk(top):
        dirs.sort()
        out.append((Path(folder), dirs, sorted(files)))
    return out


def _files(top: Path, walked: list[tuple[Path, list[str], list[str]]]) -> list[Path]:
    return [folder / f for folder, _, files in walked if Path(folder).is_relative_to(top) for f in files]


def _add_files(run: RunSpec, paths: list[Path]) -> None:
    for path in paths:
        spec = classify(path)
        if spec is None:
            continue
        if spec.how == TRL_FOLDER:  # the folder is the source: one stream of its files
            run.files.setdefault(os.path.relpath(path.parent, run.root), (path.parent, spec))
        else:
            run.add(path, spec)


def discover(logdir: Path) -> dict[Path, RunSpec]:
    """The runs under ``logdir``: each framework run folder whole, then each other folder holding event
    files (named by its path under ``logdir``, the logdir's own name for itself)."""
    walked = _walk(logdir)
    runs: dict[Path, RunSpec] = {}
    for folder, dirs, files in walked:
        if any(folder.is_relative_to(root) for root in runs):
            continue
        for marks, _ in LAYOUTS:
            if marks(folder, dirs, files):
                run = runs[folder] = RunSpec(folder, _name(logdir, folder), framework=True)
                _add_files(run, _files(folder, walked))
                break
    claimed = list(runs)  # framework run folders hold their event files; other folders are runs each, nested or not
    for folder, _, files in walked:
        if any(folder.is_relative_to(root) for root in claimed):
            continue
        events = [f for f in files if is_event_file(f)]
        if events:
            run = runs[folder] = RunSpec(folder, _name(logdir, folder))
            for name in events:
                run.add(folder / name, FileSpec(EVENTS))
    return runs


def explicit(paths: list[Path], name: str) -> RunSpec:
    """One run of every file a reader knows under ``paths`` (files or folders), named ``name``."""
    root = Path(os.path.commonpath([p.resolve() for p in paths]))
    run = RunSpec(root if root.is_dir() else root.parent, name, framework=True)
    for path in paths:
        path = path.resolve()
        if path.is_dir():
            _add_files(run, _files(path, _walk(path)))
        elif classify(path) is None and _first_line(path):  # named, and no reader knows it: said, not passed over
            run.add(path, FileSpec(WHOLE, Unknown()))
        else:
            _add_files(run, [path])
    return run


class Unknown:
    """A file named with ``--run`` that no reader knows (once its first line is whole: a file-logger file
    just made is empty): refused with a line saying so rather than left out unsaid."""

    name = "known framework's"

    def file(self, path: Path) -> Any:
        first = _first_line(path)[:120]
        raise ValueError(f"no reader knows its first line, {first!r}: a verl file-logger line is "
                         '{"step": N, "data": {...}}; docs/frameworks.md lists the files each framework writes')


def _first_line(path: Path) -> str:
    """``path``'s first line if it is whole (ends in a newline), else ''."""
    try:
        with open(path, "rb") as f:
            line = f.readline(1 << 20)
    except OSError:
        return ""
    return line.decode("utf-8", "replace").rstrip("\n") if line.endswith(b"\n") else ""


def _name(logdir: Path, folder: Path) -> str:
    rel = folder.relative_to(logdir).as_posix()
    return logdir.name if rel == "." else rel

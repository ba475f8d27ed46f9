"""`pilothouse tail`: lines that fit the terminal ($COLUMNS), the most important metrics first with
"+N more", ``--metric GLOB`` to choose (every chosen one shown, wrapped), a clear error when a glob
matches nothing, events as sentences; piped without $COLUMNS nothing is cut."""

from __future__ import annotations

import pytest
from support.processes import run_cli

import pilothouse as ph
from pilothouse.cli.tail import MetricFilter, clip, cols, fit

GRADS = [f"grad/layer{i:02d}" for i in range(24)]


@pytest.fixture
def wide_run(agent_proc):
    """A finished run with 27 metrics a step: far wider than a terminal."""
    run = ph.init(project="wide", name="many-metrics", agent=agent_proc.url)
    for step in range(30):
        run.log({"loss": 1.0 / (step + 1), "reward/mean": step / 30, "kl": 0.01 * step,
                 **{g: 1e-3 * step + i for i, g in enumerate(GRADS)}}, step=step)
    assert run.finish()
    return agent_proc, run.id


def tail(agent, run_id, *args, columns: str | None = "60"):
    return run_cli("tail", run_id, "--history", "--agent", agent.url, *args,
                   env={"COLUMNS": columns} if columns else None)


def step_blocks(out: str) -> dict[int, list[str]]:
    """Each step's lines: its 'step N' line and the continuation lines under it."""
    blocks: dict[int, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("step "):
            current = int(line.split()[1])
            blocks[current] = [line]
        elif current is not None and line.startswith(" " * 15):
            blocks[current].append(line)
        else:
            current = None
    return blocks


def test_every_line_fits_and_the_most_important_come_first(wide_run):
    agent, run_id = wide_run
    out = tail(agent, run_id)
    assert out.returncode == 0, out.stderr
    assert all(cols(line) <= 60 for line in out.stdout.splitlines()), out.stdout
    blocks = step_blocks(out.stdout)
    assert sorted(blocks) == list(range(30))
    last = blocks[29]
    assert len(last) == 1  # one line a step: the rest counted, not wrapped
    assert last[0].startswith("step       29  reward/mean=0.966667  kl=0.29") and last[0].endswith(" more")
    shown = len(last[0].split("  +")[0].split()) - 2
    assert last[0].endswith(f"+{27 - shown} more")
    assert out.stdout.splitlines()[-1] == "-- status: finished"


def test_metric_globs_choose_and_every_chosen_one_is_shown_wrapped(wide_run):
    agent, run_id = wide_run
    out = tail(agent, run_id, "--metric", "grad/layer1*", "--metric", "loss")
    assert out.returncode == 0, out.stderr
    assert all(cols(line) <= 60 for line in out.stdout.splitlines()), out.stdout
    block = step_blocks(out.stdout)[29]
    assert len(block) > 1  # wrapped, under the first value
    items = " ".join(block).split()[2:]
    assert [i.split("=")[0] for i in items] == ["loss"] + [g for g in GRADS if g.startswith("grad/layer1")]
    assert "more" not in out.stdout and "reward" not in out.stdout


def test_a_glob_that_matches_nothing_says_what_there_is(wide_run):
    agent, run_id = wide_run
    for glob in ("los", "", "[grad"):
        out = tail(agent, run_id, "--metric", glob)
        assert out.returncode == 1 and out.stdout == "", (glob, out)
        assert f"no metric of run {run_id} matches {glob!r}" in out.stderr, out.stderr
        assert "its metrics: reward/mean, kl, loss," in out.stderr and "(+17 more)" in out.stderr
        assert "Traceback" not in out.stderr


def test_piped_without_columns_nothing_is_cut(wide_run, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    agent, run_id = wide_run
    out = tail(agent, run_id, columns=None)
    assert out.returncode == 0, out.stderr
    last = step_blocks(out.stdout)[29]
    assert len(last) == 1 and "more" not in last[0] and len(last[0].split()) == 2 + 27


def test_hostile_text_in_events_is_escaped(agent_proc):
    """Names are checked where they are logged; a checkpoint's path is the trainer's own text."""
    run = ph.init(project="wide", name="esc", agent=agent_proc.url)
    run.log({"loss": 1.0}, step=0)
    run.checkpoint_saved("ck\x1b[2J\u202e.pt", 0)
    assert run.finish()
    out = run_cli("tail", run.id, "--history", "--agent", agent_proc.url, env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\u202e" not in out.stdout
    assert "-- checkpoint saved at step 0: ck\\x1b[2J\\u202e.pt" in out.stdout.splitlines(), out.stdout


def test_fit_and_clip():
    items = [f"m{i}=1" for i in range(10)]
    assert fit("step 1  ", items, 30, wrap=False) == ["step 1  m0=1  m1=1  +8 more"]
    assert fit("step 1  ", items, 30, wrap=True) == ["step 1  m0=1  m1=1  m2=1  m3=1", "        m4=1  m5=1  m6=1  m7=1",
                                                     "        m8=1  m9=1"]
    assert fit("step 1  ", items, None, wrap=False) == ["step 1  " + "  ".join(items)]
    assert fit("step 1  ", ["a_very_long_metric_name=1.5"], 20, wrap=False) == ["step 1  a_very_lo..."]
    assert fit("s  ", ["x" * 30, "y=1"], 20, wrap=False) == ["s  xxxxx...  +1 more"]
    assert cols("損失=1") == 6 and clip("損失損失", 5) == "損..."
    assert MetricFilter(["train/*"])("train/loss") and not MetricFilter(["train/*"])("eval/loss")
    assert MetricFilter()("anything") and not MetricFilter()

"""The Rollouts panel on agentic runs, offscreen: a real agent's journal of tool-calling trajectories
in a real LocalStore; the transcript (folds clicked open), the step's groups, its reward histogram and
a prompt's history, for one run and for two paired by prompt."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
from support.rollouts import FORECAST, GROUP, QUESTIONS, agentic_rows, prompt, sync, trajectory

from pilothouse.gui._qt.rollouts import RolloutsPanel
from pilothouse.gui._qt.theme import qcolor
from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.step_groups import NO_SIGNAL

pytest_plugins = ["support.rollouts"]  # panel


def log_run(url: str, name: str, steps: tuple[int, ...], flip: bool = False, last: list | None = None) -> str:
    """A trainer logging GROUP tool-calling samples of each question per step; ``flip`` turns the
    rewards around (the last question's group stays all equal); ``last``: rows of one more step
    after them.  Returns the run's id."""
    import pilothouse as ph

    run = ph.init(project="agents", name=name, agent=url)
    for step in steps:
        rows = agentic_rows(step)
        if flip:
            for row in rows[:2 * GROUP]:
                row["reward"] = 1.0 - row["reward"]
        run.log_rollouts(step, rows)
    if last:
        run.log_rollouts(steps[-1] + 10, last)
    assert run.finish()
    return run.id


def click_link(qtbot, panel: RolloutsPanel, words: str) -> None:
    """A real click on the transcript's link that says ``words``."""
    view = panel.detail
    found = view.document().find(words)
    assert not found.isNull(), f"no {words!r} in the transcript"
    view.setTextCursor(found)
    view.ensureCursorVisible()
    qtbot.mouseClick(view.viewport(), Qt.LeftButton, pos=view.cursorRect(found).center())


def test_one_agentic_run_transcript_groups_histogram_and_history(panel, qtbot, agent_proc, tmp_path):
    run = log_run(agent_proc.url, "agent", (0, 10, 20))
    store = LocalStore(tmp_path / "app.sqlite")
    sync(store, agent_proc.url)
    panel.show_runs([(agent_proc.url, run)], store)
    assert panel.current_step() == 20
    assert panel.model.cells(1)[1:] == [QUESTIONS[0],
                                        "3 turns · 2 tool calls · final: Answer 1 at step 20: mild, around 15°C.", "0.3333"]

    assert panel.histogram.bars.counts == [[2, 2, 2, 6]]  # rewards 0, 1/3, 2/3 twice each; 1 six times
    assert list(panel.histogram.items[0].opts["height"]) == [2, 2, 2, 6]
    groups = [panel.groups.tree.topLevelItem(i) for i in range(panel.groups.tree.topLevelItemCount())]
    assert [g.text(0) for g in groups] == [f"{GROUP} rows · mean 0.5 · std 0.373 — {q}" for q in QUESTIONS[:2]] + [
        f"⊘ {NO_SIGNAL} · {GROUP} rows · mean 1 · std 0 — {QUESTIONS[2]}"]  # the group with no signal, marked
    assert [g.foreground(0).color() == qcolor("alert_text") for g in groups] == [False, False, True]
    assert panel.groups.title.text() == "step 20: 3 groups, 1 with no signal"
    panel.groups.order.setCurrentIndex(panel.groups.order.findData("desc"))
    first = panel.groups.tree.topLevelItem(0)
    assert [first.child(i).text(0) for i in range(GROUP)] == ["row 3", "row 2", "row 1", "row 0"]
    assert [float(first.child(i).text(2)) for i in range(GROUP)] == sorted(
        (float(first.child(i).text(2)) for i in range(GROUP)), reverse=True)

    panel.table.selectRow(1)
    shown = panel.detail.toPlainText()
    for said in ("PROMPT", "system", "user", QUESTIONS[0], "assistant → get_weather (call_20_1_a)",
                 '"city": "Paris"', "tool · get_weather · call_20_1_a", "assistant → lookup_units (call_20_1_b)",
                 '"unit": "celsius"', "Let me check the units.", "Answer 1 at step 20"):
        assert said in shown, said
    assert '{\n  "city": "Paris",\n  "day": "tomorrow"\n}' in shown  # arguments as indented JSON
    assert panel.detail.folded() == [True] and FORECAST.splitlines()[-1] not in shown  # the long result
    click_link(qtbot, panel, "show all")
    assert panel.detail.folded() == [False] and FORECAST in panel.detail.toPlainText()
    click_link(qtbot, panel, "fold")
    assert panel.detail.folded() == [True]
    marked = panel.groups.tree.currentItem()
    assert marked is not None and marked.text(0) == "row 1" and marked.parent() is panel.groups.tree.topLevelItem(0)

    history = panel.history.lines()  # the selected prompt at every step, newest first
    assert [step for step, _ in history] == [20] * GROUP + [10] * GROUP + [0] * GROUP
    assert all(a["prompt"] == history[0][1][0]["prompt"] and b is None for _, (a, b) in history)
    assert "at 3 steps, newest first" in panel.history.title.text()
    panel.history.table.selectRow(GROUP + 2)
    assert "step 10" in panel.detail.toPlainText() and "Answer 2 at step 10" in panel.detail.toPlainText()

    herbert = panel.groups.tree.topLevelItem(2).child(0)
    panel.groups.tree.setCurrentItem(herbert)  # a group's row clicked: read in full
    assert "Frank Herbert (sample 0 at step 20)" in panel.detail.toPlainText()
    store.close()


def test_two_agentic_runs_histogram_groups_and_history_paired_by_prompt(panel, agent_proc, tmp_path):
    a = log_run(agent_proc.url, "base", (0, 10, 20))
    whole = [{"messages": prompt(QUESTIONS[2]) + trajectory(QUESTIONS[2], 0, 30), "reward": 1.0}]
    b = log_run(agent_proc.url, "tuned", (0, 20), flip=True, last=whole)  # and a step of one whole trajectory
    store = LocalStore(tmp_path / "app.sqlite")
    sync(store, agent_proc.url)
    keys = [(agent_proc.url, a), (agent_proc.url, b)]
    panel.show_runs(keys, store, {keys[0]: 0, keys[1]: 1})
    assert panel.current_step() == 30 and panel.histogram.bars.counts == [[0], [1]]  # base has no step 30
    panel.set_step(20)
    assert panel.histogram.bars.counts == [[2, 2, 2, 6], [2, 2, 2, 6]]  # flipped: the same spread
    assert len(panel.histogram.items) == 2
    tops = [panel.groups.tree.topLevelItem(i).text(0) for i in range(panel.groups.tree.topLevelItemCount())]
    assert [(t.split(" · ")[0], t.split(" — ")[1]) for t in tops] == [(r, q) for r in ("base", "tuned") for q in QUESTIONS]
    assert panel.groups.title.text() == "step 20: 6 groups, 2 with no signal"

    panel.table.selectRow(3)  # base's row 3 (reward 1) beside tuned's row 3 (reward 0)
    assert panel.model.cells(3)[3:] == ["1", "3 turns · 2 tool calls · final: Answer 3 at step 20: mild, around 15°C.", "0"]
    shown = panel.detail.toPlainText()
    assert "COMPLETION · base   reward=1.0" in shown and "COMPLETION · tuned   reward=0.0" in shown
    assert panel.detail.folded() == [True, True]  # each run's forecast
    history = panel.history.lines()
    assert [(s, x is not None, y is not None) for s, (x, y) in history] == (
        [(20, True, True)] * GROUP + [(10, True, False)] * GROUP + [(0, True, True)] * GROUP)
    assert all(x["completion"] == y["completion"] and x["reward"] + y["reward"] == pytest.approx(1.0)
               for _, (x, y) in history if y is not None)

    panel.search.setText("Dune")  # searching: the groups and bars follow the selected line's step
    assert panel.groups.tree.topLevelItemCount() == 0 and panel.histogram.bars.counts == [[], []]
    panel.table.selectRow(panel.model.rowCount() - 1)
    assert panel.model.lines[-1][0] == 0 and panel.groups.title.text() == "step 0: 6 groups, 2 with no signal"
    assert "Frank Herbert" in panel.detail.toPlainText()

    panel.search.setText("")
    panel.set_step(30)  # a row that logs its trajectory as ``messages``, no prompt or completion
    assert panel.model.cells(0)[1:] == [QUESTIONS[2], "", "", "1 turn · 0 tool calls · final: Frank Herbert (sample 0 at step 30)", "1"]
    panel.table.selectRow(0)
    assert "TRAJECTORY · tuned" in panel.detail.toPlainText()
    assert panel.history.lines() == [] and panel.history.title.text() == "this row logs no prompt: no history to follow"
    store.close()

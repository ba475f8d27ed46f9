"""The Rollouts panel keeps what is being read while a tool-calling trainer logs live steps: the
selected line (or search result) stays selected, and "follow latest" only moves the step shown
until the user picks a line.  A real agent, a real LocalStore, the panel offscreen."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from support.rollouts import QUESTIONS, agentic_rows, prompt, sync

from pilothouse.gui.local_store import LocalStore

pytest_plugins = ["support.rollouts"]  # panel


def selected(panel) -> tuple | None:
    rows = panel.table.selectionModel().selectedRows()
    return panel.model.lines[rows[0].row()] if rows else None


def test_live_steps_keep_the_selected_line_and_follow_latest_until_a_pick(panel, agent_proc, tmp_path):
    import pilothouse as ph

    run = ph.init(project="rl", name="agentic", agent=agent_proc.url)
    for step in (0, 1):
        run.log_rollouts(step, agentic_rows(step))
    assert run.flush()
    store = LocalStore(tmp_path / "app.sqlite")
    sync(store, agent_proc.url)
    panel.show_runs([(agent_proc.url, run.id)], store)
    assert panel.follow.isChecked() and panel.current_step() == 1

    def live(step: int, rows: list[dict]) -> None:
        cursor = store.cursor(agent_proc.url)
        run.log_rollouts(step, rows)
        assert run.flush()
        panel.add_entries(agent_proc.url, sync(store, agent_proc.url, after=cursor))

    live(2, agentic_rows(2))  # following, nothing picked: the new step is shown
    assert panel.current_step() == 2 and {s for s, _ in panel.model.lines} == {2}

    panel.order.setCurrentIndex(panel.order.findData("desc"))
    panel.table.selectRow(8)  # picking a line stops following
    assert not panel.follow.isChecked()
    reading, detail = selected(panel), panel.detail.toPlainText()
    assert reading[0] == 2 and "Answer" in detail and "step 2" in detail

    live(3, agentic_rows(3))  # a new step only grows the slider
    assert panel.steps() == [0, 1, 2, 3] and panel.slider.maximum() == 3
    assert panel.current_step() == 2 and selected(panel) == reading and panel.detail.toPlainText() == detail

    better = [{"prompt": prompt(QUESTIONS[0]), "completion": "late and right", "reward": 5.0}]
    live(2, better)  # rows for the shown step: the table is rebuilt, the better row sorts first ...
    assert panel.model.cells(0)[2] == "late and right" and panel.current_step() == 2
    assert selected(panel) == reading and panel.table.selectionModel().selectedRows()[0].row() == 9  # ... moved
    assert panel.detail.toPlainText() == detail

    panel.search.setText("Frank Herbert")  # a search result stays selected as newer matches arrive
    panel.table.selectRow(0)
    hit = selected(panel)
    assert hit[0] == 3
    live(4, agentic_rows(4))
    assert panel.model.lines[0][0] == 4 and selected(panel) == hit
    assert panel.current_step() == 2  # still not following

    panel.search.setText("")
    panel.follow.setChecked(True)  # following again: the latest step at once, then each new one
    assert panel.current_step() == 4
    live(5, agentic_rows(5))
    assert panel.current_step() == 5 and panel.follow.isChecked()

    panel.set_step(1)  # moving back to an older step stops following too
    assert not panel.follow.isChecked()
    live(6, agentic_rows(6))
    assert panel.current_step() == 1
    assert run.finish()
    store.close()

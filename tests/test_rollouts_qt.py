"""The Rollouts panel offscreen, fed like the app: a real agent's journal in a real LocalStore."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
from support.rollouts import sync

from pilothouse.gui._qt.rollouts import SEARCH_PAGE, RolloutsPanel
from pilothouse.gui._qt.rollouts_model import CELL_CHARS
from pilothouse.gui.local_store import LocalStore
from pilothouse.wire.entries import KIND_ROLLOUTS, Entry
from pilothouse.wire.rollouts import pack_batch

pytest_plugins = ["support.rollouts"]  # panel
PROMPTS = ("What is 2+2?", "Name a colour", "Capital of France")
LONG = "because " * 100  # longer than a table cell


def log_run(url: str, name: str, steps: range, answer: str):
    """A trainer that logs three rollouts per step; returns the still open run."""
    import pilothouse as ph

    run = ph.init(project="rl", name=name, agent=url)
    for step in steps:
        run.log_rollouts(step, [{"prompt": p, "completion": f"{answer} {i} at {step} {LONG}", "reward": i / 2}
                                for i, p in enumerate(PROMPTS)])
    return run


def completions(panel: RolloutsPanel, column: int = 2) -> list[str]:
    return [panel.model.cells(i)[column] for i in range(panel.model.rowCount())]


def test_steps_search_filter_sort_and_live_rollouts(panel, agent_proc, tmp_path):
    run = log_run(agent_proc.url, "solo", range(0, 50, 10), "ans")
    assert run.flush()
    store = LocalStore(tmp_path / "app.sqlite")
    history = sync(store, agent_proc.url)
    assert len([e for e in history if e.kind == KIND_ROLLOUTS]) == 5
    panel.show_runs([(agent_proc.url, run.id)], store)
    assert panel.steps() == [0, 10, 20, 30, 40] and panel.current_step() == 40  # opens on the latest
    assert panel.step_info.text() == "3 rows, mean reward 0.5"  # from the store's step list

    panel.set_step(20)
    assert [c.split(" ")[3] for c in completions(panel)] == ["20"] * 3  # that step's rows
    panel.step_box.setValue(25)  # no rollouts at 25: the step at or below it
    assert panel.current_step() == 20 and panel.step_box.value() == 20
    cell = completions(panel)[0]
    assert len(cell) == CELL_CHARS and cell.endswith("…")  # elided in the table ...
    panel.table.selectRow(0)
    assert LONG.strip() in panel.detail.toPlainText()  # ... in full below

    panel.search.setText("COLOUR")  # searches every step, newest first
    assert [panel.model.lines[i][0] for i in range(panel.model.rowCount())] == [40, 30, 20, 10, 0]
    assert not panel.slider.isEnabled()
    panel.search.setText("")
    panel.reward_min.setText("0.5")
    assert [panel.model.cells(i)[3] for i in range(panel.model.rowCount())] == ["0.5", "1"]
    panel.reward_min.setText("")
    panel.order.setCurrentIndex(panel.order.findData("desc"))
    assert [panel.model.cells(i)[3] for i in range(panel.model.rowCount())] == ["1", "0.5", "0"]

    cursor = store.cursor(agent_proc.url)  # the floor show_runs took
    for step in (50, 60):
        run.log_rollouts(step, [{"prompt": "late", "completion": "new", "reward": 1.0}])
    assert run.finish()
    panel.table.selectRow(1)
    reading = panel.detail.toPlainText()
    panel.add_entries(agent_proc.url, history)  # entries the panel read from the store: ignored
    panel.add_entries(agent_proc.url, sync(store, agent_proc.url, after=cursor))
    assert panel.steps() == [0, 10, 20, 30, 40, 50, 60]
    assert panel.current_step() == 20  # the user is not at the latest step: no jump ...
    assert reading and panel.detail.toPlainText() == reading  # ... nor a lost selection
    panel.set_step(60)
    panel.order.setCurrentIndex(0)
    assert completions(panel) == ["new"]  # once, not twice
    store.close()


def test_two_runs_side_by_side_pair_by_prompt(panel, agent_proc, tmp_path):
    a = log_run(agent_proc.url, "base", range(3), "old")
    b = log_run(agent_proc.url, "tuned", range(3), "new")
    b.log_rollouts(2, [{"prompt": "only in b", "completion": "x", "reward": 0.0}])
    assert a.finish() and b.finish()
    store = LocalStore(tmp_path / "app.sqlite")
    sync(store, agent_proc.url)
    keys = [(agent_proc.url, a.id), (agent_proc.url, b.id)]
    panel.show_runs(keys, store, {keys[0]: 0, keys[1]: 1})

    assert panel.model.headers() == ["step", "prompt", "completion · base", "reward · base",
                                     "completion · tuned", "reward · tuned"]  # by name, not by id
    icons = [panel.model.headerData(c, Qt.Horizontal, Qt.DecorationRole) for c in range(6)]
    assert icons[:2] == [None, None] and all(i is not None and not i.isNull() for i in icons[2:])
    assert panel.current_step() == 2
    assert panel.step_info.text() == "base: 3 rows, mean reward 0.5 · tuned: 4 rows, mean reward 0.375"
    for i, prompt in enumerate(PROMPTS):
        cells = panel.model.cells(i)
        assert cells[1] == prompt
        assert cells[2].startswith(f"old {i} at 2") and cells[4].startswith(f"new {i} at 2")
    assert panel.model.cells(3)[1:] == ["only in b", "", "", "x", "0"]
    panel.search.setText("capital")
    assert [panel.model.lines[i][0] for i in range(panel.model.rowCount())] == [2, 1, 0]
    panel.table.selectRow(2)
    detail = panel.detail.toPlainText()
    assert "Capital of France" in detail and "old 2 at 0" in detail and "new 2 at 0" in detail
    assert "COMPLETION · base" in detail and "COMPLETION · tuned" in detail
    store.close()


def test_the_panel_reads_one_step_and_one_search_page_never_the_whole_run(panel, qtbot, tmp_path):
    url = "tcp://127.0.0.1:7001"
    store = LocalStore(tmp_path / "app.sqlite")
    entries = [Entry(step + 1, "big", KIND_ROLLOUTS, None, 0, 3, None, None, None,
                     pack_batch(step, 1.0, [{"prompt": f"q{i} of step {step}", "completion": f"answer {i}",
                                             "reward": float(i)} for i in range(3)])) for step in range(100)]
    store.write_page(url, entries, len(entries))
    while store.index_rollouts():
        pass
    read: list[str] = []
    store.db.conn.set_trace_callback(read.append)
    panel.show_runs([(url, "big")], store)
    bodies = [sql for sql in read if "SELECT body" in sql]
    assert panel.steps() == list(range(100)) and completions(panel) == ["answer 0", "answer 1", "answer 2"]
    assert len(bodies) == 1 and "step=99" in bodies[0].replace(" ", "")  # the step shown, nothing else

    read.clear()
    panel.search.setText("answer")  # 300 matches: the newest page, then the next on request
    assert panel.model.rowCount() == SEARCH_PAGE and panel.model.lines[0][0] == 99 and panel.more.isVisible()
    assert sum(sql.count("SELECT body") for sql in read) <= SEARCH_PAGE // 3 + 1  # the hit batches only
    qtbot.mouseClick(panel.more, Qt.LeftButton)
    assert panel.model.rowCount() == 300 and panel.model.lines[-1][0] == 0 and not panel.more.isVisible()
    panel.reward_min.setText("2")  # filters what is loaded, no new search
    assert panel.model.rowCount() == 100

    panel.search.setText('"unclosed')  # FTS5 syntax is not run: said in the box, nothing shown
    assert panel.model.rowCount() == 0 and "unclosed quote" in panel.search.toolTip()
    panel.search.setText("q1 OR q2")  # operators are words: no row holds "or"
    assert panel.model.rowCount() == 0
    panel.search.setText("")
    assert panel.search.toolTip() == "" and panel.current_step() == 99
    store.db.conn.set_trace_callback(None)
    store.close()

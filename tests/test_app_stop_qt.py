"""Stop asks first (it ends a run for good), naming the run; the other commands do not ask.

A real agent, a real trainer process and the real window; the real QMessageBox is answered by a timer.
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="pilothouse-qt-config-")  # QSettings stays in tests

import pytest  # noqa: E402

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from support.dialogs import answer_next_box  # noqa: E402
from support.processes import LOOP_UNTIL_STOPPED, finish, start_trainer  # noqa: E402

from pilothouse.client import Client  # noqa: E402


def _status(url: str, run_id: str) -> tuple[str, int | None]:
    with Client(url) as c:
        run = next(r for r in c.runs() if r["id"] == run_id)
    return run["status"], run["last_step"]


def test_stop_asks_naming_the_run_and_cancel_keeps_it_running(window, qtbot, tmp_path, agent_proc):
    trainer = start_trainer(tmp_path, LOOP_UNTIL_STOPPED, agent_proc.url, "ctl", "lr-sweep-7")
    run_id = trainer.stdout.readline().strip()
    w = window([agent_proc.url])
    try:
        qtbot.waitUntil(lambda: any(w.table_model.row_at(i).run_id == run_id
                                    for i in range(w.table_model.rowCount())), timeout=15000)
        w.table.selectRow(next(i for i in range(w.table_model.rowCount())
                               if w.table_model.row_at(i).run_id == run_id))

        seen: list[str] = []
        answer_next_box("Cancel", seen)
        w.actions["stop"].trigger()  # returns once the timer answered the modal box
        assert seen and "lr-sweep-7" in seen[0] and "for good" in seen[0]
        assert seen[1] == "default: Cancel"
        assert "nothing sent" in w.statusBar().currentMessage()
        _, step = _status(agent_proc.url, run_id)
        qtbot.wait(800)
        status, later = _status(agent_proc.url, run_id)
        assert status == "running" and later > step and trainer.poll() is None  # still training

        seen.clear()
        w.actions["pause"].trigger()  # no question for pause
        qtbot.waitUntil(lambda: "paused at step" in w.statusBar().currentMessage(), timeout=15000)
        assert not seen

        answer_next_box("Stop", seen)
        w.actions["stop"].trigger()
        assert seen and "lr-sweep-7" in seen[0]
        finish(trainer, timeout=30)  # the trainer saw the stop and ended
        qtbot.waitUntil(lambda: _status(agent_proc.url, run_id)[0] == "finished", timeout=15000)
    finally:
        if trainer.poll() is None:
            trainer.kill()
        w.close()

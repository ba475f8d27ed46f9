"""The app's Events pane shows the sentences `pilothouse events` prints, live; the run list's status
icons are drawn, not taken from a font (no missing-glyph box for "paused")."""

from __future__ import annotations

import getpass
import os
import socket
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="pilothouse-qt-config-")  # QSettings stays in tests

import pytest  # noqa: E402

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QItemSelectionModel, QSize  # noqa: E402
from PySide6.QtWidgets import QStyleOptionViewItem  # noqa: E402
from support.processes import LOOP_UNTIL_STOPPED, finish, run_cli, start_trainer  # noqa: E402

from pilothouse.client import Client  # noqa: E402
from pilothouse.gui._qt.runs_table import COLUMNS  # noqa: E402
from pilothouse.gui._qt.status_icons import SHAPES, SIZE, StatusDelegate, status_icon  # noqa: E402
from pilothouse.gui._qt.theme import status_color  # noqa: E402


def test_events_pane_shows_the_clis_sentences_and_the_paused_icon_is_drawn(window, qtbot, tmp_path, agent_proc):
    trainer = start_trainer(tmp_path, LOOP_UNTIL_STOPPED, agent_proc.url, "app", "evented")
    run_id = trainer.stdout.readline().strip()
    try:
        w = window([agent_proc.url])
        w.tabs.setCurrentWidget(w.events)  # live events are read while the pane is seen
        qtbot.waitUntil(lambda: any(w.table_model.row_at(i).run_id == run_id
                                    for i in range(w.table_model.rowCount())), timeout=15000)
        row = next(i for i in range(w.table_model.rowCount()) if w.table_model.row_at(i).run_id == run_id)
        w.table.selectRow(row)
        with Client(agent_proc.url, timeout=10) as c:
            step = c.command(run_id, "pause", wait=10, who={"client": "gui"})["step"]
            me = f"{getpass.getuser()}@{socket.gethostname()}"
            qtbot.waitUntil(lambda: f"paused at step {step} by {me} (gui)" in w.events.toPlainText(), timeout=10000)
            text = w.events.toPlainText()
            assert f"pause requested by {me} (gui)" in text and "status: running on" in text
            assert "{'" not in text and "who=" not in text  # sentences, not dicts
            cli = run_cli("events", run_id, "--agent", agent_proc.url).stdout.splitlines()
            assert text.splitlines() == cli[:len(text.splitlines())]  # the very lines of `pilothouse events`

            qtbot.waitUntil(lambda: w.table_model.row_at(row).status == "paused", timeout=10000)
            status = w.table_model.index(row, COLUMNS.index("status"))
            delegate = w.table.itemDelegateForColumn(COLUMNS.index("status"))
            assert isinstance(delegate, StatusDelegate)
            option = QStyleOptionViewItem()
            delegate.initStyleOption(option, status)
            assert option.text == "paused" and not option.icon.isNull()  # the word; the icon says the rest
            w.table.grab().save(str(tmp_path / "runs.png"))  # to look at when this fails
            c.command(run_id, "stop", wait=10)
        finish(trainer)
    finally:
        if trainer.poll() is None:
            trainer.kill()


def test_events_of_several_selected_runs_are_merged_in_time_order_and_named(window, qtbot, tmp_path, agent_proc):
    trainers = [start_trainer(tmp_path, LOOP_UNTIL_STOPPED, agent_proc.url, "app", "twin", name=f"t{i}")
                for i in range(2)]
    try:
        ids = [t.stdout.readline().strip() for t in trainers]
        w = window([agent_proc.url])
        w.tabs.setCurrentWidget(w.events)  # live events are read while the pane is seen
        rows = lambda: {w.table_model.row_at(i).run_id: i for i in range(w.table_model.rowCount())}  # noqa: E731
        qtbot.waitUntil(lambda: set(ids) <= set(rows()), timeout=15000)
        flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
        for run_id in ids:
            w.table.selectionModel().select(w.table_model.index(rows()[run_id], 0), flags)
        labels = [f"twin ({run_id}): " for run_id in ids]  # one name twice: the ids tell them apart
        qtbot.waitUntil(lambda: all(label in w.events.toPlainText() for label in labels), timeout=10000)
        with Client(agent_proc.url, timeout=10) as c:
            step = c.command(ids[1], "pause", wait=10)["step"]
            qtbot.waitUntil(lambda: f"paused at step {step}" in w.events.toPlainText(), timeout=10000)  # live
            lines = w.events.toPlainText().splitlines()
            assert all(any(line.startswith(label) for label in labels) for line in lines)
            paused = next(line for line in lines if f"paused at step {step}" in line)
            assert paused.startswith(labels[1])
            stamps = [line.split(": ", 1)[1][:19] for line in lines]
            assert stamps == sorted(stamps)  # one journal, oldest first
            assert {line.split(": ", 1)[0] for line in lines} == {label[:-2] for label in labels}

            w.table.selectRow(rows()[ids[0]])  # one run again: the plain lines of `pilothouse events`
            qtbot.waitUntil(lambda: not w.events.toPlainText().startswith("twin"), timeout=5000)
            assert "paused at step" not in w.events.toPlainText()
            for run_id in ids:
                c.command(run_id, "stop", wait=10)
        for t in trainers:
            finish(t)
    finally:
        for t in trainers:
            if t.poll() is None:
                t.kill()


def test_status_icons_are_drawn_in_the_status_color_and_differ(qtbot):
    images = {}
    for status in (*SHAPES, "unknown"):
        color = status_color(status)
        image = status_icon(status, color).pixmap(QSize(SIZE, SIZE), 3.0).toImage()  # as on a HiDPI screen
        assert image.width() == 3 * SIZE, status
        pixels = [image.pixelColor(x, y) for x in range(image.width()) for y in range(image.height())]
        painted = [p for p in pixels if p.alpha() == 255]
        assert len(painted) > 40, status  # something is drawn, whatever fonts the machine has
        assert all(abs(p.red() - color.red()) < 8 and abs(p.blue() - color.blue()) < 8 for p in painted), status
        images[status] = image
    assert len({bytes(i.constBits()) for i in images.values()}) == len(images)  # a shape each

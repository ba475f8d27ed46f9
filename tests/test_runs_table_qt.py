"""The runs table in the real window, offscreen: config and summary columns, header clicks that sort
(and keep the selection), the header menu that adds columns (remembered), status colors per theme."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="pilothouse-qt-config-")  # QSettings stays in tests

import pytest  # noqa: E402

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, Qt  # noqa: E402
from PySide6.QtGui import QColor  # noqa: E402

from pilothouse.gui._qt.runs_table import COLUMNS, load_columns, save_columns  # noqa: E402
from pilothouse.gui._qt.status_icons import StatusDelegate  # noqa: E402
from pilothouse.gui.local_store import LocalStore  # noqa: E402
from pilothouse.gui.run_columns import SUMMARY, Column  # noqa: E402
from pilothouse.gui.themes import DARK, LIGHT, status_role  # noqa: E402

A = "tcp://127.0.0.1:1"  # never answers: the store alone feeds the window
N = len(COLUMNS)


@pytest.fixture
def table(window, tmp_path):
    """A window over three stored runs whose lr and seed differ (and whose model does not)."""
    store = LocalStore(tmp_path / "app-store.sqlite")
    store.put_runs(A, [{"id": i, "project": "p", "name": i, "status": status, "created": c, "key": "reward",
                        "config": {"opt": {"lr": lr}, "seed": seed, "model": "qwen"}, "summary": {"reward": reward}}
                       for i, status, c, lr, seed, reward in (("a", "finished", 1.0, 3e-4, 1, 0.5),
                                                               ("b", "crashed", 2.0, 1e-3, 2, 0.25),
                                                               ("c", "running", 3.0, 1.23456e-5, 1, 0.75))])
    store.close()
    w = window()
    w._redraw()
    yield w
    save_columns(None)  # back to the default columns: the next window must not inherit a choice


def column(w, section: int) -> list[str]:
    return [w.table_model.data(w.table_model.index(i, section)) for i in range(w.table_model.rowCount())]


def click_header(qtbot, w, section: int) -> None:
    header = w.table.horizontalHeader()
    x = header.sectionViewportPosition(section) + header.sectionSize(section) // 2
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(x, header.height() // 2))
    w._redraw()  # what the 30 ms timer would do


def test_differing_config_keys_are_columns_that_sort_on_a_click(table, qtbot):
    w, model, header = table, table.table_model, table.table.horizontalHeader()
    assert [model.headerData(s, Qt.Orientation.Horizontal) for s in range(N, model.columnCount())] == ["opt.lr", "seed"]
    assert "config" in model.headerData(N, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)
    assert isinstance(w.table.itemDelegateForColumn(COLUMNS.index("status")), StatusDelegate)
    assert column(w, N) == ["0.001", "1.235e-05", "0.0003"]  # crashed b first, then the newest
    w.table.selectRow(1)
    assert [k[1] for k in w.runs.selected()] == ["c"]

    click_header(qtbot, w, N)
    assert column(w, N) == ["1.235e-05", "0.0003", "0.001"]
    assert (header.sortIndicatorSection(), header.sortIndicatorOrder()) == (N, Qt.SortOrder.AscendingOrder)
    rows = w.table.selectionModel().selectedRows()
    assert [model.row_at(i.row()).run_id for i in rows] == ["c"]  # the selection follows the run, not the row
    click_header(qtbot, w, N)
    assert column(w, N) == ["0.001", "0.0003", "1.235e-05"]
    assert header.sortIndicatorOrder() == Qt.SortOrder.DescendingOrder
    click_header(qtbot, w, N)
    assert column(w, N) == ["0.001", "1.235e-05", "0.0003"] and header.sortIndicatorSection() == -1
    click_header(qtbot, w, COLUMNS.index("run"))
    assert [model.row_at(i).run_id for i in range(3)] == ["a", "b", "c"]
    assert [k[1] for k in w.runs.selected()] == ["c"]


def test_the_header_menu_adds_a_last_value_column_and_it_is_remembered(table, window):
    w, model = table, table.table_model
    menu = w.table_header.menu()
    config, summary = (m.menu() for m in menu.actions()[:2])
    assert [(a.text(), a.isChecked()) for a in config.actions()] == [("model", False), ("opt.lr", True),
                                                                     ("seed", True)]
    reward = next(a for a in summary.actions() if a.text() == "reward")
    reward.trigger()
    w._redraw()
    assert model.headerData(N + 2, Qt.Orientation.Horizontal) == "reward"
    assert model.headerData(N + 2, Qt.Orientation.Horizontal, Qt.ItemDataRole.FontRole).italic()  # not a config key
    assert column(w, N + 2) == ["0.25", "0.75", "0.5"]
    assert load_columns()[-1] == Column(SUMMARY, "reward")
    again = window()
    again._redraw()
    assert again.table_model.headerData(N + 2, Qt.Orientation.Horizontal) == "reward"  # after a restart too

    default = w.table_header.menu().actions()[-1]
    assert not default.isChecked()
    default.trigger()
    w._redraw()
    assert model.columnCount() == N + 2 and load_columns() is None


def test_status_colors_come_from_the_theme(table):
    w, model = table, table.table_model
    status = COLUMNS.index("status")
    for theme in (LIGHT, DARK):
        w.dark.setChecked(theme is DARK)
        for i in range(model.rowCount()):
            color = model.data(model.index(i, status), Qt.ItemDataRole.ForegroundRole)
            assert color == QColor(getattr(theme, status_role(model.row_at(i).status))), theme.name


def test_a_run_list_that_changes_values_repaints_cells_and_a_new_run_resets_the_table(table):
    """An agent's list each second: new values repaint their cells (no reset: the selection and the
    scroll stay, nothing re-measured per list); an unchanged list does nothing; a new run resets."""
    w = table
    resets, repaints = [], []
    w.table_model.modelReset.connect(lambda: resets.append(1))
    w.table_model.dataChanged.connect(lambda *a: repaints.append(1))
    w.table.selectRow([r.run_id for r in w.table_model._rows].index("b"))
    resets.clear()
    repaints.clear()  # the selection's color swatch
    listed = [dict(r, summary={"reward": 0.5 if r["id"] != "c" else 0.875}) for r in w.store.runs()]
    w._on_batch(A, [], listed)
    w._redraw()
    assert (len(resets), len(repaints)) == (0, 1)
    assert "reward 0.875" in column(w, COLUMNS.index("key metric"))
    assert w.runs.selected() == [(A, "b")] and len(w.table.selectionModel().selectedRows()) == 1
    w._on_batch(A, [], listed)  # the same list again: no redraw of the table at all
    w._redraw()
    assert (len(resets), len(repaints)) == (0, 1)
    w._on_batch(A, [], [*listed, {**listed[0], "id": "d", "name": "d", "created": 4.0}])
    w._redraw()
    assert len(resets) == 1 and "p/d" in column(w, COLUMNS.index("run"))
    assert w.runs.selected() == [(A, "b")] and len(w.table.selectionModel().selectedRows()) == 1


def test_a_watched_run_says_so_and_its_controls_say_how_to_steer(window, tmp_path):
    store = LocalStore(tmp_path / "app-store.sqlite")
    store.put_runs(A, [{"id": "tb1", "project": "p", "name": "logs/a", "kind": "watched", "status": "running",
                        "created": 1.0}, {"id": "t1", "project": "p", "name": "b", "status": "running", "created": 2.0}])
    store.close()
    w = window()
    w._redraw()
    names = column(w, COLUMNS.index("run"))
    assert names == ["p/logs/a (watched)", "p/b"] or names == ["p/b", "p/logs/a (watched)"]
    row = names.index("p/logs/a (watched)")
    w.table.selectRow(row)
    assert not w.actions["pause"].isEnabled() and "PilothouseCallback" in w.actions["pause"].toolTip()
    tip = w.table_model.data(w.table_model.index(row, COLUMNS.index("run")), Qt.ItemDataRole.ToolTipRole)
    assert "cannot be steered" in tip
    w.table.selectRow(1 - row)
    assert w.actions["pause"].isEnabled()

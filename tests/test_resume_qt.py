"""One curve across restarts in the real app, offscreen, on real agents and trainer processes: a run
resumed on another node is one row and one set of curves; a resume from an older checkpoint draws the
steps it logged again once, its superseded points faint, and each resume is a marker on the charts."""

from __future__ import annotations

import csv
import os
import socket
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="pilothouse-qt-config-")  # QSettings stays in tests

import pytest  # noqa: E402

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from support.processes import AgentProcess, finish, start_trainer  # noqa: E402
from support.sockets import free_port  # noqa: E402

from pilothouse.gui._qt.export import export_run_csv  # noqa: E402
from pilothouse.gui.charts_model import OLD  # noqa: E402

# ARGS: run id, first step, last step, then "crash" to raise once logged
TRAINER = """
run = ph.init(project="resume", name="moving", id=ARGS[0], agent=URL, heartbeat=0.2)
for step in range(int(ARGS[1]), int(ARGS[2]) + 1):
    run.log({"loss": 100.0 - step + 10 * (ARGS[3] == "crash"), "attempt": float(ARGS[3] == "crash")}, step=step)
    time.sleep(0.002)
if ARGS[3] == "crash":
    run.flush(10)
    raise RuntimeError("out of memory")
run.finish()
"""


def rows_of(w, run_id: str) -> list:
    rows = [w.table_model.row_at(i) for i in range(w.table_model.rowCount())]
    return [row for row in rows if row.run_id == run_id]


def select(w, run_id: str) -> None:
    w.table.selectRow(next(i for i in range(w.table_model.rowCount()) if w.table_model.row_at(i).run_id == run_id))
    w._on_select()


def curve_steps(w, metric: str, name: str) -> list[float]:
    chart = w.charts.charts.get(metric)
    return chart.curves[name].series.x.tolist() if chart is not None and name in chart.curves else []


def check_one_curve(w, run_id: str) -> None:
    """Steps 0..79 once each on the curve, attempt 1's steps 40..59 faint, the resume marked."""
    for metric in ("loss", "attempt"):
        assert curve_steps(w, metric, run_id) == [float(s) for s in range(80)]
        assert curve_steps(w, metric, run_id + OLD) == [float(s) for s in range(40, 60)]
    chart = w.charts.charts["attempt"]
    values = dict(zip(chart.curves[run_id].series.x.tolist(), chart.curves[run_id].series.y.tolist()))
    assert values[39.0] == 1.0 and values[40.0] == 0.0  # the later attempt wins from its first step
    assert chart.curves[run_id + OLD].faint and not chart.curves[run_id].faint
    marks = [(m.x, m.label) for m in chart._alert_marks if m.resume]
    assert marks == [(40.0, f"↻ resumed on {socket.gethostname()} (attempt 2, after crashed)")]
    assert [line.label.toPlainText() for line in chart.alert_lines] == [marks[0][1]]


def test_a_run_resumed_on_another_node_is_one_run_with_one_curve(window, qtbot, tmp_path, agent_proc):
    other = AgentProcess(tmp_path / "node-b", free_port(), ["--stale-after", "3"]).start()
    try:
        finish_crash = start_trainer(tmp_path, TRAINER, agent_proc.url, "moved1", "0", "59", "crash", name="a")
        finish_crash.wait(30)
        assert "out of memory" in finish_crash.stderr.read()
        finish(start_trainer(tmp_path, TRAINER, other.url, "moved1", "40", "79", "resume", name="b"))
        w = window([agent_proc.url])  # node A's run, charted, before the app knows of node B
        qtbot.waitUntil(lambda: [r.status for r in rows_of(w, "moved1")] == ["crashed"], timeout=15000)
        select(w, "moved1")
        qtbot.waitUntil(lambda: len(curve_steps(w, "loss", "moved1")) == 60, timeout=10000)
        w.links.add(other.url)
        qtbot.waitUntil(lambda: [(r.attempts, len(r.members)) for r in rows_of(w, "moved1")] == [(2, 2)],
                        timeout=15000)
        row, = rows_of(w, "moved1")
        assert (row.key, row.status, row.step) == ((agent_proc.url, "moved1"), "finished", 79)
        qtbot.waitUntil(lambda: len(curve_steps(w, "loss", "moved1")) == 80, timeout=10000)  # joined live
        check_one_curve(w, "moved1")
        export_run_csv(w.store, *row.key, tmp_path / "moved.csv")
        with open(tmp_path / "moved.csv", newline="") as f:
            rows = [(r["metric"], int(r["step"]), r["attempt"], r["superseded"]) for r in csv.DictReader(f)]
        assert len(rows) == 2 * 100  # both attempts' points of both metrics: nothing lost
        assert sorted(r[1:] for r in rows if r[0] == "loss") == sorted(
            [(s, "1", "1" if s >= 40 else "0") for s in range(60)] + [(s, "2", "0") for s in range(40, 80)])
        assert w.remove_from_app([row.key], ask=lambda title, text: "2 runs" in text)  # both nodes' copies
        qtbot.waitUntil(lambda: w.store.removed() == set(row.members), timeout=10000)
        assert rows_of(w, "moved1") == [] and [r for r in w.store.runs() if r["id"] == "moved1"] == []
    finally:
        other.stop()


def test_a_resume_on_the_same_node_while_the_app_watches_redraws_live(window, qtbot, tmp_path, agent_proc):
    w = window([agent_proc.url])
    crash = start_trainer(tmp_path, TRAINER, agent_proc.url, "again2", "0", "59", "crash", name="a")
    qtbot.waitUntil(lambda: [r.status for r in rows_of(w, "again2")] == ["crashed"], timeout=20000)
    crash.wait(10)
    select(w, "again2")
    qtbot.waitUntil(lambda: len(curve_steps(w, "loss", "again2")) == 60, timeout=10000)
    finish(start_trainer(tmp_path, TRAINER, agent_proc.url, "again2", "40", "79", "resume", name="b"))
    qtbot.waitUntil(lambda: len(curve_steps(w, "loss", "again2")) == 80, timeout=15000)
    check_one_curve(w, "again2")
    qtbot.waitUntil(lambda: rows_of(w, "again2")[0].attempts == 2, timeout=5000)

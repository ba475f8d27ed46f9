"""`pilothouse gui` without --agent follows the user's running local agents (issue 34 item 5).

Real agents (each records itself in the test's own runtime dir), real trainers, the real window, and
the real `python -m pilothouse.gui` process: agents started while the app runs are followed, one
that stops is let go (its runs stay), none is remembered as a dead agent for the next start, runs
of one name on two agents are told apart in the table, and an explicit --agent is followed alone.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="pilothouse-qt-config-")  # QSettings stays in tests

import pytest  # noqa: E402

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication, QInputDialog  # noqa: E402
from support.paths import ROOT  # noqa: E402
from support.processes import LOOP_UNTIL_STOPPED, AgentProcess, start_trainer  # noqa: E402
from support.sockets import free_port  # noqa: E402
from support.waiting import wait_until  # noqa: E402

from pilothouse.gui._qt.runs_table import COLUMNS  # noqa: E402
from pilothouse.gui.models import RunRow, distinct_titles  # noqa: E402

RUN = COLUMNS.index("run")


def names(w) -> dict[tuple[str, str], str]:
    """The run column's text of each listed run."""
    m = w.table_model
    return {m.row_at(i).key: m.data(m.index(i, RUN)) for i in range(m.rowCount())}


def answer_next_choice(text: str, poll_ms: int = 20, tries: int = 500) -> None:
    """Pick ``text`` in the next modal QInputDialog (Agents → Remove agent…) and accept it."""
    def poll(left: int) -> None:
        box = QApplication.activeModalWidget()
        if isinstance(box, QInputDialog) and box.isVisible():
            assert text in box.comboBoxItems(), box.comboBoxItems()
            box.setTextValue(text)
            box.accept()
        elif left:
            QTimer.singleShot(poll_ms, lambda: poll(left - 1))

    QTimer.singleShot(poll_ms, lambda: poll(tries))


def test_the_app_follows_the_users_agents_those_started_later_too_and_tells_same_names_apart(
        window, qtbot, tmp_path):
    a = AgentProcess(tmp_path / "a", free_port()).start()
    b = AgentProcess(tmp_path / "b", free_port())
    trainers = [start_trainer(tmp_path, LOOP_UNTIL_STOPPED, a.url, "sweep", "both", name="ta")]
    try:
        run_a = trainers[0].stdout.readline().strip()
        w = window()  # no agent given
        assert w.followed() == []
        w.follow_local_agents(every=0.3)
        qtbot.waitUntil(lambda: w.followed() == [a.url], timeout=10000)
        qtbot.waitUntil(lambda: (a.url, run_a) in names(w), timeout=15000)
        assert names(w)[(a.url, run_a)] == "sweep/both"  # one run of that name: its name alone
        assert w.store.agents() == []  # followed while it runs, not remembered for the next start

        b.start()  # an agent started while the app runs: picked up from its record
        trainers.append(start_trainer(tmp_path, LOOP_UNTIL_STOPPED, b.url, "sweep", "both", name="tb"))
        run_b = trainers[1].stdout.readline().strip()
        qtbot.waitUntil(lambda: set(w.followed()) == {a.url, b.url}, timeout=10000)
        qtbot.waitUntil(lambda: (b.url, run_b) in names(w), timeout=15000)
        port_a, port_b = a.url.rsplit(":", 1)[1], b.url.rsplit(":", 1)[1]
        w._redraw()
        assert names(w) == {(a.url, run_a): f"sweep/both @ :{port_a}", (b.url, run_b): f"sweep/both @ :{port_b}"}
        qtbot.waitUntil(lambda: b.url in w.status_label.text(), timeout=10000)
        w.filter.setText(b.url)  # a filter finds the runs of one agent, too
        w._redraw()
        assert list(names(w)) == [(b.url, run_b)]
        w.filter.clear()

        for t in trainers[1:]:
            t.kill()
            t.wait()
        b.stop()  # a clean stop removes its record: the app lets it go, its runs stay browsable
        qtbot.waitUntil(lambda: w.followed() == [a.url], timeout=10000)
        qtbot.waitUntil(lambda: b.url not in w.status_label.text(), timeout=5000)
        w._redraw()
        assert (b.url, run_b) in names(w)

        answer_next_choice(a.url)  # removed by hand while it runs: its record does not bring it back
        w._forget_agent()
        assert w.followed() == []
        qtbot.wait(1000)  # three reads of the records
        assert w.followed() == [] and w.store.agents() == []
    finally:
        for t in trainers:
            if t.poll() is None:
                t.kill()
                t.wait()
        a.stop()
        b.stop()


def test_an_agent_added_by_hand_is_remembered_and_kept_when_its_record_goes(window, qtbot, tmp_path):
    a = AgentProcess(tmp_path / "a", free_port()).start()
    try:
        w = window()
        w.follow_local_agents(every=0.3)
        qtbot.waitUntil(lambda: w.followed() == [a.url], timeout=10000)
        w.follow(a.url)  # as Agents → Add agent… does: the user wants it on every start
        assert [x["url"] for x in w.store.agents()] == [a.url]
        a.stop()
        qtbot.wait(1000)
        assert w.followed() == [a.url]  # the user's choice, not the record's: followed while it is away
    finally:
        a.stop()


def _gui(store, *args: str) -> subprocess.Popen:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(store.parent / "config"),
           "PYTHONFAULTHANDLER": "1"}
    env.pop("PILOTHOUSE_AGENT", None)
    with open(store.parent / "app.log", "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "pilothouse.gui", "--store", str(store), *args], cwd=ROOT,
                                env=env, stdout=log, stderr=subprocess.STDOUT)


def _said(store) -> str:
    return (store.parent / "app.log").read_text(errors="replace")[-2000:]


def _stored(store, table: str = "runs") -> set:
    """What the app process wrote: its runs by (agent, id), or its remembered agents.  Read from a copy
    of the store and its WAL: SQLite in a second process on the live file could take the app's shared
    memory for its own (a store is one app's) and truncate it under the app."""
    copy = store.parent / "copy"
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir()
    for suffix in ("", "-wal"):
        if (store.parent / (store.name + suffix)).exists():
            shutil.copyfile(store.parent / (store.name + suffix), copy / (store.name + suffix))
    db = sqlite3.connect(copy / store.name, timeout=5)
    try:
        if table == "agents":
            return {url for (url,) in db.execute("SELECT url FROM agents WHERE remembered=1")}
        return set(db.execute("SELECT agent, id FROM runs"))
    except sqlite3.DatabaseError:  # not made yet, or copied in the middle of a write
        return set()
    finally:
        db.close()


def test_pilothouse_gui_follows_local_agents_without_agent_and_only_the_given_one_with_it(tmp_path):
    a = AgentProcess(tmp_path / "a", free_port()).start()
    b = AgentProcess(tmp_path / "b", free_port()).start()
    trainers = [start_trainer(tmp_path, LOOP_UNTIL_STOPPED, url, "p", name, name=name)
                for url, name in ((a.url, "on-a"), (b.url, "on-b"))]
    apps = []
    try:
        run_a, run_b = (t.stdout.readline().strip() for t in trainers)
        plain = tmp_path / "plain" / "store.sqlite"
        plain.parent.mkdir()
        apps.append(_gui(plain))
        wait_until(lambda: {(a.url, run_a), (b.url, run_b)} <= _stored(plain), timeout=60,
                   what=f"the app without --agent to store both agents' runs: {apps[0].poll()} {_said(plain)}")
        assert _stored(plain, "agents") == set()  # nothing remembered: no dead agent on the next start

        given = tmp_path / "given" / "store.sqlite"
        given.parent.mkdir()
        apps.append(_gui(given, "--agent", b.url))
        wait_until(lambda: (b.url, run_b) in _stored(given), timeout=60,
                   what=f"the app with --agent to store b's run: {apps[1].poll()} {_said(given)}")
        time.sleep(2.0)  # the local agents would be read at the start, with the given one
        assert {agent for agent, _ in _stored(given)} == {b.url}
        assert _stored(given, "agents") == {b.url}
        assert [app.poll() for app in apps] == [None, None], (_said(plain), _said(given))
    finally:
        for p in [*apps, *trainers]:
            if p.poll() is None:
                p.kill()
                p.wait()
        a.stop()
        b.stop()


def test_titles_are_told_apart_by_agent_and_by_id_where_they_collide():
    a, b = "tcp://127.0.0.1:1", "tcp://127.0.0.1:45123"

    def row(agent, run_id, name):
        return RunRow(agent, run_id, "p", name, "running", None, None, None, "", 0, 0.0)
    rows = [row(a, "r1", "x"), row(b, "r2", "x"), row(b, "r3", "x"), row(a, "r4", "y"),
            row("ipc:///tmp/pilothouse/agent.sock", "r5", "y"), row("tcp://gpu-7:7766", "r6", "z")]
    assert distinct_titles(rows) == {(a, "r1"): "p/x @ :1", (b, "r2"): "p/x @ :45123 (r2)",
                                     (b, "r3"): "p/x @ :45123 (r3)", (a, "r4"): "p/y @ :1",
                                     ("ipc:///tmp/pilothouse/agent.sock", "r5"): "p/y @ agent.sock",
                                     ("tcp://gpu-7:7766", "r6"): "p/z"}

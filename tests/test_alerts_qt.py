"""Alerts in the app, offscreen: the badge, the chart markers, the notification, the Alerts tab's
rule editing, and end to end with a real agent evaluating a rules file on a real trainer."""

from __future__ import annotations

import os
import tempfile
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="pilothouse-qt-config-")  # QSettings stays in tests

import msgpack
import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QSystemTrayIcon
from support.processes import AgentProcess, finish, run_cli, start_trainer
from support.sockets import free_port

from pilothouse.client import Client
from pilothouse.gui._qt.alerts import RuleDialog
from pilothouse.gui._qt.app import MainWindow
from pilothouse.gui._qt.runs_table import COLUMNS
from pilothouse.gui.local_store import LocalStore
from pilothouse.wire.entries import Entry

A = "tcp://127.0.0.1:1"  # never answers: the store alone feeds the window


def metric(id: int, run: str, name: str, steps: np.ndarray, vals: np.ndarray) -> Entry:
    times = 1e9 + steps.astype(float)
    return Entry(id, run, "m", name, 0, len(steps), steps.astype(np.int64).tobytes(), vals.astype(float).tobytes(),
                 times.tobytes(), None)


def event(id: int, run: str, body: dict) -> Entry:
    return Entry(id, run, "e", None, 0, 0, None, None, None, msgpack.packb(body, use_bin_type=True))


def alert(rule: str, step: int | None, t: float, state: str = "firing", metric: str | None = "loss") -> dict:
    return {"event": "alert", "time": t, "rule": rule, "kind": "nonfinite", "state": state, "metric": metric,
            "step": step, "value": float("nan"), "detail": f"{metric} is nan at step {step}", "source": "file",
            "actions": []}


def badge(w: MainWindow, run_id: str) -> str:
    row = next(i for i in range(w.table_model.rowCount()) if w.table_model.row_at(i).run_id == run_id)
    return w.table_model.data(w.table_model.index(row, COLUMNS.index("alerts")))


def select(w: MainWindow, run_id: str) -> None:
    w.table.selectRow(next(i for i in range(w.table_model.rowCount()) if w.table_model.row_at(i).run_id == run_id))


def lines(chart) -> list[tuple[float, str]]:
    return [(line.value(), line.label.toPlainText()) for line in chart.alert_lines]


def test_history_badges_and_marks_quietly_live_alerts_notify(window, qtbot, tmp_path):
    old = time.time() - 7200
    store = LocalStore(tmp_path / "app-store.sqlite")
    store.put_runs(A, [{"id": i, "project": "p", "name": i, "status": "finished", "created": c}
                       for i, c in (("calm", 2.0), ("sick", 1.0))])
    steps = np.arange(40)
    loss = np.where(steps >= 20, np.nan, 1.0 / (steps + 1))
    store.write_page(A, [metric(1, "sick", "loss", steps, loss), metric(2, "sick", "kl", steps, steps * 0.1),
                         metric(3, "calm", "loss", steps, steps * 0.0),
                         event(4, "sick", alert("nan-loss", 20, old)),
                         event(5, "sick", alert("silent", None, 1e9 + 39.5, metric=None))], 5)  # stale: no step
    store.close()
    w = window()
    w._redraw()
    assert badge(w, "sick") == "⚠ 2" and badge(w, "calm") == ""
    assert w.table_model.row_at(0).run_id == "sick"  # firing alerts sort above an older-created calm run
    tip = w.table_model.data(w.table_model.index(0, COLUMNS.index("alerts")), Qt.ToolTipRole)
    assert "nan-loss: loss is nan at step 20" in tip
    assert w.alerts.firing_table.rowCount() == 2 and "2 alerts firing" in w.notices.action.text()
    assert w.statusBar().currentMessage() == ""  # history does not notify

    w.tabs.setCurrentWidget(w.events)  # the run's events are read while the pane is seen
    select(w, "sick")
    qtbot.waitUntil(lambda: {"loss", "kl"} <= set(w.charts.charts), timeout=5000)
    assert lines(w.charts.charts["loss"]) == [(20.0, "⚠ nan-loss"), (39.0, "⚠ silent")]
    assert lines(w.charts.charts["kl"]) == [(39.0, "⚠ silent")]  # a run-level alert marks every chart
    qtbot.waitUntil(lambda: "alert nan-loss firing at step 20: loss is nan" in w.events.toPlainText())  # a sentence

    live = [event(6, "sick", alert("nan-loss", 20, time.time(), state="cleared")),
            event(7, "calm", alert("flat", 30, time.time()))]
    for entry in live:  # as a link does: into the store, then the signal
        w.store.write_page(A, [entry], entry.id)
        w.inbox.put(A, [entry], entry.id, None)
    qtbot.waitUntil(lambda: badge(w, "calm") == "⚠ 1" and badge(w, "sick") == "⚠ 1", timeout=3000)
    assert not QSystemTrayIcon.isSystemTrayAvailable()  # offscreen: the fallback notifies
    assert "⚠ flat on p/calm" in w.statusBar().currentMessage()
    assert lines(w.charts.charts["loss"])[-1] == (20.0, "✓ nan-loss")  # the clearing is marked too
    assert "nan-loss cleared" in w.events.toPlainText()  # the shown run's events follow live

    w.tabs.setCurrentWidget(w.charts)  # out of sight, the Events pane is not read again per event
    hidden = event(8, "sick", alert("nan-loss", 25, time.time()))
    w.store.write_page(A, [hidden], hidden.id)
    w.inbox.put(A, [hidden], hidden.id, None)
    qtbot.wait(200)  # the window's redraws of the batch ran
    assert "at step 25" not in w.events.toPlainText()
    w.tabs.setCurrentWidget(w.events)  # seen again: read at once
    assert "alert nan-loss firing at step 25" in w.events.toPlainText()


def test_rule_form_checks_fields_before_sending(qtbot):
    dialog = RuleDialog(None, [("r1", "p/one")])
    qtbot.addWidget(dialog)
    dialog.kind.setCurrentText("above")
    assert dialog.fields["threshold"].isEnabled() and not dialog.fields["pct"].isEnabled()
    dialog.name.setText("kl-high")
    dialog.fields["metric"].setText("kl")
    dialog.fields["threshold"].setText("lots")
    dialog.accept()
    assert dialog.rule is None and "threshold must be a number" in dialog.error.text()
    dialog.fields["threshold"].setText("0.5")
    dialog.fields["pct"].setText("ignored: not this kind's")
    dialog.pause.setChecked(True)
    dialog.scope.setCurrentIndex(1)
    dialog.accept()
    assert dialog.rule == {"name": "kl-high", "kind": "above", "metric": "kl", "threshold": 0.5, "pause": True}
    assert dialog.run == "r1"


def test_no_rules_explains_what_a_rule_is_and_how_to_add_one_then_the_list_replaces_it(window, qtbot, agent_proc):
    w = window([agent_proc.url])
    panel = w.alerts
    with qtbot.waitSignal(panel.calls.answered, timeout=10000) as answer:
        w.tabs.setCurrentWidget(panel)  # the rules are asked for when the tab is shown
    assert answer.args[1] and answer.args[2]["rules"] == []
    assert panel.no_rules.isVisible() and not panel.rules_table.isVisible()
    text = panel.no_rules.text()
    assert f"the {panel.add_button.text()} button" in text  # the button named as it is labelled
    for words in ("NaN", "threshold", "notification", "pause the run", "run a hook", "alerts=[", "--alerts rules.toml"):
        assert words in text, words
    command = next(line.strip() for line in text.splitlines() if line.strip().startswith("pilothouse alerts add"))
    words = command.replace("[--run RUN]", "").split()[1:]
    done = run_cli(*words, "--agent", agent_proc.url)  # the command shown works as written
    assert done.returncode == 0 and "added kl-high" in done.stdout, done.stderr
    panel.refresh_rules()
    qtbot.waitUntil(lambda: panel.rules_table.isVisible(), timeout=10000)
    assert not panel.no_rules.isVisible() and panel.rules_table.item(0, 0).text() == "kl-high"
    assert panel.rules_table.item(0, 4).text().endswith("metric=kl threshold=5 for_steps=3 pause")
    with Client(agent_proc.url) as client:
        client.remove_alert("kl-high")
    panel.refresh_rules()
    qtbot.waitUntil(lambda: panel.no_rules.isVisible(), timeout=10000)  # the last rule gone: explained again
    assert panel.rules == [] and not panel.rules_table.isVisible()


def test_rules_are_listed_added_and_removed_off_the_ui_thread(window, qtbot, agent_proc):
    with Client(agent_proc.url) as client:
        client.add_alert({"name": "from-cli", "kind": "stale", "seconds": 60})
    w = window([agent_proc.url])
    panel = w.alerts
    assert panel.agent.currentText() == agent_proc.url and panel.rules_table.rowCount() == 0  # not asked yet
    w.tabs.setCurrentWidget(panel)
    qtbot.waitUntil(lambda: panel.rules_table.rowCount() == 1, timeout=10000)  # asked when shown
    assert panel.rules_table.item(0, 0).text() == "from-cli" and panel.rules_table.item(0, 2).text() == "every run"
    panel.rules_table.selectRow(0)
    panel.remove_rule()
    qtbot.waitUntil(lambda: panel.rules_table.rowCount() == 0, timeout=10000)
    panel.ask_rule = lambda parent, runs: ({"name": "kl-high", "kind": "above", "metric": "kl", "threshold": 0.5}, None)
    panel.add_rule()
    qtbot.waitUntil(lambda: panel.rules_table.rowCount() == 1, timeout=10000)
    assert panel.rules_table.item(0, 0).text() == "kl-high" and "threshold=0.5" in panel.rules_table.item(0, 4).text()
    panel.ask_rule = lambda parent, runs: ({"name": "bad", "kind": "drop", "metric": "r", "pct": -3}, None)
    panel.add_rule()
    qtbot.waitUntil(lambda: "add rule bad failed: " in panel.status.text(), timeout=10000)
    assert "pct" in panel.status.text()  # the agent's own reason
    panel.rules_table.selectRow(0)
    panel.remove_rule()
    qtbot.waitUntil(lambda: panel.rules_table.rowCount() == 0, timeout=10000)
    assert "remove rule kl-high: done" in panel.status.text()
    with Client(agent_proc.url) as client:
        assert client.alerts()["rules"] == []


TRAINER = """
run = ph.init(project="oncall", name="nan", agent=URL, heartbeat=0.2)
print(run.id, flush=True)
for step in range(100000):
    if run.sync(step).stop:
        break
    run.log({"loss": float("nan") if step >= 20 else 1.0 / (step + 1), "reward": step / 10}, step=step)
    time.sleep(0.01)
run.finish()
"""


def test_agent_rule_fires_on_a_real_trainer_and_the_app_shows_it(window, qtbot, tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nname = "nan-loss"\nkind = "nonfinite"\nmetric = "loss"\n')
    proc = AgentProcess(tmp_path / "agent", free_port(), ["--alerts", str(rules)]).start()
    trainer = None
    try:
        w = window([proc.url])
        trainer = start_trainer(tmp_path, TRAINER, proc.url)
        run_id = trainer.stdout.readline().strip()
        qtbot.waitUntil(lambda: any(w.table_model.row_at(i).run_id == run_id
                                    for i in range(w.table_model.rowCount())), timeout=15000)
        qtbot.waitUntil(lambda: badge(w, run_id) == "⚠ 1", timeout=15000)
        assert "⚠ nan-loss on oncall/nan" in w.statusBar().currentMessage()  # it fired live: notified
        select(w, run_id)
        qtbot.waitUntil(lambda: "loss" in w.charts.charts and bool(w.charts.charts["loss"].alert_lines), timeout=10000)
        assert lines(w.charts.charts["loss"]) == [(20.0, "⚠ nan-loss")]
        assert not w.charts.charts["reward"].alert_lines
        assert w.alerts.firing_table.item(0, 1).text() == "nan-loss"
        with Client(proc.url) as client:
            assert client.command(run_id, "stop", wait=10)["state"] == "applied"
        finish(trainer)
    finally:
        if trainer is not None and trainer.poll() is None:
            trainer.kill()
        proc.stop()


def test_a_new_runs_alert_waits_for_its_name_and_the_tray_is_made_once(window, qtbot, monkeypatch):
    shown = []
    monkeypatch.setattr(QSystemTrayIcon, "isSystemTrayAvailable", staticmethod(lambda: True))
    monkeypatch.setattr(QSystemTrayIcon, "showMessage", lambda self, title, body, *a: shown.append((title, body)))
    w = window()
    w.inbox.put(A, [event(1, "newbie", alert("nan-loss", 3, time.time()))], 1, None)
    qtbot.wait(50)
    assert shown == [] and w.notices.notifier.tray is None  # the run list does not name the run yet
    w.inbox.put(A, [], 1, [{"id": "newbie", "project": "p", "name": "fresh", "status": "running"}])
    qtbot.waitUntil(lambda: len(shown) == 1, timeout=3000)
    assert shown[0] == ("⚠ nan-loss on p/fresh", "p/fresh: loss is nan at step 3")
    tray = w.notices.notifier.tray
    w.inbox.put(A, [event(2, "newbie", alert("kl", 4, time.time())),
                    event(3, "newbie", alert("lr", 4, time.time()))], 3, None)
    qtbot.waitUntil(lambda: len(shown) == 2, timeout=3000)
    assert shown[1][0] == "⚠ 2 alerts firing" and w.notices.notifier.tray is tray and tray.isVisible()

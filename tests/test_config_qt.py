"""pilothouse.gui._qt.config: config comparison and live hyperparameter edits against a real agent and trainer."""

from __future__ import annotations

import getpass
import os
import socket

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")
pytest.importorskip("PySide6")

from support.processes import finish, start_trainer  # noqa: E402
from support.runs import run_events  # noqa: E402
from support.waiting import wait_until  # noqa: E402

import pilothouse as ph  # noqa: E402
from pilothouse.client import Client  # noqa: E402
from pilothouse.gui._qt.config import ConfigPanel  # noqa: E402
from pilothouse.gui._qt.theme import qcolor  # noqa: E402
from pilothouse.gui.local_store import LocalStore  # noqa: E402

TRAINER = """
run = ph.init(project="cfg", name="tuned", agent=URL, config={"lr": 1e-3, "batch": 32}, heartbeat=0.2)
print(run.id, flush=True)
for step in range(100000):
    ctl = run.sync(step)
    if ctl.stop:
        break
    if ctl.changes:
        print(f"lr={run.config['lr']!r}", flush=True)
    time.sleep(0.01)
run.finish()
"""


def copy_runs(url: str, store: LocalStore) -> None:
    """The app's store as a link leaves it: the agent's run list, as reported."""
    with Client(url) as client:
        store.put_runs(url, client.runs())


@pytest.fixture
def panel(qtbot):
    widget = ConfigPanel()
    widget.confirm = lambda *_: True
    qtbot.addWidget(widget)
    widget.show()
    return widget


def cell(panel: ConfigPanel, key: str, column: int = 0):
    return panel.table.item(panel.rows.index(key), column)


def test_differing_rows_are_highlighted_and_columns_named_by_run(panel, agent_proc, tmp_path):
    keys = []
    for name, lr in (("a", 0.1), ("b", 0.2), ("b", 0.2)):
        run = ph.init(project="cmp", name=name, agent=agent_proc.url,
                         config={"lr": lr, "batch": 32, "opt": {"beta": lr, "eps": 1e-8}})
        assert run.finish()
        keys.append((agent_proc.url, run.id))
    store = LocalStore(tmp_path / "app.sqlite")
    copy_runs(agent_proc.url, store)
    panel.show_runs(keys, store, {keys[0]: 0, keys[1]: 1})
    assert panel.rows == ["batch", "lr", "opt.beta", "opt.eps"]
    assert panel.table.columnCount() == 3
    headers = [panel.table.horizontalHeaderItem(c) for c in range(3)]
    assert [h.text() for h in headers] == ["a", f"b ({keys[1][1]})", f"b ({keys[2][1]})"]  # ids only for twins
    assert not headers[0].icon().isNull() and headers[2].icon().isNull()  # the charts' color, where given
    highlighted = {k for k in panel.rows if cell(panel, k).background().color() == qcolor("diff_bg")}
    assert highlighted == {"lr", "opt.beta"}
    assert cell(panel, "lr", 1).text() == "0.2"
    assert cell(panel, "opt.eps").foreground().color() == qcolor("dim_text")  # nested: not tunable
    assert cell(panel, "lr").foreground().color() != qcolor("dim_text")
    assert not panel.tunable and not panel.request_set("lr", "0.5")  # two runs: nothing to edit


def test_edit_lr_on_running_run_applies_and_bad_value_is_rejected(panel, qtbot, agent_proc, tmp_path):
    trainer = start_trainer(tmp_path, TRAINER, agent_proc.url)
    try:
        run_id = trainer.stdout.readline().strip()
        store = LocalStore(tmp_path / "app.sqlite")
        with agent_proc.client() as client:
            wait_until(lambda: any(r["id"] == run_id and r["status"] == "running" for r in client.runs()),
                       what="running trainer")
        copy_runs(agent_proc.url, store)
        panel.show_runs([(agent_proc.url, run_id)], store)
        assert panel.tunable == {"lr", "batch"}

        cell(panel, "lr").setText("0.01")  # an in-place edit
        qtbot.waitUntil(lambda: "applied at step" in panel.status.text(), timeout=15000)
        assert trainer.stdout.readline().strip() == "lr=0.01"
        assert cell(panel, "lr").text() == "0.01"

        asked = []
        panel.confirm = lambda _parent, question: asked.append(question) or True
        assert not panel.request_set("lr", "nan")  # checked against the run's schema first: no dialog, not sent
        assert "lr not sent" in panel.status.text() and "finite" in panel.status.text() and not asked
        assert not panel.request_set("batch", "0.5")
        assert "batch must be int" in panel.status.text() and not asked
        assert cell(panel, "lr").text() == "0.01"  # the old value stays
        with Client(agent_proc.url) as client:
            assert next(r for r in client.runs() if r["id"] == run_id)["config"]["lr"] == 0.01
            who = [e["who"] for e in run_events(client, run_id, "command")]
            assert len(who) == 1  # the refused values never reached the agent
            assert who[0] == {"user": getpass.getuser(), "host": socket.gethostname(), "client": "gui",
                              "via": "loopback"}  # the app's commands say who sent them, like the CLI's
            client.command(run_id, "stop")
        assert "lr=" not in finish(trainer)  # the trainer saw no second change
    finally:
        if trainer.poll() is None:
            trainer.kill()


def test_a_paused_run_is_editable_and_the_confirm_names_it_paused(panel, qtbot, agent_proc, tmp_path):
    trainer = start_trainer(tmp_path, TRAINER, agent_proc.url)
    try:
        run_id = trainer.stdout.readline().strip()
        with agent_proc.client() as client:
            wait_until(lambda: any(r["id"] == run_id and r["status"] == "running" for r in client.runs()),
                       what="running trainer")
            assert client.command(run_id, "pause", wait=15)["state"] == "applied"
        store = LocalStore(tmp_path / "app.sqlite")
        copy_runs(agent_proc.url, store)
        panel.show_runs([(agent_proc.url, run_id)], store)
        assert panel.tunable == {"lr", "batch"}
        asked = []
        panel.confirm = lambda _parent, question: asked.append(question) or False  # the user says No
        assert not panel.request_set("lr", "0.02")
        assert asked == ["Set lr = 0.02 (now 0.001) on cfg/tuned (paused)?\n\n"
                         "The trainer takes it at its next sync; it cannot be undone, only set again."]
        assert cell(panel, "lr").text() == "0.001"
        panel.confirm = lambda *_: True
        assert panel.request_set("lr", "0.02")
        qtbot.waitUntil(lambda: "applied at step" in panel.status.text(), timeout=15000)
        with agent_proc.client() as client:
            assert next(r for r in client.runs() if r["id"] == run_id)["status"] == "paused"  # still held
            assert client.command(run_id, "resume", wait=15)["state"] == "applied"
            assert trainer.stdout.readline().strip() == "lr=0.02"  # the trainer's own value, once it goes on
            client.command(run_id, "stop")
        finish(trainer)
    finally:
        if trainer.poll() is None:
            trainer.kill()

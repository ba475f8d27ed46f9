"""A multi-node job in the app, offscreen: the bar offers the nodes not followed once, Add follows them
and remembers the job, Not for this job is remembered, and Agents → Jobs offers again or removes a job's
agents as one (what to add and how is tested without Qt in test_jobs.py)."""

from __future__ import annotations

import os
import socket
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="pilothouse-qt-config-")  # QSettings stays in tests

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from pilothouse.gui._qt.app import MainWindow

A, B, C = "tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3"  # never answer: the store feeds the window
HERE = socket.gethostname()


def job_run(run_id: str, *agents: str) -> dict:
    nodes = [{"host": HERE, "agent": url, "ranks": [i]} for i, url in enumerate(agents)]
    return {"id": run_id, "project": "p", "name": run_id, "host": HERE, "nodes": nodes, "created": 1.0,
            "status": "running"}


def listed(w: MainWindow, url: str, runs: list[dict]) -> None:
    """As a link does: the run list into the store, then the signal."""
    w.store.put_runs(url, runs)
    w.inbox.put(url, [], w.store.cursor(url), runs)


def menu_entries(w: MainWindow) -> dict[str, list[str]]:
    menu = w.job_offers.menu
    menu.aboutToShow.emit()
    return {a.text(): [s.text() for s in a.menu().actions()] if a.menu() else [] for a in menu.actions()}


def test_a_job_is_offered_once_added_as_one_and_removed_as_one(window, qtbot):
    w = window([A])
    assert menu_entries(w) == {"no multi-node jobs yet": []}
    listed(w, A, [job_run("big", A, B, C)])
    bar = w.job_offers.bar
    qtbot.waitUntil(bar.isVisible, timeout=3000)
    assert bar.plan.run == "big" and bar.add.text() == "Add 2 agents"
    assert "runs on 3 nodes; add the other 2 agents" in bar.headline.text()

    bar.add.click()
    assert not bar.isVisible() and sorted(w.followed()) == [A, B, C]
    assert "job p/big: following 2 more agents" in w.statusBar().currentMessage()
    assert sorted(w.alerts.agent.itemText(i) for i in range(w.alerts.agent.count())) == [A, B, C]
    listed(w, B, [job_run("big", A, B, C)])  # decided: never offered again
    qtbot.wait(50)
    assert not bar.isVisible()
    assert menu_entries(w) == {"p/big (big) · 3 agents": ["Add its agents…", "Remove job (stop following its agents)…"]}

    w.job_offers.offer_again("big")
    assert "every agent of this job is followed" in w.statusBar().currentMessage() and not bar.isVisible()
    assert not w.job_offers.remove("big", ask=lambda title, text: False)  # said no: still followed
    assert sorted(w.followed()) == [A, B, C]
    assert w.job_offers.remove("big", ask=lambda title, text: "3 agents of job p/big" in text)
    assert w.followed() == [] and w.store.jobs() == []


def test_a_declined_job_is_remembered_and_can_be_offered_again(window, qtbot, tmp_path):
    w = window([A])
    listed(w, A, [job_run("big", A, B), job_run("other", A, C)])
    bar = w.job_offers.bar
    qtbot.waitUntil(bar.isVisible, timeout=3000)
    assert bar.plan.run == "big" and [p.run for p in bar.queue] == ["other"]  # one job at a time
    bar.no.click()
    assert bar.plan.run == "other"
    bar.no.click()
    assert not bar.isVisible() and w.followed() == [A]
    assert menu_entries(w) == {"p/big (big) · declined": ["Add its agents…"],
                               "p/other (other) · declined": ["Add its agents…"]}
    w.close()

    w = window([A])  # the answer outlives the app
    listed(w, A, [job_run("big", A, B)])
    qtbot.wait(50)
    assert not w.job_offers.bar.isVisible()
    w.job_offers.offer_again("big")
    assert w.job_offers.bar.isVisible() and w.job_offers.bar.plan.run == "big"
    w.job_offers.bar.add.click()
    assert sorted(w.followed()) == [A, B]

"""pilothouse.gui.alerts: alert events -> firing alerts, badges, chart markers, and which ones notify."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pilothouse.gui.alerts import AlertBook, Marker, firing, is_alert, place, rule_from_form, rule_text
from pilothouse.gui.models import RunsModel

A = "tcp://127.0.0.1:7766"
T0 = 1_700_000_000.0


def body(rule="nan-loss", state="firing", metric="loss", step=20, value=math.nan, t=T0, kind="nonfinite", **kw):
    return {"event": "alert", "time": t, "rule": rule, "kind": kind, "state": state, "metric": metric,
            "step": step, "value": value, "detail": f"{metric} is {value} at step {step}", "source": "file",
            "actions": ["pause"], **kw}


def test_latest_event_per_rule_and_metric_decides_firing():
    book = AlertBook(started=T0)
    book.load(A, "r1", [
        {"event": "status", "time": T0, "status": "running"},  # not an alert: ignored
        body(step=20), body(state="cleared", step=40, value=1.0, t=T0 + 1),
        body(rule="kl-high", kind="above", metric="kl", step=30, value=9.0, t=T0 + 2),
        body(rule="low", kind="below", metric="reward/mean", step=31, t=T0 + 3),
        body(rule="low", kind="below", metric="reward/std", step=32, t=T0 + 4),
        body(rule="low", kind="below", metric="reward/mean", step=33, state="cleared", t=T0 + 5),
    ])
    assert sorted((a.rule, a.metric) for a in book.firing((A, "r1"))) == [("kl-high", "kl"), ("low", "reward/std")]
    assert book.counts() == {(A, "r1"): 2}
    assert [a.state for a in book.recent(2)] == ["cleared", "firing"]  # newest first
    book.load(A, "r2", [body(rule="stale", kind="stale", metric=None, step=None, value=None, t=T0 + 9)])
    assert [a.run for a in book.firing()] == ["r2", "r1", "r1"]  # across runs, newest first
    assert firing([]) == []


def test_markers_carry_step_rule_metric_detail_state():
    book = AlertBook(started=T0)
    book.load(A, "r1", [body(step=20), body(state="cleared", step=25, value=0.5, t=T0 + 1)])
    marks = book.markers((A, "r1"))
    assert [(m.step, m.rule, m.metric, m.state) for m in marks] == [(20, "nan-loss", "loss", "firing"),
                                                                     (25, "nan-loss", "loss", "cleared")]
    assert isinstance(marks[0], Marker) and "step 20" in marks[0].detail and marks[0].time == T0
    assert book.markers((A, "nope")) == []
    book.load(A, "r2", [body(rule="idle", kind="gpu_idle", metric="gpu0/util", step=None, value=0.0)])
    assert book.markers((A, "r2"))[0].metric is None  # not one of the run's curves: marks them all


def test_markers_without_a_step_go_to_the_last_step_logged_by_then():
    marks = [Marker(None, "silent", None, "", "firing", T0 + 12.5), Marker(7, "x", "loss", "", "firing", T0),
             Marker(None, "early", None, "", "firing", T0 - 99)]
    steps, times = np.arange(10, 20), T0 + np.arange(10.0)
    times[5] = T0 - 50  # a clock stepped back mid-run
    assert [m.step for m in place(marks, steps, times)] == [19, 7, 10]
    assert place(marks, steps[:0], times[:0]) is marks  # nothing logged: nowhere to place them


def test_history_never_notifies_live_alerts_do_once():
    book = AlertBook(started=T0)
    book.follow(A, cursor=100)
    book.load(A, "r1", [body(t=T0 - 3600)])
    assert book.add(A, "r1", 50, body(rule="old-page", t=T0 + 5)) is None  # at or below the cursor: history
    assert book.add(A, "r1", 101, body(rule="backlog", t=T0 - 3600)) is None  # journaled before the app opened
    live = book.add(A, "r1", 102, body(rule="live", t=T0 + 10))
    assert live is not None and live.rule == "live" and live.key == (A, "r1") and live.actions == ("pause",)
    assert book.add(A, "r1", 102, body(rule="live", t=T0 + 10)) is None  # the same event twice
    assert book.add(A, "r1", 103, body(rule="live", state="cleared", t=T0 + 11)) is None  # clearing is quiet
    assert book.add(A, "r1", 104, {"event": "ack", "time": T0 + 12}) is None
    assert book.add(A, "r1", 105, body(rule="skew", t=T0 - 5)) is not None  # within the clock-skew grace
    other = "tcp://10.0.0.2:7766"
    book.follow(other, cursor=7, since=T0 + 100)  # added while the app runs: its backlog is history
    assert book.add(other, "x", 8, body(t=T0 + 20)) is None
    assert book.add(other, "x", 9, body(t=T0 + 120)) is not None
    assert book.counts()[(A, "r1")] == 4  # everything is on the badge, notified or not


def test_malformed_alerts_are_ignored_not_fatal():
    book = AlertBook(started=T0)
    book.load(A, "r1", [{"event": "alert", "step": "x"}, "junk", None, {"event": "alert", "time": T0}])
    assert [a.rule for a in book.recent()] == ["?"]
    assert not is_alert([1]) and is_alert({"event": "alert"})


def test_runs_with_firing_alerts_sort_first_and_carry_the_count():
    model = RunsModel()
    model.set_runs([{"id": i, "agent": A, "project": "p", "name": i, "status": s, "created": c}
                    for i, s, c in (("crashed", "crashed", 1.0), ("ok", "running", 2.0), ("alerted", "finished", 0.5))])
    assert [r.run_id for r in model.rows()] == ["crashed", "ok", "alerted"]
    model.set_alerts({(A, "alerted"): 2, (A, "ok"): 0})
    assert [r.run_id for r in model.rows()] == ["crashed", "alerted", "ok"]
    assert model.row((A, "alerted")).alerts == 2 and model.row((A, "ok")).alerts == 0
    model.update_agent(A, [{"id": "alerted", "project": "p", "name": "alerted", "status": "finished"}])
    assert model.row((A, "alerted")).alerts == 2  # a run-list refresh keeps the badge
    model.set_alerts({})
    assert model.row((A, "alerted")).alerts == 0


def test_rule_form_sends_only_the_kinds_fields_typed():
    form = {"name": " nan-loss ", "kind": "drop", "metric": "reward/mean", "pct": "30", "window": "50",
            "threshold": "ignored", "seconds": ""}
    assert rule_from_form(form, pause=True) == {"name": "nan-loss", "kind": "drop", "metric": "reward/mean",
                                                "pct": 30.0, "window": 50, "pause": True}
    assert rule_from_form({"name": "s", "kind": "stale", "seconds": "120"}) == {"name": "s", "kind": "stale",
                                                                                "seconds": 120.0}
    for bad, message in (({"kind": "stale"}, "name"), ({"name": "x", "kind": "weird"}, "unknown kind"),
                         ({"name": "x", "kind": "above", "threshold": "ten"}, "threshold"),
                         ({"name": "x", "kind": "drop", "window": "2.5"}, "whole number"),
                         ({"name": "x", "kind": "above", "threshold": "nan"}, "finite")):
        with pytest.raises(ValueError, match=message):
            rule_from_form(bad)


def test_rule_text_reads_well():
    spec = {"name": "kl", "kind": "above", "metric": "kl", "threshold": 0.5, "for_steps": 3, "pause": True}
    assert rule_text({"name": "kl", "spec": spec}) == "metric=kl threshold=0.5 for_steps=3 pause"

"""A run across restarts in plain Python: members joined by id and project, attempts in start order,
and a later attempt superseding the points it logged again."""

from __future__ import annotations

import numpy as np

from pilothouse.gui.attempts import Timeline, attempts, members
from pilothouse.gui.models import RunsModel

A, B = "tcp://node-a:7766", "tcp://node-b:7766"


def test_members_join_one_id_and_project_across_agents_first_begun_first():
    groups = members([((B, "r1"), "p", 20.0), ((A, "r1"), "p", 10.0), ((A, "r2"), "p", 5.0),
                      ((B, "r2"), "other", 30.0)])  # another project: another run that shares the id
    assert groups == {(A, "r1"): [(A, "r1"), (B, "r1")], (A, "r2"): [(A, "r2")], (B, "r2"): [(B, "r2")]}


def test_attempts_number_every_start_and_say_how_the_one_before_ended():
    run_a = {"created": 10.0, "host": "a2", "status": "running"}  # resumed on A, then went silent
    events_a = [{"event": "status", "status": "running", "host": "a1"},
                {"event": "resumed", "attempt": 2, "host": "a2", "after": "crashed", "started": 50.0, "time": 51.0}]
    run_b = {"created": 90.0, "host": "b1", "status": "finished"}
    got = attempts([((B, "r"), run_b, []), ((A, "r"), run_a, events_a)])
    assert [(a.number, a.member, a.started, a.host, a.after) for a in got] == [
        (1, (A, "r"), 10.0, "a1", ""), (2, (A, "r"), 50.0, "a2", "crashed"), (3, (B, "r"), 90.0, "b1", "stale")]
    assert got[2].label == "↻ resumed on b1 (attempt 3, after stale)"


def test_a_later_attempt_supersedes_from_its_first_step_and_the_curve_is_continuous():
    timeline = Timeline(attempts([((A, "r"), {"created": 0.0}, [
        {"event": "resumed", "attempt": 2, "host": "h", "after": "crashed", "started": 100.0}])]))
    steps = np.array([*range(60), *range(40, 80)])  # crashed at 59, resumed from a checkpoint at 40
    times = np.array([*np.arange(60) + 1.0, *np.arange(40) + 101.0])
    numbers = timeline.numbers((A, "r"), times)
    assert numbers.tolist() == [1] * 60 + [2] * 40
    assert timeline.saw(numbers, steps) and timeline.first_steps == {1: 0, 2: 40}
    old = timeline.superseded(numbers, steps)
    assert steps[old].tolist() == list(range(40, 60)) and (numbers[old] == 1).all()
    assert steps[~old].tolist() == list(range(80))  # one point per step: no zigzag where they overlap
    assert not timeline.saw(numbers[-5:], steps[-5:])  # more of attempt 2: nothing else superseded
    assert [(a.number, step) for a, step in timeline.resumes()] == [(2, 40)]


def test_a_run_with_one_attempt_supersedes_nothing():
    timeline = Timeline(attempts([((A, "r"), {"created": 5.0}, [])]))
    numbers = timeline.numbers((A, "r"), np.array([1.0, 6.0, 7.0]))
    assert not timeline.saw(numbers, np.array([3, 1, 2]))
    assert not timeline.superseded(numbers, np.array([3, 1, 2])).any() and timeline.resumes() == []


def test_the_run_list_shows_a_run_resumed_on_another_node_as_one_row():
    model = RunsModel()
    model.update_agent(A, [{"id": "r1", "project": "p", "name": "base", "status": "crashed", "created": 10.0,
                            "last_step": 59, "host": "a", "lost_records": 1}])
    model.update_agent(B, [{"id": "r1", "project": "p", "name": "base", "status": "running", "created": 90.0,
                            "last_step": 70, "host": "b", "attempts": 1},
                           {"id": "r2", "project": "p", "name": "other", "status": "running", "created": 5.0}])
    model.set_alerts({(B, "r1"): 2})
    row, other = (model.row((A, "r1")), model.row((B, "r2")))
    assert [r.key for r in model.rows()] == [(A, "r1"), (B, "r2")] and other.attempts == 1
    assert (row.status, row.step, row.host, row.attempts, row.lost_records, row.alerts, row.created) == (
        "running", 70, "b", 2, 1, 2, 10.0)
    assert row.members == ((A, "r1"), (B, "r1")) and model.row((B, "r1")) is None

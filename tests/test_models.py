"""Plain-Python view models: filter, severity order, selection, metric groups, config diff."""

from __future__ import annotations

import math

from pilothouse.gui.models import RunRow, RunsModel, config_diff, metric_groups, run_labels


def run(agent: str, id: str, status: str, name: str = "", created: float = 0.0, **extra) -> dict:
    return {"agent": agent, "id": id, "project": "grpo", "name": name or id, "kind": "train", "status": status,
            "host": f"{agent}-host", "last_step": 7, "created": created, "lost_records": 0,
            "summary": {"reward/mean": 0.5, "loss": 1.0}, "key": "reward/mean", **extra}


def model() -> RunsModel:
    m = RunsModel()
    m.set_runs([run("a", "r1", "finished", created=1), run("a", "r2", "running", created=2),
                run("b", "r3", "crashed", name="lr1e-4", created=3), run("b", "r4", "paused", created=4),
                run("b", "r5", "stale", created=5), run("a", "r6", "running", created=6),
                {"agent": "a", "id": "sys-a", "kind": "system", "status": "running", "created": 9}])
    return m


def test_severity_first_then_newest():
    assert [r.run_id for r in model().rows()] == ["r5", "r3", "r6", "r2", "r4", "r1"]


def test_row_from_run_dict():
    row = RunRow.from_run(run("a", "r1", "running", lost_records=3))
    assert (row.key, row.title, row.step, row.key_metric, row.key_value, row.lost_records) == \
        (("a", "r1"), "grpo/r1", 7, "reward/mean", 0.5, 3)
    assert RunRow.from_run({"id": "x", "summary": {"loss": 2.0}, "key": "loss"}, agent="z").key_metric == "loss"


def test_row_shows_the_agents_key_metric_not_one_of_its_own():
    """The agent decides the headline (a project's choice, or automatic): the row takes it as is."""
    row = RunRow.from_run(run("a", "r1", "running", key="loss"))
    assert (row.key_metric, row.key_value) == ("loss", 1.0)
    assert RunRow.from_run(run("a", "r1", "running", key=None)).key_metric is None  # a run with no metrics
    assert RunRow.from_run(run("a", "r1", "running", key=["bad"])).key_metric is None  # not a name: no headline


def test_filter_matches_project_name_id_and_host():
    m = model()
    m.set_filter("LR1E")
    assert [r.run_id for r in m.rows()] == ["r3"]
    m.set_filter("b-host")
    assert {r.run_id for r in m.rows()} == {"r3", "r4", "r5"}
    m.set_filter("grpo r2")
    assert [r.run_id for r in m.rows()] == ["r2"]
    m.set_filter("")
    assert len(m.rows()) == 6  # the system run is not in the list


def test_selection_survives_filtering_and_updates():
    m = model()
    m.select(("b", "r3"))
    m.toggle(("a", "r1"))
    m.select(("a", "nope"))  # unknown runs are not selectable
    m.set_filter("r3")
    assert m.selected() == [("b", "r3"), ("a", "r1")]
    m.update_agent("a", [run("a", "r1", "crashed", created=1)])
    assert m.row(("a", "r1")).status == "crashed" and len(m.selected()) == 2
    m.toggle(("b", "r3"))
    assert m.selected() == [("a", "r1")]
    m.clear_selection()
    assert m.selected() == []


def test_metric_groups_by_prefix_and_importance():
    assert metric_groups(["reward/std", "kl", "reward/mean", "completions/len", "loss", "kl", "zeta"]) == {
        "reward": ["reward/mean", "reward/std"], "kl": ["kl"], "loss": ["loss"],
        "completions": ["completions/len"], "zeta": ["zeta"]}
    assert metric_groups([]) == {}


def test_a_trl_run_opens_on_its_reward():
    trl = ["clip_ratio/high_max", "clip_ratio/low_mean", "completions/mean_length", "entropy", "frac_reward_zero_std",
           "grad_norm", "kl", "learning_rate", "loss", "num_tokens", "reward", "reward_std",
           "rewards/letter_a/mean", "rewards/letter_a/std", "step_time"]
    order = [m for group in metric_groups(trl).values() for m in group]
    assert order[0] == "reward" and order.index("kl") < order.index("loss") < order.index("entropy")
    assert max(order.index(m) for m in trl if m.startswith("clip_ratio/")) > order.index("completions/mean_length")


def test_config_diff_names_keys_that_differ_or_are_missing():
    configs = {("a", "r1"): {"lr": 1e-5, "kl": 0.05, "opt": {"beta": 0.9, "eps": 1e-8}, "x": math.nan, "flag": True},
               ("a", "r2"): {"lr": 3e-6, "kl": 0.05, "opt": {"beta": 0.95, "eps": 1e-8}, "x": math.nan, "flag": 1},
               ("b", "r1"): {"lr": 1e-5, "kl": 0.05, "opt": {"beta": 0.9, "eps": 1e-8}, "x": math.nan,
                             "flag": True, "seed": 1}}
    assert config_diff(configs) == {"lr", "opt.beta", "flag", "seed"}
    assert config_diff({"only": {"lr": 1}}) == set()
    assert config_diff({"a": {"n": 1}, "b": {"n": 1.0}}) == set()
    assert config_diff({}) == set()


def test_compared_runs_are_labelled_by_name_with_the_id_only_for_twins():
    a, b, c, d = ("tcp://x", "aaaa1111"), ("tcp://x", "bbbb2222"), ("tcp://y", "cccc3333"), ("tcp://y", "dddd4444")
    assert run_labels({a: "base", b: "tuned"}) == {a: "base", b: "tuned"}
    assert run_labels({a: "base", b: "tuned", c: "base", d: ""}) == {
        a: "base (aaaa1111)", b: "tuned", c: "base (cccc3333)", d: "dddd4444"}  # no name: the id


def test_an_agents_run_list_joins_only_what_changed_and_equals_a_whole_join():
    """Each agent's once-a-second list re-joins only the run ids whose rows changed (the app's cost
    per list is that agent's runs, not every agent's): the rows equal a join of everything."""
    m = model()
    a_runs = [run("a", "r1", "finished", created=1), run("a", "r2", "running", created=2),
              run("a", "r6", "running", created=6)]
    assert m.update_agent("a", a_runs) is False  # the same list again: nothing to join or redraw
    a_runs[1] = run("a", "r2", "running", created=2, summary={"reward/mean": 0.9})
    assert m.update_agent("a", a_runs) is True
    assert m.row(("a", "r2")).key_value == 0.9  # a last value alone is a change
    resumed = run("b", "r1", "running", created=20)  # a's r1, resumed on b
    assert m.update_agent("b", [resumed]) is True
    whole = RunsModel()
    whole.set_runs([*a_runs, run("b", "r3", "crashed", name="lr1e-4", created=3), run("b", "r4", "paused", created=4),
                    run("b", "r5", "stale", created=5), resumed])
    assert m.rows() == whole.rows()
    assert m.row(("a", "r1")).members == (("a", "r1"), ("b", "r1")) and m.row(("b", "r1")) is None
    assert (m.row(("a", "r1")).status, m.row(("a", "r1")).attempts) == ("running", 2)

"""The runs table's config and summary columns, in plain Python: which show by default, how each
column sorts (missing values last both ways, ties in severity order), how values read."""

from __future__ import annotations

import math

from pilothouse.gui.models import RunRow, RunsModel
from pilothouse.gui.run_columns import (
    CONFIG,
    FIXED,
    MISSING,
    SUMMARY,
    Column,
    cell_text,
    default_config_columns,
    ordered,
)

LR, SEED, STEP, RUN = Column(CONFIG, "opt.lr"), Column(CONFIG, "seed"), FIXED[3], FIXED[2]
REWARD = Column(SUMMARY, "reward/mean")


def run(id: str, status: str = "finished", created: float = 0.0, config: dict | None = None, **summary) -> dict:
    return {"agent": "a", "id": id, "project": "p", "name": id, "kind": "train", "status": status, "host": "h",
            "last_step": 10, "created": created, "config": config or {}, "summary": summary, "key": None}


def model() -> RunsModel:
    m = RunsModel()
    m.set_runs([run("r1", created=1, config={"opt": {"lr": 3e-4}, "seed": 1, "model": "Qwen"}, **{"reward/mean": 0.2}),
                run("r2", created=2, config={"opt": {"lr": 1e-3}, "seed": 2, "model": "Qwen"}, **{"reward/mean": 0.9}),
                run("r3", "crashed", created=3, config={"opt": {"lr": 1e-3}, "model": "Qwen"}, loss=1.0),
                run("r4", created=4, config={"opt": {"lr": 1e-5}, "seed": 1, "model": "Qwen"},
                    **{"reward/mean": math.nan})])
    return m


def ids(m: RunsModel) -> list[str]:
    return [r.run_id for r in m.rows()]


def test_values_sort_by_kind_with_missing_ones_last_both_ways():
    values = [3, "b", None, 10.0, MISSING, math.nan, "A", True, False, 2, [1]]
    up = ordered(values, lambda v: v)
    assert up[:8] == [False, True, 2, 3, 10.0, "A", "b", [1]]  # bools as bools, numbers numerically
    assert math.isnan(up[8]) and up[9:] == [None, MISSING]
    down = ordered(values, lambda v: v, descending=True)
    assert down[:8] == [[1], "b", "A", 10.0, 3, 2, True, False] and down[9:] == [None, MISSING]  # still last


def test_ties_keep_the_order_they_came_in():
    pairs = [("x", 1), ("y", 2), ("z", 1), ("w", "a"), ("v", "A")]
    assert [k for k, _ in ordered(pairs, lambda p: p[1])] == ["x", "z", "y", "w", "v"]
    assert [k for k, _ in ordered(pairs, lambda p: p[1], descending=True)] == ["w", "v", "y", "x", "z"]


def test_cells_read_compactly():
    assert [cell_text(v) for v in (3e-4, 123456789.0, 100001, 0.5, True, "a\x1b[2J", None, [1, 2], MISSING)] == [
        "0.0003", "1.235e+08", "100001", "0.5", "true", "a\\x1b[2J", "None", "[1, 2]", ""]


def test_a_row_carries_its_flattened_config_and_last_values():
    row = RunRow.from_run(run("r1", config={"opt": {"lr": 3e-4}}, loss=1.0))
    assert (row.config, row.summary) == ({"opt.lr": 3e-4}, {"loss": 1.0})
    assert (row.value(LR), row.value(Column(SUMMARY, "loss")), row.value(SEED)) == (3e-4, 1.0, MISSING)
    bad = RunRow.from_run({"id": "x", "config": ["not", "a", "dict"], "summary": 3})
    assert (bad.config, bad.summary, bad.value(STEP)) == ({}, {}, MISSING)


def test_the_default_columns_are_the_config_keys_that_differ():
    m = model()
    assert m.default_columns and m.extra_columns() == [LR, SEED]  # "model" is the same everywhere
    m.set_filter("r1")
    assert m.extra_columns() == []  # one run: nothing differs
    keys = [f"k{i}" for i in range(9)]
    configs = [{k: 0 for k in keys}, {**{k: 1 for k in keys}, "k0": 0, "only": 1}, {k: 2 for k in keys}]
    differing = {*keys[1:], "only"}
    assert [c.key for c in default_config_columns(configs, differing, limit=3)] == ["k1", "k2", "k3"]
    configs[2]["k8"] = 1  # k8 now splits the runs only two ways: the others show first
    assert [c.key for c in default_config_columns(configs, differing, limit=7)] == [f"k{i}" for i in range(1, 8)]


def test_header_clicks_sort_up_down_then_back_to_severity():
    m = model()
    assert ids(m) == ["r3", "r4", "r2", "r1"]  # crashed first, then newest
    m.cycle_sort(LR)
    assert ids(m) == ["r4", "r1", "r3", "r2"] and m.sort == (LR, False)  # 1e-5, 3e-4, then the 1e-3 tie by severity
    m.cycle_sort(LR)
    assert ids(m) == ["r3", "r2", "r1", "r4"] and m.sort == (LR, True)
    m.cycle_sort(LR)
    assert ids(m) == ["r3", "r4", "r2", "r1"] and m.sort is None
    m.cycle_sort(SEED)
    assert ids(m) == ["r4", "r1", "r2", "r3"]  # r3 has no seed: last
    m.cycle_sort(SEED)
    assert ids(m) == ["r2", "r4", "r1", "r3"]  # ... in both directions
    m.cycle_sort(RUN)  # another column starts ascending
    assert ids(m) == ["r1", "r2", "r3", "r4"] and m.sort == (RUN, False)


def test_summary_columns_sort_with_nan_and_missing_last():
    m = model()
    m.set_extra_columns([REWARD])
    m.sort_by(REWARD, descending=True)
    assert ids(m) == ["r2", "r1", "r4", "r3"]  # NaN, then the run that never logged it
    m.sort_by(FIXED[0])  # status, by severity
    assert ids(m)[0] == "r3"


def test_columns_are_chosen_from_every_config_key_and_metric():
    m = model()
    assert m.available_columns() == [Column(CONFIG, "model"), LR, SEED, REWARD, Column(SUMMARY, "loss")]
    m.cycle_sort(SEED)
    m.toggle_column(REWARD)
    assert m.extra_columns() == [LR, SEED, REWARD] and not m.default_columns  # added to the defaults
    m.toggle_column(SEED)
    assert m.extra_columns() == [LR, REWARD] and m.sort is None  # hidden: no longer sorted by it
    m.sort_by(LR)
    m.set_filter("r1")
    assert m.extra_columns() == [LR, REWARD] and m.sort == (LR, False)  # a choice stays whatever is listed
    m.set_extra_columns(None)
    assert m.default_columns and m.extra_columns() == []
    assert ids(m) == ["r1"]
    m.set_filter("")
    assert ids(m) == ["r4", "r1", "r3", "r2"]  # the default columns show LR again: sorted by it again


def test_a_column_is_remembered_by_name():
    assert Column.parse(REWARD.ident) == REWARD and Column.parse(LR.ident) == LR
    assert [Column.parse(t) for t in ("run:step", "config:", "lr", "summary:a:b")] == [
        None, None, None, Column(SUMMARY, "a:b")]

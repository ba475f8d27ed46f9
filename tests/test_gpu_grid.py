"""pilothouse.gui.gpu_grid: every GPU of every node, what stands out, and a bounded history per GPU.

The first test feeds the model from two real agent subprocesses (their samplers read a stand-in
NVML, ``tests/support/fake_pynvml``: this machine has no GPU) through the app's real network links, with a
real trainer making one node busy; the others give the model the sampler's readings directly to
pin down each edge (NaN, a node that goes away, a GPU count that changes).
"""

from __future__ import annotations

import json
import math
import queue
import time

import numpy as np
import pytest
from support.gpus import NODE, reading, sample, start_gpu_agent
from support.processes import start_trainer
from support.waiting import wait_until

from pilothouse.gui.gpu_grid import (
    HOT,
    IDLE,
    MEM_FULL,
    MEMORY,
    MISSING,
    POWER_DRAW,
    TEMPERATURE,
    UTILIZATION,
    GpuGrid,
    Thresholds,
    gpu_reading,
)
from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.network import AgentLink
from pilothouse.wire.checks import SYSTEM_RUN_PREFIX
from pilothouse.wire.entries import KIND_METRIC, entry_points

BUSY_TRAINER = """
run = ph.init(project="grid", name="busy", agent=URL, heartbeat=0.2)
print(run.id, flush=True)
for step in range(100000):
    if run.sync(step).stop:
        break
    run.log({"loss": 1.0}, step=step)
    time.sleep(0.05)
"""


def feed(grid: GpuGrid, batches: queue.Queue) -> None:
    """What the System tab does with a link's batches: system readings in, run lists noted."""
    while not batches.empty():
        url, entries, _, runs = batches.get()
        for e in entries:
            if e.kind == KIND_METRIC and e.run.startswith(SYSTEM_RUN_PREFIX):
                _, vals, times = entry_points(e)
                grid.add((url, e.run), e.metric, times, vals, heard=time.time())
        if runs is not None:
            grid.note_runs(url, runs)


def flags_of(grid: GpuGrid, url: str) -> dict[int, frozenset]:
    return {c.gpu: c.flags for key, _, row in grid.rows() if key[0] == url for c in row}


def test_two_real_agents_idle_hot_full_then_a_lost_gpu_and_a_node_gone(tmp_path, monkeypatch):
    a, _ = start_gpu_agent(tmp_path, monkeypatch, "a", 4, {"1": {"util": 0}, "2": {"temp": 91},
                                                             "3": {"mem_used_gb": 79}})
    b, b_state = start_gpu_agent(tmp_path, monkeypatch, "b", 2, {"0": {"throttle": 0x40}})
    grid = GpuGrid(Thresholds(idle_after=0.5, missing_after=1.5))
    batches: queue.Queue = queue.Queue()
    links = [AgentLink(agent.url, tmp_path / f"app-{i}.sqlite", on_batch=lambda *batch: batches.put(batch),
                       runs_every=0.2) for i, agent in enumerate((a, b))]
    trainer = start_trainer(tmp_path, BUSY_TRAINER, a.url)
    try:
        for link in links:
            link.start()

        def settled() -> bool:
            feed(grid, batches)
            return flags_of(grid, a.url) == {0: frozenset(), 1: {IDLE}, 2: {HOT}, 3: {MEM_FULL}} \
                and flags_of(grid, b.url) == {0: {HOT}, 1: frozenset()}

        wait_until(settled, timeout=20, what=f"idle, hot and full GPUs on a; {flags_of(grid, b.url)}")
        [(key_a, host_a, row_a), (key_b, _, row_b)] = sorted(grid.rows(), key=lambda r: r[0][0] != a.url)
        assert host_a == key_a[1].removeprefix(SYSTEM_RUN_PREFIX)
        assert row_a[2].readings["temp_c"] == 91 and row_a[1].value(UTILIZATION) == 0
        assert row_a[3].value(MEMORY) == pytest.approx(100 * 79 / 80, rel=1e-6)
        assert row_b[0].readings["throttle"] == 0x40 and row_b[1].value(POWER_DRAW) == 250.001
        times, vals = grid.series(key_a, 2, TEMPERATURE)
        assert len(times) >= 3 and (vals == 91).all() and (np.diff(times) > 0).all()

        b_state.write_text(json.dumps({"1": {"lost": True}}))  # gpu1 of b falls off the bus
        wait_until(lambda: feed(grid, batches) or flags_of(grid, b.url) == {0: frozenset(), 1: {MISSING}},
                   timeout=15, what=f"b's gpu1 missing, its gpu0 cooled down: {flags_of(grid, b.url)}")

        b.stop()  # the whole node goes away
        wait_until(lambda: feed(grid, batches) or flags_of(grid, b.url) == {0: {MISSING}, 1: {MISSING}},
                   timeout=15, what="every GPU of b missing")
        assert flags_of(grid, a.url) == {0: frozenset(), 1: {IDLE}, 2: {HOT}, 3: {MEM_FULL}}  # a is unaffected

        links[0].stop()
        store = LocalStore(tmp_path / "app-0.sqlite")  # what a's link wrote: the tail is the series' end
        _, whole, whole_t = store.series(*key_a, "gpu2/temp_c")
        _, tail, tail_t = store.series_tail(*key_a, "gpu2/temp_c", 3)
        assert len(whole) > 3 and tail.tolist() == whole[-3:].tolist() and tail_t.tolist() == whole_t[-3:].tolist()
        store.close()
    finally:
        trainer.kill()
        trainer.wait()
        for link in links:
            link.stop()
        a.stop()
        b.stop()


def test_idle_needs_a_running_job_and_a_whole_stretch_under_the_threshold():
    grid = GpuGrid(Thresholds(idle_util=5, idle_after=10))
    for t in range(0, 12):
        sample(grid, 100.0 + t, util=1.0)
    assert grid.cell(NODE, 0, now=111).flags == frozenset()  # no job runs there: a free GPU is not idle
    grid.note_runs(NODE[0], [{"kind": "system", "status": "running"}, {"kind": "train", "status": "running"}])
    assert grid.cell(NODE, 0, now=111).flags == {IDLE}
    sample(grid, 112.0, util=30.0)  # one busy reading ends the stretch
    sample(grid, 113.0, util=1.0)
    assert IDLE not in grid.cell(NODE, 0, now=113).flags
    for t in range(114, 124):
        sample(grid, float(t), util=4.9)
    assert IDLE in grid.cell(NODE, 0, now=123).flags
    grid.note_runs(NODE[0], [{"kind": "train", "status": "finished"}])
    assert IDLE not in grid.cell(NODE, 0, now=123).flags


def test_nan_and_inf_readings_are_shown_as_such_and_never_idle_or_hot():
    grid = GpuGrid(Thresholds(idle_after=2))
    grid.set_busy(NODE[0], True)
    for t in range(5):
        sample(grid, 100.0 + t, util=math.nan, temp_c=math.inf, mem_used_gb=math.nan)
    cell = grid.cell(NODE, 0, now=104)
    assert cell.flags == frozenset()
    assert math.isnan(cell.value(UTILIZATION)) and math.isnan(cell.value(MEMORY))
    assert "utilization nan %" in cell.tooltip() and "temperature inf °C" in cell.tooltip()
    sample(grid, 105.0, util=0.0)
    sample(grid, 106.0, util=math.nan)  # unknown in the middle: the stretch starts again
    sample(grid, 107.0, util=0.0)
    sample(grid, 108.0, util=0.0)
    assert IDLE not in grid.cell(NODE, 0, now=108).flags
    sample(grid, 109.0, util=0.0)
    assert IDLE in grid.cell(NODE, 0, now=109).flags


def test_hot_by_temperature_or_throttling_and_memory_full_at_the_edge():
    grid = GpuGrid(Thresholds(hot_temp=85, mem_full=0.95))
    sample(grid, 100.0, gpus=4)
    reading(grid, "gpu0/temp_c", 100.0, 85.0)  # at the threshold: hot
    reading(grid, "gpu1/temp_c", 100.0, 84.9)
    reading(grid, "gpu1/throttle", 100.0, 32.0)  # software thermal slowdown: hot
    reading(grid, "gpu2/mem_used_gb", 100.0, 76.0)  # 95 % exactly
    reading(grid, "gpu3/mem_total_gb", 100.0, 0.0)  # a board that reports no total: no percentage, no flag
    assert [c.flags for c in grid.rows(now=100)[0][2]] == [{HOT}, {HOT}, {MEM_FULL}, frozenset()]
    assert math.isnan(grid.cell(NODE, 3, now=100).value(MEMORY))
    assert "throttling (reasons 0x20)" in grid.cell(NODE, 1, now=100).tooltip()


def test_a_silent_node_goes_missing_and_a_gpu_count_that_changes():
    grid = GpuGrid(Thresholds(missing_after=5))
    other = ("tcp://127.0.0.1:2", SYSTEM_RUN_PREFIX + "node-b")
    sample(grid, 100.0, gpus=8, temp_c=95.0)
    sample(grid, 100.0, gpus=2, node=other)
    assert all(c.flags == {HOT} for c in grid.rows(now=105)[0][2])
    sample(grid, 106.0, gpus=2, node=other)
    rows = grid.rows(now=106)
    assert all(c.flags == {MISSING} for c in rows[0][2])  # stale readings claim nothing but "missing"
    assert all(c.flags == frozenset() for c in rows[1][2]) and rows[1][2][0].heard == 106
    sample(grid, 107.0, gpus=4)  # node-a's agent came back seeing 4 of its 8 GPUs
    cells = grid.rows(now=108)[0][2]
    assert [c.flags for c in cells] == [frozenset()] * 4 + [{MISSING}] * 4
    assert "last reading 8 s ago" in cells[7].tooltip(now=108)
    assert grid.cell(NODE, 0, now=109) is cells[0]  # unchanged: the same cell, nothing allocated
    sample(grid, 108.5, gpus=1)
    assert grid.cell(NODE, 0, now=109) is not cells[0] and grid.cell(NODE, 0, now=109).readings["util"] == 50
    sample(grid, 109.0, gpus=9)  # and later one more than before: a new cell
    assert len(grid.rows(now=109)[0][2]) == 9
    grid.forget(other[0])
    assert grid.nodes() == [NODE]


def test_missing_goes_by_when_readings_arrived_not_the_node_clock():
    grid = GpuGrid(Thresholds(missing_after=5))
    sample(grid, 100.0)  # a node whose clock is an hour behind, heard just now
    grid.add(NODE, "gpu0/util", np.array([100.0]), np.array([50.0]), heard=3700.0)
    assert MISSING not in grid.cell(NODE, 0, now=3702).flags


def test_bad_input_is_refused_and_changes_nothing():
    grid = GpuGrid()
    for metric in ("gpu/util", "gpu1/fan", "gpu64/util", "gpu-1/util", "cpu/util", "gpu1/util/x", "GPU1/util"):
        assert not grid.add(NODE, metric, np.array([1.0]), np.array([1.0]))
    assert not grid.add(("tcp://127.0.0.1:1", "trainer-run"), "gpu0/util", np.array([1.0]), np.array([1.0]))
    with pytest.raises(ValueError, match="differ in shape"):
        grid.add(NODE, "gpu0/util", np.array([1.0, 2.0]), np.array([1.0]))
    assert len(grid) == 0 and grid.rows() == []
    for bad in (math.nan, -1.0, math.inf):
        with pytest.raises(ValueError, match="idle_util"):
            Thresholds(idle_util=bad)
    with pytest.raises(ValueError, match="history"):
        GpuGrid(history=0)
    assert gpu_reading("gpu63/temp_c") == (63, "temp_c") and gpu_reading("gpu64/temp_c") is None


def test_history_is_bounded_and_memory_is_a_percentage_of_the_total():
    grid = GpuGrid(history=100)
    t = np.arange(1000, dtype=np.float64)
    grid.add(NODE, "gpu0/util", t[:400], t[:400] % 100)
    grid.add(NODE, "gpu0/util", t[400:], t[400:] % 100)
    times, vals = grid.series(NODE, 0, UTILIZATION)
    assert (times == t[-100:]).all() and (vals == t[-100:] % 100).all()
    grid.add(NODE, "gpu0/mem_total_gb", t[:3], np.array([80.0, 40.0, 40.0]))
    grid.add(NODE, "gpu0/mem_used_gb", t[:3], np.array([20.0, 20.0, 40.0]))
    assert grid.series(NODE, 0, MEMORY)[1].tolist() == [25.0, 50.0, 100.0]
    assert grid.series(NODE, 0, POWER_DRAW)[0].size == 0  # never reported


def test_rows_are_ordered_by_host_name_as_people_count():
    grid = GpuGrid()
    for host in ("node10", "node2", "node1"):
        sample(grid, 1.0, node=("tcp://h:1", SYSTEM_RUN_PREFIX + host))
    assert [host for _, host, _ in grid.rows(now=1)] == ["node1", "node2", "node10"]

"""pilothouse.gui._qt.system: real agents' host and GPU samples become per-node charts over wall time."""

from __future__ import annotations

import os
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")
pytest.importorskip("PySide6")

from support.app_store import copy_all  # noqa: E402
from support.nvml_fake import fake_nvml  # noqa: E402
from support.sockets import free_port  # noqa: E402
from support.waiting import wait_until  # noqa: E402

from pilothouse.client import Client  # noqa: E402
from pilothouse.gui._qt.system import CPU, GPU_MEM, GPU_POWER, GPU_TEMP, GPU_UTIL, RAM, SystemPanel  # noqa: E402
from pilothouse.gui.local_store import LocalStore  # noqa: E402
from pilothouse.node.sampler import SystemSampler  # noqa: E402
from pilothouse.node.server import Agent  # noqa: E402
from pilothouse.wire.entries import KIND_METRIC  # noqa: E402


def cpu_samples(client: Client) -> int:
    return sum(e.n for p in client.history(kinds=[KIND_METRIC]) for e in p.entries if e.metric == "cpu/util")


def test_system_run_shows_host_charts_and_no_gpu_label(qtbot, agent_proc, tmp_path):
    panel = SystemPanel()
    qtbot.addWidget(panel)
    panel.show()
    store = LocalStore(tmp_path / "app.sqlite")
    with agent_proc.client() as client:
        wait_until(lambda: cpu_samples(client) >= 2, what="two host samples")
        copy_all(client, store, agent_proc.url)
        panel.show_agents(store)
        assert panel.hint.isHidden()
        [(key, node)] = panel.nodes.items()
        assert key[1].startswith("sys-")
        assert {CPU, RAM} <= set(node.charts) and GPU_UTIL not in node.charts
        qtbot.waitUntil(node.no_gpu.isVisible)  # children of a shown panel show on the next event loop turn
        assert "no gpu on this node" in node.no_gpu.text().lower()
        cpu = node.charts[CPU].curves["cpu"].series
        history = len(cpu.x)
        assert history >= 2 and abs(cpu.x[-1] - time.time()) < 60  # x is wall time, not a step
        assert set(node.charts[RAM].curves) == {"used", "total"}

        cursor = store.cursor(agent_proc.url)
        wait_until(lambda: cpu_samples(client) > history, what="a live sample")
        live = copy_all(client, store, agent_proc.url, after=cursor)
        panel.add_entries(agent_proc.url, live + live)  # a page seen twice must not double points
        assert len(cpu.x) == history + sum(e.n for e in live if e.metric == "cpu/util")
        assert (cpu.x[1:] > cpu.x[:-1]).all()


def test_gpu_node_gets_a_curve_per_gpu_and_no_label(qtbot, tmp_path):
    """A real in-process agent whose sampler reads two GPUs from a fake NVML (no GPU here)."""
    url, agents = f"tcp://127.0.0.1:{free_port()}", []

    def serve() -> None:  # the agent's SQLite connection belongs to the thread that serves
        agents.append(Agent(url, tmp_path / "gpu-agent", sample_interval=0.1,
                            sampler=SystemSampler(nvml=fake_nvml(2))))
        agents[0].serve_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    wait_until(lambda: agents, what="the agent")
    try:
        panel = SystemPanel()
        qtbot.addWidget(panel)
        store = LocalStore(tmp_path / "app.sqlite")
        with Client(url) as client:
            wait_until(lambda: cpu_samples(client) >= 2, what="two samples")
            copy_all(client, store, url)
        panel.show_agents(store)
        [node] = panel.nodes.values()
        assert node.no_gpu.isHidden()
        assert set(node.charts) == {GPU_UTIL, GPU_MEM, GPU_POWER, GPU_TEMP, CPU, RAM}
        assert set(node.charts[GPU_UTIL].curves) == {"gpu0", "gpu1"}
        assert set(node.charts[GPU_MEM].curves) == {"gpu0", "gpu1", "gpu0 total", "gpu1 total"}
        assert node.charts[GPU_MEM].curves["gpu1 total"].series.y[-1] == 80.0
        assert node.charts[GPU_TEMP].curves["gpu1"].series.y[-1] == 61.0
    finally:
        agents[0].stop()
        thread.join(10)


def test_a_packed_entrys_rest_is_shown_and_a_page_seen_twice_is_not(qtbot):
    """A page that ends inside a packed entry carries its part under the entry's id (above the
    cursor); the rest comes with the next page under the same id.  Both show, once each."""
    import numpy as np

    from pilothouse.wire.entries import Entry

    def samples(id_: int, times: list[float]) -> Entry:
        t = np.array(times)
        return Entry(id_, "sys-node1", KIND_METRIC, "cpu/util", 0, len(t), np.zeros(len(t), np.int64).tobytes(),
                     (t - 1000.0).tobytes(), t.tobytes(), None)

    panel = SystemPanel()
    qtbot.addWidget(panel)
    url = "tcp://127.0.0.1:7001"
    panel.add_entries(url, [samples(1, [1000.0, 1001.0]), samples(3, [1002.0])])  # 3: a part
    second = [samples(3, [1003.0, 1004.0]), samples(4, [1005.0])]  # 3's rest, then more
    panel.add_entries(url, second)
    panel.add_entries(url, second)  # the same page again
    [node] = panel.nodes.values()
    cpu = node.charts[CPU].curves["cpu"].series
    assert cpu.x.tolist() == [1000.0, 1001.0, 1002.0, 1003.0, 1004.0, 1005.0]

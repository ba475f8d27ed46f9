"""The reward distribution chart and the steering marks offscreen, in the Charts panel on a real
LocalStore: nested bands per run with the median a line, the commands' marks on every chart with
what changed and who asked on hover, hidden by the "steering" box, hidden runs' bands with them."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from support.app_store import r1_chunk as chunk
from support.steering_events import quantiles, steered

from pilothouse.gui._qt.charts import ChartsPanel
from pilothouse.gui._qt.distribution import DistributionChart
from pilothouse.gui.distribution import CHART
from pilothouse.gui.local_store import LocalStore

A = "tcp://127.0.0.1:7001"
STEPS = np.arange(40)


@pytest.fixture
def panel(qtbot, tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    store.put_runs(A, [{"id": r, "project": "p", "name": name, "status": "running", "created": 1.0}
                       for r, name in (("r1", "base"), ("r2", "wide"))])
    page = quantiles(1, "r1", STEPS, STEPS / 40) + quantiles(7, "r2", STEPS, 2 - STEPS / 40)
    page += [chunk(13, "loss", STEPS, 1 / (STEPS + 1))]
    page += steered(14, "r1", "c1", "set", 10, values={"lr": 3e-4})
    page += steered(16, "r1", "c2", "set", 25, values={"lr": 1e-4})
    store.write_page(A, page, 17)
    panel = ChartsPanel()
    qtbot.addWidget(panel)
    panel.resize(1000, 700)
    panel.show()
    panel.show_runs([(A, "r1"), (A, "r2")], store)
    yield panel
    store.close()


def steering_lines(panel: ChartsPanel, metric: str) -> list:
    return [line for line in panel.charts[metric].alert_lines if "asked by" in line.toolTip()]


def test_the_quantiles_are_nested_bands_and_the_median_a_line(panel):
    chart = panel.charts[CHART]
    assert isinstance(chart, DistributionChart) and {"rollouts/reward/mean", "loss"} <= set(panel.charts)
    assert not any(m.startswith("rollouts/reward/p") for m in panel.charts)  # no line chart per quantile
    chart.flush()
    assert set(chart.curves) == {"r1", "r2"}  # the medians, named as the runs' curves are on every chart
    xs, ys = chart.curves["r1"].raw.getData()
    assert np.allclose(xs, STEPS) and np.allclose(ys, STEPS / 40)
    for run, mean in (("r1", STEPS / 40), ("r2", 2 - STEPS / 40)):
        bands = chart.quantiles[run].bands
        assert set(bands) == {("min", "max"), ("p10", "p90")}
        for (lo, hi), width in ((("min", "max"), 1.0), (("p10", "p90"), 0.5)):
            band = bands[(lo, hi)]
            assert not band.fill.path().isEmpty()
            _, low = band.lo_edge.getData()
            _, high = band.hi_edge.getData()
            assert np.allclose(low, mean - width) and np.allclose(high, mean + width)
        outer, inner = (bands[b].fill.brush().color().alpha() for b in (("min", "max"), ("p10", "p90")))
        assert 0 < outer < inner < 255  # min–max lighter than p10–p90
    (_, _), (y0, y1) = chart.getPlotItem().getViewBox().viewRange()
    assert y0 <= -1.0 and y1 >= 3.0  # the view holds both runs' whole bands
    assert "base p50: 0.5 (p10–p90 0 … 1; min–max -0.5 … 1.5)" in chart.readout(20)

    panel._hide((A, "r2"), True)  # clicked off in the legend: its bands go with its median
    assert not chart.curves["r2"].raw.isVisible()
    assert not any(b.fill.isVisible() for b in chart.quantiles["r2"].bands.values())
    assert all(b.fill.isVisible() for b in chart.quantiles["r1"].bands.values())


def test_steering_marks_say_what_and_who_on_hover_and_the_box_hides_them_everywhere(panel):
    for metric in (CHART, "loss", "rollouts/reward/mean"):
        lines = steering_lines(panel, metric)
        assert [line.value() for line in lines] == [10.0, 25.0]
        assert lines[1].label.toPlainText() == "lr 0.0003 → 0.0001 (base)"
        tip = lines[1].toolTip()
        assert tip.startswith("base: lr 0.0003 → 0.0001 at step 25\nasked by alice@laptop (cli)\n")

    panel.steering.setChecked(False)
    assert all(steering_lines(panel, m) == [] for m in panel.charts)
    panel.add_entries(A, steered(18, "r2", "c3", "pause", 30))  # live, while hidden: marked once shown
    assert steering_lines(panel, CHART) == []
    panel.steering.setChecked(True)
    lines = steering_lines(panel, CHART)
    assert [line.value() for line in lines] == [10.0, 25.0, 30.0] and "paused at step 30 by" in lines[2].toolTip()

    panel.add_entries(A, steered(20, "r1", "c4", "set", 35, values={"lr": 5e-5}))  # live, shown: marked at once
    lines = steering_lines(panel, "loss")
    assert [line.value() for line in lines] == [10.0, 25.0, 35.0, 30.0]  # each run's in turn
    assert lines[2].label.toPlainText() == "lr 0.0001 → 5e-05 (base)"

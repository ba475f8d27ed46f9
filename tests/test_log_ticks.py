"""pilothouse.gui.log_ticks: a log y axis whose labels never pile up and always say something."""

from __future__ import annotations

import numpy as np
import pytest

from pilothouse.gui.log_ticks import MIN_GAP_PX, log_ticks, tick_label


def _ranges():
    rng = np.random.default_rng(7)
    for _ in range(2000):
        lo = rng.uniform(-12, 8)
        yield lo, lo + 10 ** rng.uniform(-3, 1.6), rng.uniform(2 * MIN_GAP_PX, 900)


def test_labels_are_a_line_apart_readable_and_never_fewer_than_two():
    short = 0
    for lo, hi, pixels in _ranges():
        ticks = log_ticks(lo, hi, pixels)
        where = f"range {lo:.4f}..{hi:.4f} over {pixels:.0f} px"
        assert len(ticks.major) >= 2, where
        assert all(lo - 1e-9 <= t <= hi + 1e-9 for t in ticks.major + ticks.minor), where
        gaps = np.diff(ticks.major) * pixels / (hi - lo)
        # no label on top of another: MIN_GAP_PX apart, a little less (still a line of text) only where
        # the axis is too short for two labels that far apart inside the range
        assert (gaps >= 0.75 * MIN_GAP_PX).all(), where
        short += (gaps < MIN_GAP_PX).any()
        values = [float(s) for s in ticks.labels]  # each label is a number, and the number at its tick
        assert len(set(ticks.labels)) == len(ticks.labels), (where, ticks.labels)
        assert np.allclose(np.log10(values), ticks.major, atol=0.01), (where, ticks.labels)
        assert not set(ticks.minor) & set(ticks.major)
    assert short < 20  # out of 2000: the rule, not the exception


@pytest.mark.parametrize(("lo", "hi", "pixels", "labels"), [
    (-4, 0, 200, ["1e-4", "0.001", "0.01", "0.1", "1"]),  # decades, short numbers
    (-1, 1, 180, ["0.1", "0.2", "0.5", "1", "2", "5", "10"]),  # room for 1-2-5
    (-0.097, 0.079, 200, ["0.8", "0.9", "1.0", "1.1"]),  # inside a decade: evenly spaced, above 1 too
    (-30, 10, 150, ["1e-30", "1e-20", "1e-10", "1", "1e10"]),  # forty decades: every tenth
    (3, 3.2, 200, ["1000", "1100", "1200", "1300", "1400", "1500"]),
])
def test_the_scale_matches_the_range(lo, hi, pixels, labels):
    assert log_ticks(lo, hi, pixels).labels == labels


def test_pyqtgraphs_pile_up_under_one_is_gone():
    """0.3..3 on a chart's height: pyqtgraph labels 0.4 ... 0.9 a few pixels apart under the 1."""
    ticks = log_ticks(np.log10(0.3), np.log10(3), 180)
    assert ticks.labels == ["0.5", "1", "2"] and len(ticks.minor) >= 5  # the rest as unlabelled marks


def test_empty_or_broken_ranges_give_no_ticks():
    for lo, hi, pixels in ((1, 1, 200), (0, float("nan"), 200), (0, 1, 0), (float("-inf"), 1, 200)):
        assert log_ticks(lo, hi, pixels) == ([], [], [])
    assert [tick_label(p) for p in (0, 2, 3.5, -5.30103)] == ["1", "100", "3162", "5e-6"]

"""PySide6 6.12.0 on Python 3.11 leaks a reference to None on every Qt call returning nothing and
aborts ("Fatal Python error: none_dealloc: deallocating None") after a few thousand; pyqtgraph makes
many per frame.  This runs thousands of live-chart frames in a subprocess, where such an abort
would show as a crash, so a PySide6 upgrade that brings it back fails here first."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("PySide6")

FRAMES = """
import os
os.environ["QT_QPA_PLATFORM"] = "offscreen"
import numpy as np
from PySide6.QtWidgets import QApplication
from pilothouse.gui._qt.chart import ChartWidget
app = QApplication([])
chart = ChartWidget()
chart.resize(600, 300)
chart.show()
chart.add_curve("a")
chart.set_smoothing(0.6)
for frame in range(1500):  # each frame makes dozens of Qt calls
    chart.append("a", np.array([float(frame)]), np.array([np.sin(frame / 50)]))
    chart.flush()
    app.processEvents()
print("frames", frame + 1)
"""


def test_thousands_of_live_frames_do_not_abort():
    out = subprocess.run([sys.executable, "-c", FRAMES], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "deallocating None" not in out.stderr, out.stderr[-2000:]
    assert out.stdout.strip() == "frames 1500"


def test_the_pyside6_pin_holds():
    import PySide6

    major, minor = (int(p) for p in PySide6.__version__.split(".")[:2])
    assert (major, minor) < (6, 12), f"PySide6 {PySide6.__version__}: prove it clean before lifting the pin"

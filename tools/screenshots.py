"""Refresh the README's screenshots from the real app on a live demo: ``python tools/screenshots.py``.

Runs ``pilothouse demo --headless`` (a real agent and two GRPO trainers), opens the real window
on a virtual display (Xvfb, so it is drawn exactly as a desktop draws it, dialogs included), sets up
each scene the way a user would (select the runs, log y, the Rollouts tab while steps arrive, Stop
asked) and grabs the screen into ``assets/``.  Needs Xvfb and the gui extra; look at every picture
before committing it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"
DISPLAY = ":97"
SIZE = (1500, 950)


def main() -> int:
    xvfb = subprocess.Popen(["Xvfb", DISPLAY, "-screen", "0", f"{SIZE[0]}x{SIZE[1]}x24", "-nolisten", "tcp"])
    demo = subprocess.Popen([sys.executable, "-m", "pilothouse", "demo", "--headless"], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        url = None
        for line in demo.stdout:
            found = re.search(r"demo agent on (tcp://\S+)", line)
            if found:
                url = found.group(1)
                break
        if url is None:
            raise SystemExit("the demo printed no agent address")
        time.sleep(25)  # some history on the charts and a few rollout steps before the first picture
        env = {**os.environ, "DISPLAY": DISPLAY, "QT_QPA_PLATFORM": "xcb"}
        return subprocess.call([sys.executable, __file__, "--scenes", url], env=env)
    finally:
        demo.send_signal(signal.SIGINT)  # the demo's own clean-up: runs stopped, agent ended, data removed
        try:
            demo.wait(60)
        except subprocess.TimeoutExpired:
            demo.kill()
        xvfb.terminate()  # SIGTERM: a killed Xvfb leaves its socket behind and breaks the next display
        xvfb.wait(10)


def scenes(url: str) -> int:
    """In the app's process: each scene set up through the window's own controls, then grabbed."""
    from PySide6.QtCore import QItemSelectionModel, QSettings, QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    from pilothouse.gui._qt.app import MainWindow

    app = QApplication([])
    # the default layout, not the user's saved one (their keys, in the same config dir, stay in use)
    QSettings.setPath(QSettings.Format.NativeFormat, QSettings.Scope.UserScope,
                      tempfile.mkdtemp(prefix="pilothouse-shots-"))
    store = Path(tempfile.mkdtemp(prefix="pilothouse-shots-store-")) / "app.sqlite"
    w = MainWindow(store, [url])
    w.resize(*SIZE)
    w.show()

    def wait(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.02)

    def grab(name: str) -> None:
        wait(0.5)
        QApplication.primaryScreen().grabWindow(0).save(str(ASSETS / name))
        print(f"wrote assets/{name}", flush=True)

    wait(6)
    model = w.table.selectionModel()
    for row in range(w.table_model.rowCount()):  # both demo runs, compared
        model.select(w.table_model.index(row, 0), QItemSelectionModel.SelectionFlag.Select
                     | QItemSelectionModel.SelectionFlag.Rows)
    wait(4)
    w.tabs.setCurrentIndex(0)
    w.charts.log_y.setChecked(True)
    wait(3)
    grab("charts-log-y.png")
    w.charts.log_y.setChecked(False)

    w.tabs.setCurrentIndex(2)  # Rollouts, while steps arrive
    wait(8)
    grab("rollouts-live.png")

    def shoot_and_cancel() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(100, shoot_and_cancel)
            return
        wait(0.3)
        grab("stop-confirm.png")
        box.reject()  # Cancel: the runs go on

    w.tabs.setCurrentIndex(0)
    wait(2)
    QTimer.singleShot(300, shoot_and_cancel)
    w.actions["stop"].trigger()
    wait(1)
    grab("app-screenshot.png")
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(scenes(sys.argv[2]) if sys.argv[1:2] == ["--scenes"] else main())

"""The Qt layer: the only part of gui/ that imports PySide6 and pyqtgraph."""

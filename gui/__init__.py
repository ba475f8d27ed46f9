"""The Pilothouse desktop app (PySide6 + pyqtgraph).

Only ``gui._qt`` may import Qt; models, buffers, the local store and the network
client stay plain Python.  The app itself is built under the desktop-app issue.
"""

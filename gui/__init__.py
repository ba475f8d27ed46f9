"""The Pilothouse desktop app (PySide6 + pyqtgraph), ``pilothouse.gui``; ``python -m pilothouse.gui``.

Only ``pilothouse.gui._qt`` imports Qt; models, buffers, the local store and the network links
stay plain Python, tested without a display.
"""

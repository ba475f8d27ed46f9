"""Helpers the tests share that the app does not ship (tests/ is on sys.path: ``from support.x import ...``)."""

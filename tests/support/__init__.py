"""Helpers the tests share that the app does not ship (tests/ is on sys.path: ``from support.x import ...``)."""

import pytest

# a test module imports these helpers before pytest loads them as its plugin: rewrite their asserts anyway
pytest.register_assert_rewrite("support.wire_peer")

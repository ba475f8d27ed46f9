"""A full disk on demand: the ``small_disk`` fixture mounts a 128 MB tmpfs for a test (we run as
root, as CI does), and ``fill_disk`` takes every free byte of it.  A test module takes the fixture
with ``pytest_plugins = ["support.disk"]``."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import pytest


def fill_disk(path: Path) -> None:
    """Take every free byte of ``path``'s filesystem."""
    with open(path, "wb", buffering=0) as out:
        for size in (1 << 20, 65536, 4096, 512):  # the last bits too
            while True:
                try:
                    if out.write(b"\0" * size) < size:
                        break
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128m,mode=0700", "tmpfs", str(mount)],
                          check=False, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs for the full-disk test ({done.stderr.strip()}): run the tests as root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)

"""The second local user of the tests that need one (``nobody``, through setpriv): ``NOBODY`` and
``as_nobody``, which runs a script as that user, as a stranger on a shared GPU node would."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

NOBODY = pwd.getpwnam("nobody")  # the second local user of the tests that need one


def as_nobody(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``code`` as the local user nobody, with a home of its own: its own local keys, no access
    to the owner's files; what a stranger on a shared GPU node can do."""
    home = Path(tempfile.mkdtemp(prefix="pilothouse-nobody-"))
    os.chown(home, NOBODY.pw_uid, NOBODY.pw_gid)
    script = home / "probe.py"
    script.write_text(textwrap.dedent(code))
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups",
                           sys.executable, str(script), *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=home)

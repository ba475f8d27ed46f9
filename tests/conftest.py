"""Fixtures that start real processes: the agent via the real CLI, trainers as scripts."""

from __future__ import annotations

import os
import pwd
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import zmq

# every process of these tests is "the owner": one local keyring for the whole session, never the
# user's real one (a module-scoped agent and a later test's trainer must hold the same keys)
os.environ["PILOTHOUSE_LOCAL_KEYS"] = tempfile.mkdtemp(prefix="pilothouse-local-keys-")

from pilothouse.client import Client, reachable  # noqa: E402
from pilothouse.security import local_keyring, secure_client  # noqa: E402
from pilothouse.wire.entries import entry_body  # noqa: E402
from pilothouse.wire.messages import pack, unpack  # noqa: E402
from pilothouse.wire.records import REC_METRICS, encode_batch, metrics_packer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NOBODY = pwd.getpwnam("nobody")  # the second local user of the tests that need one
TOKEN = "5eed" * 8  # a run's secret (Run.token) for raw hellos
# The suite runs on several pytest-xdist workers (pyproject addopts); the tests that start an agent
# on the one default address run on one worker, one after the other, as they must.
ON_THE_DEFAULT_PORT = pytest.mark.xdist_group("default-port")


def as_owner(sock: zmq.Socket) -> zmq.Socket:
    """A raw socket that speaks for the agents' owner: the owner's local CURVE keys, as every
    trainer, CLI and app of this user has them."""
    ring = local_keyring()
    secure_client(sock, ring.keypair("client"), ring.public("agent"))
    return sock


def owner_agent_socket(sock: zmq.Socket) -> zmq.Socket:
    """A raw server socket that the owner's clients take for their agent (it holds the local agent key)."""
    keys = local_keyring().keypair("agent")
    sock.curve_server = True
    sock.curve_secretkey, sock.curve_publickey = keys.secret, keys.public
    return sock


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


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


class AgentProcess:
    """A real ``pilothouse agent`` subprocess that tests can kill and restart."""

    def __init__(self, data: Path, port: int, extra: list[str] | None = None):
        self.data = data
        self.url = f"tcp://127.0.0.1:{port}"
        self.extra = extra or []
        self.proc: subprocess.Popen | None = None
        self.log = data / "agent-test.log"

    def start(self) -> "AgentProcess":
        self.data.mkdir(parents=True, exist_ok=True)
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pilothouse", "agent", "--bind", self.url, "--data", str(self.data), *self.extra],
            stdout=out, stderr=out, cwd=ROOT)
        out.close()
        wait_until(self.ready, timeout=20, what=f"agent on {self.url}")
        return self

    def ready(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
        return reachable(self.url, timeout=0.5)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(timeout=20)

    def client(self, timeout: float = 10.0) -> Client:
        return Client(self.url, timeout=timeout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(autouse=True)
def own_keyring(tmp_path, monkeypatch):
    """Tests (and the processes they start) never see the user's real CurveZMQ keys."""
    monkeypatch.setenv("PILOTHOUSE_KEYS", str(tmp_path / "no-keys"))


@pytest.fixture
def agent_proc(tmp_path):
    proc = AgentProcess(tmp_path / "agent", free_port(), ["--stale-after", "3"]).start()
    yield proc
    proc.stop()


def batch_fields(records: list) -> dict:
    """Records written readably -> the batch entries of a 'rec' message (``n``, ``keys``, ``metrics``,
    ``others``), made by the trainer's own encoder and passed through msgpack as the agent gets them:
    [0, step, wall_time, {name: value}] metrics, [1, step, wall_time, rows] rollouts, [2, step, wall_time,
    path] a checkpoint."""
    queue = []
    for kind, step, wall_time, payload in records:
        if kind == REC_METRICS:
            queue.append((kind, tuple(payload), metrics_packer(len(payload))(step, wall_time, *payload.values())))
        else:
            queue.append((kind, None, (step, wall_time, payload)))
    return unpack(pack(encode_batch(queue)))


def start_trainer(tmp_path: Path, body: str, url: str, *args: str, name: str = "trainer") -> subprocess.Popen:
    """Run ``body`` as a real trainer script (``URL`` and ``ARGS`` are defined for it)."""
    script = tmp_path / f"{name}.py"
    script.write_text("import sys, time, math\nimport pilothouse as ph\nURL = sys.argv[1]\nARGS = sys.argv[2:]\n"
                      + textwrap.dedent(body))
    env = dict(os.environ)
    env.pop("PILOTHOUSE_AGENT", None)
    return subprocess.Popen([sys.executable, str(script), url, *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_events(client: Client, run_id: str, *names: str) -> list[dict]:
    """A run's journal events (status, command, ack, alert...), oldest first; only ``names`` if given."""
    bodies = [entry_body(e) for page in client.history(run_id, ["e"]) for e in page.entries]
    return [b for b in bodies if not names or b.get("event") in names]


def run_cli(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """``pilothouse ARGS`` as a real subprocess; $PILOTHOUSE_AGENT only when ``env`` sets it."""
    full_env = {**os.environ, **(env or {})}
    if not env or "PILOTHOUSE_AGENT" not in env:
        full_env.pop("PILOTHOUSE_AGENT", None)
    return subprocess.run([sys.executable, "-m", "pilothouse", *args], check=False, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=full_env)


def finish(proc: subprocess.Popen, timeout: float = 60) -> str:
    proc.wait(timeout=timeout)  # trainers print little, so their pipes never fill
    out, err = proc.stdout.read(), proc.stderr.read()  # read() keeps what readline() buffered
    assert proc.returncode == 0, f"trainer failed ({proc.returncode}):\n{out}\n{err}"
    return out


# A trainer that logs a loss each step until stopped (ARGS: project, name), for tests that steer one.
LOOP_UNTIL_STOPPED = """
run = ph.init(project=ARGS[0], name=ARGS[1], agent=URL, heartbeat=0.2, config={"lr": 0.1})
print(run.id, flush=True)
for step in range(100000):
    if run.sync(step).stop:
        break
    run.log({"loss": 1.0 / (step + 1)}, step=step)
    time.sleep(0.01)
run.finish()
"""


@pytest.fixture
def window(qtbot, tmp_path):
    """``window(agents)``: a real MainWindow on a store in ``tmp_path``, shown, closed at the end."""
    import gc

    from pilothouse.gui._qt.app import MainWindow

    gc.collect()  # earlier tests' windows die here, on the UI thread, not in a worker's collection
    made = []

    def make(agents=()):
        w = MainWindow(tmp_path / "app-store.sqlite", agents)
        qtbot.addWidget(w)
        w.show()
        made.append(w)
        return w
    yield make
    for w in made:
        w.close()

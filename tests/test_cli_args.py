"""The ``pilothouse`` command with bad arguments: a clear message, the right exit status, nothing left behind.

Reader commands run in-process through ``pilothouse.cli.main`` (fast, real sockets to a real agent);
the ``agent`` command and anything whose traceback matters runs as a real ``python -m pilothouse``.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time

import msgpack
import pytest
import zmq
from support.messages import TOKEN
from support.paths import ROOT
from support.processes import AgentProcess, run_cli
from support.sockets import as_owner, free_port

import pilothouse as ph
from pilothouse.cli import main
from pilothouse.version import __version__


def in_process(capsys, *args: str) -> tuple[int, str, str]:
    """``main(args)`` -> (exit status, stdout, stderr); argparse's SystemExit is an exit status too."""
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def port_is_free(port: int) -> bool:
    for host in ("127.0.0.1", "0.0.0.0"):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


@pytest.fixture(autouse=True)
def _no_agent_env(monkeypatch):
    monkeypatch.delenv("PILOTHOUSE_AGENT", raising=False)


@pytest.fixture(scope="module")
def cli_agent(tmp_path_factory):
    """An agent holding run "solo" and two runs both called cli/dup."""
    proc = AgentProcess(tmp_path_factory.mktemp("cli") / "agent", free_port(), ["--stale-after", "3"]).start()
    ids = {}
    for key, name in (("solo", "solo"), ("dup1", "dup"), ("dup2", "dup")):
        run = ph.init("cli", name, agent=proc.url, id=f"{key}id", heartbeat=3600)
        for s in range(5):
            run.log({"x": float(s)}, step=s)
        assert run.finish(timeout=10)
        ids[key] = run.id
    yield proc, ids
    proc.stop()


# --- URLs ----------------------------------------------------------------------------------------

BAD_URLS = [
    ("http://127.0.0.1:7766", r"scheme must be tcp or ipc, got 'http'"),
    ("http://x", r"scheme must be tcp or ipc"),
    ("tcp://127.0.0.1", r"needs a host and a port 1-65535"),
    ("tcp://h:99999", r"needs a host and a port 1-65535"),
    ("tcp://h:0", r"needs a host and a port 1-65535"),
    ("tcp://:7766", r"needs a host and a port"),
    ("tcp://h:port", r"needs a host and a port"),
    ("127.0.0.1:7766", r"must look like tcp://127.0.0.1:7766"),
    ("", r"must look like tcp://"),
    ("ipc://", r"ipc URL needs a path"),
]


@pytest.mark.parametrize("command", ["runs", "tail", "export"])
@pytest.mark.parametrize("url, why", BAD_URLS, ids=[u or "empty" for u, _ in BAD_URLS])
def test_bad_agent_url_is_a_usage_error(capsys, command, url, why):
    extra = [] if command == "runs" else ["somerun"]
    code, out, err = in_process(capsys, command, *extra, "--agent", url, "--timeout", "1")
    assert code == 2 and out == ""
    assert "argument --agent" in err
    assert re.search(why, err), err


def test_bad_agent_url_from_the_environment_is_named(tmp_path):
    r = run_cli("runs", env={"PILOTHOUSE_AGENT": "http://nowhere"})
    assert r.returncode == 2, r
    assert "http" in r.stderr and "scheme must be tcp or ipc" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "192.168.7.7", "example.invalid", "[::]"])
def test_non_loopback_bind_is_refused_and_leaves_nothing(tmp_path, host):
    port = free_port()
    data = tmp_path / "data"
    started = time.monotonic()
    r = run_cli("agent", "--bind", f"tcp://{host}:{port}", "--data", str(data), timeout=20)
    assert r.returncode == 2, r
    assert "loopback" in r.stderr and "SSH" in r.stderr and "ssh -N -L" in r.stderr and "--listen" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert time.monotonic() - started < 15
    assert not data.exists(), "a refused agent created its data directory"
    assert port_is_free(port), "a refused agent left a listening socket"


def test_wildcard_bind_is_refused(tmp_path):
    port = free_port()
    r = run_cli("agent", "--bind", f"tcp://*:{port}", "--data", str(tmp_path / "data"), timeout=20)
    assert r.returncode == 2, r
    assert "bind to an explicit address, not '*'" in r.stderr
    assert not (tmp_path / "data").exists() and port_is_free(port)


@pytest.mark.parametrize("url", ["tcp://127.0.0.1", "http://127.0.0.1:7766", "tcp://127.0.0.1:70000"])
def test_malformed_bind_is_a_usage_error(capsys, url):
    code, _, err = in_process(capsys, "agent", "--bind", url)
    assert code == 2 and "argument --bind" in err


def test_bind_to_a_busy_port_says_so_and_the_running_agent_is_untouched(cli_agent, tmp_path):
    proc, ids = cli_agent
    r = run_cli("agent", "--bind", proc.url, "--data", str(tmp_path / "second"), timeout=20)
    assert r.returncode == 1, r
    assert f"cannot listen on {proc.url}" in r.stderr and "another agent running" in r.stderr
    assert "Traceback" not in r.stderr
    with proc.client() as c:
        assert c.resolve("solo") == ids["solo"]


def test_failed_bind_leaves_no_data_directory(cli_agent, tmp_path):
    proc, _ = cli_agent
    r = run_cli("agent", "--bind", proc.url, "--data", str(tmp_path / "second"), timeout=20)
    assert r.returncode == 1
    assert not (tmp_path / "second").exists()


def test_ipv6_loopback_bind_works(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pilothouse", "agent", "--bind", f"tcp://[::1]:{port}",
                             "--data", str(tmp_path / "data")], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2.0)
        alive = proc.poll() is None
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert alive, err


# --- numbers ---------------------------------------------------------------------------------------

BAD_SECONDS = ["-1", "0", "nan", "NaN", "inf", "-inf", "abc", ""]


@pytest.mark.parametrize("option", ["--sample-interval", "--stale-after"])
@pytest.mark.parametrize("value", BAD_SECONDS, ids=[v or "empty" for v in BAD_SECONDS])
def test_agent_interval_must_be_positive_seconds(capsys, tmp_path, option, value):
    # the non-loopback bind makes sure no agent could start here even if the value were accepted
    code, _, err = in_process(capsys, "agent", "--bind", "tcp://10.9.9.9:7766", "--data", str(tmp_path / "d"),
                                f"{option}={value}")
    assert code == 2
    assert f"argument {option}: must be a positive number of seconds, got {value!r}" in err, err
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "-inf", "x"])
def test_reader_timeout_must_be_positive_seconds(capsys, value):
    code, _, err = in_process(capsys, "runs", "--agent", "tcp://127.0.0.1:1", f"--timeout={value}")
    assert code == 2 and "argument --timeout: must be a positive number of seconds" in err


@pytest.mark.parametrize("args, why", [
    ((), r"the following arguments are required: COMMAND"),
    (("frobnicate",), r"invalid choice: 'frobnicate'"),
    (("export",), r"the following arguments are required: run"),
    (("tail",), r"the following arguments are required: run"),
    (("export", "r", "--format", "xml"), r"invalid choice: 'xml'"),
    (("agent", "--log-level", "LOUD"), r"invalid choice: 'LOUD'"),
    (("runs", "--bogus"), r"unrecognized arguments: --bogus"),
    (("rollouts",), r"the following arguments are required: run"),
    (("rollouts", "r", "--step", "-1"), r"argument --step: a step must be an int in \[0, "),
    (("rollouts", "r", "--step", "two"), r"argument --step: not a step: 'two'"),
    (("rollouts", "r", "--last", "0"), r"argument --last: --last must be a whole number from 1 to 1000"),
    (("rollouts", "r", "--last", "1001"), r"argument --last: --last must be a whole number from 1 to 1000"),
    (("rollouts", "r", "--limit", "0"), r"argument --limit: --limit must be a whole number from 1 to"),
    (("rollouts", "r", "--sort", "-loss"), r"argument --sort: sort by reward, advantage or rewards/NAME"),
    (("rollouts", "r", "--sort", "rewards/\x1b[2J"), r"sort by reward.*got 'rewards/\\x1b\[2J'$"),
    (("rollouts", "r", "--step", "3", "--last", "2"), r"argument --last: not allowed with argument --step"),
])
def test_usage_errors(capsys, args, why):
    code, _, err = in_process(capsys, *args)
    assert code == 2 and re.search(why, err), err


# --- no agent ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [("runs",), ("runs", "--json"), ("tail", "r1"), ("export", "r1"), ("rollouts", "r1"),
                                  ("pause", "r1"), ("set", "r1", "lr=1")])  # never "the command stays queued"
def test_commands_without_an_agent_fail_within_the_timeout(capsys, args):
    url = f"tcp://127.0.0.1:{free_port()}"
    started = time.monotonic()
    code, out, err = in_process(capsys, *args, "--agent", url, "--timeout", "1")
    elapsed = time.monotonic() - started
    assert code == 1
    assert f"pilothouse: no answer from the agent at {url} within 1 s" in err, err
    assert "pilothouse agent" in err  # says how to start one
    assert out == ""
    assert 0.9 <= elapsed < 3.0, elapsed


def test_runs_without_an_agent_real_process():
    url = f"tcp://127.0.0.1:{free_port()}"
    r = run_cli("runs", "--agent", url, "--timeout", "1", timeout=15)
    assert r.returncode == 1 and "no answer from the agent" in r.stderr and "Traceback" not in r.stderr


# --- run references --------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["export", "tail", "rollouts"])
@pytest.mark.parametrize("ref", ["nope", "cli/nope", "solo\x1b[2J", "x" * 300, ""], ids=["name", "proj-name",
                                                                                         "escape", "long", "empty"])
def test_unknown_run_is_an_error(capsys, cli_agent, command, ref):
    proc, _ = cli_agent
    code, out, err = in_process(capsys, command, ref, "--agent", proc.url, "--timeout", "5")
    assert code == 1 and out == ""
    assert f"pilothouse: no run with id or name {ref!r}" in err, err


@pytest.mark.parametrize("command", ["export", "tail", "rollouts"])
@pytest.mark.parametrize("ref", ["dup", "cli/dup"])
def test_ambiguous_run_name_asks_for_an_id(capsys, cli_agent, command, ref):
    proc, ids = cli_agent
    code, out, err = in_process(capsys, command, ref, "--agent", proc.url, "--timeout", "5")
    assert code == 1 and out == ""
    assert f"{ref!r} names 2 runs" in err and "use a run id" in err, err
    assert ids["dup1"] in err and ids["dup2"] in err


def test_ambiguous_run_is_exportable_by_id(capsys, cli_agent, tmp_path):
    proc, ids = cli_agent
    out_file = tmp_path / "dup2.csv"
    code, _, err = in_process(capsys, "export", ids["dup2"], "-o", str(out_file), "--agent", proc.url)
    assert code == 0, err
    lines = out_file.read_text().splitlines()
    assert lines[0] == "metric,step,value,wall_time" and len(lines) == 6
    assert f"wrote 5 points of run {ids['dup2']}" in err


@pytest.mark.parametrize("target", ["missing-dir/out.csv", ".", "file.txt/out.csv"],
                         ids=["missing-dir", "is-a-directory", "under-a-file"])
def test_export_to_unwritable_path_is_a_clear_error(cli_agent, tmp_path, target):
    proc, _ = cli_agent
    (tmp_path / "file.txt").write_text("not a directory\n")
    path = tmp_path / target
    r = run_cli("export", "solo", "-o", str(path), "--agent", proc.url, "--timeout", "5", timeout=20)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 1 and str(path).rstrip("/.") in r.stderr, r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("target", ["file.txt", "file.txt/sub"], ids=["a-file", "under-a-file"])
def test_agent_data_dir_that_cannot_be_used_is_a_clear_error(tmp_path, target):
    (tmp_path / "file.txt").write_text("not a directory\n")
    port = free_port()
    r = run_cli("agent", "--bind", f"tcp://127.0.0.1:{port}", "--data", str(tmp_path / target), timeout=20)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr, r.stderr
    assert str(tmp_path / target) in r.stderr
    assert (tmp_path / "file.txt").read_text() == "not a directory\n"


def test_runs_json_survives_any_stored_config(agent_proc):
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    as_owner(sock)
    sock.connect(agent_proc.url)
    try:
        sock.send(msgpack.packb({"t": "hello", "run": "rawcfg1", "rank": 0, "token": TOKEN, "project": "p", "name": "n",
                                 "config": {b"lr": 0.1}, "host": "elsewhere", "pid": 1}, use_bin_type=True))
        assert sock.poll(5000)
        sock.recv()
    finally:
        sock.close(linger=0)
    r = run_cli("runs", "--json", "--agent", agent_proc.url, "--timeout", "5", timeout=20)
    assert "Traceback" not in r.stderr, r.stderr[-800:]
    assert r.returncode == 0


def test_version_prints_the_package_version():
    r = run_cli("--version", timeout=20)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"pilothouse {__version__}\n", "")

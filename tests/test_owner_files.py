"""What decides what runs as the owner, or holds the owner's runs, is the owner's alone (issue 30).

A shared GPU node's other users can make a file or folder first wherever its name is guessable
(``/tmp/pilothouse-$USER``), leave a link there, or write to a file left open to them.  Each test
plays that stranger with the real second user ``nobody`` and checks the owner's agent, trainer or
app refuses what the stranger made, with a message naming the file and the fix, and changes
nothing of it: the alert rules file (its ``exec`` programs run as the owner), the agent's data
folder and journal, the app's store, and the log of an agent a trainer starts.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

import pytest
from support.processes import AgentProcess, run_cli
from support.runs import run_events
from support.sockets import free_port
from support.users import NOBODY, as_nobody
from support.waiting import wait_until

import pilothouse as ph
from pilothouse.gui.local_store import LocalStore
from pilothouse.node.rules_file import load_rules
from pilothouse.security import SecurityError
from pilothouse.trainer.launcher import ensure_local_agent

MAKE_DIR = "import os, sys\nos.mkdir(sys.argv[1], 0o777)\nos.chmod(sys.argv[1], 0o777)\n"
WRITE = "import sys\nwith open(sys.argv[1], 'a') as f:\n    f.write(sys.argv[2])\n"
LINK = "import os, sys\nos.symlink(sys.argv[2], sys.argv[1])\n"


def rule(name: str, marker: Path) -> str:
    """A rule that runs a program as the agent's user at the first NaN loss: it touches ``marker``."""
    return f'\n[[rule]]\nname = "{name}"\nkind = "nonfinite"\nmetric = "loss"\nexec = ["touch", "{marker}"]\n'


def by_nobody(code: str, *args: str) -> None:
    out = as_nobody(code, *args)
    assert out.returncode == 0, out.stderr


@pytest.fixture
def shared():
    """A folder everyone may write, like /tmp itself (sticky, root's), that nobody can reach."""
    path = Path(tempfile.mkdtemp(prefix="pilothouse-shared-"))
    os.chmod(path, 0o1777)
    yield path
    shutil.rmtree(path)


def agent_cli(tmp_path: Path, data: Path, *extra: str):
    return run_cli("agent", "--bind", f"tcp://127.0.0.1:{free_port()}", "--data", str(data), *extra, timeout=30)


# --- the alert rules file ------------------------------------------------------------------------


def test_a_rules_file_another_user_made_stops_the_agent_at_start(tmp_path, shared):
    rules = shared / "rules.toml"
    by_nobody(WRITE, str(rules), rule("theirs", tmp_path / "owned"))
    out = agent_cli(tmp_path, tmp_path / "d", "--alerts", str(rules))
    assert out.returncode == 2, out.stderr
    assert f"refusing {rules}: it belongs to nobody, not to you" in out.stderr and "chown" in out.stderr
    assert not (tmp_path / "d").exists() and not (tmp_path / "owned").exists()
    assert rules.stat().st_uid == NOBODY.pw_uid  # theirs it stays


def test_a_rules_file_is_read_only_where_no_one_else_can_write_it_or_swap_it(tmp_path, shared):
    """OpenSSH's StrictModes rule, with sticky folders (/tmp) allowed: every case by load_rules."""
    text = rule("mine", tmp_path / "m")
    mine = shared / "mine.toml"  # a file of the owner's, in a sticky folder of root's: no one can swap it
    mine.write_text(text)
    assert [r.name for r in load_rules(mine)] == ["mine"]
    link = tmp_path / "link.toml"  # a link is judged by the file it leads to
    link.symlink_to(mine)
    assert [r.name for r in load_rules(link)] == ["mine"]

    os.chmod(mine, 0o666)
    with pytest.raises(SecurityError, match=rf"refusing {link}: it is writable by other users .*chmod go-w {link}"):
        load_rules(link)
    open_folder = tmp_path / "open"
    open_folder.mkdir(mode=0o777)
    os.chmod(open_folder, 0o777)
    (open_folder / "r.toml").write_text(text)
    with pytest.raises(SecurityError, match=rf"the folder {open_folder} is writable .*chmod go-w {open_folder}"):
        load_rules(open_folder / "r.toml")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "r.toml").write_text(text)
    os.chown(theirs, NOBODY.pw_uid, NOBODY.pw_gid)  # its owner could rename the owner's file away
    with pytest.raises(SecurityError, match=f"the folder {theirs} belongs to nobody"):
        load_rules(theirs / "r.toml")


def test_a_rules_file_opened_to_others_is_refused_on_reload_and_their_program_never_runs(tmp_path):
    folder = Path(tempfile.mkdtemp(prefix="pilothouse-rules-"))  # 0755: nobody can reach the file
    os.chmod(folder, 0o755)
    rules, mine, theirs = folder / "rules.toml", tmp_path / "mine-ran", tmp_path / "theirs-ran"
    rules.write_text(rule("nan-seen", mine))
    proc = AgentProcess(tmp_path / "agent", free_port(), ["--alerts", str(rules)]).start()
    try:
        with proc.client() as client:
            system = next(r["id"] for r in client.runs() if r["kind"] == "system")
            os.chmod(rules, 0o666)  # opened to others, and so refused from now on, edited or not
            by_nobody(WRITE, str(rules), rule("theirs", theirs))
            edited = time.time()
            events = wait_until(lambda: (e := run_events(client, system, "rules")) and e[-1]["time"] >= edited and e,
                                what="the stranger's edit read and refused")
            assert [e["ok"] for e in events] == [False] * len(events)
            assert f"refusing {rules}: it is writable by other users (mode 666)" in events[-1]["detail"]
            assert [r["name"] for r in client.alerts()["rules"]] == ["nan-seen"]  # the last good rules

            run = ph.init(project="p", name="nan", agent=proc.url)
            run.log({"loss": math.nan}, step=1)
            run.finish()
            wait_until(mine.exists, what="the owner's own program")  # programs do run, from the owner's rules
            time.sleep(0.3)  # the stranger's program would have run just after it, by the same worker
            assert not theirs.exists()
            assert [a["rule"] for a in client.alerts()["recent"]] == ["nan-seen"]
        assert "alert rules not reloaded, the previous ones stay" in proc.log.read_text()
    finally:
        proc.stop()
        shutil.rmtree(folder)


# --- data folders and files ----------------------------------------------------------------------


def test_a_data_folder_another_user_made_first_is_refused_and_left_alone(tmp_path, shared):
    data = shared / "pilothouse-root"  # the name the owner's job script uses, made first by nobody
    by_nobody(MAKE_DIR, str(data))
    out = agent_cli(tmp_path, data)
    assert out.returncode == 2, out.stderr
    assert f"refusing {data}: it belongs to nobody, not to you" in out.stderr
    st = os.lstat(data)
    assert (st.st_uid, stat.S_IMODE(st.st_mode), os.listdir(data)) == (NOBODY.pw_uid, 0o777, [])

    link = shared / "pilothouse-link"  # or a link to a folder of theirs, or of the owner's
    by_nobody(LINK, str(link), str(tmp_path))
    out = agent_cli(tmp_path, link)
    assert out.returncode == 2 and f"refusing {link}: it is a symbolic link" in out.stderr, out.stderr
    assert os.listdir(tmp_path) == []


def test_a_journal_or_store_another_user_planted_is_refused(tmp_path, shared):
    data = shared / "left-open"  # the owner's folder, once open to all: nobody put a journal in it
    data.mkdir(mode=0o777)
    os.chmod(data, 0o777)
    journal, store = data / "journal.sqlite", data / "store.sqlite"
    by_nobody(WRITE, str(journal), "theirs")
    by_nobody(LINK, str(store), str(tmp_path / "elsewhere.sqlite"))  # and a link where the app's store goes
    out = agent_cli(tmp_path, data)
    assert out.returncode == 2, out.stderr
    assert f"refusing {journal}: it belongs to nobody" in out.stderr
    assert journal.read_text() == "theirs" and journal.stat().st_uid == NOBODY.pw_uid
    assert stat.S_IMODE(data.stat().st_mode) == 0o700  # the owner's folder is the owner's to close

    with pytest.raises(SecurityError, match=f"refusing {store}: it is a symbolic link"):
        LocalStore(store)
    assert not (tmp_path / "elsewhere.sqlite").exists()
    os.chmod(data, 0o775)
    with pytest.raises(SecurityError, match=f"refusing {data}: it is writable by other users .*chmod go-w"):
        LocalStore(data / "other.sqlite")


def test_a_trainer_never_follows_a_planted_agent_log_link(tmp_path, shared, caplog):
    victim = tmp_path / "victim.txt"  # any file of the owner's
    victim.write_text("precious\n")
    os.chmod(victim, 0o644)
    data = shared / "pilothouse-data"
    data.mkdir(mode=0o777)
    os.chmod(data, 0o777)
    by_nobody(LINK, str(data / "agent.log"), str(victim))
    with caplog.at_level(logging.ERROR, logger="pilothouse"):
        ensure_local_agent(f"tcp://127.0.0.1:{free_port()}", data)
    assert f"no local agent started: refusing {data / 'agent.log'}: it is a symbolic link" in caplog.text
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert sorted(os.listdir(data)) == ["agent.log"]  # no agent was started on it


def test_a_watch_state_folder_another_user_made_first_is_refused(shared):
    from pilothouse.watch.offsets import WatchState

    folder = shared / "watch"
    by_nobody(MAKE_DIR, str(folder))
    with pytest.raises(SecurityError, match=f"refusing {folder}: it belongs to nobody"):
        WatchState(folder, "tcp://127.0.0.1:7766", Path("/logs"))
    assert os.listdir(folder) == []

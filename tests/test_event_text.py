"""Events read as sentences: the bodies a real agent writes (steering, an alert's pause, a crash),
every kind the agent's code can write, unknown and malformed ones, hostile text; `pilothouse
events` prints the same lines (time + sentence), and its --json stays the journal's bodies."""

from __future__ import annotations

import getpass
import json
import math
import re
import signal
import socket
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.paths import ROOT
from support.processes import finish, run_cli, start_trainer
from support.runs import run_events
from support.waiting import wait_until

from pilothouse.client import Client
from pilothouse.event_text import _WRITERS, Narrator, event_lines, sender, sentence, value_text
from pilothouse.node.alert_engine import Alert
from pilothouse.node.hooks import HookResult
from pilothouse.wire.alert_rules import check_rule

ME = f"{getpass.getuser()}@{socket.gethostname()}"

STEERED = """
import os
run = ph.init(project="prose", name="steered", agent=URL, heartbeat=0.2, config={"lr": 1e-3},
              tunable={"lr": {"min": 0.0, "max": 1.0}})
print(run.id, flush=True)
for step in range(100000):
    ctl = run.sync(step)
    if ctl.checkpoint:
        path = os.path.join(ARGS[0], f"ckpt-{step}.pt")
        open(path, "w").write("weights")
        run.checkpoint_saved(path, step)
    if ctl.stop:
        break
    run.log({"lr": run.config["lr"]}, step=step)
    time.sleep(0.01)
run.finish()
"""

NAN = """
run = ph.init(project="prose", name="nan", agent=URL, heartbeat=0.2,
              alerts=[{"name": "nan-loss", "kind": "nonfinite", "metric": "loss", "pause": True}])
print(run.id, flush=True)
for step in range(100000):
    run.sync(step)
    run.log({"loss": float("nan") if step >= 25 else 1.0 / (step + 1)}, step=step)
    time.sleep(0.01)
"""


def sentences(bodies: list[dict]) -> list[str]:
    return [line.split("  ", 1)[1] for line in event_lines(bodies)]


def no_reprs(lines: list[str]) -> None:
    for line in lines:
        assert "{'" not in line and "': " not in line and "None" not in line, line


def test_a_steered_run_reads_as_sentences_in_the_cli_too(tmp_path, agent_proc):
    trainer = start_trainer(tmp_path, STEERED, agent_proc.url, str(tmp_path))
    run_id = trainer.stdout.readline().strip()
    with Client(agent_proc.url, timeout=10) as c:
        wait_until(lambda: any(r["id"] == run_id and r["last_step"] for r in c.runs()), what="first steps")
        paused = c.command(run_id, "pause", wait=10)
        resumed = c.command(run_id, "resume", wait=10)
        changed = c.command(run_id, "set", {"lr": 5e-4}, wait=10)
        at = changed["step"] + 40
        scheduled = c.command(run_id, "set", {"lr": 2e-4}, at_step=at, wait=10)
        saved = c.command(run_id, "checkpoint", wait=10)
        assert [a["state"] for a in (paused, resumed, changed, scheduled, saved)] == ["applied"] * 3 + \
            ["scheduled", "applied"]
        wait_until(lambda: c.request("command_status", cid=scheduled["cid"])["state"] == "applied",
                   what="the scheduled change")
        stopped = c.command(run_id, "stop", wait=10)
        finish(trainer)
        wait_until(lambda: run_events(c, run_id, "status")[-1]["status"] == "finished", what="the run's end")
        bodies = run_events(c, run_id)
    said = sentences(bodies)
    path = saved["applied"]["path"]
    s, t = paused["step"], changed["step"]
    for line in (f"pause requested by {ME} (cli)",
                 f"paused at step {s} by {ME} (cli)",
                 f"resumed at step {resumed['step']} by {ME} (cli)",
                 "set lr=0.0005 requested by " + f"{ME} (cli)",
                 f"set lr=0.0005 applied at step {t} (requested by {ME})",
                 f"set lr=0.0002 for step {at} requested by {ME} (cli)",
                 f"set lr=0.0002 scheduled for step {at} (requested by {ME})",
                 f"set lr=0.0002 applied at step {at} (requested by {ME})",
                 f"checkpoint saved at step {saved['step']} (requested by {ME}): {path}",
                 f"checkpoint saved at step {saved['step']}: {path}",
                 f"stopped at step {stopped['step']} by {ME} (cli)",
                 "status: finished"):
        assert line in said, (line, said)
    assert re.fullmatch(rf"status: running on {re.escape(socket.gethostname())} \(pid \d+\)", said[0]), said[0]
    no_reprs(said)

    out = run_cli("events", run_id, "--agent", agent_proc.url)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == event_lines(bodies)  # the same function, the same lines
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  \S", line) for line in out.stdout.splitlines())
    raw = run_cli("events", run_id, "--agent", agent_proc.url, "--json")
    assert [json.loads(line) for line in raw.stdout.splitlines()] == json.loads(json.dumps(bodies))  # unchanged


def test_an_alerts_pause_and_a_crash_read_as_sentences(tmp_path, agent_proc):
    trainer = start_trainer(tmp_path, NAN, agent_proc.url)
    run_id = trainer.stdout.readline().strip()
    try:
        with Client(agent_proc.url, timeout=10) as c:
            wait_until(lambda: run_events(c, run_id, "ack"), timeout=20, what="the alert's pause acknowledged")
            trainer.send_signal(signal.SIGKILL)
            trainer.wait(10)
            wait_until(lambda: run_events(c, run_id, "status")[-1]["status"] == "crashed", timeout=20,
                       what="the crash seen")
            bodies = run_events(c, run_id)
    finally:
        if trainer.poll() is None:
            trainer.kill()
    said = sentences(bodies)
    ack = next(b for b in bodies if b["event"] == "ack")
    assert "alert nan-loss firing at step 25: loss is nan; pausing the run" in said, said
    assert "pause requested by alert rule nan-loss" in said
    assert f"paused at step {ack['step']} by alert rule nan-loss" in said
    assert re.fullmatch(r"status: crashed \(no heartbeat for \d+\.\d s\)", said[-1]), said[-1]
    no_reprs(said)


# --- every kind, from the agent's own code -------------------------------------------------------------

AGENT_KINDS = re.compile(r"""\.event\([^,]+,\s*["'](\w+)["']""")


def test_every_kind_the_agent_writes_has_its_own_sentence():
    """A new ``store.event(run, "kind", ...)`` in the agent must come with a sentence here."""
    written = {m for path in (ROOT / "agent" / "node").glob("*.py") for m in AGENT_KINDS.findall(path.read_text())}
    assert {"status", "command", "ack", "checkpoint", "alert", "refused", "loss", "rules", "alert_hook"} <= written
    assert written <= set(_WRITERS), written - set(_WRITERS)


def test_bodies_made_by_the_agents_own_classes():
    rule = check_rule({"name": "nan-loss", "kind": "nonfinite", "metric": "loss", "pause": True})
    fired = Alert(("file", "", "nan-loss"), rule, "r1", "loss", "firing", 25, math.nan, "loss is nan at step 25")
    assert sentence(fired.body()) == "alert nan-loss firing at step 25: loss is nan; pausing the run"
    cleared = Alert(("file", "", "nan-loss"), rule, "r1", "loss", "cleared", 40, 0.5, "loss back to 0.5 at step 40")
    assert sentence(cleared.body()) == "alert nan-loss cleared at step 40: loss back to 0.5"
    stale = check_rule({"name": "silent", "kind": "stale", "seconds": 5})
    quiet = Alert(("user", "", "silent"), stale, "r1", None, "firing", None, None, "no heartbeat for 5.2 s")
    assert sentence(quiet.body()) == "alert silent firing: no heartbeat for 5.2 s"
    hook = HookResult("r1", "nan-loss", ("notify.sh", "--to", "ops team"), 0, False, "")
    assert sentence({"event": "alert_hook", **hook.body()}) == "hook of alert nan-loss (notify.sh --to 'ops team') " \
                                                              "exited with 0"
    late = HookResult("r1", "nan-loss", ("pager",), None, True, "killed after 10 s")
    assert sentence({"event": "alert_hook", **late.body()}) == "hook of alert nan-loss (pager) timed out: " \
                                                              "killed after 10 s"
    broken = HookResult("r1", "nan-loss", ("nope",), None, False, "No such file or directory: 'nope'")
    assert "could not start: No such file" in sentence({"event": "alert_hook", **broken.body()})


@pytest.mark.parametrize("body, said", [
    ({"event": "status", "status": "crashed", "reason": "no heartbeat for 3.2 s"},
     "status: crashed (no heartbeat for 3.2 s)"),
    ({"event": "status", "status": "paused", "reason": "heartbeat"}, "status: paused (heartbeat)"),
    ({"event": "status", "status": "finished"}, "status: finished"),
    ({"event": "loss", "rank": 1, "records": 12, "first_seq": 5, "last_seq": 16},
     "lost 12 records of rank 1 (records 5 to 16): the trainer dropped them when its buffer was full"),
    ({"event": "refused", "rank": 0, "metrics": 2, "first": ["a", "b"], "detail": "run r has 4096 metrics, the most"},
     "refused: run r has 4096 metrics, the most"),
    ({"event": "refused", "rank": 0, "message": "hb", "pid": 99, "refused": 3,
      "detail": "run r rank 0 belongs to pid 12"},
     "refused: run r rank 0 belongs to pid 12 (3 hb messages from pid 99)"),
    ({"event": "rules", "ok": True, "file": "/etc/ph/rules.toml", "detail": "3 rule(s) loaded"},
     "alert rules in /etc/ph/rules.toml loaded: 3 rule(s) loaded"),
    ({"event": "rules", "ok": False, "file": "r.toml", "detail": "unknown field 'secondz'"},
     "alert rules in r.toml not reloaded, the previous ones stay: unknown field 'secondz'"),
    ({"event": "checkpoint", "cid": None, "cmd": "checkpoint", "state": "applied", "step": 1250, "rank": 0,
      "applied": {"path": "checkpoints/x.pt"}, "detail": "checkpoint saved at step 1250: checkpoints/x.pt"},
     "checkpoint saved at step 1250: checkpoints/x.pt"),
    ({"event": "ack", "cid": "c9", "cmd": "pause", "state": "applied", "step": 7, "detail": "already paused",
      "applied": {}}, "pause at step 7: already paused"),
    ({"event": "ack", "cid": "c9", "cmd": "set", "state": "rejected", "step": None, "applied": {},
      "detail": "run r is finished: only a running run can be steered"},
     "set rejected: run r is finished: only a running run can be steered"),
])
def test_sentences_of_each_kind(body, said):
    assert sentence({"time": 1.7e9, **body}) == said


def test_an_ack_names_who_asked_and_a_set_what_it_asked():
    who = {"user": "bob", "host": "gpu3", "client": "gui", "via": "loopback"}
    bodies = [{"event": "command", "cid": "c1", "cmd": "set", "values": {"lr": 0.1, "fp16": True, "mode": "a b"},
               "who": who},
              {"event": "ack", "cid": "c1", "cmd": "set", "state": "rejected", "step": 9, "applied": {},
               "detail": "lr=0.1 is out of range"}]
    assert sentences(bodies) == ['set lr=0.1 fp16=true mode="a b" requested by bob@gpu3 (gui)',
                                 'set lr=0.1 fp16=true mode="a b" rejected at step 9: lr=0.1 is out of range '
                                 '(requested by bob@gpu3)']
    curve = {"user": "mallory", "host": "x", "client": "cli", "via": "curve", "key": "K" * 40, "name": "alice"}
    assert sender(curve) == "alice [key KKKKKKKKKKKK...] as mallory@x (cli)"  # the key's name before the claims
    assert sender({}) == "?@?" and sender(None) == "someone unknown"


def test_unknown_and_malformed_events_read_as_fields_never_reprs():
    assert sentence({"event": "migrated", "time": 1.0, "who": {"user": "root"}, "n": [1, 2.5], "x": None}) == \
        "migrated: who=(user=root) n=[1, 2.5] x=none"
    assert sentence({"event": "status"}) == "status"  # a known kind, its fields missing
    assert sentence({"event": "ack", "cmd": ["not", "text"], "state": {}}).startswith("ack")
    assert sentence("junk") == "unreadable event: junk"
    assert sentence({"time": "later"}) == "event"
    assert Narrator().line({"time": float("inf")}).startswith("????-??-?? ??:??:??  ")
    assert value_text(1e-05) == "1e-05" and value_text(0.1 + 0.2) == "0.30000000000000004"  # exact, as set


def test_hostile_text_is_escaped():
    hostile = "x\x1b[2J\x1b]0;pwned\x07\u202eevil\u200b"
    bodies = [{"event": "command", "cid": "c1", "cmd": "set", "values": {hostile: hostile},
               "who": {"user": hostile, "host": hostile, "client": hostile}},
              {"event": "ack", "cid": "c1", "cmd": "set", "state": "applied", "step": 1, "detail": hostile,
               "applied": {}},
              {"event": "checkpoint", "step": 1, "applied": {"path": hostile}},
              {"event": "alert", "rule": hostile, "state": "firing", "step": 2, "detail": hostile,
               "actions": [hostile]},
              {"event": hostile, hostile: hostile}]
    for line in event_lines(bodies):
        assert not re.search("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e]", line), repr(line)
        assert "\\x1b[2J" in line and "\\u202e" in line, line


values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                  max_size=3), max_leaves=8)
kinds = st.sampled_from(sorted(_WRITERS)) | st.text(string.printable, max_size=8)
fields = st.sampled_from(["cid", "cmd", "state", "step", "detail", "applied", "who", "values", "at_step",
                          "status", "reason", "host", "pid", "rule", "actions", "records", "argv", "ok"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.fixed_dictionaries({"event": kinds, "time": st.floats()})
                .flatmap(lambda b: st.dictionaries(fields, values, max_size=6).map(lambda d: {**b, **d})),
                max_size=4))
def test_any_body_gets_one_printable_line(bodies):
    for line in event_lines(bodies):
        assert isinstance(line, str) and "\n" not in line
        assert not re.search("[\x00-\x1f\x7f-\x9f]", line), repr(line)

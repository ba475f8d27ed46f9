"""Text from trainers and peers that must never act on whoever reads it (issue 30, item 7): host
names pasted into a shell in `runs --job` and the app, invisible and line-breaking characters in
`events` and `tail`, metric names that hold them, and a claimed user name on its way into the
agent's log.  Each test is the attack that got through, run against a real agent subprocess."""

from __future__ import annotations

import socket

import pytest
from support.processes import AgentProcess, run_cli
from support.sockets import free_port
from support.waiting import wait_until

import pilothouse as ph
import pilothouse.trainer.run as trainer_run
from pilothouse.gui.jobs import plan_job
from pilothouse.text import printable

# U+2028 line separator, U+061C Arabic letter mark, U+2060 word joiner, U+E0041 tag 'A', U+3164 Hangul filler
HIDDEN = "\u2028\u061c\u2060\U000e0041\u3164"
ESCAPED = "\\u2028\\u061c\\u2060\\U000e0041\\u3164"
HOSTS = ["-oProxyCommand=touch${IFS}pwned", "node;touch pwned", "$(touch pwned)"]  # ssh options, shell code


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    proc = AgentProcess(tmp_path_factory.mktemp("hostile") / "agent", free_port(), ["--stale-after", "3"]).start()
    yield proc
    proc.stop()


def test_events_and_tail_show_invisible_and_separator_characters_as_escapes(agent):
    run = ph.init(project="hostile", name="text", agent=agent.url, heartbeat=0.2)
    run.log({"loss": 1.0}, step=0)
    run.finish(error=f"boom{HIDDEN}end")
    for args in (("events", run.id), ("tail", run.id, "--history")):
        out = run_cli(*args, "--agent", agent.url)
        assert out.returncode == 0, out.stderr
        assert f"boom{ESCAPED}end" in out.stdout, out.stdout
        assert not set(HIDDEN) & set(out.stdout), args


@pytest.mark.parametrize("char, what", [("\u2028", "line separator"), ("\u2029", "paragraph separator"),
                                        ("\u2060", "invisible format character")])
def test_a_metric_name_with_a_separator_or_invisible_character_is_refused_by_name(agent, char, what):
    run = ph.init(project="hostile", name="names", agent=agent.url, heartbeat=0.2)
    try:
        with pytest.raises(ValueError, match=f"metric name .* contains {what} U\\+{ord(char):04X}"):
            run.log({f"loss{char}": 1.0}, step=0)
    finally:
        run.finish()


def test_a_claimed_user_name_reaches_the_agent_log_escaped(agent):
    """A peer claims to be ``ESC [2J BEL mallory`` with a forged log line after a newline; the
    agent's log (its stderr, agent.log when a trainer started it) holds it as escapes on one line."""
    run = ph.init(project="hostile", name="who", agent=agent.url, heartbeat=0.2)
    run.finish()
    claimed = "\x1b[2J\x07mallory\n2099-01-01 00:00:00 pilothouse.agent INFO forged"
    with agent.client() as client:
        client.request("remove", runs=[run.id], force=True, plan=False, who={"user": claimed, "host": "h"})
    log = wait_until(lambda: "removed by" in (text := agent.log.read_text()) and text, what="the removal logged")
    assert "\x1b" not in log and "\x07" not in log and "\nforged" not in log
    assert "\\x1b[2J\\x07mallory\\x0a2099-01-01 00:00:00 pilothouse.agent INFO forged@h" in log


def test_runs_job_offers_ssh_only_to_plain_host_names(agent, monkeypatch):
    here, plain = socket.gethostname(), "node-b.example"
    nodes = [{"host": here, "agent": agent.url, "ranks": [0]},
             *({"host": h, "agent": "tcp://127.0.0.1:7766", "ranks": [i]} for i, h in enumerate(HOSTS, 1)),
             {"host": plain, "agent": "tcp://127.0.0.1:7766", "ranks": [9]}]
    monkeypatch.setattr(trainer_run, "_job_nodes", lambda *args: nodes)
    run = ph.init(project="hostile", name="job", agent=agent.url, heartbeat=0.2)
    try:
        out = run_cli("runs", "--job", run.id, "--agent", agent.url)
    finally:
        run.finish()
    assert out.returncode == 0, out.stderr
    ssh = [line.strip() for line in out.stdout.splitlines() if "ssh " in line]
    assert ssh == [f"ssh -N -L 17767:127.0.0.1:7766 {plain}"], out.stdout
    assert out.stdout.count("not a plain host name") == len(HOSTS)
    assert f"pilothouse gui --agent {agent.url} --agent tcp://127.0.0.1:17767\n" in out.stdout


def test_the_app_copies_no_ssh_command_for_a_host_that_is_not_plain():
    nodes = [{"host": "nodeA", "agent": "tcp://127.0.0.1:7766", "ranks": [0]},
             *({"host": h, "agent": "tcp://127.0.0.1:7766", "ranks": [i]} for i, h in enumerate(HOSTS, 1))]
    copy = {"id": "job1", "project": "p", "name": "big", "host": "nodeA", "nodes": nodes, "created": 1.0}
    plan = plan_job("job1", {"tcp://127.0.0.1:17767": copy}, "desk", used_urls=["tcp://127.0.0.1:17767"])
    assert plan.tunnels == []
    for node in plan.nodes[1:]:
        assert node.tunnel is None and not node.addable and "not a plain host name" in node.line()


def test_printable_leaves_visible_text_and_spaces_alone():
    text = "loss/π 损失 ⚠ a\u00a0b e\u0301"  # NBSP is a space; a combining accent is visible
    assert printable(text) == text
    assert printable("\x00\x9b\U0010ffff\ud800") == "\\x00\\x9b\\U0010ffff\\ud800"

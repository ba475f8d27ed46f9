"""``pilothouse rollouts`` on agentic rows: chats with tool calls and tool results logged by a real
trainer to a real agent, read with the real CLI: transcripts, search inside tool calls and results,
``--prompt``, ``--groups``, and JSON that gives the rows back exactly as logged."""

from __future__ import annotations

import math
import re

import pytest
from support.processes import AgentProcess
from support.rollout_runs import headers, json_lines, rollouts, run_trainer, same
from support.sockets import free_port

SYSTEM = {"role": "system", "content": "You answer weather questions with the tools you have."}


def ask(city: str) -> list[dict]:
    return [SYSTEM, {"role": "user", "content": f"What is the weather in {city}?"}]


def answer(city: str, temp: int, args_as_text: bool = False) -> list[dict]:
    """An agentic completion: a tool call (arguments a map, or JSON text as some servers send them),
    its result, and the final answer."""
    args = {"city": city, "unit": "celsius"}
    return [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": f'{{"city": "{city}", "unit": "celsius"}}' if args_as_text else args}}]},
        {"role": "tool", "name": "get_weather", "tool_call_id": "call_1",
         "content": f'{{"temp": {temp}, "sky": "zanzibarish"}}'},
        {"role": "assistant", "content": f"It is {temp} degrees in {city}."},
    ]


# step 5: two groups of one prompt each (GRPO's), one of them with rewards all equal
STEP5 = [{"prompt": ask("Paris"), "completion": answer("Paris", 21), "reward": 1.0},
         {"prompt": ask("Paris"), "completion": answer("Paris", 30, args_as_text=True), "reward": 0.0},
         {"prompt": ask("Paris"), "completion": [{"role": "assistant", "content": "No idea.\nReally.\nSorry.\n"
                                                  "Truly.\nHonestly.\nBye."}], "reward": 0.5},
         {"prompt": ask("Quokkaville"), "completion": answer("Quokkaville", 12), "reward": 1.0, "advantage": 0.0},
         {"prompt": ask("Quokkaville"), "completion": answer("Quokkaville", 13), "reward": 1.0, "advantage": 0.0}]
# step 6: whole trajectories in "messages", explicit groups, content as parts, a long chat
LONG = [SYSTEM, {"role": "user", "content": "Plan a trip."}] + [
    {"role": "assistant", "content": f"thinking step {i}"} for i in range(10)] + [
    {"role": "assistant", "content": [{"type": "text", "text": "Done: go to Lisbon."}]}]
STEP6 = [{"messages": LONG, "group": "g1", "reward": 2.0},
         {"messages": LONG[:2] + [{"role": "assistant", "content": "Stay home."}], "group": "g1", "reward": 1.0}]
# step 7: plain text rows, grouped by prompt
STEP7 = [{"prompt": "2+2?", "completion": "4", "reward": 1.0}, {"prompt": "2+2?", "completion": "5", "reward": 0.0},
         {"prompt": "3+3?", "completion": "6", "reward": 1.0}]
PLAN = [(5, [STEP5]), (6, [STEP6]), (7, [STEP7])]
ESC = "\x1b[2J\x1b]0;owned\x07"
HOSTILE = [{"prompt": [{"role": f"user{ESC}", "content": f"hi {ESC}"}],
            "completion": [{"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {
                "name": f"rm{ESC}", "arguments": {"path": f"/{ESC}\u202e"}}}]},
                {"role": "tool", "name": f"rm{ESC}", "content": f"gone{ESC}\u2028line"}],
            "reward": 1.0}]


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chat-rollouts")
    proc = AgentProcess(tmp / "agent", free_port(), ["--stale-after", "3"]).start()
    run_trainer(tmp, proc.url, "agentic", PLAN)
    run_trainer(tmp, proc.url, "hostile", [(1, [HOSTILE])])
    yield proc
    proc.stop()


def wide(agent: AgentProcess, *args: str):
    r = rollouts(agent, *args, env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_chat_prints_as_a_transcript_with_tool_calls_and_results(agent):
    out = wide(agent, "agentic", "--step", "5")
    assert headers(out) == ["== run agentic step 5: 5 rows, mean reward 0.7"]
    first = out.split("[2]")[0].splitlines()
    assert first[1:] == [
        "[1] reward=1",
        "    prompt       system: You answer weather questions with the tools you have.",
        "                 user: What is the weather in Paris?",
        "    completion   assistant:",
        '                   → get_weather({"city": "Paris", "unit": "celsius"})',
        '                 tool get_weather: {"temp": 21, "sky": "zanzibarish"}',
        "                 assistant: It is 21 degrees in Paris.",
    ]
    assert '→ get_weather({"city": "Paris", "unit": "celsius"})' in out.split("[2]")[1]  # arguments sent as text
    cut = out.split("[3]")[1].split("[4]")[0].splitlines()
    assert cut[3:6] == ["    completion   assistant: No idea.", "                   Really.",
                        "                   Sorry. … (+3 more lines)"]


def test_a_long_chat_shows_its_first_and_last_messages(agent):
    out = wide(agent, "agentic", "--step", "6")
    lines = out.split("[2]")[0].splitlines()
    assert lines[2:5] == ["    messages     system: You answer weather questions with the tools you have.",
                          "                 user: Plan a trip.",
                          "                 … 5 messages left out (--json has them all)"]
    assert lines[5] == "                 assistant: thinking step 5"
    assert lines[-2:] == ["                 assistant: Done: go to Lisbon.",  # text parts read as text
                          "    group        g1"]


def test_json_gives_chats_back_exactly_as_logged(agent):
    steps = json_lines(wide(agent, "agentic", "--last", "3", "--json"))
    assert [s["step"] for s in steps] == [5, 6, 7]
    assert same([s["rows"] for s in steps], [STEP5, STEP6, STEP7])
    call = steps[0]["rows"][0]["completion"][0]["tool_calls"][0]["function"]
    assert call["arguments"] == {"city": "Paris", "unit": "celsius"}  # a map stays a map
    assert steps[0]["rows"][1]["completion"][0]["tool_calls"][0]["function"]["arguments"].startswith('{"city"')


def test_hostile_chat_text_prints_as_escapes(agent):
    out = wide(agent, "hostile")
    for raw in ("\x1b", "\x07", "\u202e", "\u2028"):
        assert raw not in out, repr(raw)
    assert "    prompt       user\\x1b[2J\\x1b]0;owned\\x07: hi \\x1b[2J" in out
    # a map's arguments print as JSON, which writes a control character as \\u001b; U+202E is escaped here
    assert '→ rm\\x1b[2J\\x1b]0;owned\\x07({"path": "/\\u001b[2J\\u001b]0;owned\\u0007\\u202e"})' in out
    assert "tool rm\\x1b[2J\\x1b]0;owned\\x07: gone\\x1b[2J\\x1b]0;owned\\x07" in out
    row = json_lines(wide(agent, "hostile", "--json"))[0]["rows"][0]
    assert same(row, HOSTILE[0])


@pytest.mark.parametrize("word, want", [
    ("quokkaville", [(5, 4), (5, 3)]),  # the prompt, the call's arguments and the answer
    ("zanzibarish", [(5, 4), (5, 3), (5, 1), (5, 0)]),  # only ever in a tool's result
    ("celsius", [(5, 4), (5, 3), (5, 1), (5, 0)]),  # only ever in a tool's arguments
    ("lisbon", [(6, 0)]),  # a trajectory's last message, as a text part
])
def test_search_reads_every_message_tool_call_and_tool_result(agent, word, want):
    hits = json_lines(wide(agent, "agentic", "--search", word, "--json"))
    assert [(h["step"], h["row"]) for h in hits] == want
    assert all(same(h["rollout"], {5: STEP5, 6: STEP6}[h["step"]][h["row"]]) for h in hits)


def test_prompt_search_finds_the_rows_of_one_task_only(agent):
    assert [(h["step"], h["row"]) for h in json_lines(wide(agent, "agentic", "--prompt", "paris", "--json"))] == \
        [(5, 2), (5, 1), (5, 0)]
    assert json_lines(wide(agent, "agentic", "--prompt", "zanzibarish", "--json")) == []  # a tool result is no prompt
    assert json_lines(wide(agent, "agentic", "--prompt", "celsius", "--json")) == []
    out = wide(agent, "agentic", "--prompt", "quokkaville", "--sort", "-reward")
    assert headers(out) == ["== run agentic: 2 rows whose prompt holds 'quokkaville'"]
    assert re.findall(r"^\[step (\d+) row (\d+)\]", out, re.M) == [("5", "4"), ("5", "3")]


def test_groups_show_stats_and_mark_groups_with_no_signal(agent):
    out = wide(agent, "agentic", "--step", "5", "--groups")
    assert headers(out) == ["== run agentic step 5: 5 rows in 2 groups, 1 with all rewards equal (no GRPO signal)"]
    std = math.sqrt(((1 - 0.5) ** 2 + 0.5 ** 2) / 3)
    adv = 0.5 / std
    assert out.splitlines()[1:] == [
        f"-- group 1: 3 rows, reward mean 0.5 std {std:.6g}",
        "    prompt       system: You answer weather questions with the tools you have.",
        "                 user: What is the weather in Paris?",
        f"    [row 0] reward=1  advantage={adv:.6g}  (3 messages, 1 tool call) assistant: It is 21 degrees in Paris.",
        f"    [row 1] reward=0  advantage={-adv:.6g}  (3 messages, 1 tool call) assistant: It is 30 degrees in Paris.",
        "    [row 2] reward=0.5  advantage=0  (1 message) assistant: No idea.",
        "-- group 2: 2 rows, reward mean 1 std 0  ALL EQUAL: no GRPO signal",
        "    prompt       system: You answer weather questions with the tools you have.",
        "                 user: What is the weather in Quokkaville?",
        "    [row 3] reward=1  advantage=0  (3 messages, 1 tool call) assistant: It is 12 degrees in Quokkaville.",
        "    [row 4] reward=1  advantage=0  (3 messages, 1 tool call) assistant: It is 13 degrees in Quokkaville.",
    ]


def test_groups_as_json_sorted_and_limited(agent):
    steps = json_lines(wide(agent, "agentic", "--last", "3", "--groups", "--json", "--sort", "-reward"))
    assert [s["step"] for s in steps] == [5, 6, 7]
    paris, quokka = steps[0]["groups"]
    assert paris["prompt"] == ask("Paris") and paris["size"] == 3 and not paris["all_equal"]
    assert paris["mean"] == 0.5 and paris["std"] == pytest.approx(math.sqrt(1 / 6))
    assert [m["row"] for m in paris["rows"]] == [0, 2, 1]  # --sort: highest reward first, within the group
    assert [m["reward"] for m in paris["rows"]] == [1.0, 0.5, 0.0]
    assert paris["rows"][0]["advantage"] == pytest.approx(0.5 / math.sqrt(1 / 6))  # GRPO's, none logged
    assert all(same(m["rollout"], STEP5[m["row"]]) for m in paris["rows"])  # each row whole, as logged
    assert quokka["all_equal"] and quokka["std"] == 0.0 and [m["advantage"] for m in quokka["rows"]] == [0.0, 0.0]
    (trip,) = steps[1]["groups"]
    assert trip["group"] == "g1" and trip["prompt"] is None and trip["size"] == 2
    assert [g["prompt"] for g in steps[2]["groups"]] == ["2+2?", "3+3?"]  # text prompts group too
    assert [g["size"] for g in steps[2]["groups"]] == [2, 1] and not steps[2]["groups"][1]["all_equal"]
    limited = json_lines(wide(agent, "agentic", "--step", "7", "--groups", "--json", "--limit", "1"))
    assert [g["prompt"] for g in limited[0]["groups"]] == ["2+2?"]
    out = wide(agent, "agentic", "--step", "7", "--groups", "--limit", "1")
    assert out.splitlines()[-1] == "… 1 more groups (use --limit)"


def test_groups_with_a_search_is_a_usage_error(agent):
    for words in (("--search", "paris"), ("--prompt", "paris")):
        r = rollouts(agent, "agentic", "--groups", *words)
        assert r.returncode == 2 and r.stdout == "" and "--groups" in r.stderr and "Traceback" not in r.stderr

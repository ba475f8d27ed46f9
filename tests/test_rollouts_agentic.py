"""Agentic rollouts without Qt: transcripts, folds and one-line summaries of chat rows, a step's GRPO
groups and reward bars, and a prompt's history from a real LocalStore (SQLite FTS5)."""

from __future__ import annotations

import json

import pytest
from support.rollouts import FORECAST, GROUP, QUESTIONS, SYSTEM, agentic_rows, prompt, trajectory

from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.prompt_history import history, paired, prompt_words
from pilothouse.gui.rollouts import pair
from pilothouse.gui.step_groups import MAX_BARS, group_lines, reward_bars
from pilothouse.gui.transcript import cells, folds, parts, pretty_arguments, preview, sections, summary
from pilothouse.wire.entries import Entry
from pilothouse.wire.rollouts import pack_batch

A = "tcp://127.0.0.1:7001"


def test_a_trajectory_reads_as_roles_tool_calls_and_results():
    shown = parts(prompt(QUESTIONS[0]) + trajectory(QUESTIONS[0], 1, 5))
    assert [(p.role, p.kind) for p in shown] == [
        ("system", "content"), ("user", "content"), ("assistant", "call"), ("tool", "content"),
        ("assistant", "content"), ("assistant", "call"), ("tool", "content"), ("assistant", "content")]
    call = shown[2]
    assert call.title == "assistant → get_weather (call_5_1_a)"
    assert call.body == '{\n  "city": "Paris",\n  "day": "tomorrow"\n}'  # a map's arguments, indented
    assert shown[5].body == '{\n  "unit": "celsius"\n}'  # JSON text too
    assert shown[3].title == "tool · get_weather · call_5_1_a" and shown[3].body == FORECAST
    assert shown[4].body == "Let me check the units."  # a content part's text
    assert [p.long for p in shown] == [False, False, False, True, False, False, False, False]
    assert preview(FORECAST) == "\n".join(FORECAST.split("\n")[:6])


def test_arguments_that_are_not_json_are_shown_as_sent_and_folds_count_lines_or_characters():
    assert pretty_arguments("city=Paris") == "city=Paris"
    assert pretty_arguments("42") == "42"  # JSON, but not a map or list: as sent
    assert pretty_arguments('["a", 1]') == '[\n  "a",\n  1\n]'
    assert pretty_arguments(None) == ""
    assert not folds("x" * 600) and folds("x" * 601)
    assert not folds("\n".join("x" * 11)) and folds("\n".join("x" * 13))


def test_cells_sum_up_a_chat_in_one_line():
    row = agentic_rows(3)[1]
    assert cells(row) == (QUESTIONS[0],
                          "3 turns · 2 tool calls · final: Answer 1 at step 3: mild, around 15°C.")
    assert summary([{"role": "user", "content": "hi"}]) == "hi"
    assert summary("plain\ntext") == "plain\ntext" and summary(None) == ""
    last_calls = [{"role": "assistant", "content": None,
                   "tool_calls": [{"function": {"name": "search", "arguments": {"q": "x"}}}]}]
    assert summary(last_calls) == '1 turn · 1 tool call · final: → search({"q": "x"})'
    whole = {"messages": prompt("Hello there") + trajectory(QUESTIONS[2], 0, 1), "reward": 1.0}
    assert cells(whole) == ("Hello there", "1 turn · 0 tool calls · final: Frank Herbert (sample 0 at step 1)")


def test_sections_show_the_prompt_once_then_each_runs_completion_with_its_fields():
    a, b = agentic_rows(2)[0], {"prompt": "text prompt", "completion": "plain answer", "reward": 0.5, "id": 7}
    got = sections(2, [("base", a), ("tuned", None)])
    assert [s.heading for s in got] == ["step 2", "PROMPT", "COMPLETION · base   reward=0.0"]
    assert got[1].parts[1].body == QUESTIONS[0] and len(got[2].parts) == 6
    plain = sections(9, [("solo", b)])
    assert plain[1].text == "text prompt" and plain[2].text == "plain answer"
    assert plain[2].heading == "COMPLETION · solo   reward=0.5  id=7"
    both = sections(1, [("r", {"messages": [SYSTEM], "completion": "c"})])
    assert [s.heading for s in both][2:] == ["COMPLETION · r", "TRAJECTORY · r"]


def test_groups_mark_no_signal_and_order_rows_by_advantage():
    rows = agentic_rows(0)
    groups = group_lines(rows)
    assert [(g.label, g.size, g.all_equal) for g in groups] == [
        (q, GROUP, q == QUESTIONS[2]) for q in QUESTIONS]
    assert [m.index for m in groups[0].members] == [0, 1, 2, 3]
    assert groups[2].std == 0.0 and [m.advantage for m in groups[2].members] == [0.0] * GROUP
    best_first = group_lines(rows, "desc")[0].members
    assert [m.index for m in best_first] == [3, 2, 1, 0] and best_first[0].advantage > 1.0
    logged = group_lines([{"prompt": "p", "reward": 1.0, "advantage": -0.25, "group": 7}, {"prompt": "q", "group": 7}], "asc")
    assert logged[0].label == "group 7" and [m.advantage for m in logged[0].members] == [-0.25, None]


def test_reward_bars_one_per_distinct_reward_or_binned():
    rows = agentic_rows(0)
    bars = reward_bars([rows, [{"reward": 1.0}, {"reward": "n/a"}]])
    assert bars.centers == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0], abs=1e-9)
    assert bars.counts == [[2, 2, 2, 6], [0, 0, 0, 1]]
    many = reward_bars([[{"reward": i / 100} for i in range(101)]])
    assert len(many.centers) == MAX_BARS and sum(many.counts[0]) == 101
    assert reward_bars([[{"prompt": "no reward"}]]).counts == [[]]
    assert reward_bars([[{"reward": 3.0}] * 2]).counts == [[2]]
    assert reward_bars([[{"reward": 2 / 3}], [{"reward": 1 - 1 / 3}]]).counts == [[1], [1]]  # one reward


def test_pairing_two_runs_matches_chat_prompts_whole():
    a, b = agentic_rows(0), agentic_rows(0, QUESTIONS[::-1])
    paired_rows = pair(a, b)
    assert all(x["prompt"] == y["prompt"] for x, y in paired_rows)
    assert [x["completion"] == y["completion"] for x, y in paired_rows[:GROUP]] == [True] * GROUP


def test_a_prompts_history_is_its_exact_prompt_newest_first_bounded(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite")
    decoy = "What will the weather be in Paris tomorrow? Answer in French."  # shares every searched word
    entries = []
    for step in range(6):
        rows = agentic_rows(step)[:GROUP] + [{"prompt": prompt(decoy), "completion": "x", "reward": 0.0}]
        entries.append(Entry(step + 1, "r1", "r", None, 0, len(rows), None, None, None,
                             pack_batch(step * 10, 1.7e9 + step, rows)))
    store.write_page(A, entries, len(entries))
    while store.index_rollouts():
        pass
    assert prompt_words(prompt(QUESTIONS[0])) == "tomorrow weather Paris What"  # the user's words, longest
    assert prompt_words("2 + 2 = ?") == "2" and prompt_words("?!") == ""

    found = history(store, (A, "r1"), prompt(QUESTIONS[0]))
    assert found.complete and [s for s, _ in found.rows] == [s for s in (50, 40, 30, 20, 10, 0) for _ in range(GROUP)]
    assert all(json.dumps(r["prompt"]) == json.dumps(prompt(QUESTIONS[0])) for _, r in found.rows)
    assert [r["completion"][-1]["content"][:8] for _, r in found.rows[:GROUP]] == [f"Answer {i}" for i in range(GROUP)]
    cut = history(store, (A, "r1"), prompt(QUESTIONS[0]), limit=7)  # 7 hits read, 5 of them the prompt's
    assert not cut.complete and [s for s, _ in cut.rows] == [50] * 4 + [40]
    assert history(store, (A, "r1"), "?!").rows == []

    lines = paired(found.rows[:GROUP * 2], found.rows[GROUP:GROUP + 1])  # A at 50 and 40, B at 40 once
    assert [(s, a is not None, b is not None) for s, (a, b) in lines] == (
        [(50, True, False)] * GROUP + [(40, True, True)] + [(40, True, False)] * (GROUP - 1))
    store.close()

"""Rollouts for the Rollouts tab's tests: agentic rows as a tool-calling trainer logs them
(``agentic_rows``: chat prompts, multi-turn trajectories with tool calls whose arguments are maps or
JSON text, tool results, one long; groups of a prompt, one with all rewards equal), and ``sync``, what
the app's link does with a real agent's journal (pages into the LocalStore, rollouts indexed); and the
``panel`` fixture, a shown RolloutsPanel (``pytest_plugins = ["support.rollouts"]``)."""

from __future__ import annotations

import json

import pytest

from pilothouse.client import Client
from pilothouse.gui.local_store import LocalStore

SYSTEM = {"role": "system", "content": "You are a careful agent. Use the tools, then answer in one line."}
QUESTIONS = ("What will the weather be in Paris tomorrow?", "Convert 250 dollars into euros today",
             "Who wrote the novel Dune?")
GROUP = 4  # samples per prompt
FORECAST = "\n".join(f"{h:02d}:00  {12 + h % 7}°C  wind {5 + h % 4} km/h  rain {h * 3 % 40}%" for h in range(24))


def prompt(question: str) -> list[dict]:
    return [SYSTEM, {"role": "user", "content": question}]


def trajectory(question: str, sample: int, step: int) -> list[dict]:
    """Two tool calls (arguments as a map, then as JSON text), their results (the forecast is long:
    it folds), and a final answer."""
    if question == QUESTIONS[2]:  # answered without tools, always right: its group has no signal
        return [{"role": "assistant", "content": f"Frank Herbert (sample {sample} at step {step})"}]
    tool = "get_weather" if question == QUESTIONS[0] else "convert_currency"
    args = {"city": "Paris", "day": "tomorrow"} if tool == "get_weather" else {"amount": 250, "from": "USD", "to": "EUR"}
    first, second = f"call_{step}_{sample}_a", f"call_{step}_{sample}_b"
    result = FORECAST if tool == "get_weather" else "250 USD = 231.50 EUR"
    return [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": first, "type": "function", "function": {"name": tool, "arguments": args}}]},
        {"role": "tool", "tool_call_id": first, "name": tool, "content": result},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me check the units."}],
         "tool_calls": [{"id": second, "type": "function",
                         "function": {"name": "lookup_units", "arguments": json.dumps({"unit": "celsius"})}}]},
        {"role": "tool", "tool_call_id": second, "name": "lookup_units", "content": "°C"},
        {"role": "assistant", "content": f"Answer {sample} at step {step}: mild, around 15°C."},
    ]


def agentic_rows(step: int, questions: tuple[str, ...] = QUESTIONS) -> list[dict]:
    """A step's GROUP samples of each question, rewards spread in every group but the last
    question's (all 1.0)."""
    return [{"prompt": prompt(q), "completion": trajectory(q, i, step),
             "reward": 1.0 if q == QUESTIONS[2] else i / (GROUP - 1)}
            for q in questions for i in range(GROUP)]


def sync(store: LocalStore, url: str, after: int = 0) -> list:
    """What a network link does: every journal page after ``after`` and the run list into the
    store, rollouts indexed for search; the entries."""
    entries = []
    with Client(url) as client:
        for page in client.history(after=after):
            store.write_page(url, page.entries, page.cursor)
            while store.index_rollouts():
                pass
            entries.extend(page.entries)
        store.put_runs(url, client.runs())
    return entries


@pytest.fixture
def panel(qtbot):
    from pilothouse.gui._qt.rollouts import RolloutsPanel

    shown = RolloutsPanel()
    qtbot.addWidget(shown)
    shown.resize(1400, 900)
    shown.show()
    return shown

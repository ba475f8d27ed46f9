"""``pilothouse rollouts RUN``: a real agent, a real trainer logging TRL-shaped rollouts, the real CLI.

The agent's ``rollouts`` query reads a run from its end (the latest steps) or by binary search (one
step), so its cost never grows with the run: the last tests count its SQL statements on a real Store.
"""

from __future__ import annotations

import base64
import json
import math
import random
import re
import time

import pytest
from support.messages import batch_fields
from support.processes import AgentProcess
from support.rollout_runs import headers, rollouts, run_trainer, same
from support.rollout_runs import json_lines as json_steps
from support.sockets import free_port

from pilothouse.client import AgentError
from pilothouse.node.journal import Store
from pilothouse.wire.entries import entry_body
from pilothouse.wire.rollouts import MAX_ROLLOUT_STEPS, ROLLOUT_PAGE_BYTES, pack_batch


def trl_rows(step: int, n: int, first: int = 0) -> list[dict]:
    """Rows as the TRL callback logs them; rewards that need every digit, one reward missing (NaN)."""
    rows = []
    for i in range(first, first + n):
        accuracy = float((i * 7 + step) % 3 == 0)
        fmt = (i % 5) / 3
        rows.append({"prompt": f"step {step} question {i}: what is {i} + {step}?\nAnswer briefly.",
                     "completion": f"<think>add</think> {i + step}" + " and more" * (i % 4),
                     "reward": math.nan if i == 2 else accuracy + 0.5 * fmt, "advantage": (i % 7 - 3) / 7,
                     "rewards/accuracy": accuracy, "rewards/format": fmt})
    return rows


# step -> the batches logged for it; step 30 comes in two calls, step 50 has more rows than a screen
PLAN = [(0, [trl_rows(0, 4)]), (10, [trl_rows(10, 4)]), (20, [trl_rows(20, 4)]),
        (30, [trl_rows(30, 3), trl_rows(30, 3, first=3)]), (40, [trl_rows(40, 4)]), (50, [trl_rows(50, 30)])]
HOSTILE = "evil \x1b[2J\x1b]0;owned\x07 \u202egnp.exe\u2066 \r\x00 \u2028x\u200b \x9b31m"


def logged(step: int) -> list[dict]:
    return [row for s, batches in PLAN if s == step for rows in batches for row in rows]


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    """One agent with run "grpo" (PLAN), run "hostile" and run "quiet" (metrics, no rollouts)."""
    tmp = tmp_path_factory.mktemp("rollouts")
    proc = AgentProcess(tmp / "agent", free_port(), ["--stale-after", "3"]).start()
    run_trainer(tmp, proc.url, "grpo", PLAN)
    hostile = {"prompt": HOSTILE, "completion": HOSTILE + "\n" * 5 + "end", "reward": 1.0,
               "rewards/\x1b[31mred\u2028": 0.5, "note": HOSTILE}
    run_trainer(tmp, proc.url, "hostile", [(7, [[hostile]])])
    run_trainer(tmp, proc.url, "quiet", [(1, [])])
    yield proc
    proc.stop()


# --- what it shows -------------------------------------------------------------------------------

def test_default_is_the_latest_step_with_a_readable_number_of_rows(agent):
    r = rollouts(agent, "rl/grpo", env={"COLUMNS": "100"})
    assert r.returncode == 0, r.stderr
    rewards = [row["reward"] for row in logged(50) if not math.isnan(row["reward"])]
    mean = sum(rewards) / len(rewards)
    assert headers(r.stdout) == [f"== run grpo step 50: 30 rows, mean reward {mean:.6g}"]
    blocks = re.findall(r"^\[(\d+)\] (.*)$", r.stdout, re.M)
    assert [int(i) for i, _ in blocks] == list(range(1, 21))
    first = logged(50)[0]
    assert blocks[0][1] == (f"reward={first['reward']:.6g}  advantage={first['advantage']:.6g}  "
                            f"rewards/accuracy={first['rewards/accuracy']:.6g}  rewards/format=0")
    assert "reward=nan" in blocks[2][1]  # TRL's missing reward, shown as such
    assert "    prompt       step 50 question 0: what is 0 + 50?" in r.stdout
    assert "                 Answer briefly." in r.stdout  # the prompt's second line, under the first
    assert "    completion   <think>add</think> 50" in r.stdout
    assert r.stdout.rstrip().endswith("… 10 more rows (use --limit)")
    assert all(len(line) <= 100 for line in r.stdout.splitlines())
    assert "step 40" not in r.stdout and "question" in r.stdout


def test_step_shows_that_step_with_its_batches_joined_in_order(agent):
    r = rollouts(agent, "grpo", "--step", "30")
    assert r.returncode == 0, r.stderr
    assert headers(r.stdout)[0].startswith("== run grpo step 30: 6 rows, mean reward ")
    assert re.findall(r"question (\d+)", r.stdout) == [str(i) for i in range(6)]
    assert "more rows" not in r.stdout
    for step in (0, 10):  # the first step and one the binary search must find
        r = rollouts(agent, "grpo", "--step", str(step), "--json")
        assert r.returncode == 0 and [s["step"] for s in json_steps(r.stdout)] == [step]


@pytest.mark.parametrize("step, near", [("25", "20, 30"), ("5", "0, 10"), ("1000", "50"), ("49", "40, 50")])
def test_a_step_without_rollouts_names_the_nearest_steps_that_have_some(agent, step, near):
    r = rollouts(agent, "grpo", "--step", step)
    assert r.returncode == 1 and r.stdout == ""
    assert f"pilothouse: run grpo has no rollouts at step {step}; the nearest steps with rollouts: {near}" in r.stderr


def test_last_n_steps_oldest_first(agent):
    r = rollouts(agent, "grpo", "--last", "3", "--limit", "1")
    assert r.returncode == 0, r.stderr
    assert [h.split(":")[0] for h in headers(r.stdout)] == ["== run grpo step 30", "== run grpo step 40",
                                                             "== run grpo step 50"]
    r = rollouts(agent, "grpo", "--last", str(MAX_ROLLOUT_STEPS), "--json")
    assert [s["step"] for s in json_steps(r.stdout)] == [s for s, _ in PLAN]  # fewer steps than asked: all


def test_limit_cuts_rows_per_step_and_says_how_many_are_left(agent):
    r = rollouts(agent, "grpo", "--last", "2", "--limit", "3")
    assert r.returncode == 0, r.stderr
    assert re.findall(r"^\[(\d+)\]", r.stdout, re.M) == ["1", "2", "3"] * 2
    assert "… 1 more rows (use --limit)" in r.stdout and "… 27 more rows (use --limit)" in r.stdout
    r = rollouts(agent, "grpo", "--limit", "25")
    assert len(re.findall(r"^\[\d+\]", r.stdout, re.M)) == 25 and "… 5 more rows" in r.stdout
    r = rollouts(agent, "grpo", "--limit", "30")
    assert "more rows" not in r.stdout


def test_json_is_every_row_exactly_as_logged(agent):
    r = rollouts(agent, "grpo", "--last", "6", "--json")
    assert r.returncode == 0, r.stderr
    steps = json_steps(r.stdout)
    assert [s["step"] for s in steps] == [s for s, _ in PLAN]
    for got in steps:
        assert got["run"] == "grpo" and isinstance(got["time"], float)
        assert same(got["rows"], logged(got["step"])), got["step"]  # untruncated, NaN and all
    r = rollouts(agent, "grpo", "--json")  # the default is the latest step, all rows
    assert len(json_steps(r.stdout)) == 1 and same(json_steps(r.stdout)[0]["rows"], logged(50))
    r = rollouts(agent, "grpo", "--json", "--limit", "2", "--step", "30")
    assert same(json_steps(r.stdout)[0]["rows"], logged(30)[:2])


@pytest.mark.parametrize("key", ["reward", "-reward", "advantage", "-advantage", "rewards/format", "-rewards/format"])
def test_sort_orders_rows_and_puts_rows_without_a_number_last(agent, key):
    r = rollouts(agent, "grpo", "--step", "50", "--sort", key, "--json")
    assert r.returncode == 0, r.stderr
    rows = json_steps(r.stdout)[0]["rows"]
    field = key.lstrip("-")
    values = [row[field] for row in rows if not math.isnan(row[field])]
    assert values == sorted(values, reverse=key.startswith("-"))
    assert sorted(map(json.dumps, rows)) == sorted(map(json.dumps, logged(50)))  # the same rows, reordered
    if field == "reward":
        assert math.isnan(rows[-1]["reward"])
    # wide enough that no number is cut short to fit (a narrower terminal ends them with "…")
    text = rollouts(agent, "grpo", "--step", "50", "--sort", key, "--limit", "30", env={"COLUMNS": "400"}).stdout
    lines = [dict(kv.split("=") for kv in line.split()[1:]) for line in text.splitlines() if line.startswith("[")]
    assert [line[field] for line in lines] == [f"{row[field]:.6g}" for row in rows]  # the text view agrees


def test_hostile_text_prints_as_escapes(agent):
    r = rollouts(agent, "hostile", env={"COLUMNS": "400"})
    assert r.returncode == 0, r.stderr
    for raw in ("\x1b", "\x07", "\x00", "\r", "\u202e", "\u2066", "\u2028", "\u200b", "\x9b"):
        assert raw not in r.stdout, repr(raw)
    assert "    prompt       evil \\x1b[2J\\x1b]0;owned\\x07 \\u202egnp.exe\\u2066 \n" in r.stdout
    assert "\\x00 \n" in r.stdout and "x\\u200b \\x9b31m" in r.stdout  # CR and U+2028 end lines
    assert "rewards/\\x1b[31mred\\u2028=0.5" in r.stdout  # a field's name, escaped on the numbers line
    assert "    note         evil \\x1b[2J" in r.stdout  # a text field of any name, escaped too
    assert "… (+5 more lines)" in r.stdout  # the completion's blank lines and "end" are cut
    r = rollouts(agent, "hostile", "--json")
    assert all(ord(c) < 128 and c.isprintable() for c in r.stdout.replace("\n", ""))
    row = json_steps(r.stdout)[0]["rows"][0]
    assert row["prompt"] == HOSTILE and row["rewards/\x1b[31mred\u2028"] == 0.5  # the JSON keeps the text exact


# --- what it refuses -----------------------------------------------------------------------------

@pytest.mark.parametrize("args, why", [
    (("nope",), r"pilothouse: no run with id or name 'nope'"),
    (("quiet",), r"pilothouse: run quiet has no rollouts \(a trainer logs them with run.log_rollouts\)"),
    (("quiet", "--step", "1"), r"run quiet has no rollouts"),
    (("grpo", "--sort", "rewards/nope"), r"no rollout row of run grpo has a number 'rewards/nope' to sort by; "
                                          r"numbers there: advantage, reward, rewards/accuracy, rewards/format"),
])
def test_agent_refusals_exit_1_and_print_nothing(agent, args, why):
    r = rollouts(agent, *args)
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr
    assert re.search(why, r.stderr), r.stderr


@pytest.mark.parametrize("args, why", [
    (("--step", "-1"), r"argument --step: a step must be an int in \[0, "),
    (("--step", "x"), r"argument --step: not a step: 'x'"),
    (("--step", "1.5"), r"argument --step: not a step: '1.5'"),
    (("--last", "0"), r"argument --last: --last must be a whole number from 1 to 1000, got '0'"),
    (("--last", str(MAX_ROLLOUT_STEPS + 1)), r"--last must be a whole number from 1 to 1000"),
    (("--limit", "-3"), r"argument --limit: --limit must be a whole number from 1 to"),
    (("--sort", "loss"), r"argument --sort: sort by reward, advantage or rewards/NAME"),
    (("--sort", "rewards/"), r"argument --sort: sort by reward"),
    (("--step", "1", "--last", "2"), r"argument --last: not allowed with argument --step"),
])
def test_bad_arguments_are_usage_errors_from_a_real_process(agent, args, why):
    r = rollouts(agent, "grpo", *args)
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert re.search(why, r.stderr), r.stderr


@pytest.mark.parametrize("args, why", [
    ({}, r"run must be str"),
    ({"run": "nope"}, r"no run with id 'nope'"),
    ({"run": "grpo", "step": -1}, r"step must be an int in \[0, \d+\], got -1"),
    ({"run": "grpo", "step": "3"}, r"step must be an int"),
    ({"run": "grpo", "step": True}, r"step must be an int"),
    ({"run": "grpo", "last": 0}, r"last must be an int in \[1, 1000\], got 0"),
    ({"run": "grpo", "last": 10 ** 6}, r"last must be an int in \[1, 1000\]"),
    ({"run": "grpo", "step": 3, "last": 2}, r"ask for one step or for the last steps, not both"),
    ({"run": "grpo", "before": 0}, r"before must be an int in \[1, "),
    ({"run": "grpo", "seen": "x"}, r"seen must be a list of at most 1 steps"),
    ({"run": "grpo", "last": 2, "seen": [1, -2]}, r"a seen step must be an int in \[0, "),
])
def test_the_agent_query_checks_its_arguments(agent, args, why):
    with agent.client() as client:
        with pytest.raises(AgentError, match=why):
            client.request("rollouts", **args)
        assert client.ping()["version"]  # and goes on answering


# --- search -------------------------------------------------------------------------------------------

def words_of(row: dict) -> set[str]:
    return set(re.findall(r"\w+", (row["prompt"] + " " + row["completion"]).lower()))


def newest_first() -> list[tuple[int, dict]]:
    """Every row of PLAN as the journal holds them, newest first (the last row of the last batch first)."""
    return [(step, row) for step, batches in reversed(PLAN) for rows in reversed(batches) for row in reversed(rows)]


@pytest.mark.parametrize("words", ["question 3", "QUESTION 3 briefly", "question OR nothing", '"what is 4"'])
def test_search_finds_rows_of_every_step_newest_first_exactly_as_logged(agent, words):
    r = rollouts(agent, "grpo", "--search", words, "--json")
    assert r.returncode == 0, r.stderr
    hits = json_steps(r.stdout)
    terms = set(re.findall(r"\w+", words.lower()))
    want = [(s, row) for s, row in newest_first() if terms <= words_of(row)
            and (not words.startswith('"') or words.strip('"') in row["prompt"])]
    assert [(h["step"], h["rollout"]["prompt"]) for h in hits] == [(s, row["prompt"]) for s, row in want]
    assert same([h["rollout"] for h in hits], [row for _, row in want])  # NaN, every digit, every field
    assert all(h["run"] == "grpo" for h in hits)


def test_search_pages_through_the_agent_and_shows_text_like_a_step(agent):
    every = [(s, row) for s, row in newest_first() if "question" in words_of(row)]
    with agent.client() as client:
        page = client.request("rollouts", run="grpo", search="question", limit=7)
        assert len(page["hits"]) == 7 and page["next"] is not None
        hits, indexing = client.search_rollouts("grpo", "question", limit=len(every) + 5)  # several pages
    assert [h["rollout"]["prompt"] for h in hits] == [row["prompt"] for _, row in every] and not indexing
    r = rollouts(agent, "grpo", "--search", "question", "--limit", "2", env={"COLUMNS": "100"})
    assert r.returncode == 0, r.stderr
    assert headers(r.stdout) == ["== run grpo: 2 rows (the newest: use --limit) holding 'question'"]
    assert re.findall(r"^\[step (\d+) row (\d+)\]", r.stdout, re.M) == [("50", "29"), ("50", "28")]


@pytest.mark.parametrize("words, reason", [('"open', "unclosed quote"), ("++ --", "letter or a digit"),
                                           ("", "at least one word")])
def test_a_search_that_cannot_be_run_is_refused_plainly(agent, words, reason):
    r = rollouts(agent, "grpo", "--search", words)
    assert r.returncode == 2 and reason in r.stderr and "Traceback" not in r.stderr
    with agent.client() as client, pytest.raises(AgentError, match=reason):
        client.request("rollouts", run="grpo", search=words)
    with agent.client() as client, pytest.raises(AgentError, match="not step"):
        client.request("rollouts", run="grpo", search="x", step=1)
    r = rollouts(agent, "grpo", "--search", "x", "--step", "1")
    assert r.returncode == 2 and "not allowed with" in r.stderr


# --- a step larger than a reply page ---------------------------------------------------------------

def test_a_step_larger_than_a_page_arrives_whole(agent, tmp_path):
    """Four calls of ~3 MiB at one step: the agent answers in pages below MAX_MESSAGE_BYTES and the
    client asks for the rest, so the CLI shows every row.  Random text, so it stays large compressed."""
    noise = random.Random(7)
    big = [[{"prompt": f"p{call}-{i}", "completion": base64.b64encode(noise.randbytes(225_000)).decode(),
             "reward": float(i)} for i in range(10)] for call in range(4)]
    assert sum(len(pack_batch(2, 0.0, b)) for b in big) > ROLLOUT_PAGE_BYTES
    run_trainer(tmp_path, agent.url, "big", [(1, big[:1]), (2, big)])
    with agent.client() as client:
        first = client.request("rollouts", run="big", last=2)
        assert first["next"] == {"last": 2, "seen": [2], "before": min(e[0] for e in first["entries"])}
    r = rollouts(agent, "big", "--json", "--last", "2")
    assert r.returncode == 0, r.stderr
    steps = json_steps(r.stdout)
    assert [s["step"] for s in steps] == [1, 2]
    assert same(steps[1]["rows"], [row for batch in big for row in batch])
    r = rollouts(agent, "big", "--step", "2", "--sort", "-reward", "--limit", "2", env={"COLUMNS": "80"})
    assert headers(r.stdout) == ["== run big step 2: 40 rows, mean reward 4.5"]
    assert re.findall(r"^\s+prompt\s+(\S+)", r.stdout, re.M) == ["p0-9", "p1-9"]
    assert max(map(len, r.stdout.splitlines())) <= 80


# --- the Store behind it: cost and order -----------------------------------------------------------

def store_with(tmp_path, steps: list[tuple[int, int]]) -> Store:
    """A real journal holding one rollout batch per (step, rank), in this order."""
    store = Store(tmp_path / "journal.sqlite")
    store.begin()
    store.upsert_run({"run": "r1", "project": "p", "name": "n", "host": "h", "pid": 1, "config": {}}, time.time())
    seqs: dict[int, int] = {}
    for step, rank in steps:
        seq = seqs[rank] = seqs.get(rank, 0) + 1
        store.ingest(("r1", rank, ""), seq, seq, batch_fields(
            [[0, step, 1.0, {"loss": 0.5}], [1, step, 2.0, [{"prompt": f"{step}/{rank}", "reward": 1.0}]]]), 0.0)
    store.commit()
    return store


def statements(store: Store, **query) -> tuple[int, list]:
    """(SQL statements a rollouts query ran, (step, rank) of what it returned)."""
    count = 0

    def seen(_: str) -> None:
        nonlocal count
        count += 1
    store.db.conn.set_trace_callback(seen)
    try:
        entries, _ = store.rollouts.page("r1", **query)
    finally:
        store.db.conn.set_trace_callback(None)
    return count, [(entry_body(e)["step"], e.rank) for e in entries]


def test_cost_does_not_grow_with_the_run(tmp_path):
    short = store_with(tmp_path / "short", [(s, 0) for s in range(100)])
    long = store_with(tmp_path / "long", [(s, 0) for s in range(10_000)])
    for query in ({}, {"last": 5}):
        assert statements(short, **query)[0] == statements(long, **query)[0]
    cost, found = statements(long, step=5_432)
    assert found == [(5_432, 0)]
    assert cost < 4 * 64, cost  # a binary search: a few statements per probe, not one per batch
    assert statements(long, step=5_432)[0] - statements(short, step=50)[0] < 4 * 20


def test_interleaved_ranks_are_gathered_and_pages_continue(tmp_path):
    store = store_with(tmp_path, [(10, 0), (10, 1), (20, 0), (10, 2), (30, 0), (20, 1), (30, 1)])
    assert statements(store, step=10)[1] == [(10, 2), (10, 1), (10, 0)]  # newest first
    assert statements(store, step=20)[1] == [(20, 1), (20, 0)]
    assert statements(store, last=2)[1] == [(30, 1), (20, 1), (30, 0)]  # stops at a third step
    entries, more = store.rollouts.page("r1", last=3, budget=1)  # one batch per page
    pages = [entries]
    while more is not None:
        entries, more = store.rollouts.page("r1", **more, budget=1)
        pages.append(entries)
    assert [[(entry_body(e)["step"], e.rank) for e in page] for page in pages] == \
        [[(30, 1)], [(20, 1)], [(30, 0)], [(10, 2)], [(20, 0)], [(10, 1)], [(10, 0)]]

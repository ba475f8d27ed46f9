"""Rollout storage and search at scale: the journal's compressed bodies and FTS5 index against what a
user's own SQLite would do, a table of plain text searched with LIKE; and chat rows (tool-calling
trajectories) at the goal's 10 M, with the cost of the derived ``rollouts/*`` series per rollout.

Plain rows (the default): for each size, rollouts of about 2 KB of text (a prompt and a completion
drawn from a Zipf-like vocabulary, 64 to a batch, like a GRPO step's group) are written in bulk into a
real agent journal (``Store``: zstd bodies, queued and then indexed by ``RolloutSearch.index_some``)
and into a peer table with the same text uncompressed.  Reported: bytes per rollout (body before and
after compression, the index, the whole file against the peer's), the median latency of the first
search page (50 rows, newest first) for a common word, a rare word and a phrase, against the peer's
``LIKE`` scan, and the ingest path's cost per batch (compressing, and indexing done between turns).

Chat rows (``--chat``): ``--rows`` tool-calling trajectories (system, user; assistant calling a tool
with JSON arguments, the tool's result, the assistant's final answer; about 2 KB of text), 8 to a
prompt as GRPO groups, with rewards, built the same way; the first page's latency over many queries
of each kind (common, uncommon and rare words, and prompt-only searches), its p50 and p90 against the
200 ms goal; and what deriving the step's series costs per rollout against what storing it costs.
Generated files go to a temporary folder and are deleted.

    python benchmarks/bench_rollouts.py [--sizes 100000,300000,1000000] [--repeats 7] [--peer-max 1000000]
    python benchmarks/bench_rollouts.py --chat [--rows 10000000] [--queries 40] [--repeats 3] [--before e03d57c]
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import random
import re
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import msgpack
from _common import ROOT, AgentProcess, median, percentile, table, write_result

import pilothouse as ph
from pilothouse.node.journal import Store
from pilothouse.store.rollout_search import texts as indexed_texts
from pilothouse.wire.entries import KIND_ROLLOUTS
from pilothouse.wire.job import MAX_RANKS
from pilothouse.wire.messages import pack, unpack
from pilothouse.wire.records import REC_ROLLOUTS, encode_batch
from pilothouse.wire.rollout_groups import StepStats
from pilothouse.wire.rollouts import pack_batch

ROWS = 64  # rollouts per batch
CHUNK = 200  # batches per transaction (12,800 rollouts)
PAGE = 50  # rows of a first search page
RARE = "quokka"  # in one rollout of every 100,000
PHRASE = '"the final answer"'  # in one completion of every 8
VOCAB = 30_000
GROUP = 8  # chat rows per prompt: a GRPO group
IDS = 2_000_000  # ticket and document ids: a rare word, in a few rows of 10 M
TOOLS = ("search", "calculator", "python", "read_file", "sql_query", "http_get")
GOAL_MS = 200.0
CHAT_BYTES = 3_000  # disk per chat rollout, with room to spare (body, index, journal pages)


def _sentences(rng: random.Random, words: list[str], count: int) -> list[str]:
    cum = list(itertools.accumulate(1.0 / (i + 1) for i in range(len(words))))  # Zipf: rank r weighs 1/r
    return [" ".join(rng.choices(words, cum_weights=cum, k=rng.randint(8, 24))) + "." for _ in range(count)]


def vocabulary(rng: random.Random) -> list[str]:
    words = ["the", "of", "and", "to", "answer", "is", "a", "we", "step", "so"]
    while len(words) < VOCAB:
        words.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 10))))
    return words


class Texts:
    """Rollout text fast enough for millions: sentences drawn once from the vocabulary, each rollout a
    new combination of them plus numbers of its own (so no two batches are alike to zstd)."""

    def __init__(self, seed: int = 0, sentences: int = 20_000):
        rng = random.Random(seed)
        self.sentences = _sentences(rng, vocabulary(rng), sentences)

    def batch(self, b: int, count: int) -> list[dict]:
        """Batch ``b``'s rows of rollouts 0..``count``, the same in any process."""
        rng = random.Random(b)
        return [self._rollout(rng, n) for n in range(b * ROWS, min((b + 1) * ROWS, count))]

    def _rollout(self, rng: random.Random, n: int) -> dict:
        pick = rng.sample(self.sentences, 18)
        prompt = f"Problem {n}: " + " ".join(pick[:4]) + f" What is {n % 997} + {n % 89}?"
        completion = " ".join(pick[4:])
        if n % 8 == 3:
            completion += " so the final answer is " + str(n % 997 + n % 89)
        if n % 100_000 == 77:
            completion += f" {RARE}"
        return {"prompt": prompt, "completion": completion, "reward": (n % 5) / 4, "advantage": (n % 7 - 3) / 7}


class ChatTexts:
    """Tool-calling trajectories of about 2 KB, GRPO groups of 8 to a prompt, rewarded 0 or 1.  Questions
    and tool results draw on the same 30,000 words ranked differently (a word common in results, as a
    library's or a file's name is, may be rare in questions: the hard case of a prompt-only search),
    and rows name ids of their own (a ticket in the prompt, documents in the tool result): the rare
    words a user looks up."""

    def __init__(self, seed: int = 0, sentences: int = 20_000):
        rng = random.Random(seed)
        self.asked_words = vocabulary(rng)
        self.found_words = self.asked_words[:10] + rng.sample(self.asked_words[10:], VOCAB - 10)
        self.asked = _sentences(rng, self.asked_words, sentences)
        self.found = _sentences(rng, self.found_words, sentences)
        self.systems = [f"You are agent {i}, a careful assistant. Call a tool ({', '.join(TOOLS)}) whenever a "
                        "fact is needed, then answer in one line. " + " ".join(rng.sample(self.asked, 2))
                        for i in range(8)]

    def batch(self, b: int, count: int) -> list[dict]:
        """Batch ``b``'s rows of rollouts 0..``count`` (8 groups of 8), the same in any process."""
        rng = random.Random(b)
        rows: list[dict] = []
        for n in range(b * ROWS // GROUP, (b + 1) * ROWS // GROUP):
            prompt = [{"role": "system", "content": self.systems[n % len(self.systems)]},
                      {"role": "user", "content": f"Ticket tk{rng.randrange(IDS)}: " + " ".join(rng.sample(
                          self.asked, 3)) + f" What is {n % 997} + {n % 89}?"}]
            right = rng.random()  # the group's chance of a right answer (near 0 or 1: a group all equal)
            rows.extend(self._row(rng, n, prompt, right) for _ in range(GROUP))
        return rows[:max(0, count - b * ROWS)]

    def _row(self, rng: random.Random, n: int, prompt: list[dict], right: float) -> dict:
        pick = rng.sample(self.found, 12)
        tool, call = TOOLS[rng.randrange(len(TOOLS))], f"call_{rng.getrandbits(40):x}"
        args = {"query": " ".join(pick[0].split()[:5]), "top_k": rng.randint(1, 10)}
        docs = " ".join(f"doc{rng.randrange(IDS)}" for _ in range(3))
        reward = float(rng.random() < right)
        answer = n % 997 + n % 89 + (0 if reward else rng.randint(1, 9))
        completion = [
            {"role": "assistant", "content": pick[1], "tool_calls": [{"id": call, "type": "function", "function": {
                "name": tool, "arguments": json.dumps(args) if n % 2 else args}}]},  # text, or a map (TRL)
            {"role": "tool", "tool_call_id": call, "name": tool, "content": f"{docs}: " + " ".join(pick[2:8])},
            {"role": "assistant", "content": " ".join(pick[8:]) + f" So the final answer is {answer}."}]
        return {"prompt": prompt, "completion": completion, "reward": reward}


_MAKERS: dict[str, Texts | ChatTexts] = {}


def _chunk(job: tuple[str, int, int, int, bool]) -> tuple[list[tuple[int, bytes]], int, list[tuple]]:
    """Batches ``first``..``last`` packed as the agent stores them (in a worker process: generating and
    compressing overlap indexing); their msgpack size; the peer's rows when asked for."""
    kind, first, last, count, peer = job
    maker = _MAKERS.get(kind) or _MAKERS.setdefault(kind, ChatTexts() if kind == "chat" else Texts())
    bodies, plain, peer_rows = [], 0, []
    for b in range(first, last):
        batch = maker.batch(b, count)
        bodies.append((len(batch), pack_batch(b, 1.7e9 + b, batch)))
        plain += len(msgpack.packb({"step": b, "time": 1.7e9 + b, "rows": batch}))
        if peer:
            peer_rows.extend((None, b, i, r["prompt"], r["completion"], r["reward"]) for i, r in enumerate(batch))
    return bodies, plain, peer_rows


def _ahead(pool, fn: Callable, jobs: list, most: int) -> Iterator:
    """``fn`` of each job, in order, computed in ``pool`` at most ``most`` jobs ahead of the caller (indexing
    is the slower side: unbounded, the packed batches would pile up in memory)."""
    pending: deque = deque()
    for job in jobs:
        pending.append(pool.apply_async(fn, (job,)))
        if len(pending) > most:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


def build(folder: Path, count: int, peer: bool, kind: str = "plain") -> dict:
    """A journal with ``count`` rollouts of one run, indexed; and the peer table (when ``peer``)."""
    workers = max(1, min(4, (os.cpu_count() or 2) - 1))
    pool = multiprocessing.get_context("spawn").Pool(workers)  # spawned: this process may hold a trainer's threads
    store = Store(folder / "journal.sqlite")
    store.begin()
    store.upsert_run({"run": "r", "project": "bench", "name": "r", "host": "h", "pid": 1, "config": {}}, time.time())
    store.commit()
    if peer:
        store.db.execute("CREATE TABLE plain (id INTEGER PRIMARY KEY, step INTEGER, row INTEGER, prompt TEXT, "
                         "completion TEXT, reward REAL)")
    plain_bytes = framed_bytes = 0
    write = index = 0.0
    batches = (count + ROWS - 1) // ROWS
    jobs = [(kind, c, min(c + CHUNK, batches), count, peer) for c in range(0, batches, CHUNK)]
    with pool:
        started, shown = time.perf_counter(), 0
        for bodies, plain, plain_rows in _ahead(pool, _chunk, jobs, 2 * workers):
            t0 = time.perf_counter()
            store.db.execute("BEGIN")
            rows = []
            for n, body in bodies:
                store.head += 1
                framed_bytes += len(body)
                rows.append((store.head, "r", KIND_ROLLOUTS, None, 0, n, None, None, None, body))
            plain_bytes += plain
            store.db.conn.executemany("INSERT INTO journal (id, run, kind, metric, rank, n, steps, vals, times, body) "
                                      "VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
            if plain_rows:
                store.db.conn.executemany("INSERT INTO plain VALUES (?,?,?,?,?,?)", plain_rows)
            store.db.execute("COMMIT")
            t1 = time.perf_counter()
            store.db.execute("BEGIN")
            while store.rollout_search.index_some(1 << 30):
                pass
            store.db.execute("COMMIT")
            write, index = write + t1 - t0, index + time.perf_counter() - t1
            done = min(count, store.head * ROWS)
            if done - shown >= 1_000_000:
                shown = done
                print(f"  {done:,} rollouts stored and indexed, {time.perf_counter() - started:.0f} s", flush=True)
    page = store.db.execute("PRAGMA page_size").fetchone()[0]

    def pages(names: str) -> int:
        return store.db.execute(f"SELECT COUNT(*) FROM dbstat WHERE name IN ({names})").fetchone()[0] * page
    index_bytes = pages("'rollout_text_data', 'rollout_text_idx', 'rollout_batches', 'rollout_batches_step', "
                        "'rollout_batches_key'")
    return {"rollouts": count, "store": store, "write_s": write, "index_s": index,
            "body_plain_B": plain_bytes / count, "body_zstd_B": framed_bytes / count,
            "journal_B": pages("'journal'") / count, "index_B": index_bytes / count,
            "plain_B": pages("'plain'") / count if peer else None}


def latency(fn: Callable, repeats: int) -> float:
    fn()  # a first run warms SQLite's page cache, as a user's second keystroke would find it
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return median(times) * 1e3


def searches(built: dict, repeats: int, peer: bool) -> dict:
    store: Store = built["store"]
    like = {"common word": "% the %", "rare word": f"%{RARE}%", "phrase": "%the final answer%"}
    out = {}
    for label, words in (("common word", "the"), ("rare word", RARE), ("phrase", PHRASE)):
        hits = store.rollouts.search_text("r", words, limit=PAGE)[0]
        assert hits and all(words.strip('"') in (h[3]["prompt"] + " " + h[3]["completion"]) for h in hits)
        fts = latency(lambda: store.rollouts.search_text("r", words, limit=PAGE), repeats)
        scan = None
        if peer:
            found = store.db.execute("SELECT step, row FROM plain WHERE prompt LIKE ?1 OR completion LIKE ?1 "
                                     "ORDER BY id DESC LIMIT ?2", [like[label], PAGE]).fetchall()
            if label != "common word":  # LIKE has no word boundaries; for the rare word and the phrase they agree
                assert [(s, r) for s, r, *_ in hits] == found, label
            scan = latency(lambda: store.db.execute(
                "SELECT * FROM plain WHERE prompt LIKE ?1 OR completion LIKE ?1 ORDER BY id DESC LIMIT ?2",
                [like[label], PAGE]).fetchall(), max(1, repeats // 3))
        out[label] = (fts, scan, len(hits))
    return out


def chat_queries(texts: ChatTexts, count: int, seed: int = 7) -> dict[str, tuple[list[str], bool]]:
    """``count`` searches of each kind: (their words, whether prompt-only)."""
    rng = random.Random(seed)
    everywhere = {w for s in texts.systems for w in s.split()}  # in 1 prompt of 8: not uncommon
    seen = Counter(w for s in texts.asked + texts.found for w in set(s[:-1].split()))
    uncommon = sorted(w for w, n in seen.items() if n == 1 and w not in everywhere)
    asked_rank = {w: i for i, w in enumerate(texts.asked_words)}
    in_results = [w for w in texts.found_words[10:] if asked_rank[w] >= 5_000 and w not in everywhere]
    return {"common word": (texts.found_words[:count], False),
            "uncommon word (1 sentence in 40,000)": (rng.sample(uncommon, count), False),
            "rare word (a document id)": ([f"doc{rng.randrange(IDS)}" for _ in range(count)], False),
            "prompt: common word": (texts.asked_words[:count], True),
            "prompt: word common in tool results": (in_results[:count], True),
            "prompt: rare word (a ticket id)": ([f"tk{rng.randrange(IDS)}" for _ in range(count)], True)}


def _holds(row: dict, words: str, in_prompt: bool) -> bool:
    prompt, completion = indexed_texts(row)
    return re.search(rf"\b{re.escape(words)}\b", prompt if in_prompt else f"{prompt}\n{completion}", re.I) is not None


def chat_searches(store: Store, queries: dict[str, tuple[list[str], bool]], repeats: int) -> dict:
    """Per query set, each query's first page: its first run's ms (the first time this process asks for
    that word), the median of ``repeats`` more, and its hits, each checked to hold the word."""
    out = {}
    for label, (queries_of, in_prompt) in queries.items():
        first, warm, hits = [], [], []
        for words in queries_of:
            def search() -> list:
                return store.rollouts.search_text("r", words, limit=PAGE, in_prompt=in_prompt)[0]
            t0 = time.perf_counter()
            found = search()
            first.append((time.perf_counter() - t0) * 1e3)
            assert all(_holds(hit[3], words, in_prompt) for hit in found), (label, words)
            warm.append(latency(search, repeats))
            hits.append(len(found))
        out[label] = {"in_prompt": in_prompt, "words": queries_of, "first_ms": first, "warm_ms": warm, "hits": hits}
    return out


def _per_row(fn: Callable[[], object], rows: int, repeats: int) -> float:
    """Median µs per row of ``fn`` over ``rows`` rows."""
    return latency(fn, repeats) / rows * 1e3


def derived_cost(repeats: int) -> dict:
    """µs per rollout of a step's derived series (``StepStats().add(rows).series()``: a step of 512 rows
    logged at once, and logged as 8 calls of 64, its series after each as the agent may write them),
    against ``pack_batch`` of the same rows (what storing them already costs the agent), for chat rows
    and plain ones; and the text per row."""
    out = {}
    for kind, maker in (("chat", ChatTexts(seed=1)), ("plain", Texts(seed=1))):
        parts = [maker.batch(b, 1 << 40) for b in range(8)]
        rows = [row for part in parts for row in part]

        def in_parts(parts: list[list[dict]] = parts) -> None:
            stats = StepStats()
            for part in parts:
                stats = stats.add(part)
                stats.series()
        out[kind] = {
            "series_once_us": _per_row(lambda rows=rows: StepStats().add(rows).series(), len(rows), repeats),
            "series_in_8_calls_us": _per_row(in_parts, len(rows), repeats),
            "pack_batch_us": _per_row(lambda parts=parts: [pack_batch(b, 1.7e9, p) for b, p in enumerate(parts)],
                                      len(rows), repeats),
            "text_B": sum(len(p) + len(c) for p, c in map(indexed_texts, rows)) / len(rows)}
    return out


def ingest_cost(folder: Path, kind: str = "plain", batches: int = 100) -> dict:
    """Median ms per 64-rollout batch through ``Store.ingest`` and commit (a turn), and for the slice
    that indexes it between turns."""
    maker = ChatTexts(seed=1) if kind == "chat" else Texts(seed=1)
    store = Store(folder / f"ingest-{kind}.sqlite")
    store.begin()
    store.upsert_run({"run": "r", "project": "bench", "name": "r", "host": "h", "pid": 1, "config": {}}, time.time())
    store.commit()
    turn, index = [], []
    for b in range(batches):
        body = unpack(pack(encode_batch([(REC_ROLLOUTS, None, (b, 1.7e9 + b, maker.batch(b, 1 << 40)))])))
        t0 = time.perf_counter()
        store.begin()
        store.ingest(("r", 0, ""), b + 1, b + 1, body, time.time())
        store.commit()
        t1 = time.perf_counter()
        store.begin()
        store.rollouts.index_some(1 << 30)
        store.commit()
        turn.append(t1 - t0)
        index.append(time.perf_counter() - t1)
    store.db.close()
    shutil.rmtree(folder, ignore_errors=True)
    return {"turn_ms": median(turn) * 1e3, "index_ms": median(index) * 1e3}


def _code_of(rev: str, into: Path) -> Path:
    """A folder to put first on PYTHONPATH so that ``python -m pilothouse`` runs the agent of commit ``rev``."""
    archive = subprocess.run(["git", "archive", rev, "agent"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "path").mkdir()
    (into / "path" / "pilothouse").symlink_to(into / "agent")
    return into / "path"


def agent_cost(kind: str, steps: int, code: Path | None) -> tuple[float, int]:
    """A real agent's CPU µs per rollout, from the first ``log_rollouts`` until every row is stored and
    indexed and the run is finished (its last steps' series written): ``steps`` steps of 256 rows logged
    in 4 calls of 64 by a trainer in this process; and the derived series' entries it wrote (none from
    an agent without them).  ``code``: the agent of another commit (``_code_of``)."""
    maker = ChatTexts(seed=2) if kind == "chat" else Texts(seed=2)
    parts = [maker.batch(b, 1 << 40) for b in range(steps * 4)]
    ours = os.environ.pop("PYTHONPATH", None)
    if code is not None:  # the agent subprocess inherits it: the other commit's package comes first
        os.environ["PYTHONPATH"] = str(code)
    agent = AgentProcess()
    try:
        agent.start()
    finally:
        os.environ.pop("PYTHONPATH", None)
        if ours is not None:
            os.environ["PYTHONPATH"] = ours
    try:  # not ``with agent``: that would start a second one
        run = ph.init(project="bench", name=f"cost-{kind}", agent=agent.url)
        cpu0 = agent.cpu_seconds()
        for b, part in enumerate(parts):
            run.log_rollouts(b // 4, part)
        assert run.finish(timeout=120), "the agent did not confirm the run's end"
        with closing(sqlite3.connect(f"file:{agent.data / 'journal.sqlite'}?mode=ro", uri=True)) as db:
            while db.execute("SELECT COUNT(*) FROM rollout_queue").fetchone()[0]:
                time.sleep(0.05)
            stored = db.execute("SELECT SUM(n) FROM journal WHERE kind=?", [KIND_ROLLOUTS]).fetchone()[0]
            derived = db.execute("SELECT COUNT(*) FROM journal WHERE rank=?", [MAX_RANKS]).fetchone()[0]
        cpu = agent.cpu_seconds() - cpu0
    finally:
        agent.stop()
    assert stored == steps * 4 * ROWS, (stored, steps)
    return cpu / stored * 1e6, derived


def agent_costs(before: str | None, steps: int, trials: int) -> dict:
    """µs per rollout through a real agent, chat and plain rows, median of ``trials`` (alternating with
    the agent of commit ``before`` when given, so both see the same machine)."""
    codes: dict[str, Path | None] = {"now": None}
    folder = Path(tempfile.mkdtemp(prefix="bench-rollouts-code-"))
    try:
        if before:
            codes[f"at {before}"] = _code_of(before, folder)
        found: dict[str, dict[str, list[float]]] = {kind: {c: [] for c in codes} for kind in ("chat", "plain")}
        series: dict[str, int] = {}
        for _ in range(trials):
            for kind, per_code in found.items():
                for name, code in codes.items():
                    us, series[name] = agent_cost(kind, steps, code)
                    per_code[name].append(us)
    finally:
        shutil.rmtree(folder)
    return {**{kind: {name: median(v) for name, v in per_code.items()} for kind, per_code in found.items()},
            "series_entries": series}


def plain_main(args: argparse.Namespace) -> dict:
    sizes = [int(s) for s in args.sizes.split(",")]
    cost = ingest_cost(Path(tempfile.mkdtemp(prefix="bench-rollouts-")))
    print(f"ingest path, per batch of {ROWS} rollouts: a turn (check, compress, journal, commit) "
          f"{cost['turn_ms']:.2f} ms; indexing it between turns {cost['index_ms']:.2f} ms")
    results = []
    for count in sizes:
        folder = Path(tempfile.mkdtemp(prefix="bench-rollouts-"))
        try:
            peer = count <= args.peer_max
            built = build(folder, count, peer)
            found = searches(built, args.repeats, peer)
            built["store"].db.close()
            file_bytes = (folder / "journal.sqlite").stat().st_size
        finally:
            shutil.rmtree(folder)
        built.pop("store")
        results.append({**built, "file_B": file_bytes / count, "search_ms": found})
        print(f"\n{count:,} rollouts: written in {built['write_s']:.0f} s, indexed in {built['index_s']:.0f} s "
              f"({built['index_s'] / count * 1e6:.0f} µs per rollout)")
        print(_bytes_table(built, file_bytes / count))
        print(table(["first page of 50", "FTS5 median ms", "LIKE scan median ms", "ratio", "hits"], [
            [label, f"{fts:.2f}", f"{scan:.1f}" if scan is not None else "-",
             f"{scan / fts:.1f}x" if scan is not None else "-", n] for label, (fts, scan, n) in found.items()]))
    if len(results) > 1:
        first, last = results[0], results[-1]
        grow = last["rollouts"] / first["rollouts"]
        print(f"\nfrom {first['rollouts']:,} to {last['rollouts']:,} rollouts ({grow:.0f}x): " + ", ".join(
            f"{label} search {last['search_ms'][label][0] / first['search_ms'][label][0]:.1f}x"
            for label in first["search_ms"]))
    data = {"ingest": cost, "sizes": results, "rows_per_batch": ROWS}
    print(f"\nresults: {write_result('rollouts', data)}")
    return data


def _bytes_table(built: dict, file_b: float) -> str:
    return table(["bytes per rollout", "value"], [
        ["body as msgpack (before)", f"{built['body_plain_B']:.0f}"],
        ["body as a zstd frame per batch (now)", f"{built['body_zstd_B']:.0f}"],
        ["journal table pages", f"{built['journal_B']:.0f}"],
        ["FTS5 index + step table pages", f"{built['index_B']:.0f}"],
        ["peer: plain text table pages", f"{built['plain_B']:.0f}" if built["plain_B"] else "-"],
        ["the whole file", f"{file_b:.0f}"]])


def chat_main(args: argparse.Namespace) -> dict:
    began = time.perf_counter()
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if args.rows * CHAT_BYTES > free:
        raise SystemExit(f"{args.rows:,} chat rollouts need about {args.rows * CHAT_BYTES / 1e9:.0f} GB in "
                         f"{tempfile.gettempdir()}, {free / 1e9:.0f} GB free (TMPDIR picks another folder)")
    derived = derived_cost(args.cost_repeats)
    ingest = {kind: ingest_cost(Path(tempfile.mkdtemp(prefix="bench-rollouts-")), kind) for kind in ("chat", "plain")}
    agent = agent_costs(args.before, args.agent_steps, args.agent_trials)
    print(f"text per row: chat {derived['chat']['text_B']:.0f} B, plain {derived['plain']['text_B']:.0f} B")
    print(table(["µs per rollout (median)", "chat rows", "plain rows"], [
        [label, *(f"{derived[k][key]:.1f}" for k in ("chat", "plain"))] for label, key in (
            ("derived series, a step of 512 rows at once", "series_once_us"),
            ("derived series, a step in 8 calls of 64", "series_in_8_calls_us"),
            ("pack_batch (msgpack + zstd)", "pack_batch_us"))] + [
        [label, *(f"{ingest[k][key] * 1e3 / ROWS:.1f}" for k in ("chat", "plain"))] for label, key in (
            ("Store.ingest + commit (a turn)", "turn_ms"), ("indexing between turns", "index_ms"))] + [
        [f"a real agent's CPU, all of it ({name}: {agent['series_entries'][name]} series entries)",
         *(f"{agent[k][name]:.1f}" for k in ("chat", "plain"))] for name in agent["chat"]]))
    data = {"rows": args.rows, "derived_us": derived, "ingest": ingest, "agent_us": agent,
            "rows_per_batch": ROWS, "group": GROUP, "goal_ms": GOAL_MS}
    if not args.rows:
        print(f"results: {write_result('rollouts_chat', data)}")
        return data
    folder = Path(tempfile.mkdtemp(prefix="bench-rollouts-"))
    try:
        built = build(folder, args.rows, False, "chat")
        found = chat_searches(built["store"], chat_queries(ChatTexts(), args.queries), args.repeats)
        built["store"].db.close()
        file_bytes = (folder / "journal.sqlite").stat().st_size
    finally:
        shutil.rmtree(folder)
    built.pop("store")
    print(f"\n{args.rows:,} chat rollouts: written in {built['write_s']:.0f} s, indexed in {built['index_s']:.0f} s "
          f"({built['index_s'] / args.rows * 1e6:.0f} µs per rollout), {file_bytes / 1e9:.1f} GB")
    print(_bytes_table(built, file_bytes / args.rows))
    print(table(["first page of 50", "queries", "hits p50", "first ms p50", "p90", "warm ms p50", "p90"], [
        [label, len(s["hits"]), median(s["hits"]), *(f"{percentile(sorted(s[k]), q):.1f}" for k in
                                                     ("first_ms", "warm_ms") for q in (50, 90))]
        for label, s in found.items()]))
    print(f"\nthe whole command took {(time.perf_counter() - began) / 60:.1f} min")
    data |= {"build": {**built, "file_B": file_bytes / args.rows}, "search": found}
    print(f"results: {write_result('rollouts_chat', data)}")
    return data


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="100000,300000,1000000", help="plain rows: rollout counts, comma-separated")
    p.add_argument("--repeats", type=int, default=None, help="runs of each search, after a first (7; --chat: 3)")
    p.add_argument("--peer-max", type=int, default=1_000_000, help="largest size that also builds the LIKE peer")
    p.add_argument("--chat", action="store_true", help="chat rows (tool-calling trajectories) instead")
    p.add_argument("--rows", type=int, default=10_000_000, help="--chat: rollouts in the store (0: the costs only)")
    p.add_argument("--queries", type=int, default=40, help="--chat: searches of each kind")
    p.add_argument("--cost-repeats", type=int, default=21, help="--chat: runs of each per-rollout cost")
    p.add_argument("--before", help="--chat: a commit whose agent's cost per rollout is measured too (e03d57c: "
                                    "before the derived series)")
    p.add_argument("--agent-steps", type=int, default=20, help="--chat: steps of 256 rows per real-agent trial")
    p.add_argument("--agent-trials", type=int, default=3)
    args = p.parse_args(argv)
    args.repeats = args.repeats or (3 if args.chat else 7)
    return chat_main(args) if args.chat else plain_main(args)


def passed(data: dict) -> bool:
    """Plain rows: every search found rows (and, where the peer ran, the same rows as its scan: else it
    raised).  Chat rows: every common word was found, and each kind's p50 and p90 (warm) are within
    the goal; every hit held its word (else it raised)."""
    if "sizes" in data:
        return all(n > 0 for size in data["sizes"] for _, _, n in size["search_ms"].values())
    if "search" not in data:
        return True
    found = data["search"]
    return all(all(found[label]["hits"]) for label in ("common word", "prompt: common word")) and all(
        percentile(sorted(s["warm_ms"]), q) <= GOAL_MS for s in found.values() for q in (50, 90))


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)

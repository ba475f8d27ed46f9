"""Rollout storage and search at scale: the journal's compressed bodies and FTS5 index against what a
user's own SQLite would do, a table of plain text searched with LIKE.

For each size, rollouts of about 2 KB of text (a prompt and a completion drawn from a Zipf-like
vocabulary, 64 to a batch, like a GRPO step's group) are written in bulk into a real agent journal
(``Store``: zstd bodies, queued and then indexed by ``RolloutSearch.index_some``) and into a peer
table with the same text uncompressed.  Reported: bytes per rollout (body before and after
compression, the index, the whole file against the peer's), the median latency of the first search
page (50 rows, newest first) for a common word, a rare word and a phrase, against the peer's
``LIKE`` scan, and the ingest path's cost per batch (compressing, and indexing done between turns).
Generated files go to a temporary folder and are deleted.

    python benchmarks/bench_rollouts.py [--sizes 100000,300000,1000000] [--repeats 7] [--peer-max 1000000]
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

import msgpack
from _common import median, table, write_result

from pilothouse.node.journal import Store
from pilothouse.wire.entries import KIND_ROLLOUTS
from pilothouse.wire.messages import pack, unpack
from pilothouse.wire.records import REC_ROLLOUTS, encode_batch
from pilothouse.wire.rollouts import pack_batch

ROWS = 64  # rollouts per batch
PAGE = 50  # rows of a first search page
RARE = "quokka"  # in one rollout of every 100,000
PHRASE = '"the final answer"'  # in one completion of every 8
VOCAB = 30_000


def vocabulary(rng: random.Random) -> tuple[list[str], list[float]]:
    words = ["the", "of", "and", "to", "answer", "is", "a", "we", "step", "so"]
    while len(words) < VOCAB:
        words.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 10))))
    return words, [1.0 / (i + 1) for i in range(VOCAB)]


class Texts:
    """Rollout text fast enough for millions: sentences drawn once from the vocabulary, each rollout a
    new combination of them plus numbers of its own (so no two batches are alike to zstd)."""

    def __init__(self, seed: int = 0, sentences: int = 20_000):
        rng = random.Random(seed)
        words, weights = vocabulary(rng)
        self.rng = rng
        self.sentences = [" ".join(rng.choices(words, weights, k=rng.randint(8, 24))) + "." for _ in range(sentences)]

    def rollout(self, n: int) -> dict:
        pick = self.rng.sample(self.sentences, 18)
        prompt = f"Problem {n}: " + " ".join(pick[:4]) + f" What is {n % 997} + {n % 89}?"
        completion = " ".join(pick[4:])
        if n % 8 == 3:
            completion += " so the final answer is " + str(n % 997 + n % 89)
        if n % 100_000 == 77:
            completion += f" {RARE}"
        return {"prompt": prompt, "completion": completion, "reward": (n % 5) / 4, "advantage": (n % 7 - 3) / 7}


def build(folder: Path, count: int, peer: bool) -> dict:
    """A journal with ``count`` rollouts of one run, indexed; and the peer table (when ``peer``)."""
    texts = Texts()
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
    for chunk in range(0, batches, 200):  # 200 batches (12,800 rollouts) per transaction
        t0 = time.perf_counter()
        store.db.execute("BEGIN")
        rows, plain_rows = [], []
        for b in range(chunk, min(chunk + 200, batches)):
            batch = [texts.rollout(b * ROWS + i) for i in range(min(ROWS, count - b * ROWS))]
            body = pack_batch(b, 1.7e9 + b, batch)
            plain_bytes += len(msgpack.packb({"step": b, "time": 1.7e9 + b, "rows": batch}))
            framed_bytes += len(body)
            store.head += 1
            rows.append((store.head, "r", KIND_ROLLOUTS, None, 0, len(batch), None, None, None, body))
            if peer:
                plain_rows.extend((None, b, i, r["prompt"], r["completion"], r["reward"]) for i, r in enumerate(batch))
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
    page = store.db.execute("PRAGMA page_size").fetchone()[0]

    def pages(names: str) -> int:
        return store.db.execute(f"SELECT COUNT(*) FROM dbstat WHERE name IN ({names})").fetchone()[0] * page
    index_bytes = pages("'rollout_text_data', 'rollout_text_idx', 'rollout_batches', 'rollout_batches_step', "
                        "'rollout_batches_key'")
    out = {"rollouts": count, "store": store, "write_s": write, "index_s": index,
           "body_plain_B": plain_bytes / count, "body_zstd_B": framed_bytes / count,
           "journal_B": pages("'journal'") / count, "index_B": index_bytes / count,
           "plain_B": pages("'plain'") / count if peer else None}
    return out


def latency(fn, repeats: int) -> float:
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


def ingest_cost(folder: Path, batches: int = 100) -> dict:
    """Median ms per 64-rollout batch through ``Store.ingest`` and commit (a turn), and for the slice
    that indexes it between turns."""
    texts = Texts(seed=1)
    store = Store(folder / "ingest.sqlite")
    store.begin()
    store.upsert_run({"run": "r", "project": "bench", "name": "r", "host": "h", "pid": 1, "config": {}}, time.time())
    store.commit()
    turn, index = [], []
    for b in range(batches):
        body = unpack(pack(encode_batch([(REC_ROLLOUTS, None, (b, 1.7e9 + b,
                                                              [texts.rollout(b * ROWS + i) for i in range(ROWS)]))])))
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


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="100000,300000,1000000", help="rollout counts, comma-separated")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--peer-max", type=int, default=1_000_000, help="largest size that also builds the LIKE peer")
    args = p.parse_args(argv)
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
        print(table(["bytes per rollout", "value"], [
            ["body as msgpack (before)", f"{built['body_plain_B']:.0f}"],
            ["body as a zstd frame per batch (now)", f"{built['body_zstd_B']:.0f}"],
            ["journal table pages", f"{built['journal_B']:.0f}"],
            ["FTS5 index + step table pages", f"{built['index_B']:.0f}"],
            ["peer: plain text table pages", f"{built['plain_B']:.0f}" if built["plain_B"] else "-"]]))
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


def passed(data: dict) -> bool:
    """Every search found rows (and, where the peer ran, the same rows as its scan: else it raised)."""
    return all(n > 0 for size in data["sizes"] for _, _, n in size["search_ms"].values())


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)

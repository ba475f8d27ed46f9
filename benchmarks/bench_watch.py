"""``pilothouse watch`` and ``pilothouse import LOGDIR`` against TensorBoard's own loader.

- live: a writer process appends scalar events as fast as it can (tensorboard's own RecordWriter,
  flushed every 1,000 events, one scalar per event as SummaryWriter writes them) while a real
  ``pilothouse watch`` process follows the logdir into a fresh agent: points/s from the writer's
  first event to the agent holding every point, and the lag after the writer's last.
- import: ``pilothouse import LOGDIR`` of runs x points (to the command's exit: every point
  acknowledged and every run finished) against TensorBoard's ``EventAccumulator.Reload()`` of the
  same files with every point kept (``size_guidance`` 0), its ratio, medians over trials.

- rollouts: ``--rows`` rollouts of about 2 KB in files of ``--per-step`` rows, written as the frameworks
  write them: verl's ``{step}.jsonl`` dumps (``RayPPOTrainer._write_generations``, verl 0.9.1, its
  field names) and TRL's ``completions/completions_{step:05d}.parquet`` (``GRPOTrainer.log``, TRL
  1.16: ``pd.DataFrame(table).to_parquet``).  Read by the watcher's own readers
  (``formats.verl.Generations().file``, ``formats.trl.read_rows``) against pandas reading the same
  files (``pd.read_json(lines=True)``, ``pd.read_parquet``; and with ``.to_dict("records")``, the
  rows as dicts as the readers give them), the ratio per trial (a busy spell slows both sides);
  and the whole path, ``pilothouse import --run NAME DUMP_DIR`` and ``pilothouse import
  OUTPUT_DIR`` into a fresh agent, to the command's exit, every row counted back from the agent.

    python benchmarks/bench_watch.py [--points 500000] [--runs 4] [--rows 100000] [--per-step 1024] [--trials 3]
    python benchmarks/bench_watch.py --parts rollouts --rows 20000     # the rollouts only, smaller
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from _common import ROOT, AgentProcess, median, table, write_result
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.record_writer import RecordWriter

from pilothouse.client import Client
from pilothouse.watch.formats import trl, verl

TAGS = ("loss", "reward")


def write_run(folder: Path, points: int, flush_every: int = 0, start: float = 1.7e9) -> None:
    """``points`` scalars (alternating tags, two per step), one event each, as SummaryWriter lays them out."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"events.out.tfevents.{int(start)}.bench", "wb") as f:
        writer = RecordWriter(f)
        writer.write(Event(wall_time=start, file_version="brain.Event:2").SerializeToString())
        for i in range(points):
            step, tag = divmod(i, len(TAGS))
            value = Summary.Value(tag=TAGS[tag], simple_value=1.0 / (step + 1))
            writer.write(Event(wall_time=start + step, step=step, summary=Summary(value=[value])).SerializeToString())
            if flush_every and i % flush_every == 0:
                f.flush()


def agent_points(client: Client) -> int:
    return sum(r["points"] for r in client.runs() if r["kind"] == "watched")


def live(points: int) -> dict:
    with AgentProcess() as agent, tempfile.TemporaryDirectory(prefix="pilothouse-bench-watch-") as tmp:
        logdir = Path(tmp) / "logs"
        logdir.mkdir()
        env = {**os.environ, "PILOTHOUSE_DATA": str(Path(tmp) / "data")}
        watcher = subprocess.Popen([sys.executable, "-m", "pilothouse", "watch", str(logdir), "--agent", agent.url],
                                   cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
        try:
            time.sleep(1.5)  # the watcher is up and polling
            writer = multiprocessing.Process(target=write_run, args=(logdir / "run", points, 1000))
            client = Client(agent.url, timeout=30)
            t0 = time.perf_counter()
            writer.start()
            writer.join()
            written = time.perf_counter() - t0
            while (held := agent_points(client)) < points:
                time.sleep(0.02)
            followed = time.perf_counter() - t0
        finally:
            watcher.terminate()
            watcher.wait(timeout=30)
    return {"points": points, "writer_s": written, "followed_s": followed, "lag_s": followed - written,
            "points_per_s": points / followed, "exact": held == points}


def import_vs_tensorboard(runs: int, points: int) -> dict:
    with AgentProcess() as agent, tempfile.TemporaryDirectory(prefix="pilothouse-bench-import-") as tmp:
        logdir = Path(tmp) / "logs"
        for r in range(runs):
            write_run(logdir / f"run{r}", points // runs)
        env = {**os.environ, "PILOTHOUSE_DATA": str(Path(tmp) / "data")}
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pilothouse", "import", str(logdir), "--agent", agent.url],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        imported = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        got = agent_points(Client(agent.url, timeout=30))
        t0 = time.perf_counter()
        kept = 0
        for r in range(runs):
            acc = EventAccumulator(str(logdir / f"run{r}"), size_guidance={"scalars": 0, "tensors": 0})
            acc.Reload()
            kept += sum(len(acc.Scalars(t)) for t in acc.Tags()["scalars"])
        tensorboard = time.perf_counter() - t0
    return {"points": got, "import_s": imported, "tensorboard_s": tensorboard,
            "exact": got == kept == points // runs * runs}


# --- rollouts: verl's generation dumps and TRL's completion files -------------------------------------

WORDS = ("the model answer step reason check total value problem equation solve first then because "
         "number sum product result final compute each both since therefore thus so we get").split()


def write_generations(inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path, global_steps):
    """verl 0.9.1's ``RayPPOTrainer._write_generations`` (verl/trainer/ppo/ray_trainer.py), as written there."""
    os.makedirs(dump_path, exist_ok=True)
    filename = os.path.join(dump_path, f"{global_steps}.jsonl")
    n = len(inputs)
    base_data = {"input": inputs, "output": outputs, "gts": gts, "score": scores, "step": [global_steps] * n}
    for k, v in reward_extra_infos_dict.items():
        if len(v) == n:
            base_data[k] = v
    with open(filename, "w") as f:
        for i in range(n):
            entry = {k: v[i] for k, v in base_data.items()}
            f.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")


def write_completions(output_dir: Path, global_step: int, table_: dict) -> None:
    """TRL 1.16's ``GRPOTrainer.log`` (trl/trainer/grpo_trainer.py): the table of its deques, to parquet by pandas."""
    pd.DataFrame(table_).to_parquet(os.path.join(output_dir, "completions", f"completions_{global_step:05d}.parquet"))


def write_rollouts(tmp: Path, rows: int, per_step: int) -> tuple[Path, Path]:
    """``rows`` rollouts (a ~1.4 KB prompt, a ~0.6 KB completion, each row's own) as verl's dumps and as a
    TRL output_dir's completion files, ``per_step`` to a file; (the dump folder, the output_dir)."""
    rng = random.Random(0)
    prompts = [" ".join(rng.choices(WORDS, k=230)) for _ in range(997)]
    answers = [" ".join(rng.choices(WORDS, k=100)) for _ in range(1009)]
    dumps, output_dir = tmp / "rollout_data", tmp / "trl-output"
    (output_dir / "completions").mkdir(parents=True)
    for step, first in enumerate(range(0, rows, per_step), 1):
        ids = range(first, min(rows, first + per_step))
        inputs = [f"Question {i}: {prompts[i % len(prompts)]}" for i in ids]
        outputs = [f"{answers[i * 7 % len(answers)]} The answer is {i}." for i in ids]
        scores = [float(i % 3 == 0) for i in ids]
        write_generations(inputs, outputs, [str(i) for i in ids], scores,
                          {"acc": scores, "pred": [str(i) for i in ids], "request_id": [f"req-{i}" for i in ids]},
                          str(dumps), step)
        write_completions(output_dir, step, {
            "step": [step] * len(ids), "prompt": inputs, "completion": outputs, "accuracy_reward": scores,
            "format_reward": [0.5] * len(ids), "advantage": [s - 1 / 3 for s in scores]})
    return dumps, output_dir


def timed(read: Callable[[Path], int], paths: list[Path]) -> tuple[float, int]:
    t0 = time.perf_counter()
    got = sum(read(p) for p in paths)
    return time.perf_counter() - t0, got


def verl_rows(path: Path) -> int:
    return sum(len(rows) for _, _, rows in verl.Generations().file(path).rollouts)


READERS: dict[str, list[tuple[str, Callable[[Path], int]]]] = {
    "verl": [("pilothouse verl.Generations().file", verl_rows),
             ("pandas read_json(lines=True)", lambda p: len(pd.read_json(p, lines=True))),
             ("pandas read_json + to_dict('records')", lambda p: len(pd.read_json(p, lines=True).to_dict("records")))],
    "trl": [("pilothouse trl.read_rows", lambda p: len(trl.read_rows(p)[1])),
            ("pandas read_parquet", lambda p: len(pd.read_parquet(p))),
            ("pandas read_parquet + to_dict('records')", lambda p: len(pd.read_parquet(p).to_dict("records")))],
}


def readers(files: dict[str, list[Path]], rows: int, trials: int) -> dict:
    """Each reader over every file of its format, round robin per trial; seconds, and ratios to the first peer."""
    out: dict = {}
    for fmt, peers in READERS.items():
        times: dict[str, list[float]] = {name: [] for name, _ in peers}
        exact = True
        for _, read in peers:
            read(files[fmt][0])  # warm-up: modules loaded (pyarrow's first read loads it)
        for _ in range(trials):
            for name, read in peers:
                seconds, got = timed(read, files[fmt])
                times[name].append(seconds)
                exact = exact and got == rows
        ours = peers[0][0]
        out[fmt] = {"seconds": times, "exact": exact, "ratio_to_pandas": {
            name: median([a / b for a, b in zip(times[ours], times[name])]) for name, _ in peers[1:]}}
    return out


def agent_rows(client: Client, steps: int) -> int:
    (run,) = [r for r in client.runs() if r["kind"] == "watched"]
    return sum(len(b["rows"]) for s in range(1, steps + 1) for b in client.rollouts(run["id"], step=s))


def imported(args: list[str], rows: int, steps: int) -> dict:
    """``pilothouse import ARGS`` into a fresh agent, to the command's exit; the agent's rows counted."""
    with AgentProcess() as agent, tempfile.TemporaryDirectory(prefix="pilothouse-bench-import-") as state:
        env = {**os.environ, "PILOTHOUSE_DATA": state}
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pilothouse", "import", *args, "--agent", agent.url,
                               "--project", "bench"], cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        held = agent_rows(Client(agent.url, timeout=60), steps)
    return {"seconds": seconds, "rows": held, "exact": held == rows}


def rollouts(rows: int, per_step: int, trials: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="pilothouse-bench-rollouts-") as tmp:
        dumps, output_dir = write_rollouts(Path(tmp), rows, per_step)
        files = {"verl": sorted(dumps.iterdir(), key=lambda p: int(p.stem)),
                 "trl": [p for _, p in trl.numbered(output_dir / "completions")]}
        sizes = {fmt: sum(p.stat().st_size for p in paths) for fmt, paths in files.items()}
        steps = len(files["verl"])
        read = readers(files, rows, trials)
        imports = {"verl": [imported(["--run", "verl-bench", str(dumps)], rows, steps) for _ in range(trials)],
                   "trl": [imported([str(output_dir)], rows, steps) for _ in range(trials)]}
    return {"rows": rows, "per_step": per_step, "bytes": sizes, "readers": read, "import": imports}


def rollout_rows(result: dict) -> list[list]:
    rows = result["rows"]
    out = []
    for fmt, label in (("verl", "verl {step}.jsonl"), ("trl", "TRL completions parquet")):
        read = result["readers"][fmt]
        names = list(read["seconds"])
        mb = result["bytes"][fmt] / 1e6
        for name in names:
            seconds = median(read["seconds"][name])
            ratio = "" if name == names[0] else f"; pilothouse / this = {read['ratio_to_pandas'][name]:.2f}x"
            out.append([f"{label}: {name}", rows, f"{rows / seconds:,.0f} rows/s",
                        f"{seconds:.2f} s, {mb:.0f} MB{ratio}"])
        seconds = median([t["seconds"] for t in result["import"][fmt]])
        how = "import --run NAME DUMP_DIR" if fmt == "verl" else "import OUTPUT_DIR"
        out.append([f"{label}: pilothouse {how}", result["import"][fmt][0]["rows"], f"{rows / seconds:,.0f} rows/s",
                    f"{seconds:.2f} s to exit, every row in the agent"])
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", type=int, default=500_000)
    p.add_argument("--runs", type=int, default=4, help="runs of the imported logdir")
    p.add_argument("--rows", type=int, default=100_000, help="rollouts written as each framework writes them")
    p.add_argument("--per-step", type=int, default=1024, help="rollouts in one step's file")
    p.add_argument("--parts", default="tensorboard,rollouts", help="what to measure: tensorboard, rollouts or both")
    p.add_argument("--trials", type=int, default=3)
    args = p.parse_args(argv)
    parts = set(args.parts.split(","))
    result: dict = {}
    lines: list[list] = []
    if "tensorboard" in parts:
        result.update(tensorboard(args))
        lines += tensorboard_rows(args, result)
    if "rollouts" in parts:
        result["rollouts"] = rollouts(args.rows, args.per_step, args.trials)
        lines += rollout_rows(result["rollouts"])
    print(table(["case", "count", "median", "note"], lines))
    write_result("bench_watch", result)
    if not passed(result):
        print("LOSS: the agent did not hold exactly the points and rows the files hold")
    return result


def tensorboard(args: argparse.Namespace) -> dict:
    lives = [live(args.points) for _ in range(args.trials)]
    imports = [import_vs_tensorboard(args.runs, args.points) for _ in range(args.trials)]
    imp, tb = median([t["import_s"] for t in imports]), median([t["tensorboard_s"] for t in imports])
    return {"live": lives, "import": imports, "median_live_points_per_s": median([t["points_per_s"] for t in lives]),
            "median_import_s": imp, "median_tensorboard_s": tb, "ratio": imp / tb}


def tensorboard_rows(args: argparse.Namespace, result: dict) -> list[list]:
    lives, imports = result["live"], result["import"]
    writer, lag = median([t["writer_s"] for t in lives]), median([t["lag_s"] for t in lives])
    imp, tb = result["median_import_s"], result["median_tensorboard_s"]
    return [
        ["watch, live writer", args.points, f"{result['median_live_points_per_s']:,.0f} points/s",
         f"writer {writer:.2f} s, lag after it {lag:.2f} s"],
        [f"import ({args.runs} runs)", imports[0]["points"], f"{imp:.2f} s",
         f"{imports[0]['points'] / imp:,.0f} points/s"],
        ["TensorBoard EventAccumulator", imports[0]["points"], f"{tb:.2f} s",
         f"import / TensorBoard = {imp / tb:.2f}x"],
    ]


def passed(result: dict) -> bool:
    """Every point and row of the files, no more and no fewer, in the agent (live: reached; import: counted),
    and every reader read every row."""
    checks = [t["exact"] for t in result.get("live", []) + result.get("import", [])]
    if "rollouts" in result:
        checks += [r["exact"] for r in result["rollouts"]["readers"].values()]
        checks += [t["exact"] for trials in result["rollouts"]["import"].values() for t in trials]
    return all(checks)


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)

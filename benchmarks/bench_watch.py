"""``pilothouse watch`` and ``pilothouse import LOGDIR`` against TensorBoard's own loader.

- live: a writer process appends scalar events as fast as it can (tensorboard's own RecordWriter,
  flushed every 1,000 events, one scalar per event as SummaryWriter writes them) while a real
  ``pilothouse watch`` process follows the logdir into a fresh agent: points/s from the writer's
  first event to the agent holding every point, and the lag after the writer's last.
- import: ``pilothouse import LOGDIR`` of runs x points (to the command's exit: every point
  acknowledged and every run finished) against TensorBoard's ``EventAccumulator.Reload()`` of the
  same files with every point kept (``size_guidance`` 0), its ratio, medians over trials.

    python benchmarks/bench_watch.py [--points 500000] [--runs 4] [--trials 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, AgentProcess, median, table, write_result
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.record_writer import RecordWriter

from pilothouse.client import Client

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


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", type=int, default=500_000)
    p.add_argument("--runs", type=int, default=4, help="runs of the imported logdir")
    p.add_argument("--trials", type=int, default=3)
    args = p.parse_args(argv)
    lives = [live(args.points) for _ in range(args.trials)]
    imports = [import_vs_tensorboard(args.runs, args.points) for _ in range(args.trials)]
    rate = median([t["points_per_s"] for t in lives])
    writer, lag = median([t["writer_s"] for t in lives]), median([t["lag_s"] for t in lives])
    imp, tb = median([t["import_s"] for t in imports]), median([t["tensorboard_s"] for t in imports])
    print(table(["case", "points", "median", "note"], [
        ["watch, live writer", args.points, f"{rate:,.0f} points/s",
         f"writer {writer:.2f} s, lag after it {lag:.2f} s"],
        [f"import ({args.runs} runs)", imports[0]["points"], f"{imp:.2f} s",
         f"{imports[0]['points'] / imp:,.0f} points/s"],
        ["TensorBoard EventAccumulator", imports[0]["points"], f"{tb:.2f} s",
         f"import / TensorBoard = {imp / tb:.2f}x"],
    ]))
    result = {"live": lives, "import": imports, "median_live_points_per_s": rate, "median_import_s": imp,
              "median_tensorboard_s": tb, "ratio": imp / tb}
    write_result("bench_watch", result)
    if not passed(result):
        print("LOSS: the agent did not hold exactly the points the files hold")
    return result


def passed(result: dict) -> bool:
    """Every point of the files, no more and no fewer, in the agent (live: reached; import: counted)."""
    return all(t["exact"] for t in result["live"] + result["import"])


if __name__ == "__main__":
    raise SystemExit(0 if passed(main()) else 1)

"""A re-run does not make its own name ambiguous: a name several runs share means the one live run
(running or paused before a stale one); several live, or none, stays ambiguous with each run's id
and status named; ``rm`` never prefers.  Real agent, real trainers, the real CLI."""

from __future__ import annotations

import pytest
from support.processes import LOOP_UNTIL_STOPPED, AgentProcess, finish, start_trainer
from support.processes import run_cli as cli
from support.sockets import free_port

from pilothouse.node.journal import Store

ONE_STEP = """
run = ph.init(project="p", name=ARGS[0], agent=URL, heartbeat=0.2)
run.log({"loss": 1.0}, step=0)
print(run.id, flush=True)
run.finish()
"""


def test_a_rerun_is_steered_by_its_name_and_only_a_second_live_one_is_ambiguous(tmp_path):
    agent = AgentProcess(tmp_path / "agent", free_port()).start()
    trainers = []
    try:
        first = finish(start_trainer(tmp_path, ONE_STEP, agent.url, "again", name="first")).strip()

        trainers.append(start_trainer(tmp_path, LOOP_UNTIL_STOPPED, agent.url, "p", "again", name="second"))
        second = trainers[-1].stdout.readline().strip()
        paused = cli("pause", "again", "--agent", agent.url)
        assert paused.returncode == 0 and f"(run {second}, " in paused.stdout, paused.stderr
        out = tmp_path / "again.csv"
        read = cli("export", "p/again", "-o", str(out), "--agent", agent.url)  # reads mean the live one too
        assert read.returncode == 0 and f"of run {second} to" in read.stderr, read.stderr

        removed = cli("rm", "again", "--yes", "--agent", agent.url)  # a removal must name exactly one run
        assert removed.returncode == 1, removed.stdout
        assert f"'again' names 2 runs ({second} (paused), {first} (finished)); use a run id" in removed.stderr

        trainers.append(start_trainer(tmp_path, LOOP_UNTIL_STOPPED, agent.url, "p", "again", name="third"))
        third = trainers[-1].stdout.readline().strip()
        for command in ("resume", "stop"):
            two = cli(command, "again", "--agent", agent.url)
            assert two.returncode == 1 and two.stdout == ""
            assert (f"'again' names 3 runs ({third} (running), {second} (paused), {first} (finished)); "
                    "2 of them live; use a run id") in two.stderr, two.stderr

        for run in (second, third):
            stopped = cli("stop", run, "--agent", agent.url)
            assert stopped.returncode == 0, stopped.stderr
        for t in trainers:
            finish(t)
        trainers.clear()
        ended = cli("export", "again", "--agent", agent.url)  # no live one: no guess, for reads either
        assert ended.returncode == 1 and ended.stdout == ""
        assert (f"'again' names 3 runs ({third} (finished), {second} (finished), {first} (finished)); "
                "none of them live; use a run id") in ended.stderr, ended.stderr
    finally:
        for t in trainers:
            t.kill()
            t.wait()
        agent.stop()


def _run(store: Store, run: str, name: str, status: str, created: float) -> None:
    store.upsert_run({"run": run, "rank": 0, "project": "p", "name": name, "config": {}, "host": "h", "pid": 1},
                     created)
    store.set_status(run, status, created)


@pytest.mark.parametrize("statuses, meant", [
    (("finished", "running"), "r1"),
    (("crashed", "paused"), "r1"),
    (("stale", "running"), "r1"),  # heard from beats silent (or imported)
    (("running", "stale"), "r0"),
    (("finished", "stale"), "r1"),  # the one live run, silent or not
    (("stale", "stale"), None),
    (("running", "paused"), None),
    (("finished", "crashed"), None),
])
def test_which_run_a_shared_name_means(tmp_path, statuses, meant):
    store = Store(tmp_path / "j.sqlite")
    store.begin()
    for i, status in enumerate(statuses):
        _run(store, f"r{i}", "twin", status, float(i))
    store.commit()
    if meant is None:
        with pytest.raises(LookupError, match=r"'twin' names 2 runs \(r1 \(\w+\), r0 \(\w+\)\); .*use a run id"):
            store.resolve("twin")
    else:
        assert store.resolve("twin") == store.resolve("p/twin") == meant
    with pytest.raises(LookupError, match=r"names 2 runs \(r1 \(\w+\), r0 \(\w+\)\); use a run id"):
        store.resolve("twin", live_wins=False)
    assert store.resolve("r0", live_wins=False) == "r0"
    store.db.close()

"""A multi-node job seen from the app, without Qt: which agents are missing, how each is reached (this
host, SSH tunnels, CurveZMQ keys known or exactly which is missing), bad node lists, the store's jobs,
and a job's nodes kept apart as runs (never one node's resume of another)."""

from __future__ import annotations

import pytest

from pilothouse.gui.jobs import app_keys, offers, plan_job
from pilothouse.gui.local_store import LocalStore
from pilothouse.gui.models import RunsModel
from pilothouse.security import Keyring

HERE = "desk"
A, B = "tcp://127.0.0.1:7001", "tcp://127.0.0.1:7002"
LOOP = "tcp://127.0.0.1:7766"  # every node's own agent, as its ranks saw it
KEY = "ab" * 32


def node(host: str, agent: str, *ranks: int) -> dict:
    return {"host": host, "agent": agent, "ranks": list(ranks)}


def copy(host: str, nodes, run_id: str = "job1") -> dict:
    return {"id": run_id, "project": "p", "name": "big", "host": host, "nodes": nodes, "created": 1.0}


CLUSTER = [node("nodeA", LOOP, 0, 1), node("nodeB", LOOP, 2, 3), node("nodeC", LOOP, 4, 5)]


def test_agents_on_this_host_are_added_as_they_are():
    plan = plan_job("job1", {A: copy(HERE, [node(HERE, A, 0), node(HERE, B, 1)])}, HERE)
    assert [(n.url, n.followed, n.addable) for n in plan.nodes] == [(A, True, False), (B, False, True)]
    assert plan.headline() == "This job (p/big) runs on 2 nodes; add the other 1 agent"
    assert plan.tunnels == [] and plan.members() == [(A, HERE, A), (B, HERE, B)]


def test_nothing_is_offered_once_every_agent_is_followed_or_decided():
    nodes = [node(HERE, A, 0), node(HERE, B, 1)]
    runs = [{**copy(HERE, nodes), "agent": A}, {**copy(HERE, nodes), "agent": B}]
    assert offers(runs, [A, B], (), HERE) == []
    assert [p.run for p in offers(runs, [A], (), HERE)] == ["job1"]  # B's copy is stored, B not followed
    assert offers(runs, [A], {"job1"}, HERE) == []
    single = [{**copy(HERE, [node(HERE, A, 0)]), "agent": A}]
    assert offers(single, [A], (), HERE) == []  # one node is no job to offer


def test_a_tunnelled_agent_gets_tunnels_for_the_others_on_free_ports():
    plan = plan_job("job1", {"tcp://127.0.0.1:17767": copy("nodeA", CLUSTER)}, HERE,
                    used_urls=["tcp://127.0.0.1:17767", "tcp://127.0.0.1:17768"])
    a, b, c = plan.nodes
    assert a.followed and a.url == "tcp://127.0.0.1:17767"
    assert (b.url, b.tunnel) == ("tcp://127.0.0.1:17769", "ssh -N -L 17769:127.0.0.1:7766 nodeB")
    assert (c.url, c.tunnel) == ("tcp://127.0.0.1:17770", "ssh -N -L 17770:127.0.0.1:7766 nodeC")
    assert plan.tunnels == [b.tunnel, c.tunnel] and "through `ssh -N -L 17769" in b.line()


def test_the_same_loopback_url_on_another_host_is_not_taken_for_followed():
    """The user tunnels nodeA to 7766 here; nodeB's agent is tcp://127.0.0.1:7766 on nodeB, not this one."""
    plan = plan_job("job1", {LOOP: copy("nodeA", CLUSTER)}, HERE, used_urls=[LOOP])
    assert [n.followed for n in plan.nodes] == [True, False, False]
    assert plan.nodes[1].url == "tcp://127.0.0.1:17767"


def test_agents_added_before_they_answered_count_as_followed():
    member = ("tcp://127.0.0.1:17767", "nodeB", LOOP)
    plan = plan_job("job1", {"tcp://127.0.0.1:17000": copy("nodeA", CLUSTER)}, HERE, remembered=[member],
                    used_urls=["tcp://127.0.0.1:17000", member[0]])
    assert [n.followed for n in plan.nodes] == [True, True, False]
    assert plan.nodes[2].url == "tcp://127.0.0.1:17768"  # the remembered tunnel's port is taken


def test_a_tunnel_with_a_pinned_key_says_which_key_the_others_need():
    first = "tcp://127.0.0.1:17000"
    plan = plan_job("job1", {first: copy("nodeA", CLUSTER)}, HERE, known={first: KEY}, used_urls=[first])
    b = plan.nodes[1]
    assert not b.addable and b.tunnel == "ssh -N -L 17767:127.0.0.1:7766 nodeB"
    assert "on nodeB run `pilothouse keys show`, then here `pilothouse keys trust tcp://127.0.0.1:17767" in b.problem
    assert plan.headline().endswith("add the other 2 agents (0 can be added now)")


def test_over_curve_the_known_key_of_that_host_is_used_else_the_missing_one_is_named():
    first = "tcp://nodeA.cluster:7767"
    known = {first: KEY, "tcp://nodeB.cluster:7767": KEY}
    plan = plan_job("job1", {first: copy("nodeA", CLUSTER)}, HERE, known=known, client_key="cd" * 32)
    a, b, c = plan.nodes
    assert a.followed and b.addable and b.url == "tcp://nodeB.cluster:7767" and b.tunnel is None
    assert not c.addable and c.url == "tcp://nodeC:7767"
    assert c.problem.startswith("no agent key known for tcp://nodeC:7767: on nodeC run `pilothouse keys show`, "
                                "then here `pilothouse keys trust tcp://nodeC:7767 AGENT_KEY`")
    assert "`pilothouse agent --listen tcp://0.0.0.0:7767`" in c.problem
    assert f"`pilothouse keys allow {'cd' * 32} --name NAME`" in c.problem
    assert plan.members() == [(first, "nodeA", LOOP), (b.url, "nodeB", LOOP)]
    no_client = plan_job("job1", {first: copy("nodeA", CLUSTER)}, HERE, known=known)
    assert "CLIENT_KEY: `pilothouse keys show` here" in no_client.nodes[2].problem


@pytest.mark.parametrize("entry, reason", [
    (node("nodeB", "http://nodeB:7766", 2), "node agent: agent URL scheme must be tcp or ipc"),
    (node("nodeB", "tcp://nodeB", 2), "needs a host and a port"),
    ({"host": "nodeB", "agent": LOOP}, "exactly host, agent and ranks"),
    ("nodeB", "exactly host, agent and ranks"),
    (node("nodeB", LOOP, 3, 2), "ascending"),
    (node("node\x00B", LOOP, 2), "node host"),
    (node("nodeB", "ipc:///tmp/agent", 2), "an ipc:// agent is reachable only on nodeB itself"),
    (node("nodeA", LOOP, 7), "listed twice"),
])
def test_a_bad_node_entry_is_shown_with_its_reason_and_never_added(entry, reason):
    nodes = [node("nodeA", LOOP, 0), entry, node("nodeC", LOOP, 4)]
    plan = plan_job("job1", {"tcp://127.0.0.1:17000": copy("nodeA", nodes)}, HERE)
    bad = plan.nodes[1]
    assert reason in bad.problem and not bad.addable and "not added" in bad.line()
    assert plan.nodes[2].addable  # the good ones still are
    assert all(m[1] != "nodeB" for m in plan.members())


@pytest.mark.parametrize("nodes", ["garbage", {"host": "x"}, [], None, [node("nodeA", LOOP, 0)]])
def test_a_run_without_a_node_list_of_several_is_no_job(nodes):
    assert plan_job("job1", {A: copy(HERE, nodes)}, HERE) is None


def test_the_keyring_gives_the_pinned_keys_and_the_client_key(tmp_path):
    ring = Keyring(tmp_path / "keys")
    assert app_keys(ring) == ({}, None)
    ring.init()
    ring.trust("tcp://nodeB:7767", KEY)
    known, client = app_keys(ring)
    assert known == {"tcp://nodeB:7767": KEY} and client == ring.public("client")
    (ring.dir / "known_agents").chmod(0o666)  # others may edit it: no key from it is used
    assert app_keys(ring)[0] == {}


def test_the_store_remembers_a_job_as_one_and_forgets_it_as_one(tmp_path):
    path = tmp_path / "store.sqlite"
    store = LocalStore(path)
    store.remember_job("job1", "p/big", [(A, HERE, A), (B, HERE, B)])
    store.remember_job("job2", "p/other", [(B, HERE, B), ("tcp://127.0.0.1:7003", HERE, "tcp://127.0.0.1:7003")])
    store.decline_job("job3", "p/no")
    store.close()
    store = LocalStore(path)  # kept across restarts
    jobs = {j["id"]: j for j in store.jobs()}
    assert jobs["job1"]["members"] == [(A, HERE, A), (B, HERE, B)] and not jobs["job1"]["declined"]
    assert jobs["job3"]["declined"] and jobs["job3"]["members"] == []
    assert store.forget_job("job1") == [A]  # B is job2's too: it stays followed
    assert [j["id"] for j in store.jobs()] == ["job2", "job3"]
    store.decline_job("job2", "p/other")  # declining a job added before keeps its agents listed
    assert next(j for j in store.jobs() if j["id"] == "job2")["declined"]
    store.close()


def test_a_jobs_nodes_are_runs_of_their_own_but_a_resume_is_one_run():
    nodes = [node(HERE, A, 0), node(HERE, B, 1)]
    model = RunsModel()
    model.set_runs([{**copy(HERE, nodes), "agent": A, "status": "running"},
                    {**copy(HERE, nodes), "agent": B, "status": "running", "created": 1.1},
                    {**copy(HERE, [], "moved"), "agent": A, "status": "crashed"},
                    {**copy(HERE, [], "moved"), "agent": B, "status": "running", "created": 2.0}])
    rows = {r.key: r for r in model.rows()}
    assert set(rows) == {(A, "job1"), (B, "job1"), (A, "moved")}
    assert rows[(A, "job1")].attempts == 1 and rows[(B, "job1")].members == ((B, "job1"),)
    assert rows[(A, "moved")].members == ((A, "moved"), (B, "moved"))

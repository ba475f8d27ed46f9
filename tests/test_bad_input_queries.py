"""Bad queries: every op of the agent's query table (``pilothouse.wire.queries``) refuses an unknown
argument and a bad value the same way: an error under the query's id that names the op and the
argument, counted as a bad frame, and nothing changed.  One agent (``wire_agent``) serves every case.
"""

from __future__ import annotations

import re

import pytest
from support.wire_peer import SEED, RawPeer

from pilothouse.wire.queries import QUERIES, QueryError, check_query

pytest_plugins = ["support.wire_peer"]  # wire_agent, wire

NO_ARGUMENTS = {"ping", "runs", "alerts"}
RULE = {"name": "nan-loss", "kind": "nan", "metric": "loss"}
# Per op: arguments of the right shapes, to which a case adds an unknown one or a bad value.
GOOD = {
    "resolve": {"ref": SEED},
    "read": {"after": 0},
    "tiers": {"run": SEED, "metrics": ["loss"], "level": 0, "x0": 0, "x1": 10},
    "rollouts": {"run": SEED},
    "key_metric": {"project": "seed"},
    "key_metric_set": {"project": "seed", "metric": "acc"},
    "command": {"cid": "bad-query-1", "run": SEED, "cmd": "pause"},
    "command_status": {"cid": "bad-query-1"},
    "alert_add": {"rule": RULE},
    "alert_rm": {"name": "nan-loss"},
    "import_begin": {"run": {}},
    "import_batch": {"token": "0" * 32, "batch": 0, "entries": []},
    "import_end": {"token": "0" * 32, "batches": 0, "entries": 0},
    "import_abort": {"token": "0" * 32},
    "remove": {"runs": [SEED], "plan": True},
    "gc": {"older_than": 0},
}
BAD = {
    "resolve": ("ref", 5, r"ref must be str"),
    "read": ("after", -1, r"after must be an int in \[0, \d+\], got -1"),
    "tiers": ("pixels", 0, r"pixels must be an int in \[1, 16384\], got 0"),
    "rollouts": ("last", 0, r"last must be an int in \[1, 1000\], got 0"),
    "key_metric": ("project", "p\x00", r"project 'p\\x00' contains control character U\+0000"),
    "key_metric_set": ("metric", "", r"metric name must be 1 to 250 characters, got 0"),
    "command": ("wait", -1, r"wait must be a number of seconds >= 0"),
    "command_status": ("cid", "has space", r"command id must match"),
    "alert_add": ("rule", "pause on nan", r"rule must be dict"),
    "alert_rm": ("name", 7, r"name must be str"),
    "import_begin": ("run", [], r"run must be dict"),
    "import_batch": ("batch", -1, r"batch must be an int in \[0, "),
    "import_end": ("batches", "3", r"batches must be an int in \[0, "),
    "import_abort": ("token", None, r"token must be str"),
    "remove": ("force", "yes", r"force must be true or false"),
    "gc": ("max_size", -5, r"max_size must be an int in \[0, "),
}


def state(client) -> tuple:
    """What a wrong query could change beyond the stored runs (the ``wire`` fixture checks those)."""
    return client.request("key_metric", project="seed"), client.alerts()["rules"], client.gc_plan(older_than=0)["runs"]


def refused(proc, peer: RawPeer, op: str, args: dict, req_id: int) -> str:
    """The error of query ``op``: under its id, one bad frame more, no internal error, nothing changed."""
    with proc.client() as c:
        bad_frames, before = c.ping()["bad_frames"], state(c)
    reply = peer.ask({"t": "q", "id": req_id, "op": op, "args": args})
    assert reply is not None and reply["t"] == "err" and reply["id"] == req_id, reply
    with proc.client() as c:
        ping, after = c.ping(), state(c)
    assert (ping["bad_frames"], ping["internal_errors"]) == (bad_frames + 1, 0), ping
    assert after == before
    return reply["msg"]


def test_every_op_has_a_case():
    assert set(GOOD) | NO_ARGUMENTS == set(QUERIES) == set(BAD) | NO_ARGUMENTS


@pytest.mark.parametrize("op", sorted(QUERIES))
def test_an_unknown_argument_is_refused_naming_the_op_and_it(wire, op):
    proc, peer, _ = wire
    msg = refused(proc, peer, op, {**GOOD.get(op, {}), "bogus": 1}, 31)
    names = list(QUERIES[op].args)
    takes = "no arguments" if not names else names[0] if len(names) == 1 else \
        f"{', '.join(names[:-1])} and {names[-1]}"
    assert msg == f"a {op} query takes {takes}, not bogus"


@pytest.mark.parametrize("op", sorted(BAD))
def test_a_bad_value_is_refused_naming_the_op_and_the_argument(wire, op):
    proc, peer, _ = wire
    arg, value, why = BAD[op]
    msg = refused(proc, peer, op, {**GOOD[op], arg: value}, 32)
    assert msg.startswith(f"{op} query, argument {arg!r}: "), msg
    assert re.search(why, msg), msg


@pytest.mark.parametrize("op, args, why", [
    ("drop_tables", {}, r"^unknown query 'drop_tables'$"),
    ("resolve", {}, r"^resolve query, argument 'ref': ref must be str$"),
    ("resolve", {"ref": "no-such-run"}, r"no run with id or name 'no-such-run'"),
    ("read", {}, r"^read query, argument 'after': after must be an int in \[0, \d+\], got None$"),
    ("read", {"after": True}, r"after must be an int"),
    ("read", {"after": 2 ** 63}, r"after must be an int in \[0, \d+\], got 9223372036854775808"),
    ("read", {"after": 0, "run": 5}, r"run id must match"),
    ("read", {"after": 0, "kinds": ["x"]}, r"kinds must be a list drawn from"),
    ("read", {"after": 0, "limit_points": "9"}, r"limit_points must be an int in \[1, "),
    ("ping", [1, 2], r"^query args must be a map$"),
    ("tiers", {**GOOD["tiers"], "level": 16}, r"^tiers query, argument 'level': level must be an int in \[0, 15\]"),
    ("tiers", {**GOOD["tiers"], "x0": 10, "x1": 0}, r"argument 'x1': x1 must not be below x0, got 10..0"),
    ("rollouts", {"run": SEED, "step": 3, "last": 2}, r"argument 'last': ask for one step or for the last steps"),
    ("rollouts", {"run": SEED, "search": "x", "step": 1},
     r"^a rollouts search takes run, search, before, limit and in_prompt, not step$"),
    ("rollouts", {"run": SEED, "limit": 3}, r"argument 'limit': limit is for a search"),
    ("rollouts", {"run": SEED, "in_prompt": True}, r"argument 'in_prompt': in_prompt is for a search"),
    ("rollouts", {"run": SEED, "search": "x", "in_prompt": "yes"}, r"argument 'in_prompt'"),
    ("gc", {}, r"^gc query, argument 'older_than': say which runs: older_than, max_size or both$"),
])
def test_a_bad_query_gets_err_with_its_id(wire, op, args, why):
    _, peer, _ = wire
    reply = peer.ask({"t": "q", "id": 4242, "op": op, "args": args})
    assert reply == {"t": "err", "id": 4242, "msg": reply and reply.get("msg")}, reply
    assert re.search(why, reply["msg"]), reply["msg"]


def test_the_table_fills_in_defaults_and_checks_a_missing_argument_as_none():
    """What an op gets: every argument it takes, those not sent at their defaults (checked values
    as the checks return them: a page asked past the bound is the bound)."""
    assert check_query("rollouts", {"run": "r"}) == {"run": "r", "step": None, "last": 1, "before": None, "seen": [],
                                                     "search": None, "limit": 100, "in_prompt": False}
    assert check_query("read", {"after": 3, "limit_points": 10 ** 9})["limit_points"] == 200_000
    with pytest.raises(QueryError, match="project must be a string, not NoneType") as err:
        check_query("key_metric", {})
    assert (err.value.op, err.value.arg) == ("key_metric", "project")

"""Bad input through the trainer API (``pilothouse.init``, ``log``, ``log_rollouts``): a clear error
at the call, nothing of it logged, and the run and the agent go on.
"""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest
from support.waiting import wait_until
from support.wire_peer import (
    RawPeer,
    bits,
    expect_rejected,
    hello,
    series,
)

import pilothouse as ph
from pilothouse.wire.messages import MAX_HELLO_BYTES

pytest_plugins = ["support.wire_peer"]  # api_agent

torch = pytest.importorskip("torch")


BAD_NAMES = [
    pytest.param("a\x00b", r"control character U\+0000", id="nul"),
    pytest.param("tab\there", r"control character U\+0009", id="tab"),
    pytest.param("two\nlines", r"control character U\+000A", id="newline"),
    pytest.param("\x1b[31mred", r"control character U\+001B", id="ansi-escape"),
    pytest.param("del\x7f", r"control character U\+007F", id="del"),
    pytest.param("nel\x85", r"control character U\+0085", id="c1-nel"),
    pytest.param("half\ud800", r"control character U\+D800", id="lone-surrogate"),
    pytest.param("x" * 251, r"1 to 250 characters, got 251", id="251-chars"),
    pytest.param(123, r"must be a string, not int", id="int"),
    pytest.param(b"proj", r"must be a string, not bytes", id="bytes"),
    pytest.param(["p"], r"must be a string, not list", id="list"),
]


@pytest.mark.parametrize("bad, why", [*BAD_NAMES,
                                      pytest.param("", r"1 to 250 characters, got 0", id="empty"),
                                      pytest.param(None, r"must be a string, not NoneType", id="none")])
def test_init_rejects_bad_project(api_agent, bad, why):
    expect_rejected(lambda: ph.init(bad, "ok", agent=api_agent.url), (ValueError, TypeError),
                    rf"^project .*{why}|^project {why}")


@pytest.mark.parametrize("bad, why", BAD_NAMES)
def test_init_rejects_bad_run_name(api_agent, bad, why):
    expect_rejected(lambda: ph.init("proj", bad, agent=api_agent.url), (ValueError, TypeError),
                    rf"^run name .*{why}|^run name {why}")


@pytest.mark.parametrize("bad", ["", 0, False], ids=["empty", "zero", "false"])
def test_init_rejects_falsy_run_name(api_agent, bad):
    expect_rejected(lambda: ph.init("proj", bad, agent=api_agent.url), (ValueError, TypeError), r"run name")


def test_init_accepts_names_at_the_limit(api_agent):
    name = "n" * 250
    run = ph.init("é" * 250, name, agent=api_agent.url, heartbeat=3600)
    run.log({"x": 1.0})
    assert run.finish(timeout=10)
    with api_agent.client() as c:
        row = next(r for r in c.runs() if r["id"] == run.id)
    assert (row["project"], row["name"]) == ("é" * 250, name)


@pytest.mark.parametrize("config, why", [
    ({1: "a"}, r"config keys must be strings"),
    ({"a": object()}, r"config\.a has type object"),
    ({"opt": {"betas": {1, 2}}}, r"config\.opt\.betas has type set"),
    ({"layers": [1, b"x"]}, r"config\.layers\._ has type bytes|config\.layers"),
], ids=["int-key", "object", "nested-set", "bytes-in-list"])
def test_init_rejects_bad_config(api_agent, config, why):
    expect_rejected(lambda: ph.init("proj", "cfg", config, agent=api_agent.url), TypeError, why)


@pytest.mark.parametrize("url", ["http://127.0.0.1:7766", "tcp://127.0.0.1", "tcp://127.0.0.1:99999",
                                 "127.0.0.1:7766"])
def test_init_rejects_bad_agent_url(url):
    expect_rejected(lambda: ph.init("proj", "u", agent=url), ValueError, r"agent URL|URL")


@pytest.mark.parametrize("bad", ["has space", "semi;colon", "-leading-dash", "x" * 65, "ünï"])
def test_init_rejects_bad_run_id(api_agent, bad):
    expect_rejected(lambda: ph.init("proj", "n", agent=api_agent.url, id=bad), ValueError, r"run id")


@pytest.mark.parametrize("bad", ["0", True, 1.5])
def test_init_rejects_bad_rank(api_agent, bad):
    expect_rejected(lambda: ph.init("proj", "n", agent=api_agent.url, rank=bad), (TypeError, ValueError),
                    r"rank")


@pytest.mark.parametrize("bad", [-1, 0])
def test_init_rejects_non_positive_buffer(api_agent, bad):
    expect_rejected(lambda: ph.init("proj", "n", agent=api_agent.url, buffer_mb=bad), ValueError, r"buffer")


@pytest.fixture
def api_run(api_agent, request):
    run = ph.init("api", request.node.name[:200], agent=api_agent.url, heartbeat=3600)
    yield run
    run.finish(timeout=1)


BAD_VALUES = [
    pytest.param("1.5", "str", id="str"),
    pytest.param(None, "NoneType", id="none"),
    pytest.param([1.0], "list", id="list"),
    pytest.param({"v": 1.0}, "dict", id="dict"),
    pytest.param(b"1.5", "bytes", id="bytes"),
    pytest.param(np.str_("2"), "str_", id="numpy-str"),
    pytest.param(1 + 2j, "complex", id="complex"),
    pytest.param(object(), "object", id="object"),
]


@pytest.mark.parametrize("bad, tname", BAD_VALUES)
def test_log_rejects_non_numeric_value_and_logs_nothing(api_agent, api_run, bad, tname):
    api_run.log({"loss": 1.0, "acc": 0.5}, step=0)
    with pytest.raises(TypeError, match=rf"metric 'loss' must be a number, got {tname}"):
        api_run.log({"acc": 0.75, "loss": bad}, step=1)  # the good metric of the bad call is not kept either
    api_run.log({"loss": 2.0, "acc": 0.25})  # default step: the bad call did not advance it
    assert api_run.flush(timeout=10)
    for metric, want in (("loss", [1.0, 2.0]), ("acc", [0.5, 0.25])):
        steps, vals, _ = series(api_agent, api_run.id, metric)
        assert steps.tolist() == [0, 1] and vals.tolist() == want, metric


@pytest.mark.parametrize("bad", [np.array([1.0, 2.0]), torch.tensor([1.0, 2.0])], ids=["numpy", "torch"])
def test_log_rejects_array_value_naming_the_metric(api_run, bad):
    with pytest.raises(TypeError, match=r"'loss'"):
        api_run.log({"loss": bad})


@pytest.mark.parametrize("bad", [2 ** 64, -(2 ** 63) - 1], ids=["2**64", "-2**63-1"])
def test_log_rejects_out_of_range_int_and_keeps_working(api_agent, api_run, bad):
    api_run.log({"loss": 1.0}, step=0)
    # log() refuses it in the caller, before anything is queued: the outbox thread never sees it
    with pytest.raises(ValueError, match=r"metric 'loss' = -?\d+ does not fit in int64; log it as a float"):
        api_run.log({"loss": bad}, step=1)
    api_run.log({"loss": 2.0}, step=1)
    assert api_run.flush(timeout=2)
    assert series(api_agent, api_run.id, "loss")[1].tolist() == [1.0, 2.0]


@pytest.mark.parametrize("bad, exc, why", [
    ("", ValueError, r"metric name must be 1 to 250 characters, got 0"),
    ("x" * 251, ValueError, r"metric name must be 1 to 250 characters, got 251"),
    ("a\x00b", ValueError, r"metric name .* control character U\+0000"),
    ("\x1b[31mloss", ValueError, r"metric name .* control character U\+001B"),
    ("loss\n", ValueError, r"metric name .* control character U\+000A"),
    (5, (ValueError, TypeError), r"metric name must be a string, not int"),
    (None, (ValueError, TypeError), r"metric name must be a string, not NoneType"),
    (b"loss", (ValueError, TypeError), r"metric name must be a string, not bytes"),
    (("a", "b"), (ValueError, TypeError), r"metric name must be a string, not tuple"),
], ids=["empty", "251", "nul", "ansi", "newline", "int", "none", "bytes", "tuple"])
def test_log_rejects_bad_metric_name_and_logs_nothing(api_agent, api_run, bad, exc, why):
    with pytest.raises(exc, match=why):
        api_run.log({"ok": 1.0, bad: 2.0}, step=0)
    api_run.log({"ok": 3.0}, step=0)
    assert api_run.flush(timeout=10)
    assert series(api_agent, api_run.id, "ok")[1].tolist() == [3.0]
    with api_agent.client() as c:
        chunks = [e for page in c.history(api_run.id, ["m"]) for e in page.entries]
    assert {e.metric for e in chunks} == {"ok"}


@pytest.mark.parametrize("bad, exc, why", [
    (-1, ValueError, r"step must be in \[0, \d+\], got -1"),
    (-(2 ** 40), ValueError, r"step must be in \[0, "),
    (1.0, TypeError, r"step must be an int, got float"),
    (float("nan"), TypeError, r"step must be an int, got float"),
    (True, TypeError, r"step must be an int, got bool"),
    ("3", TypeError, r"step must be an int, got str"),
    (np.float64(2.0), TypeError, r"step must be an int, got float64"),
    (np.int64(-5), ValueError, r"step must be in \[0, \d+\], got -5"),
], ids=["neg", "neg-big", "float", "nan", "bool", "str", "np-float", "np-neg-int"])
def test_log_rejects_bad_step_and_logs_nothing(api_agent, api_run, bad, exc, why):
    api_run.log({"x": 1.0}, step=3)
    with pytest.raises(exc, match=why):
        api_run.log({"x": 99.0}, step=bad)
    with pytest.raises(exc, match=why):
        api_run.log_rollouts(bad, [{"prompt": "p"}])
    api_run.log({"x": 2.0})  # the rejected call left the step counter alone
    api_run.log({"x": 3.0}, step=np.int64(7))  # any __index__ int is fine
    assert api_run.flush(timeout=10)
    steps, vals, _ = series(api_agent, api_run.id, "x")
    assert steps.tolist() == [3, 4, 7] and vals.tolist() == [1.0, 2.0, 3.0]
    with api_agent.client() as c:
        assert c.read(0, api_run.id, ["r"]).entries == []


def test_log_rejects_step_beyond_int64(api_agent, api_run):
    api_run.log({"x": 1.0}, step=0)
    with pytest.raises((ValueError, OverflowError), match=r"step"):
        api_run.log({"x": 2.0}, step=2 ** 63)
    api_run.log({"x": 3.0}, step=1)
    assert api_run.flush(timeout=5)
    assert series(api_agent, api_run.id, "x")[1].tolist() == [1.0, 3.0]


def _f(bits64: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits64))[0]


SPECIAL = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e308, -1e308, 5e-324, -5e-324,
           2.2250738585072014e-308, 1.7976931348623157e308, _f(0x7FF8000000000123), _f(0xFFF8000000000000),
           0.1, 2.0 ** 53 + 2]


def test_special_floats_are_accepted_and_come_back_bit_exact(api_agent, api_run):
    for step, value in enumerate(SPECIAL):
        api_run.log({"v": value, "w": -value}, step=step)
    assert api_run.flush(timeout=10)
    for metric, want in (("v", SPECIAL), ("w", [-x for x in SPECIAL])):
        steps, vals, times = series(api_agent, api_run.id, metric)
        assert steps.tolist() == list(range(len(SPECIAL)))
        assert vals.dtype == np.float64 and np.array_equal(vals.view(np.uint64), bits(want)), metric
        assert np.all(np.isfinite(times)) and np.all(times > 1e9)


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True")
def test_numpy_and_torch_scalars_are_accepted(api_agent, api_run):
    logged = {
        "np_f32": (np.float32(0.1), float(np.float32(0.1))),
        "np_f64": (np.float64(-2.5), -2.5),
        "np_i64": (np.int64(-7), -7.0),
        "np_u8": (np.uint8(200), 200.0),
        "np_nan32": (np.float32("nan"), float("nan")),
        "np_0d": (np.array(4.5), 4.5),
        "torch_f32": (torch.tensor(0.1), float(torch.tensor(0.1))),
        "torch_f64": (torch.tensor(1e308, dtype=torch.float64), 1e308),
        "torch_i64": (torch.tensor(3), 3.0),
        "torch_grad": (torch.tensor(1.25, requires_grad=True) * 2, 2.5),
        "py_int": (2 ** 63 - 1, float(2 ** 63 - 1)),
        "py_bool": (True, 1.0),
    }
    api_run.log({k: v for k, (v, _) in logged.items()}, step=5)
    assert api_run.flush(timeout=10)
    for metric, (_, want) in logged.items():
        steps, vals, _ = series(api_agent, api_run.id, metric)
        assert steps.tolist() == [5], metric
        assert bits(vals).tolist() == bits([want]).tolist(), f"{metric}: {vals[0]!r} != {want!r}"


@pytest.mark.parametrize("rows, exc, why", [
    ([{"prompt": {"nested": 1}}], ValueError, r"rollout row 0 field 'prompt' has unsupported type dict"),
    ([{"tokens": [1, 2, 3]}], ValueError, r"rollout row 0 field 'tokens' has unsupported type list"),
    ([{"raw": b"\x00\x01"}], ValueError, r"rollout row 0 field 'raw' has unsupported type bytes"),
    ([{"obj": object()}], ValueError, r"rollout row 0 field 'obj' has unsupported type object"),
    ([{1: "x"}], ValueError, r"rollout row 0 has a field name that is not text: '1'"),
    ([{"ok": 1}, {"prompt": ["hi"]}], ValueError, r"rollout row 1 field 'prompt' message 0 must be a map with a role"),
    ([{"completion": [{"content": "x"}]}], ValueError, r"row 0 field 'completion' message 0 needs a role"),
    ([{"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]}], ValueError,
     r"row 0 field 'messages' message 0 field 'tool_calls' \[0\] needs function.name as text"),
    ([{"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}]}],
     ValueError, r"function.arguments must be text or a map, got int"),
    ([{"prompt": [{"role": "user", "content": [{"text": "no type"}]}]}], ValueError,
     r"field 'content' part 0 must be a map with a type"),
    ([{"prompt": [{"role": "user", "content": 5}]}], ValueError, r"field 'content' must be text, null or a list"),
    ([{"prompt": [{"role": "user", "extra": [1]}]}], ValueError, r"message 0 field 'extra' has unsupported type list"),
    ([{"ok": "y"}, "not a row"], (ValueError, TypeError), r"."),
    ([5], (ValueError, TypeError), r"."),
    ([None], (ValueError, TypeError), r"."),
    ([{"ok": 1}] * 10_001, ValueError, r"at most 10000 rows"),
    ([{"completion": "é" * (1 << 20)}] * 2, ValueError, r"take \d+ bytes; log them in several calls"),
    ([{"completion": "\ud800"}], ValueError, r"surrogate"),
], ids=["nested-dict", "list", "bytes", "object", "int-key", "chat-not-maps", "chat-no-role", "call-no-name",
        "call-args-int", "part-no-type", "content-int", "message-field-list", "str-row", "int-row", "none-row", "too-many",
        "too-big-in-utf8", "lone-surrogate"])
def test_log_rollouts_rejects_bad_rows_and_logs_nothing(api_agent, api_run, rows, exc, why):
    api_run.log_rollouts(0, [{"prompt": "good", "reward": 1.0, "ok": True, "note": None}])
    with pytest.raises(exc, match=why):
        api_run.log_rollouts(1, rows)
    api_run.log({"x": 1.0}, step=1)
    assert api_run.flush(timeout=10)
    with api_agent.client() as c:
        entries = c.read(0, api_run.id, ["r"]).entries
    assert len(entries) == 1 and entries[0].n == 1


@pytest.mark.parametrize("row", ["not a row", 5, None], ids=["str", "int", "none"])
def test_log_rollouts_non_dict_row_message_says_row(api_run, row):
    with pytest.raises((TypeError, ValueError), match=r"row"):
        api_run.log_rollouts(0, [{"prompt": "ok"}, row])


def test_log_after_finish_is_an_error(api_agent):
    run = ph.init("api", "closed", agent=api_agent.url, heartbeat=3600)
    run.log({"x": 1.0})
    assert run.finish(timeout=10)
    with pytest.raises(RuntimeError, match="is finished"):
        run.log({"x": 2.0})
    with pytest.raises(RuntimeError, match="is finished"):
        run.log_rollouts(0, [{"p": "q"}])
    assert series(api_agent, run.id, "x")[1].tolist() == [1.0]


def test_a_hello_past_its_bound_is_refused_and_the_trainer_api_says_why(tmp_path, api_agent):
    with RawPeer(api_agent.url) as peer:
        reply = peer.ask(hello("bighello", config={"blob": "x" * MAX_HELLO_BYTES}))
        assert reply is not None and reply["t"] == "err" and "limited to" in reply["msg"], reply
    expect_rejected(lambda: ph.init("p", "big", config={"blob": "x" * MAX_HELLO_BYTES}, agent=api_agent.url),
                    ValueError, "keep large values")


def test_a_run_past_its_metric_limit_is_told_at_log_and_by_the_agent(api_agent):
    """The trainer API refuses the 10,001st name (nothing of that call is logged); a process that
    resumes the run and logs a new name gets its other points stored and an error in its stats."""
    from pilothouse.wire.records import MAX_METRICS_PER_RUN

    run = ph.init("p", "wide", agent=api_agent.url)
    run.log({f"m{i}": 1.0 for i in range(MAX_METRICS_PER_RUN)}, step=0)
    expect_rejected(lambda: run.log({"m1": 2.0, "one_more": 2.0}, step=1), ValueError,
                    r"would have 10001 distinct metrics; the limit is 10000")
    assert run.finish(timeout=20)
    again = ph.init("p", "wide", id=run.id, agent=api_agent.url)
    try:
        again.log({"m1": 3.0, "one_more": 3.0}, step=2)
        assert again.flush(10)
        wait_until(lambda: again.stats["errors"] > 0, what="the agent's refusal in the trainer's stats")
        assert "the most a run may have: 1 new metric not stored ('one_more')" in again.stats["last_error"]
    finally:
        again.finish(timeout=10)
    assert series(api_agent, run.id, "m1")[0].tolist() == [0, 2]
    with api_agent.client() as client:
        row = next(r for r in client.runs() if r["id"] == run.id)
        assert row["metrics"] == MAX_METRICS_PER_RUN and "one_more" not in row["summary"]


@pytest.mark.parametrize("name, why", [
    ("loss\u200b", "invisible format character U+200B"),
    ("\u202egnp.exe", "invisible format character U+202E"),
    ("a\u2066b", "invisible format character U+2066"),
    ("\ufeffloss", "invisible format character U+FEFF"),
])
def test_names_that_hide_what_they_are_are_refused(api_agent, name, why):
    for call in (lambda: ph.init(project=name, agent=api_agent.url),
                 lambda: ph.init(project="p", name=name, agent=api_agent.url)):
        with pytest.raises(ValueError, match=re.escape(why)):
            call()
    run = ph.init(project="p", name="ok", agent=api_agent.url)
    try:
        with pytest.raises(ValueError, match=re.escape(why)):
            run.log({name: 1.0}, step=0)
    finally:
        run.finish()


def test_names_have_one_spelling(api_agent):
    """'café' typed as e + combining accent (NFD) is the same metric and run name as the usual one."""
    run = ph.init(project="caf\u0065\u0301", name="r\u0065\u0301sum\u0065\u0301", agent=api_agent.url)
    run.log({"caf\u0065\u0301": 1.0}, step=0)
    run.log({"caf\u00e9": 2.0}, step=1)
    assert run.finish()
    assert (run.project, run.name) == ("caf\u00e9", "r\u00e9sum\u00e9")
    assert series(api_agent, run.id, "caf\u00e9")[1].tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="one metric twice"):
        ph.init(project="p", agent=api_agent.url).log({"caf\u0065\u0301": 1.0, "caf\u00e9": 2.0})

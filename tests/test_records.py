"""The columnar 'rec' batch: what the trainer's encoder makes is what the agent's check reads back."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from support.float_bits import bits

from pilothouse.wire.messages import ProtocolError, pack, unpack
from pilothouse.wire.records import (
    REC_CHECKPOINT,
    REC_METRICS,
    REC_ROLLOUTS,
    check_batch,
    encode_batch,
    join_batches,
    metrics_packer,
)

NAN_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_DEAD_BEEF))[0]
SPECIAL = [math.nan, NAN_PAYLOAD, math.inf, -math.inf, -0.0, 0.0, 5e-324, 1.7976931348623157e308, 0.1]


def metrics(step: int, wall_time: float, **values: float) -> tuple:
    return (REC_METRICS, tuple(values), metrics_packer(len(values))(step, wall_time, *values.values()))


def decoded(records: list[tuple]):
    """Encoded by the trainer, through msgpack, checked by the agent."""
    body = unpack(pack(encode_batch(records)))
    return check_batch(body["n"], body["keys"], body["metrics"], body["others"], set())


def test_values_come_back_bit_exact_special_floats_included():
    batch = decoded([metrics(i, 1000.0 + i, v=v, w=-v) for i, v in enumerate(SPECIAL)])
    cols = {c.metric: c for c in batch.columns()}
    assert bits(cols["v"].vals) == bits(SPECIAL)  # both NaN payloads, -0.0's sign, the subnormal
    assert bits(cols["w"].vals) == bits([-v for v in SPECIAL])
    assert cols["v"].steps.tolist() == list(range(len(SPECIAL)))
    assert cols["v"].times.tolist() == [1000.0 + i for i in range(len(SPECIAL))]


def test_int_metrics_and_extreme_steps_become_what_numpy_makes_of_them():
    big = 2 ** 63 - 1
    batch = decoded([metrics(big, 1.0, n=big), metrics(0, 2.0, n=-(2 ** 63)), metrics(1, 3.0, n=2 ** 53 + 1)])
    (col,) = batch.columns()
    assert col.steps.tolist() == [big, 0, 1]
    assert bits(col.vals) == bits(np.array([big, -(2 ** 63), 2 ** 53 + 1], dtype=np.float64))


def test_a_mixed_batch_keeps_record_order_and_offsets():
    records = [metrics(0, 1.0, loss=0.5, lr=1e-3), (REC_ROLLOUTS, None, (0, 1.5, [{"prompt": "p", "r": 1.0}])),
               metrics(1, 2.0, loss=0.4), (REC_CHECKPOINT, None, (1, 2.5, "/ckpt/1")),
               metrics(2, 3.0, loss=0.3, lr=2e-3), metrics(3, 4.0, acc=1.0)]
    batch = decoded(records)
    assert batch.n == 6
    cols = {c.metric: c for c in batch.columns()}
    assert cols["loss"].steps.tolist() == [0, 1, 2] and cols["loss"].vals.tolist() == [0.5, 0.4, 0.3]
    assert cols["lr"].steps.tolist() == [0, 2] and cols["acc"].steps.tolist() == [3]
    assert [o[:3] for o in batch.others] == [(1, REC_ROLLOUTS, 0), (3, REC_CHECKPOINT, 1)]
    # a resend overlapping what is stored: only the records from offset 2 on
    tail = {c.metric: c for c in batch.columns(skip=2)}
    assert tail["loss"].steps.tolist() == [1, 2] and tail["lr"].steps.tolist() == [2]
    assert [o[0] for o in batch.others_from(2)] == [3]


def test_the_same_names_in_another_dict_order_are_another_key_set():
    batch = decoded([metrics(0, 1.0, a=1.0, b=2.0), metrics(1, 2.0, b=3.0, a=4.0)])
    cols = {c.metric: c for c in batch.columns()}
    assert cols["a"].vals.tolist() == [1.0, 4.0] and cols["b"].vals.tolist() == [2.0, 3.0]


def test_an_empty_metrics_dict_is_a_record_with_no_points():
    batch = decoded([metrics(0, 1.0), metrics(1, 2.0, x=1.0)])
    assert batch.n == 2 and [c.metric for c in batch.columns()] == ["x"]


def test_a_frame_cannot_claim_more_records_than_it_holds():
    body = unpack(pack(encode_batch([metrics(0, 1.0, x=1.0)])))
    with pytest.raises(ProtocolError, match=r"batch of 1000000000 records holds 1"):
        check_batch(10 ** 9, body["keys"], body["metrics"], body["others"], set())


def test_a_batch_encoded_in_slices_reads_as_one():
    records = [metrics(i, float(i), loss=float(i), **({"lr": i / 10} if i % 3 else {})) for i in range(10)]
    records.insert(4, (REC_ROLLOUTS, None, (3, 3.5, [{"prompt": "p"}])))
    whole = decoded(records)
    body = unpack(pack(join_batches([encode_batch(records[i:i + 3]) for i in range(0, len(records), 3)])))
    sliced = check_batch(body["n"], body["keys"], body["metrics"], body["others"], set())
    assert sliced.n == whole.n == 11 and sliced.others == whole.others
    for a, b in zip(sorted(whole.columns(), key=lambda c: c.metric), sorted(sliced.columns(), key=lambda c: c.metric)):
        assert a.metric == b.metric and a.steps.tolist() == b.steps.tolist() and bits(a.vals) == bits(b.vals)
        assert a.times.tolist() == b.times.tolist()

"""How the sink cuts a task's rows into batch sends (no broker): every row once, in order, and no batch
over what one request may carry."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tidemq.client.message import Message
from tidemq.record import BatchItem, encode_batch, encode_properties
from tidemq.spark.arrow import SchemaError, WriteLayout, batch_to_messages
from tidemq.spark.writer import MAX_BATCH_BYTES, chunks


def _encoded(run: list[Message]) -> int:
    """The SEND_BATCH body the producer builds for ``run`` (its unique ids are 32 hex characters)."""
    return len(
        encode_batch(
            [
                BatchItem(0, m.body, encode_properties({**m.wire_properties(), "UNIQ_KEY": "0" * 32}))
                for m in run
            ]
        )
    )


def test_big_properties_split_batches_under_the_request_limit() -> None:
    msgs = [
        Message("T", b"x" * (i % 7 + 1), tags="t", properties={"p": "€" * 10_000}) for i in range(1000)
    ] + [Message("U", b"y" * 100) for _ in range(2500)]
    runs = list(chunks(msgs, 1000))
    assert [m for run in runs for m in run] == msgs
    assert all(len({m.topic for m in run}) == 1 and len(run) <= 1000 for run in runs)
    assert max(_encoded(run) for run in runs) <= MAX_BATCH_BYTES
    assert [len(run) for run in runs if run[0].topic == "U"] == [1000, 1000, 500]


def test_rows_become_the_same_messages_with_or_without_extra_columns() -> None:
    plain = pa.RecordBatch.from_pydict(
        {"body": pa.array([b"a", b"b"]), "keys": pa.array([None, None], pa.string())}
    )
    layout = WriteLayout(
        body_is_text=False, has_topic=False, has_keys=True, has_tags=False, has_properties=False
    )
    assert batch_to_messages(plain, layout, "T") == [Message("T", b"a"), Message("T", b"b")]
    full = pa.RecordBatch.from_pydict(
        {
            "body": pa.array(["a", "b"]),
            "topic": pa.array(["T", "U"]),
            "keys": pa.array(["k", None]),
            "properties": pa.array([[("p", "1"), ("q", None)], None], pa.map_(pa.string(), pa.string())),
        }
    )
    layout = WriteLayout(
        body_is_text=True, has_topic=True, has_keys=True, has_tags=False, has_properties=True
    )
    assert batch_to_messages(full, layout, None) == [
        Message("T", b"a", keys="k", properties={"p": "1"}),
        Message("U", b"b"),
    ]


def test_a_null_body_or_topic_names_its_row() -> None:
    layout = WriteLayout(
        body_is_text=False, has_topic=True, has_keys=False, has_tags=False, has_properties=False
    )
    rows = pa.RecordBatch.from_pydict({"body": pa.array([b"a", None]), "topic": pa.array(["T", "T"])})
    with pytest.raises(SchemaError, match="body: row 1 of a batch has a null body"):
        batch_to_messages(rows, layout, None)
    rows = pa.RecordBatch.from_pydict({"body": pa.array([b"a", b"b"]), "topic": pa.array(["T", None])})
    with pytest.raises(SchemaError, match="topic: row 1 of a batch has a null topic"):
        batch_to_messages(rows, layout, None)

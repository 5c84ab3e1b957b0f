"""The source's columnar record decoder agrees with the remoting codec's, and fails only its own way."""

from __future__ import annotations

import contextlib
import zlib

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema

from tidemq.record import (
    BatchItem,
    MessageDecodeError,
    SysFlag,
    build_stored_batch,
    decode_record,
    encode_batch,
    encode_properties,
    encode_record,
    iter_records,
)
from tidemq.record.layout import POS_QUEUE_OFFSET, QUEUE_AND_PHYSICAL_OFFSETS
from tidemq.spark import SCHEMA
from tidemq.spark.arrow import ARROW_SCHEMA
from tidemq.spark.records import RecordColumns

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Property text with odd characters: any Unicode but the two separators (non-BMP, combining, "=", ";").
_TEXT = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=6
)
_PROPS = st.dictionaries(_TEXT, _TEXT, max_size=4)
_V4 = b"\x7f\x00\x00\x01\x00\x00\x27\x10"
_V6 = bytes(15) + b"\x01" + b"\x00\x00\x27\x11"


@st.composite
def _properties(draw: st.DrawFn, offset: int) -> str:
    """Encoded properties, sometimes with what ``decode_properties`` drops or overrides: a pair without a
    separator or value, and a key named twice (the last value wins)."""
    props = draw(_PROPS)
    if draw(st.booleans()):
        props["TAGS"] = draw(st.sampled_from(["a", "b", "c"]))
    if draw(st.booleans()):
        props["UNIQ_KEY"] = f"U{offset}"
    if draw(st.booleans()):
        props["KEYS"] = draw(st.sampled_from(["k1", "k1 k2", "ü ß"]))
    text = encode_properties(props)
    extras = draw(st.lists(st.sampled_from(["novalue", "key\x01", "\x01value", "TAGS\x01b", ""]), max_size=2))
    return "\x02".join([text, *extras]) if extras else text


@st.composite
def records(draw: st.DrawFn) -> bytes:
    """Records as a pull answer holds them: single ones (IPv4/IPv6 hosts, compressed or not) and the
    records the broker stores for a batch send."""
    parts: list[bytes | bytearray] = []
    offset = 0
    for _ in range(draw(st.integers(1, 5))):
        if draw(st.integers(0, 3)) == 0:
            items = [
                BatchItem(0, draw(st.binary(max_size=32)), draw(_properties(offset + i)))
                for i in range(draw(st.integers(1, 3)))
            ]
            hosts = draw(st.sampled_from([_V4, _V6])), draw(st.sampled_from([_V4, _V6]))
            stamps = draw(st.integers(0, 2**41)), draw(st.integers(0, 2**41))
            batch = build_stored_batch(
                encode_batch(items), topic="t", queue_id=1, sys_flag=0, born_timestamp=stamps[0],
                born_host=hosts[0], store_timestamp=stamps[1], store_host=hosts[1],
                extra_properties="CLUSTER\x01c", max_body=1024,
            )  # fmt: skip
            data, pos = bytearray(batch.data), 0
            for size in batch.sizes:  # the store patches the offsets in on append
                QUEUE_AND_PHYSICAL_OFFSETS.pack_into(data, pos + POS_QUEUE_OFFSET, 100 + offset, 7 * offset)
                pos += size
                offset += 1
            parts.append(data)
            continue
        body = draw(st.binary(max_size=64))
        compressed = draw(st.booleans())
        parts.append(
            encode_record(
                topic=draw(st.sampled_from(["t", "topic-x"])),
                queue_id=1,
                body=zlib.compress(body) if compressed else body,
                properties=draw(_properties(offset)),
                sys_flag=SysFlag.COMPRESSED if compressed else 0,
                born_timestamp=draw(st.integers(0, 2**41)),
                born_host=draw(st.sampled_from([_V4, _V6])),
                store_timestamp=draw(st.integers(0, 2**41)),
                store_host=draw(st.sampled_from([_V4, _V6])),
                reconsume_times=draw(st.integers(-(2**31), 2**31 - 1)),
                queue_offset=100 + offset,
                commit_log_offset=draw(st.integers(0, 2**63 - 1)),
            )
        )
        offset += 1
    return b"".join(parts)


def _expected_rows(buf: bytes, lo: int, tag_set: frozenset[str]) -> list[dict[str, object]]:
    """The codec's reading of the same records, as the rows the source must give."""
    return [
        {
            "topic": "t",
            "broker": "broker-a",
            "queue": 1,
            "offset": m.queue_offset,
            "msg_id": m.msg_id,
            "keys": m.keys,
            "tags": m.tags,
            "body": m.body,
            "properties": list(m.properties.items()),
            "born_timestamp": m.born_timestamp,
            "store_timestamp": m.store_timestamp,
            "reconsume_times": m.reconsume_times,
        }
        for m in iter_records(buf)
        if m.queue_offset >= lo and (not tag_set or m.tags in tag_set)
    ]


def _rows(batch: pa.RecordBatch) -> list[dict[str, object]]:
    rows = batch.to_pylist()
    for row in rows:
        for name in ("born_timestamp", "store_timestamp"):
            stamp = row[name]
            row[name] = round(stamp.timestamp() * 1000) if stamp is not None else None
    return rows


@SETTINGS
@given(
    records(), st.sampled_from([frozenset(), frozenset({"a"}), frozenset({"b", "c"})]), st.integers(100, 103)
)
def test_columns_match_the_codec(buf: bytes, tag_set: frozenset[str], lo: int) -> None:
    cols = RecordColumns(tag_set)
    seen, first = cols.append_records(buf, lo, 10**6)
    assert seen == len(list(iter_records(buf))) and first == 100
    batch = cols.to_batch("t", "broker-a", 1)
    batch.validate(full=True)
    assert batch.schema.equals(ARROW_SCHEMA)
    assert _rows(batch) == _expected_rows(buf, lo, tag_set)


@SETTINGS
@given(st.lists(records(), min_size=1, max_size=3), st.integers(100, 103))
def test_answers_gathered_into_one_batch_match_the_codec(bufs: list[bytes], lo: int) -> None:
    """Several pull answers (each with offsets from 100) decoded as one batch: the rows of each in order."""
    cols = RecordColumns()
    for buf in bufs:
        cols.append_records(buf, lo, 10**6)
    expected = [row for buf in bufs for row in _expected_rows(buf, lo, frozenset())]
    assert _rows(cols.to_batch("t", "broker-a", 1)) == expected


@SETTINGS
@given(records(), st.data())
def test_damaged_bodies_fail_with_the_codecs_error(buf: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(1, len(buf) - 1))
    flip = data.draw(st.integers(0, len(buf) - 1))
    damaged = bytearray(buf)
    damaged[flip] ^= 0xFF
    for candidate in (buf[:cut], bytes(damaged)):
        with contextlib.suppress(MessageDecodeError):
            cols = RecordColumns()
            cols.append_records(candidate, 0, 10**6)
            cols.to_batch("t", "broker-a", 1).validate(full=True)


def test_arrow_schema_is_what_spark_expects() -> None:
    assert ARROW_SCHEMA.equals(to_arrow_schema(SCHEMA, timezone="UTC"))
    record = encode_record(
        topic="t",
        queue_id=3,
        body=b"x",
        properties=encode_properties({"TAGS": "a"}),
        born_timestamp=1_700_000_000_123,
        queue_offset=7,
    )
    cols = RecordColumns()
    cols.append_records(record, 0, 100)
    row = cols.to_batch("t", "broker-a", 3).to_pylist()[0]
    assert row["offset"] == 7 and row["queue"] == 3 and row["tags"] == "a" and row["keys"] is None
    assert row["born_timestamp"].timestamp() == pytest.approx(1_700_000_000.123)
    assert row["properties"] == [("TAGS", "a")]
    assert row["msg_id"] == decode_record(record).msg_id

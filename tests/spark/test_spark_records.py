"""The source's columnar record decoder agrees with the remoting codec's, and fails only its own way."""

from __future__ import annotations

import contextlib
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema

from tidemq.record import (
    MessageDecodeError,
    SysFlag,
    decode_record,
    encode_properties,
    encode_record,
    iter_records,
)
from tidemq.spark import SCHEMA
from tidemq.spark.arrow import ARROW_SCHEMA
from tidemq.spark.records import RecordColumns

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_PROPS = st.dictionaries(
    st.text(
        st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=6
    ),
    st.text(
        st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=6
    ),
    max_size=4,
)
_V4 = b"\x7f\x00\x00\x01\x00\x00\x27\x10"
_V6 = bytes(15) + b"\x01" + b"\x00\x00\x27\x11"


@st.composite
def records(draw: st.DrawFn) -> bytes:
    parts = []
    for offset in range(draw(st.integers(1, 5))):
        props = draw(_PROPS)
        if draw(st.booleans()):
            props["TAGS"] = draw(st.sampled_from(["a", "b", "c"]))
        if draw(st.booleans()):
            props["UNIQ_KEY"] = f"U{offset}"
        body = draw(st.binary(max_size=64))
        compressed = draw(st.booleans())
        parts.append(
            encode_record(
                topic=draw(st.sampled_from(["t", "topic-x"])),
                queue_id=1,
                body=zlib.compress(body) if compressed else body,
                properties=encode_properties(props),
                sys_flag=SysFlag.COMPRESSED if compressed else 0,
                born_timestamp=draw(st.integers(0, 2**41)),
                born_host=draw(st.sampled_from([_V4, _V6])),
                store_timestamp=draw(st.integers(0, 2**41)),
                store_host=draw(st.sampled_from([_V4, _V6])),
                reconsume_times=draw(st.integers(0, 16)),
                queue_offset=100 + offset,
                commit_log_offset=draw(st.integers(0, 2**40)),
            )
        )
    return b"".join(parts)


@SETTINGS
@given(
    records(), st.sampled_from([frozenset(), frozenset({"a"}), frozenset({"b", "c"})]), st.integers(100, 103)
)
def test_columns_match_the_codec(buf: bytes, tag_set: frozenset[str], lo: int) -> None:
    expected = [m for m in iter_records(buf) if m.queue_offset >= lo and (not tag_set or m.tags in tag_set)]
    cols = RecordColumns()
    seen, first = cols.append_records(buf, lo, 10**6, tag_set)
    assert seen == len(list(iter_records(buf))) and first == 100
    assert cols.offsets == [m.queue_offset for m in expected]
    assert cols.bodies == [m.body for m in expected]
    assert cols.msg_ids == [m.msg_id for m in expected]
    assert cols.tags == [m.tags for m in expected] and cols.keys == [m.keys for m in expected]
    assert cols.properties == [list(m.properties.items()) for m in expected]
    assert cols.born == [m.born_timestamp for m in expected]
    assert cols.stored == [m.store_timestamp for m in expected]
    assert cols.reconsume == [m.reconsume_times for m in expected]
    batch = cols.to_batch("t", "broker-a", 1)
    assert batch.schema.equals(ARROW_SCHEMA) and batch.num_rows == len(expected)


@SETTINGS
@given(records(), st.data())
def test_damaged_bodies_fail_with_the_codecs_error(buf: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(1, len(buf) - 1))
    flip = data.draw(st.integers(0, len(buf) - 1))
    damaged = bytearray(buf)
    damaged[flip] ^= 0xFF
    for candidate in (buf[:cut], bytes(damaged)):
        with contextlib.suppress(MessageDecodeError):
            RecordColumns().append_records(candidate, 0, 10**6, frozenset())


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
    cols.append_records(record, 0, 100, frozenset())
    row = cols.to_batch("t", "broker-a", 3).to_pylist()[0]
    assert row["offset"] == 7 and row["queue"] == 3 and row["tags"] == "a" and row["keys"] is None
    assert row["born_timestamp"].timestamp() == pytest.approx(1_700_000_000.123)
    assert row["properties"] == [("TAGS", "a")]
    assert row["msg_id"] == decode_record(record).msg_id

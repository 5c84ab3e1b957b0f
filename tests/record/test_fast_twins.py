"""Each hand-optimised function of ``tidemq.record._fast`` gives its reference twin's answer.

The fast functions name these tests in their docstrings: a change to one side that the other does not
follow fails here.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.record.strategies import (
    ANY_INT32,
    ANY_INT64,
    HOSTS,
    MANY,
    PROPERTIES,
    PROPERTY_KEYS,
    PROPERTY_TEXT,
    RECORD_LIKE_BYTES,
    SOME,
    joined,
    record_runs,
)
from tidemq.record import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    BatchItem,
    MessageDecodeError,
    Prop,
    SysFlag,
    build_stored_batch,
    build_uniform_batch,
    decode_batch,
    decode_properties,
    decode_records,
    encode_batch,
    encode_properties,
    encode_record,
    iter_records,
    key_prefix,
    property_value,
    record_bodies,
    record_properties,
    tag_hash,
)

# --- decoders ---------------------------------------------------------------------------------------


@MANY
@given(RECORD_LIKE_BYTES, st.booleans())
def test_decode_records_is_iter_records(data: bytes, decompress: bool) -> None:
    """The same messages, field for field, or the same refusal."""
    try:
        expected = list(iter_records(data, decompress=decompress))
    except MessageDecodeError:
        with pytest.raises(MessageDecodeError):
            decode_records(data, decompress=decompress)
        return
    assert decode_records(data, decompress=decompress) == expected
    assert decode_records(memoryview(data), decompress=decompress) == expected
    assert decode_records(bytearray(data), decompress=decompress) == expected


@SOME
@given(record_runs())
def test_record_bodies_is_iter_records(data: bytes) -> None:
    """Well-formed records: the same offsets, timestamps, stored bodies and encoded properties."""
    expected = [
        (m.queue_offset, m.store_timestamp, m.body, encode_properties(m.properties).encode())
        for m in iter_records(data, decompress=False)
    ]
    assert record_bodies(data) == expected
    assert record_bodies(memoryview(data)) == expected


@SOME
@given(record_runs())
def test_record_properties_is_decode_record(data: bytes) -> None:
    """Each well-formed record's encoded properties, read by lengths alone (IPv4 and IPv6 hosts)."""
    pos = 0
    for m in iter_records(data, decompress=False):
        record = data[pos : pos + m.store_size]
        assert record_properties(record) == encode_properties(m.properties).encode()
        assert record_properties(memoryview(record)) == encode_properties(m.properties).encode()
        pos += m.store_size


@MANY
@given(RECORD_LIKE_BYTES)
def test_record_bodies_refuses_what_iter_records_refuses_unless_only_text_is_wrong(data: bytes) -> None:
    """Any bytes: a refusal, or (when the reference accepts) the reference's answer. The fast reader
    leaves topics and properties undecoded, so it may accept what the reference refuses as not UTF-8."""
    try:
        expected = list(iter_records(data, decompress=False))
    except MessageDecodeError:
        with contextlib.suppress(MessageDecodeError):
            record_bodies(data)
        return
    got = record_bodies(data)
    assert [(o, ts, body) for o, ts, body, _ in got] == [
        (m.queue_offset, m.store_timestamp, m.body) for m in expected
    ]
    assert [decode_properties(props.decode()) for *_, props in got] == [m.properties for m in expected]


@SOME
@given(st.lists(st.tuples(PROPERTY_KEYS, st.one_of(PROPERTY_TEXT, st.just(""))), max_size=6), PROPERTY_KEYS)
def test_property_value_is_decode_properties(pairs: list[tuple[str, str]], key: str) -> None:
    """Pairs as a producer writes them (duplicates included: the last one wins in both; a pair with an
    empty value is dropped by both)."""
    text = PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in pairs)
    expected = decode_properties(text).get(key)
    assert property_value(text.encode(), key_prefix(key)) == (None if expected is None else expected.encode())


# --- builders ---------------------------------------------------------------------------------------

_BATCH_PROPERTIES = st.dictionaries(
    st.sampled_from([Prop.TAGS, Prop.KEYS, Prop.UNIQ_KEY, "XTAGS", "XUNIQ_KEY", "KEYSX", "a"]),
    st.one_of(PROPERTY_TEXT, st.sampled_from(["k1 k2", " k3  ", "\u00e9 x"])),
    max_size=4,
)
_KEY_LOOK_ALIKES = st.lists(
    st.sampled_from(["TAGS\x01", "KEYS\x01", "UNIQ_KEY\x01", "DELAY\x01", "\x02", "x"]), max_size=4
).map(lambda parts: "".join(parts).encode())
#: A unique id alone (the common batch item), with what could make it not alone after it: another name,
#: an empty value, Java's trailing separator, a pair without its separator.
_UNIQ_ALONE = st.lists(
    st.sampled_from(["abc", "\x02", "\x02TAGS", "\x02KEYS\x01k", "\x01", "UNIQ_KEY\x01", "x y"]),
    max_size=3,
).map(lambda parts: "UNIQ_KEY\x01" + "".join(parts))
_BATCH_MESSAGES = st.tuples(
    ANY_INT32,
    st.one_of(st.binary(max_size=40), _KEY_LOOK_ALIKES),
    st.one_of(_BATCH_PROPERTIES.map(encode_properties), _UNIQ_ALONE),
)
_EXTRA = st.sampled_from(["", "CLUSTER\x01c1", "WAIT\x01true\x02CLUSTER\x01c1"])


@SOME
@given(
    st.lists(_BATCH_MESSAGES, min_size=1, max_size=5),
    _EXTRA,
    HOSTS,
    HOSTS,
    ANY_INT32,
)
def test_build_stored_batch_is_encode_record_per_item(
    messages: list[tuple[int, bytes, str]], extra: str, born: bytes, store: bytes, sys_flag: int
) -> None:
    """The records ``encode_record`` builds for each item ``decode_batch`` reads, the broker's properties
    appended, the tags hashed and the keys indexed from each message's own properties."""
    body = encode_batch([BatchItem(flag, payload, props) for flag, payload, props in messages])
    batch = build_stored_batch(
        body, topic="B", queue_id=2, sys_flag=sys_flag, born_timestamp=5, born_host=born, store_timestamp=6,
        store_host=store, extra_properties=extra, max_body=1024,
    )  # fmt: skip
    items = decode_batch(body)
    records = [
        encode_record(
            topic="B", queue_id=2, body=item.body, properties=joined(item.properties, extra), flag=item.flag,
            sys_flag=sys_flag & ~SysFlag.COMPRESSED, born_timestamp=5, born_host=born, store_timestamp=6,
            store_host=store,
        )
        for item in items
    ]  # fmt: skip
    assert bytes(batch.data) == b"".join(records)
    assert batch.sizes == [len(r) for r in records]
    decoded = [decode_properties(item.properties) for item in items]
    assert batch.tags_codes == [tag_hash(props.get(Prop.TAGS)) for props in decoded]
    assert batch.keys == [
        props.get(Prop.KEYS, "").encode().split()
        + ([props[Prop.UNIQ_KEY].encode()] if Prop.UNIQ_KEY in props else [])
        for props in decoded
    ]


@SOME
@given(st.lists(st.tuples(st.binary(max_size=10), PROPERTIES), min_size=1, max_size=4))
def test_build_stored_batch_refuses_a_delay_level_as_the_reference_reads_it(
    messages: list[tuple[bytes, dict[str, str]]],
) -> None:
    body = encode_batch([BatchItem(0, payload, encode_properties(props)) for payload, props in messages])
    host = bytes(8)
    if any(props.get(Prop.DELAY) for _, props in messages):
        with pytest.raises(MessageDecodeError, match="delay"):
            build_stored_batch(
                body, topic="B", queue_id=0, sys_flag=0, born_timestamp=0, born_host=host, store_timestamp=0,
                store_host=host, extra_properties="", max_body=1024,
            )  # fmt: skip
    else:
        batch = build_stored_batch(
            body, topic="B", queue_id=0, sys_flag=0, born_timestamp=0, born_host=host, store_timestamp=0,
            store_host=host, extra_properties="", max_body=1024,
        )  # fmt: skip
        assert [m.properties for m in iter_records(batch.data)] == [props for _, props in messages]


@SOME
@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=5),
    PROPERTIES,
    ANY_INT64,
    HOSTS,
    HOSTS,
    st.text(max_size=10).filter(lambda t: len(t.encode()) <= 127),
    ANY_INT32,
)
def test_build_uniform_batch_is_encode_record_per_body(
    bodies: list[bytes],
    props: dict[str, str],
    timestamp: int,
    born: bytes,
    store: bytes,
    topic: str,
    queue: int,
) -> None:
    properties = encode_properties(props)
    batch = build_uniform_batch(
        bodies, topic=topic, queue_id=queue, properties=properties, timestamp=timestamp, born_host=born,
        store_host=store,
    )  # fmt: skip
    records = [
        encode_record(
            topic=topic, queue_id=queue, body=body, properties=properties, born_timestamp=timestamp,
            born_host=born, store_timestamp=timestamp, store_host=store,
        )
        for body in bodies
    ]  # fmt: skip
    assert bytes(batch.data) == b"".join(records)
    assert batch.sizes == [len(r) for r in records]
    assert batch.tags_codes == [0] * len(bodies)
    assert batch.keys == [[]] * len(bodies)
    assert [m.body for m in iter_records(batch.data)] == bodies

"""Hypothesis strategies for records and batches, shared by the record tests."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tidemq.record import PROPERTY_SEPARATOR, SysFlag, encode_properties, encode_record
from tidemq.record.layout import (
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    INT32,
    POS_SYSFLAG,
    POS_TOTAL_SIZE,
    PROPERTIES_LENGTH,
    TOPIC_LENGTH_SIZE,
    body_length_pos,
)

#: Property tests of pure functions: no deadline (a busy machine is not a failure).
SOME = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Decoders that take bytes from outside (a pull answer, a file): more examples.
MANY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ANY_INT32 = st.integers(-(2**31), 2**31 - 1)
ANY_INT64 = st.integers(-(2**63), 2**63 - 1)

#: Property text with neither separator: what ``encode_properties`` is given.
PROPERTY_TEXT = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=10
)
#: Keys the fast scans look for, keys that end like them, and others.
PROPERTY_KEYS = st.one_of(
    st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "XTAGS", "XUNIQ_KEY", "TAGSX", "a", "NSQ_TS"]),
    PROPERTY_TEXT,
)
PROPERTIES = st.dictionaries(PROPERTY_KEYS, PROPERTY_TEXT, max_size=5)
HOSTS = st.one_of(
    st.binary(min_size=HOST_V4_SIZE, max_size=HOST_V4_SIZE),
    st.binary(min_size=HOST_V6_SIZE, max_size=HOST_V6_SIZE),
)


@dataclass(frozen=True)
class Record:
    """One encoded record and what it was built from."""

    data: bytes
    body: bytes
    properties: dict[str, str]


@st.composite
def records(draw: st.DrawFn) -> Record:
    """A well-formed record: either host IPv4 or IPv6, maybe compressed, any field values."""
    body = draw(st.binary(max_size=60))
    compressed = draw(st.booleans())
    props = draw(PROPERTIES)
    sys_flag = draw(ANY_INT32) & ~(SysFlag.COMPRESSED | SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)
    data = encode_record(
        topic=draw(st.text(max_size=12).filter(lambda t: len(t.encode()) <= 127)),
        queue_id=draw(ANY_INT32),
        body=zlib.compress(body) if compressed else body,
        properties=encode_properties(props),
        flag=draw(ANY_INT32),
        sys_flag=sys_flag | (SysFlag.COMPRESSED if compressed else 0),
        born_timestamp=draw(ANY_INT64),
        born_host=draw(HOSTS),
        store_timestamp=draw(ANY_INT64),
        store_host=draw(HOSTS),
        reconsume_times=draw(ANY_INT32),
        prepared_transaction_offset=draw(ANY_INT64),
        queue_offset=draw(ANY_INT64),
        commit_log_offset=draw(ANY_INT64),
    )
    return Record(bytes(data), body, props)


@st.composite
def record_runs(draw: st.DrawFn) -> bytes:
    """Records back to back, as a pull answer holds them."""
    return b"".join(r.data for r in draw(st.lists(records(), max_size=4)))


_DAMAGE = (
    "total", "body length", "inner length", "compressed flag",
    "bytes", "truncated", "properties text", "trailing",
)  # fmt: skip


@st.composite
def damaged_record_runs(draw: st.DrawFn) -> bytes:
    """Records back to back with something in the first one gone wrong: its total size or body length
    (often by a few bytes around the largest value that still fits), its topic length or properties
    length (by a few), its compressed flag, a few bytes, or the end; or properties that are any text, or
    junk after the last record."""
    data = bytearray(b"".join(r.data for r in draw(st.lists(records(), min_size=1, max_size=3))))
    kind = draw(st.sampled_from(_DAMAGE))
    (sys_flag,) = INT32.unpack_from(data, POS_SYSFLAG)
    body_len_pos = body_length_pos(sys_flag)
    if kind == "total":
        edge = len(data)  # the largest total size that still fits the buffer
        INT32.pack_into(data, POS_TOTAL_SIZE, draw(_near(edge, st.integers(-4, len(data) + 4))))
    elif kind == "body length":
        edge = len(data) - body_len_pos - INT32.size
        INT32.pack_into(data, body_len_pos, draw(_near(edge, st.integers(-4, len(data)))))
    elif kind == "inner length":
        (body_len,) = INT32.unpack_from(data, body_len_pos)
        topic_len_pos = body_len_pos + INT32.size + body_len
        if draw(st.booleans()):
            data[topic_len_pos] = max(0, min(255, data[topic_len_pos] + draw(st.integers(-3, 3))))
        else:
            props_len_pos = topic_len_pos + TOPIC_LENGTH_SIZE + data[topic_len_pos]
            (props_len,) = PROPERTIES_LENGTH.unpack_from(data, props_len_pos)
            props_len = max(-(2**15), props_len + draw(st.integers(-3, 3)))
            PROPERTIES_LENGTH.pack_into(data, props_len_pos, props_len)
    elif kind == "compressed flag":  # a stored body that is not zlib, or a zlib one read as stored
        INT32.pack_into(data, POS_SYSFLAG, sys_flag ^ SysFlag.COMPRESSED)
    elif kind == "bytes":
        for _ in range(draw(st.integers(1, 5))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    elif kind == "truncated":
        del data[draw(st.integers(0, len(data) - 1)) :]
    elif kind == "properties text":
        data += encode_record(
            topic=draw(st.text(max_size=5)), queue_id=0, body=draw(st.binary(max_size=20)),
            properties=draw(st.text(max_size=10)), born_host=draw(HOSTS), store_host=draw(HOSTS),
        )  # fmt: skip
    else:
        data += draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


def _near(edge: int, anywhere: st.SearchStrategy[int]) -> st.SearchStrategy[int]:
    return st.one_of(anywhere, st.integers(edge - 3, edge + 3))


#: What a decoder may be handed from outside: any bytes, or records, whole or damaged.
RECORD_LIKE_BYTES = st.one_of(st.binary(max_size=300), record_runs(), damaged_record_runs())


def joined(own: str, appended: str) -> str:
    """A message's encoded properties with the broker's appended, as Java's batch encoder joins them: a
    separator between the two unless the message's already end with one."""
    if not own or not appended:
        return own or appended
    return own + appended if own.endswith(PROPERTY_SEPARATOR) else own + PROPERTY_SEPARATOR + appended
